"""Element types and node forms the OpenVINO CPU plugin computes inexactly: the nodes refused at support/compile
time (:func:`inexact_node`, :func:`check_exact`), shared by the backend and the linker. (The run-time range check
of int64 inputs, ``check_int32_range``, is the compiled partition's: a loaded artifact needs no onnx.)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from collage.backends.base import first_refused, node_attr, refuse
from collage.backends.openvino.compiled import I32_MAX, I32_MIN
from collage.backends.support import value_types

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


def _wrong_form(node: onnx.NodeProto) -> str | None:
    """Node forms the CPU plugin computes differently from ONNX's reference: found by ONNX's own backend tests
    run through collage (results/backends/onnx-conformance.md); the test that showed it is named. ONNX Runtime's
    ``com.microsoft`` QLinear ops (its QOperator quantization's Add, Mul, LeakyRelu, Sigmoid, Concat, AveragePool,
    ...): measured one-node against ONNX Runtime, which defines them (tests/backends/test_openvino_qlinear.py)."""
    if node.domain == "com.microsoft" and node.op_type.startswith("QLinear"):
        return (f"com.microsoft {node.op_type}: an output past its int8/uint8 range wraps around where ONNX Runtime, "
                "which defines the op, saturates (measured for QLinearAdd, Mul, LeakyRelu, Sigmoid, Concat and "
                "AveragePool: off by up to 255; the family's other ops are refused with them)")
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    given = [bool(t) for t in node.input]
    if op == "Attention":
        if node_attr(node, "left_window_size", -1) >= 0 or node_attr(node, "right_window_size", -1) >= 0:
            return "Attention with a local window: masks other positions than ONNX (test_attention_*local_window*)"
        if node_attr(node, "is_causal", 0) and len(given) > 4 and given[4]:
            return "Attention with is_causal and a past key: wrong values (test_attention_4d_with_past_*_causal)"
    if op == "BitShift":
        return "BitShift: shifts by the width or more, and of negative values, differ (test_bitshift_*_int32_*)"
    if op == "DynamicQuantizeLinear":
        return "DynamicQuantizeLinear: rounds .5 cases differently (test_dynamicquantizelinear)"
    if op in ("RNN", "GRU", "LSTM") and node_attr(node, "layout", 0) == 1:
        return f"{op} with layout=1 (batch first): wrong values (test_*_batchwise)"
    # found with the tests' parameter inputs made constants, as real models hold them (a graph input there was
    # refused for its dynamic shape, or dropped: results/backends/onnx-conformance.md ran them as inputs)
    if op == "LSTM" and len(given) > 7 and given[7]:
        return "LSTM with peephole weights P: wrong values (test_lstm_with_peepholes, P a constant)"
    if op == "Resize":
        if node_attr(node, "antialias", 0):
            return "Resize with antialias=1: wrong values (test_resize_downsample_*_antialias)"
        if node_attr(node, "mode", "nearest") == "cubic" and node_attr(node, "exclude_outside", 0):
            return "Resize cubic with exclude_outside=1: wrong values (test_resize_*_cubic_A_n0p5_exclude_outside)"
        if node_attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
            return ("Resize with keep_aspect_ratio_policy not_larger/not_smaller: another output size "
                    "(test_resize_*_sizes_nearest_not_larger/_not_smaller)")
    if op == "MaxPool" and node_attr(node, "ceil_mode", 0):
        return "MaxPool with ceil_mode=1: another output size (test_maxpool_2d_ceil_output_size_reduce_by_one)"
    if op == "RoiAlign" and node_attr(node, "mode", "avg") == "max":
        return "RoiAlign mode=max: wrong values (test_roialign_mode_max)"
    if op == "DFT":
        return "DFT: onesided / inverse forms give other output shapes (test_dft_rfft_opset19, test_dft_irfft_opset19)"
    if op == "SpaceToDepth" and node_attr(node, "mode", "DCR") == "CRD":
        return "SpaceToDepth mode=CRD: computed as DCR (test_spacetodepth_crd_mode_example)"
    # measured on the plugin (2026.4): a max over values that are all -inf gives -FLT_MAX, a min over all +inf
    # FLT_MAX (its reduction starts from the lowest/highest finite value). Masked attention computes exactly that
    # for a fully masked row and compares the result with -inf: onnx 1.23.2's *_fullymasked_*_expanded and
    # *_nan_robustness_expanded cases then got NaN where ONNX gives 0 (they load since shapes fold at load)
    if op in ("ReduceMax", "ReduceMin"):
        return (f"{op}: a {op[6:].lower()} over values that are all {'-' if op == 'ReduceMax' else '+'}inf gives "
                f"{'-' if op == 'ReduceMax' else ''}FLT_MAX, not the infinity (test_attention_*fullymasked*_expanded)")
    return None


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor of ``model`` that shape inference can type (initializers included)."""
    out = {name: vi.type.tensor_type.elem_type for name, vi in value_types(model).items()}
    out.update({t.name: t.data_type for t in model.graph.initializer})
    return out


def _inexact_reason(node: onnx.NodeProto, types: dict[str, int], consts: Mapping[str, Any]) -> str | None:
    """Why the CPU plugin would compute ``node`` inexactly (an element type it converts, or a node form it
    computes wrongly), or None."""
    wrong = _wrong_form(node)
    if wrong is None and node.op_type == "QuantizeLinear" and types.get(node.output[0]) == onnx.TensorProto.UINT16:
        wrong = ("QuantizeLinear to uint16: rounds .5 cases differently (test_quantizelinear_uint16, zero point a "
                 "constant)")
    if wrong is None and node.op_type == "Resize" and node_attr(node, "mode", "nearest") != "nearest" \
            and node_attr(node, "coordinate_transformation_mode", "half_pixel") == "align_corners" \
            and len(node.input) > 2 and node.input[2] in consts and np.any(np.asarray(consts[node.input[2]]) < 1):
        wrong = ("Resize (linear/cubic) downsampling by scales with align_corners: differs from ONNX's reference as "
                 "onnxruntime's does (test_resize_downsample_scales_*_align_corners)")
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
                if values.size and (values.min() < I32_MIN or values.max() > I32_MAX):
                    return (f"int64 constant {name!r} holds values past +-2**31, which the CPU plugin carries as "
                            "int32; run this node on another backend")
    return None


def inexact_node(model: onnx.ModelProto) -> tuple[onnx.NodeProto, str] | None:
    """The first node of ``model`` the CPU plugin would compute inexactly, with the reason, or None."""
    types = _elem_types(model)
    scales = {n.input[2] for n in model.graph.node if n.op_type == "Resize" and len(n.input) > 2 and n.input[2]}
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
              if t.data_type == _I64 or t.name in scales}  # int64 constants; Resize's scales (which way it goes)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == _I64:
                    consts[node.output[0]] = numpy_helper.to_array(a.t)
    return first_refused(model, lambda node: _inexact_reason(node, types, consts))


def check_exact(backend_name: str, model: onnx.ModelProto) -> None:
    """Raise ``UnsupportedError`` naming the first node of ``model`` the CPU plugin computes inexactly."""
    refuse(backend_name, model, inexact_node(model))


__all__ = ["check_exact", "inexact_node"]
