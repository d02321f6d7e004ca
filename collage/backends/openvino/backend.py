"""OpenVINO on CPU (the oneDNN-based CPU plugin).

Settings (RUNTIME-FACTS.md): ``INFERENCE_PRECISION_HINT`` f32 unless ``precision`` asks otherwise
(the plugin's default on AMX/avx512_bf16 CPUs is bf16, which changes results), ``PERFORMANCE_HINT``
LATENCY, ``NUM_STREAMS`` 1, ``INFERENCE_NUM_THREADS`` = ``threads`` (default
``collage.util.physical_cores()``). One ``ov.Core`` per process (:func:`core`).

Hand-over: with ``pinning=False`` (the default) the plugin does not pin its worker threads to cores
(``ENABLE_CPU_PINNING`` NO), so when another runtime's partition runs next the OS can give it the
cores at once; ``pinning=True`` is the plugin's own default for LATENCY on Linux.

Linked partitions (``compile_linked``, in ``collage.backends.openvino.link``): the feature maps between
OpenVINO partitions of one sequence are handed over channels-last (NHWC, the plugin's own layout) in
the inference precision (f32, or bf16 carried in numpy as its raw ``uint16`` bits), so the boundary
needs no Reorder pair.

Artifact format: OpenVINO IR (``.xml`` + ``.bin`` written by ``ov.save_model`` without fp16
compression), not a compiled blob (``export_model``). The IR is portable across CPU models and
OpenVINO patch releases and the compile settings above are applied again at load, so a loaded
partition computes exactly what a fresh compile does; a blob is tied to the exact OpenVINO build, the
CPU's ISA and the config it was compiled with. The price is a compile at load (milliseconds for a
layer, about a second for BERT-base).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from collage.backends.base import Backend, Compiled, _op_name
from collage.errors import ArtifactError, BackendUnavailable, CollageError, UnsupportedError
from collage.util import physical_cores, sha256_bytes

log = logging.getLogger(__name__)

_PRECISIONS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}

_core_lock = threading.Lock()
_core: Any = None


def _ov():  # lazy import: importing collage.backends never loads a runtime
    try:
        import openvino
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendUnavailable("openvino is not installed: pip install openvino") from e
    return openvino


def core() -> Any:
    """The process's one ``openvino.Core``."""
    global _core
    with _core_lock:
        if _core is None:
            _core = _ov().Core()
        return _core


# ---------------------------------------------------------------------- element types computed inexactly
# Measured (openvino 2026.4, CPU plugin; one-node Add/Mul/Max/Identity/Cast models against numpy, and ONNX's
# pytorch-operator double cases): the plugin converts these element types and returns wrong values without
# an error. A node that would compute with them is refused (``_inexact_reason``), never run:
#: float64 is computed in f32 (1e300 + 1e300 = 3.4e38; ONNX's double Add off by 1e199+), uint64 and uint32
#: as signed types (Add/Max wrong past 2**31).
_INEXACT = {onnx.TensorProto.DOUBLE: "float64 (computed as float32)",
            onnx.TensorProto.UINT64: "uint64 (computed as a signed 32-bit type)",
            onnx.TensorProto.UINT32: "uint32 (compared and computed as signed)"}
#: int64 is carried as i32 (Identity of 2**31 returns -2**31). It is everywhere (token ids, masks, shapes,
#: indices), so it is not refused outright: values that ENTER a partition are checked at run time
#: (``OVCompiled.run`` refuses a value past int32), constants are checked here, and a node that COMPUTES
#: int64 values (arithmetic, whose result may pass int32) is refused.
_I64 = onnx.TensorProto.INT64
_I32_MIN, _I32_MAX = -2**31, 2**31 - 1
#: int8/uint8 arithmetic saturates in the plugin (127 + 127 = 127) where ONNX Runtime and numpy wrap.
_SATURATING = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Sum", "Mean", "Neg", "Abs", "Pow", "Mod", "CumSum", "MatMul",
                         "Gemm", "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceMean", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "Einsum", "Range", "BitShift",
                         "MatMulInteger", "ConvInteger"})
#: int64 inputs that hold indices, axes or bounds (a constant past int32 there, e.g. Slice's INT64_MAX "to
#: the end", is understood by the plugin), by op.
_INDEX_INPUTS: dict[str, frozenset[int]] = {
    "Slice": frozenset({1, 2, 3, 4}), "Pad": frozenset({1, 3}), "Unsqueeze": frozenset({1}),
    "Squeeze": frozenset({1}), "Split": frozenset({1}), "Reshape": frozenset({1}), "Expand": frozenset({1}),
    "Tile": frozenset({1}), "ReduceSum": frozenset({1}), "ReduceMean": frozenset({1}), "ReduceMax": frozenset({1}),
    "ReduceMin": frozenset({1}), "ReduceProd": frozenset({1}), "ReduceL1": frozenset({1}),
    "ReduceL2": frozenset({1}), "ReduceLogSum": frozenset({1}), "ReduceLogSumExp": frozenset({1}),
    "ReduceSumSquare": frozenset({1}), "TopK": frozenset({1}), "CumSum": frozenset({1}),
}
#: element types numpy (and so collage's hand-over between partitions) carries exactly
_CARRIED = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT8, onnx.TensorProto.INT16,
                      onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                      onnx.TensorProto.BOOL}) | frozenset(_INEXACT)


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            value = onnx.helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _wrong_form(node: onnx.NodeProto) -> str | None:
    """Node forms the CPU plugin computes differently from ONNX's reference: found by ONNX's own backend tests
    run through collage (results/onnx-conformance.md); the test that showed it is named."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    given = [bool(t) for t in node.input]
    if op == "Attention":
        if _attr(node, "left_window_size", -1) >= 0 or _attr(node, "right_window_size", -1) >= 0:
            return "Attention with a local window: masks other positions than ONNX (test_attention_*local_window*)"
        if _attr(node, "is_causal", 0) and len(given) > 4 and given[4]:
            return "Attention with is_causal and a past key: wrong values (test_attention_4d_with_past_*_causal)"
    if op == "BitShift":
        return "BitShift: shifts by the width or more, and of negative values, differ (test_bitshift_*_int32_*)"
    if op == "DynamicQuantizeLinear":
        return "DynamicQuantizeLinear: rounds .5 cases differently (test_dynamicquantizelinear)"
    if op in ("RNN", "GRU", "LSTM") and _attr(node, "layout", 0) == 1:
        return f"{op} with layout=1 (batch first): wrong values (test_*_batchwise)"
    if op == "MaxPool" and _attr(node, "ceil_mode", 0):
        return "MaxPool with ceil_mode=1: another output size (test_maxpool_2d_ceil_output_size_reduce_by_one)"
    if op == "RoiAlign" and _attr(node, "mode", "avg") == "max":
        return "RoiAlign mode=max: wrong values (test_roialign_mode_max)"
    if op == "DFT":
        return "DFT: onesided / inverse forms give other output shapes (test_dft_rfft_opset19, test_dft_irfft_opset19)"
    if op == "SpaceToDepth" and _attr(node, "mode", "DCR") == "CRD":
        return "SpaceToDepth mode=CRD: computed as DCR (test_spacetodepth_crd_mode_example)"
    return None


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor of ``model`` that shape inference can type (initializers included)."""
    from collage.backends.support import _value_types

    out = {name: vi.type.tensor_type.elem_type for name, vi in _value_types(model).items()}
    out.update({t.name: t.data_type for t in model.graph.initializer})
    return out


def _inexact_reason(node: onnx.NodeProto, types: dict[str, int], consts: Mapping[str, Any]) -> str | None:
    """Why the CPU plugin would compute ``node`` inexactly (an element type it converts), or None."""
    wrong = _wrong_form(node)
    if wrong is not None:
        return wrong + "; run this node on another backend"
    index_in = _INDEX_INPUTS.get(node.op_type, frozenset())
    for kind, names in (("input", node.input), ("output", node.output)):
        for pos, name in enumerate(names):
            t = types.get(name) if name else None
            if t is not None and t not in _CARRIED:
                tname = onnx.TensorProto.DataType.Name(t).lower()
                return (f"element type {tname} of {kind} {name!r}: no exact numpy form for it (the CPU plugin hands "
                        "it over as another type); run this node on another backend")
            if t in _INEXACT:
                return (f"element type {_INEXACT[t]} of {kind} {name!r}: the CPU plugin does not compute it "
                        "exactly; run this node on another backend")
            if kind == "output" and t in _SATURATING and node.op_type in _ARITHMETIC:
                return (f"{_SATURATING[t]} arithmetic (output {name!r}): the CPU plugin saturates where ONNX wraps; "
                        "run this node on another backend")
            if t != _I64:
                continue
            if kind == "output" and node.op_type in _ARITHMETIC:
                return (f"int64 arithmetic (output {name!r}): the CPU plugin computes int64 as int32, so results "
                        "past +-2**31 come back wrong; run this node on another backend")
            if kind == "input" and name in consts and pos not in index_in:
                values = consts[name]
                if values.size and (values.min() < _I32_MIN or values.max() > _I32_MAX):
                    return (f"int64 constant {name!r} holds values past +-2**31, which the CPU plugin carries as "
                            "int32; run this node on another backend")
    return None


def inexact_node(model: onnx.ModelProto) -> tuple[onnx.NodeProto, str] | None:
    """The first node of ``model`` the CPU plugin would compute inexactly, with the reason, or None."""
    types = _elem_types(model)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == _I64}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == _I64:
                    consts[node.output[0]] = numpy_helper.to_array(a.t)
    for node in model.graph.node:
        reason = _inexact_reason(node, types, consts)
        if reason is not None:
            return node, reason
    return None


def _check_exact(backend_name: str, model: onnx.ModelProto) -> None:
    found = inexact_node(model)
    if found is not None:
        node, reason = found
        raise UnsupportedError(f"{backend_name} cannot take op {_op_name(node)} (node {node.name or node.output[0]!r} "
                               f"of model {model.graph.name!r}): {reason}")


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

    def __init__(self, backend: OpenVINOBackend, compiled: Any, source: onnx.ModelProto | Path,
                 input_names: list[str] | None = None, output_names: list[str] | None = None) -> None:
        ov = _ov()
        self.backend = backend.name
        self._backend = backend
        self._compiled = compiled
        self._source = source
        self._request = compiled.create_infer_request()
        self.input_names = list(input_names or [_port_name(p) for p in compiled.inputs])
        self.output_names = list(output_names or [_port_name(p) for p in compiled.outputs])
        self._in_specs: list[tuple[int, str, np.dtype, tuple[int, ...]]] = []
        for name, k in zip(self.input_names, _ports(compiled.inputs, self.input_names, "input")):
            p = compiled.inputs[k]
            self._in_specs.append((k, name, _np_dtype(p.get_element_type()), _static(p, name)))
        self._ovm = ov
        self._in_types = {k: compiled.inputs[k].get_element_type() for k, *_ in self._in_specs}
        self._outputs: dict[str, np.ndarray] = {}
        self._keep: list[Any] = []
        for name, k in zip(self.output_names, _ports(compiled.outputs, self.output_names, "output")):
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
        bound = self._bound
        for k, name, dtype, shape in self._in_specs:
            try:
                arr = feeds[name]
            except KeyError:
                raise CollageError(f"openvino: missing input {name!r} (expected {self.input_names})") from None
            if arr is not bound.get(name):
                self._bind(k, name, dtype, shape, arr)
        for name in self._i64_inputs:  # the contents of a bound array can change between calls: every call
            _check_int32_range(name, self._in_tensors[name][1])
        # share_outputs: results already sit in our pre-set buffers; do not copy them again
        try:
            self._request.infer(share_outputs=True)
        except Exception as e:  # noqa: BLE001 - a runtime failure as one clear error
            what = self._source.graph.name if isinstance(self._source, onnx.ModelProto) else self._source.name
            raise CollageError(f"openvino failed running {what!r}: {' '.join(str(e).split())[:400]}") from e
        return dict(self._outputs)

    def _ir(self) -> tuple[Any, str]:
        """The ``ov.Model`` to save and its file stem (named by a digest of what it was read from)."""
        if isinstance(self._source, Path):
            return core().read_model(str(self._source)), f"openvino-{sha256_bytes(self._source.read_bytes())[:16]}"
        data = self._source.SerializeToString()
        return self._backend._read(data), f"openvino-{sha256_bytes(data)[:16]}"

    def save(self, directory: Path) -> dict[str, Any]:
        """Write OpenVINO IR (.xml + .bin, fp32 weights kept as they are)."""
        ov = _ov()
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


def _check_int32_range(name: str, arr: np.ndarray) -> None:
    if arr.size and (arr.min() < _I32_MIN or arr.max() > _I32_MAX):
        raise CollageError(f"openvino: int64 input {name!r} holds values past +-2**31 (min {arr.min()}, max "
                           f"{arr.max()}); the CPU plugin carries int64 as int32 and would return wrong values. "
                           "Run this part of the model on another backend (re-tune without openvino for it)")


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


def _ports(ports: Any, names: list[str], kind: str) -> list[int]:
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


class OpenVINOBackend(Backend):
    """OpenVINO CPU plugin (see the module docstring for its settings)."""

    name = "openvino"
    device = "cpu"

    def __init__(self, threads: int | None = None, precision: str = "fp32", pinning: bool = False,
                 hint: str = "LATENCY") -> None:
        if precision not in _PRECISIONS:
            raise CollageError(f"openvino: precision must be one of {sorted(_PRECISIONS)}, not {precision!r}")
        self.threads = int(threads or physical_cores())
        self.precision = precision
        self.pinning = bool(pinning)
        self.hint = hint

    def available(self) -> str | None:
        try:
            devices = core().available_devices
        except BackendUnavailable as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - a broken install says why
            return f"openvino cannot start: {e}"
        if "CPU" not in devices:
            return f"openvino sees no CPU device (devices: {devices})"
        return None

    def version(self) -> str:
        return f"openvino-{_ov().get_version().split('-')[0]}-{self.precision}-t{self.threads}"

    @property
    def options(self) -> dict[str, Any]:
        """Constructor keywords: ``get_backend("openvino", **options)`` rebuilds this backend (streams: 1)."""
        return {"precision": self.precision, "threads": self.threads, "hint": self.hint, "pinning": self.pinning}

    def config(self) -> dict[str, str]:
        """The CPU plugin's compile config."""
        return {
            "INFERENCE_PRECISION_HINT": _PRECISIONS[self.precision],
            "PERFORMANCE_HINT": self.hint,
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(self.threads),
            "ENABLE_CPU_PINNING": "YES" if self.pinning else "NO",
        }

    def _read(self, data: bytes) -> Any:
        return core().read_model(data, b"")

    def _compile(self, model: Any) -> Any:
        return core().compile_model(model, "CPU", self.config())

    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        found = inexact_node(model)
        if found is not None:
            return found[1]
        try:
            self._compile(self._read(model.SerializeToString()))
        except Exception as e:  # noqa: BLE001 - the runtime's message is the answer
            return f"{type(e).__name__}: {e}"
        return None

    def compile(self, model: onnx.ModelProto) -> OVCompiled:
        _check_exact(self.name, model)
        try:
            compiled = self._compile(self._read(model.SerializeToString()))
        except Exception as e:  # noqa: BLE001 - classified below
            self._raise_compile_error(model, e)
        inits = {t.name for t in model.graph.initializer}
        return OVCompiled(self, compiled, model, [i.name for i in model.graph.input if i.name not in inits],
                          [o.name for o in model.graph.output])

    def compile_linked(self, models: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> list[Compiled]:
        """Partitions run in order in one process; the feature maps between them are handed over NHWC in
        the inference precision, the plugin's own form (``collage.backends.openvino.link``)."""
        from collage.backends.openvino.link import compile_linked

        return list(compile_linked(self, models, plain))

    def load(self, directory: Path, entry: Mapping[str, Any]) -> OVCompiled:
        """Read the IR and compile it with this backend's settings."""
        xml = Path(directory) / entry["files"][0]
        weights = xml.with_suffix(".bin").name  # read_model opens it beside the .xml: it must be a listed file
        if xml.suffix != ".xml" or weights not in entry["files"]:
            raise ArtifactError(f"{xml}: an openvino partition lists its IR as .xml then its weights {weights!r}; "
                                f"the list is {list(entry['files'])}: re-export the artifact")
        for name in entry["files"]:
            if not (Path(directory) / name).is_file():
                raise ArtifactError(f"{Path(directory) / name}: openvino partition file is missing")
        saved = entry.get("version")
        if saved and saved != self.version():
            log.warning("%s: saved by %s, loading with %s", xml, saved, self.version())
        try:
            compiled = self._compile(core().read_model(str(xml)))
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{xml}: openvino cannot load this partition: {e}") from e
        return OVCompiled(self, compiled, xml, entry.get("inputs"), entry.get("outputs"))
