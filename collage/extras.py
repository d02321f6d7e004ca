"""Which optional part of collage (a pip extra) brings which package, and the error that says so.

``pip install collage`` is the runtime (numpy, onnxruntime: load and run an artifact whose partitions run
on ONNX Runtime; it never imports onnx); the rest are extras (pyproject.toml): ``tune`` (onnx, networkx,
pandas, optuna, tqdm: the tuner, inspect, zoo, report, annotate), ``openvino`` and ``tvm`` (each with onnx),
and ``all``. A command or API call that needs a missing one fails with ``MissingExtra`` naming the extra
to install.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from collage.errors import CollageError

#: top-level import name -> the extra that installs it
EXTRA_OF = {"onnx": "tune", "networkx": "tune", "pandas": "tune", "optuna": "tune", "tqdm": "tune",
            "openvino": "openvino", "tvm": "tvm", "tvm_ffi": "tvm", "xgboost": "tune", "psutil": "tvm",
            "cloudpickle": "tvm", "ray": "cluster", "psycopg": "cluster"}


#: what installs a backend's runtime, by the backend's name before any precision suffix (``openvino-bf16`` ->
#: ``openvino``): an extra of collage, or (GPU runtimes pip must not choose) a sentence. ONNX Runtime is the core.
BACKEND_EXTRA = {"openvino": "openvino", "tvm": "tvm", "tensorrt": "gpu"}
_BACKEND_INSTALL = {
    "onnxruntime-cuda": "pip uninstall -y onnxruntime && pip install onnxruntime-gpu (docs/GPU.md: the two replace "
                        "each other)",
    "torch": "install a CUDA build of PyTorch that matches this machine's driver (docs/GPU.md)",
}


def _family(backend: str) -> str:
    if backend in _BACKEND_INSTALL or backend in BACKEND_EXTRA:
        return backend
    return backend.split("-")[0]


def backend_extras(backends) -> list[str]:
    """The extras of collage an artifact whose partitions run on ``backends`` needs beside the core install
    (sorted; ONNX Runtime's partitions need none)."""
    return sorted({BACKEND_EXTRA[f] for f in map(_family, backends) if f in BACKEND_EXTRA})


def install_hint(backend: str) -> str:
    """What to run so that ``backend`` can be imported here: ``pip install 'collage[EXTRA]'`` or the GPU note."""
    family = _family(backend)
    if family in _BACKEND_INSTALL:
        return _BACKEND_INSTALL[family]
    extra = BACKEND_EXTRA.get(family)
    return f"pip install 'collage[{extra}]'" if extra else "pip install --force-reinstall collage (its core is broken)"


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


def require(module: str, needed_for: str, alternative: str | None = None) -> ModuleType:
    """``import module``, or a ``MissingExtra``: '``needed_for`` needs ``module``: pip install 'collage[EXTRA]'
    (or ``alternative``)', the extra from ``EXTRA_OF``. For the optional packages a feature imports where it is
    used (Ray for --cluster, psycopg for a PostgreSQL cost DB, XGBoost for the learned cost model)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        also = f" (or {alternative})" if alternative else ""
        raise MissingExtra(f"{needed_for} needs {module}: pip install 'collage[{EXTRA_OF[module]}]'{also}") from e
