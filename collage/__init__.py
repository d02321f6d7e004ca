"""collage: measure which backend runs each part of an ONNX model fastest, and ship that plan.

Public API (imported lazily so that loading an artifact does not import the tuner):

    collage.tune(model, out_dir, options=None, *, target, backends, budget, ...)  -> TuneResult
                                  (collage.tuner.job; the 'tune' extra)
    collage.load(path)            -> a runnable artifact (collage.runtime; `pip install collage` is enough
                                     for ONNX Runtime partitions, extras for the others)
    collage.Graph, collage.Plan
    collage.__version__           (collage.version: a leaf the deploy path reads)

The package's layout (a folder per idea, layers that point one way, checked by import-linter: see
pyproject.toml and the README's "Layout"): graph <- backends <- measure <- cost_models; graph <- search; the tuner
composes them; runtime imports backends, util, errors, inputs and plan only; commands import everything
and nothing imports commands.
"""
from __future__ import annotations

from collage.version import __version__

__all__ = ["Graph", "Plan", "load", "tune", "__version__"]


def __getattr__(name: str):
    try:
        return _attribute(name)
    except ImportError as e:
        from collage.extras import missing_extra
        # B904: `or e` re-raises e itself when no extra is missing, and `from e` would make it its own cause
        raise missing_extra(e, f"collage.{name}") or e  # noqa: B904


def _attribute(name: str):
    if name == "Graph":
        from collage.graph.ir import Graph
        return Graph
    if name == "Plan":
        from collage.plan import Plan
        return Plan
    if name == "load":
        from collage.runtime.artifact import load
        return load
    if name == "tune":
        from collage.tuner.job import tune
        return tune
    raise AttributeError(f"module 'collage' has no attribute {name!r}")
