"""The backend registry (the ``collage backends`` command is :mod:`collage.commands.backends`).

Backends are named (``"onnxruntime"``, ``"openvino"``, ``"tvm"``, later ``"tensorrt"`` and
``"onnxruntime-cuda"``, ``"torch"``) and imported lazily from ``"module:Class"`` entries, so importing this package
loads no runtime. A backend whose module or runtime cannot be imported is *unavailable*, with the
reason, never an import error at the caller.

    get_backend("openvino", threads=2)      # -> Backend (unknown name: CollageError listing names)
    parse_backend_options(["tvm.trials=64"])  # -> {"tvm": {"trials": 64}}; check_options("tvm", {...})
    backend_names("cpu")                    # registered names for a device (None: all)
    available_backends("cpu")               # instances that can run here
    support_report(graph, ["onnxruntime", "openvino"])   # per op type: count, which backend takes it
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from collage.errors import BackendUnavailable, CollageError

if TYPE_CHECKING:
    from collage.backends.base import Backend
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: name -> ("module:Class", device). Devices are listed here so that filtering by device imports nothing.
REGISTRY: dict[str, tuple[str, str]] = {
    "onnxruntime": ("collage.backends.onnxruntime.backend:OnnxRuntimeBackend", "cpu"),
    "openvino": ("collage.backends.openvino.backend:OpenVINOBackend", "cpu"),
    "tvm": ("collage.backends.tvm.backend:TVMBackend", "cpu"),
    "tensorrt": ("collage.backends.tensorrt:TensorRTBackend", "cuda"),
    "onnxruntime-cuda": ("collage.backends.onnxruntime.cuda:OnnxRuntimeCudaBackend", "cuda"),
    "torch": ("collage.backends.torch.backend:TorchBackend", "cuda"),
    # the torch program through torch.compile (TorchInductor's generated kernels): the generated-code competitor
    "torch-inductor": ("collage.backends.torch.variants:TorchInductorBackend", "cuda"),
}

#: Lower-precision variants (collage.tuner.precision.tuner), name -> ("module:Class", device). ``get_backend`` finds
#: them, but ``backend_names`` / ``available_backends`` do not list them: they change results and are
#: used only when named in --backends together with an accuracy budget (--accuracy).
VARIANTS: dict[str, tuple[str, str]] = {
    "openvino-bf16": ("collage.backends.openvino.lowp:OpenVINOBF16Backend", "cpu"),
    "openvino-fp16": ("collage.backends.openvino.lowp:OpenVINOFP16Backend", "cpu"),
    # int8 QDQ with ranges calibrated once per model (collage.backends.qdq); need AVX2 or later (qdq.cpu_int8_reason)
    "onnxruntime-int8": ("collage.backends.onnxruntime.int8:OnnxRuntimeInt8Backend", "cpu"),
    "openvino-int8": ("collage.backends.openvino.lowp:OpenVINOInt8Backend", "cpu"),
    "openvino-int8-bf16": ("collage.backends.openvino.lowp:OpenVINOInt8BF16Backend", "cpu"),
    # torch eager with TF32 math, or under bf16 / fp16 autocast (collage.backends.torch.variants)
    "torch-tf32": ("collage.backends.torch.variants:TorchTF32Backend", "cuda"),
    "torch-bf16": ("collage.backends.torch.variants:TorchBF16Backend", "cuda"),
    "torch-fp16": ("collage.backends.torch.variants:TorchFP16Backend", "cuda"),
}


def register(name: str, target: str, device: str = "cpu") -> None:
    """Add (or replace) a backend: ``target`` is ``"module:Class"``."""
    if ":" not in target:
        raise CollageError(f"backend {name!r}: target must be 'module:Class', not {target!r}")
    REGISTRY[name] = (target, device)


def backend_names(device: str | None = "cpu") -> list[str]:
    """Registered names (in registry order) for ``device``; ``None`` for every device."""
    return [n for n, (_, d) in REGISTRY.items() if device is None or d == device]


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``; BackendUnavailable (with the reason) when it cannot be imported."""
    if name not in REGISTRY and name not in VARIANTS:
        raise CollageError(f"unknown backend {name!r}; known backends: {', '.join(REGISTRY)} "
                           f"(lower precision, with --accuracy: {', '.join(VARIANTS)})")
    target = (REGISTRY.get(name) or VARIANTS[name])[0]
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        from collage.extras import install_hint

        missing = getattr(e, "name", None)
        what = f"module {missing} is not installed" if missing else str(e)
        raise BackendUnavailable(f"backend {name!r} cannot be imported here ({what}): {install_hint(name)}") from e
    try:
        return getattr(module, cls_name)
    except AttributeError:
        raise BackendUnavailable(f"backend {name!r}: {module_name} has no class {cls_name}") from None


def get_backend(name: str, **options: Any) -> Backend:
    """An instance of backend ``name`` with ``options`` (unknown name: CollageError listing the names)."""
    return backend_class(name)(**options)


def reference_backend() -> Backend:
    """ONNX Runtime for fp32 reference runs (numerics checks, accuracy references): it joins the process-wide
    pool where one exists and never creates it. Created by a reference run, that pool would move every later
    session of the process that asks for its own pool onto it (a tune or bench under
    ``onnxruntime.shared_pool=false``; see the ONNX Runtime backend's docstring)."""
    return get_backend("onnxruntime", shared_pool=False)


def option_names(name: str) -> list[str] | None:
    """The constructor options backend ``name`` takes (None: it takes any keyword)."""
    import inspect

    params = inspect.signature(backend_class(name).__init__).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """CollageError (one line, naming the backend and the option) for an option backend ``name`` does not take."""
    known = option_names(name)
    if known is None:
        return
    for key in options:
        if key not in known:
            raise CollageError(f"backend {name!r} has no option {key!r}; its options: {', '.join(known)}")


def parse_option_value(text: str) -> Any:
    """A backend option's value from text: int, float, bool (true/false/yes/no/on/off), None (none/null), else str."""
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_backend_options(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["tvm.tuning=metaschedule", "tvm.trials=64"]`` -> ``{"tvm": {"tuning": "metaschedule", "trials": 64}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        lhs, eq, value = item.partition("=")
        backend, dot, key = lhs.strip().rpartition(".")
        if not eq or not dot or not backend or not key:
            raise CollageError(f"backend option {item!r}: write BACKEND.OPTION=VALUE, e.g. tvm.trials=64")
        out.setdefault(backend, {})[key] = parse_option_value(value)
    return out


def unavailable_reason(name: str, **options: Any) -> str | None:
    """None when backend ``name`` can run here, else why not (import failure or ``available()``)."""
    try:
        backend = get_backend(name, **options)
    except BackendUnavailable as e:
        return str(e)
    return backend.available()


def available_backends(device: str | None = "cpu") -> list[Backend]:
    """Instances (default options) of every registered backend for ``device`` that can run here."""
    out = []
    for name in backend_names(device):
        try:
            backend = get_backend(name)
        except BackendUnavailable as e:
            log.debug("%s", e)
            continue
        reason = backend.available()
        if reason is None:
            out.append(backend)
        else:
            log.debug("backend %s unavailable: %s", name, reason)
    return out


# ---------------------------------------------------------------------- support report
def support_table(graph: Graph, names: Sequence[str] | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """(backend columns, one row per op type: ``op``, ``count`` and per backend ``taken/count`` or a reason).

    A backend that is unavailable gets ``"unavailable"`` in every row.
    """
    names = list(names) if names is not None else backend_names("cpu")
    ops: dict[str, list[int]] = {}
    for i in range(len(graph)):
        node = graph.op(i)
        key = f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        ops.setdefault(key, []).append(i)
    answers: dict[str, dict[int, bool] | None] = {}
    for name in names:
        if unavailable_reason(name) is not None:
            answers[name] = None
            continue
        answers[name] = get_backend(name).supports_all(graph)
    rows = []
    for op in sorted(ops, key=lambda o: (-len(ops[o]), o)):
        ids = ops[op]
        row: dict[str, Any] = {"op": op, "count": len(ids)}
        for name in names:
            got = answers[name]
            if got is None:
                row[name] = "unavailable"
            else:
                taken = sum(got[i] for i in ids)
                row[name] = "yes" if taken == len(ids) else "no" if taken == 0 else f"{taken}/{len(ids)}"
        rows.append(row)
    return names, rows


def support_report(graph: Graph, backend_names: list[str] | None = None) -> str:  # noqa: F811 - the agreed signature
    """A Markdown table: per op type, its count and which backend takes it (``collage inspect --support``)."""
    names, rows = support_table(graph, backend_names)
    head = ["op type", "count", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join(str(row[k]) for k in ("op", "count", *names)) + " |")
    return "\n".join(lines)
