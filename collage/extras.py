"""Which optional part of collage (a pip extra) brings which package, and the error that says so.

``pip install collage`` is the runtime (numpy, onnxruntime: load and run an artifact whose partitions run
on ONNX Runtime; it never imports onnx); the rest are extras (pyproject.toml): ``tune`` (onnx, networkx,
pandas, optuna, tqdm: the tuner, inspect, zoo, report, annotate), ``openvino`` and ``tvm`` (each with onnx),
and ``all``. A command or API call that needs a missing one fails with ``MissingExtra`` naming the extra
to install.
"""
from __future__ import annotations

from collage.errors import CollageError

#: top-level import name -> the extra that installs it
EXTRA_OF = {"onnx": "tune", "networkx": "tune", "pandas": "tune", "optuna": "tune", "tqdm": "tune",
            "openvino": "openvino", "tvm": "tvm", "tvm_ffi": "tvm", "xgboost": "tvm", "psutil": "tvm",
            "cloudpickle": "tvm"}


class MissingExtra(CollageError, ImportError):
    """A part of collage was used whose optional dependencies are not installed (names the extra)."""


def missing_extra(e: ImportError, what: str) -> MissingExtra | None:
    """The ``MissingExtra`` for ``e`` (a ModuleNotFoundError of a package an extra brings), else None."""
    root = (getattr(e, "name", None) or "").split(".")[0]
    extra = EXTRA_OF.get(root)
    if extra is None:
        return None
    return MissingExtra(f"{what} needs {root}, which comes with collage's '{extra}' extra: "
                        f"pip install 'collage[{extra}]' (or 'collage[all]' for everything)")
