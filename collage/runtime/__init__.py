"""Loading and running an artifact: the manifest (:mod:`.manifest`) and the loaded artifact (:mod:`.artifact`).

The deploy path: imports ``collage.backends``, ``collage.util``, ``collage.errors``, ``collage.seeded_inputs`` (the
seeded-input rule, for ``Artifact.random_inputs``) and ``collage.version``; nothing of the tuner, search, cost
models, report, zoo or graph, nor optuna/pandas/networkx/tqdm (import-linter contract; the fresh-process
tests in tests/runtime/test_runtime.py).
"""
from __future__ import annotations

from collage.runtime.artifact import Artifact, load

__all__ = ["Artifact", "load"]
