"""Loading and running an artifact: the manifest (:mod:`.manifest`) and the loaded artifact (:mod:`.artifact`).

The deploy path: imports ``collage.backends``, ``collage.util`` and ``collage.errors`` and nothing of the tuner.
"""
from __future__ import annotations

from collage.runtime.artifact import Artifact, load

__all__ = ["Artifact", "load"]
