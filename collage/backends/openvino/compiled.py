"""OpenVINO's runtime side: the process's one ``ov.Core``, a compiled partition (``OVCompiled``) and the
port helpers both the backend and the linker use (``collage.backends.openvino.link``).

Kept apart from :mod:`collage.backends.openvino.backend` (the Backend: settings, support, compile, load) so
that the linker, which builds ``OVCompiled`` objects, and the backend, which calls the linker, do not
import each other: what they ask of the backend is a Protocol (``ModelReader`` here, ``link.Linkable``).
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from collage.backends import handover
from collage.backends.base import Compiled
from collage.errors import ArtifactError, BackendUnavailable, CollageError
from collage.util import sha256_bytes

if TYPE_CHECKING:  # a loaded partition needs openvino only (the runtime install has no onnx)
    import onnx


#: the CPU plugin carries int64 as int32 (collage.backends.openvino.inexact refuses nodes that would compute past it)
I32_MIN, I32_MAX = -2**31, 2**31 - 1


def check_int32_range(name: str, arr: np.ndarray) -> None:
    """Refuse an int64 input ``arr`` holding a value the plugin's int32 cannot carry."""
    if arr.size and (arr.min() < I32_MIN or arr.max() > I32_MAX):
        raise CollageError(f"openvino: int64 input {name!r} holds values past +-2**31 (min {arr.min()}, max "
                           f"{arr.max()}); the CPU plugin carries int64 as int32 and would return wrong values. "
                           "Run this part of the model on another backend (re-tune without openvino for it)")


class ModelReader(Protocol):
    """What a compiled partition asks of the backend that made it (``OpenVINOBackend`` and its bf16/int8
    forms): its name, version and options for the artifact entry, and its reader of an ONNX model."""

    name: str

    @property
    def options(self) -> dict[str, Any]: ...

    def version(self) -> str: ...

    def read_model(self, data: bytes) -> Any: ...


_core_lock = threading.Lock()
_core: Any = None


def openvino_module():  # lazy import: importing collage.backends never loads a runtime
    try:
        import openvino
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendUnavailable("openvino is not installed: pip install 'collage[openvino]'") from e
    return openvino


def core() -> Any:
    """The process's one ``openvino.Core``."""
    global _core
    with _core_lock:
        if _core is None:
            _core = openvino_module().Core()
        return _core


class OVCompiled(Compiled):
    """An OpenVINO compiled model with one infer request.

    ``run`` is the fast path: output tensors are numpy buffers pre-set on the request
    (``set_output_tensor`` with ``ov.Tensor(array, shared_memory=True)``); an input tensor is re-set
    only when a different array object is passed (zero-copy when it is C-contiguous with the right
    dtype, else one conversion); then a bare ``infer()`` without inputs.

    **The returned arrays are this object's output buffers and are OVERWRITTEN by the next ``run``**
    (``reuses_outputs = True``): copy any output you keep past the next call (the runtime copies
    graph outputs). Input arrays are read in place during the call, never written.
    """

    reuses_outputs = True

    def __init__(self, backend: ModelReader, compiled: Any, source: onnx.ModelProto | Path,
                 input_names: list[str] | None = None, output_names: list[str] | None = None) -> None:
        ov = openvino_module()
        self.backend = backend.name
        self._backend = backend
        self._compiled = compiled
        self._source = source
        self._request = compiled.create_infer_request()
        self.input_names = list(input_names or [_port_name(p) for p in compiled.inputs])
        self.output_names = list(output_names or [_port_name(p) for p in compiled.outputs])
        self._in_specs: list[tuple[int, str, np.dtype, tuple[int, ...]]] = []
        for name, k in zip(self.input_names, port_indices(compiled.inputs, self.input_names, "input")):
            p = compiled.inputs[k]
            self._in_specs.append((k, name, _np_dtype(p.get_element_type()), _static(p, name)))
        self._ovm = ov
        self._in_types = {k: compiled.inputs[k].get_element_type() for k, *_ in self._in_specs}
        self._outputs: dict[str, np.ndarray] = {}
        self._keep: list[Any] = []
        for name, k in zip(self.output_names, port_indices(compiled.outputs, self.output_names, "output")):
            p = compiled.outputs[k]
            arr = np.empty(_static(p, name), dtype=_np_dtype(p.get_element_type()))
            tensor = _shared_tensor(ov, arr, p.get_element_type())
            self._request.set_output_tensor(k, tensor)
            self._outputs[name] = arr
            self._keep.append(tensor)
        self._bound: dict[str, Any] = {}
        self._in_tensors: dict[str, Any] = {}
        #: int64 inputs: the plugin carries them as int32, so ``run`` refuses a value past +-2**31
        self._i64_inputs = [name for _, name, dtype, _ in self._in_specs if dtype == np.int64]

    def _bind(self, k: int, name: str, dtype: np.dtype, shape: tuple[int, ...], arr: Any) -> None:
        original = arr
        if dtype == np.uint16 and getattr(arr, "dtype", None) != dtype and _is_bf16(self._in_types[k]):
            raise CollageError(f"openvino: input {name!r} is bf16 (raw uint16 bits, as a linked partition hands it "
                               f"over), not {getattr(arr, 'dtype', type(arr).__name__)}")
        if (not isinstance(arr, np.ndarray) or arr.dtype != dtype or not arr.flags.c_contiguous
                or not arr.flags.writeable):
            arr = np.array(arr, dtype=dtype, order="C", copy=True)
        if arr.shape != shape:
            raise CollageError(f"openvino: input {name!r} has shape {arr.shape}, the partition expects {shape}")
        tensor = _shared_tensor(self._ovm, arr, self._in_types[k])
        self._request.set_input_tensor(k, tensor)
        self._in_tensors[name] = (tensor, arr)  # keeps the memory alive while set
        self._bound[name] = original

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        handover.run_on("openvino")
        bound = self._bound
        for k, name, dtype, shape in self._in_specs:
            try:
                arr = feeds[name]
            except KeyError:
                raise CollageError(f"openvino: missing input {name!r} (expected {self.input_names})") from None
            if arr is not bound.get(name):
                self._bind(k, name, dtype, shape, arr)
        for name in self._i64_inputs:  # the contents of a bound array can change between calls: every call
            check_int32_range(name, self._in_tensors[name][1])
        # share_outputs: results already sit in our pre-set buffers; do not copy them again
        try:
            self._request.infer(share_outputs=True)
        except Exception as e:  # noqa: BLE001 - a runtime failure as one clear error
            what = self._source.graph.name if not isinstance(self._source, Path) else self._source.name
            raise CollageError(f"openvino failed running {what!r}: {' '.join(str(e).split())[:400]}") from e
        return dict(self._outputs)

    def kernels(self) -> list[tuple[str, str]]:
        """(op type, kernel) of each op as the plugin runs it, in execution order (``("Convolution",
        "brgconv_avx2_I8")``): which instruction set and precision it chose (benchmarks.isa_cap)."""
        out = []
        for op in self._compiled.get_runtime_model().get_ordered_ops():
            rt = op.get_rt_info()
            if "layerType" in rt and "primitiveType" in rt:
                out.append((rt["layerType"].astype(str), rt["primitiveType"].astype(str)))
        return out

    def _ir(self) -> tuple[Any, str]:
        """The ``ov.Model`` to save and its file stem (named by a digest of what it was read from)."""
        if isinstance(self._source, Path):
            return core().read_model(str(self._source)), f"openvino-{sha256_bytes(self._source.read_bytes())[:16]}"
        data = self._source.SerializeToString()
        return self._backend.read_model(data), f"openvino-{sha256_bytes(data)[:16]}"

    def save(self, directory: Path) -> dict[str, Any]:
        """Write OpenVINO IR (.xml + .bin, fp32 weights kept as they are)."""
        ov = openvino_module()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        model, stem = self._ir()
        try:
            ov.save_model(model, str(directory / f"{stem}.xml"), compress_to_fp16=False)
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{directory / stem}.xml: openvino could not write the partition: {e}") from e
        return {"backend": self.backend, "files": [f"{stem}.xml", f"{stem}.bin"], "format": "openvino IR",
                "version": self._backend.version(), "options": self._backend.options,
                "inputs": self.input_names, "outputs": self.output_names}


def _is_bf16(element_type: Any) -> bool:
    return str(element_type.get_type_name()) == "bf16"


def _np_dtype(element_type: Any) -> np.dtype:
    """The numpy dtype holding a port's elements: bf16 (no numpy type) is carried as its raw uint16 bits."""
    return np.dtype(np.uint16) if _is_bf16(element_type) else np.dtype(element_type.to_dtype())


def _shared_tensor(ov: Any, arr: np.ndarray, element_type: Any) -> Any:
    """An ``ov.Tensor`` over ``arr``'s memory (zero-copy), typed ``element_type`` (uint16 bits for bf16)."""
    if arr.dtype == np.uint16 and _is_bf16(element_type):
        return ov.Tensor(arr, list(arr.shape), element_type)
    return ov.Tensor(arr, shared_memory=True)


def _port_name(port: Any) -> str:
    try:
        return port.get_any_name()
    except RuntimeError:  # pragma: no cover - unnamed port
        return ""


def port_indices(ports: Any, names: list[str], kind: str) -> list[int]:
    """Index of the port carrying each ONNX tensor name (OpenVINO may add names, or reorder).

    When OpenVINO folds the node right behind an input (a Dropout or Identity), the input port takes
    the next tensor's name instead: a name then found on no port falls back to its position, which
    the ONNX frontend keeps, provided the counts agree and the position is not taken by another name.
    """
    out: list[int | None] = []
    for name in names:
        hits = [k for k, p in enumerate(ports) if name in p.get_names()]
        out.append(hits[0] if hits else None)
    for pos, (name, k) in enumerate(zip(names, out)):
        if k is None:
            if len(ports) != len(names) or pos in out:
                raise CollageError(f"openvino: the compiled partition has no {kind} named {name!r} "
                                   f"(it has {[sorted(p.get_names()) for p in ports]})")
            out[pos] = pos
    return out  # type: ignore[return-value]


def _static(port: Any, name: str) -> tuple[int, ...]:
    ps = port.get_partial_shape()
    if ps.is_dynamic:
        raise CollageError(f"openvino: tensor {name!r} has dynamic shape {ps}; fix input shapes first")
    return tuple(int(d) for d in port.get_shape())
