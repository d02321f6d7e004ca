"""Output sizes of ops ONNX's shape inference does not know, from ONNX Runtime, which defines them.

ONNX Runtime's ``com.microsoft`` ops (what its quantizer and transformer optimizer write: ``DynamicQuantizeLSTM``,
``QAttention``, ``FusedConv`` ...) have no shape functions in the ``onnx`` package, so ONNX's inference leaves
their outputs (and everything computed from them) without a size. ``contrib_types`` sizes each such node whose
inputs are sized by running the node alone in ONNX Runtime on two different fillings of its inputs (zeros, then
small integers; initializers keep their values): the sizes are taken only where both runs agree, so an op whose
output size depends on the values it reads stays unsized, and the load refuses it as before.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper

#: the domains ONNX defines
ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
#: the domains whose every op ONNX's inference sizes where its size follows from its inputs' sizes: an op of any
#: other domain left unsized is asked of ONNX Runtime (``contrib_types``), ``ai.onnx.ml`` too (its ``Scaler``,
#: ``Normalizer`` ... have no shape function: an sklearn pipeline lost every size after its first step)
SIZED_DOMAINS = frozenset({"", "ai.onnx"})


def is_static(vi: onnx.ValueInfoProto | None) -> bool:
    """Whether ``vi`` is a tensor whose every dimension has a value."""
    if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)


def static_dims(vi: onnx.ValueInfoProto) -> list[int]:
    """The dimensions of a tensor ``is_static`` says has them all."""
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


def sized_values(inferred: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Each value's type in ``inferred`` (its graph inputs, value infos and outputs), a static one where any of
    them has it: a graph output whose declared size was cleared keeps a size given it in the value infos."""
    known: dict[str, onnx.ValueInfoProto] = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.name not in known or (is_static(vi) and not is_static(known[vi.name])):
            known[vi.name] = vi
    return known


def contrib_types(model: onnx.ModelProto, inferred: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Value infos for the outputs of ``model``'s nodes outside ``SIZED_DOMAINS`` that ``inferred`` (ONNX's
    inference of ``model``) left unsized, where the node's inputs are sized and ONNX Runtime runs it alone."""
    known = sized_values(inferred)
    inits = {t.name: t for t in model.graph.initializer}
    out: list[onnx.ValueInfoProto] = []
    for node in model.graph.node:
        if node.domain in SIZED_DOMAINS or all(not o or is_static(known.get(o)) for o in node.output):
            continue
        out += _run_alone(model, node, known, inits)
    return out


def _run_alone(model: onnx.ModelProto, node: onnx.NodeProto, known: Mapping[str, onnx.ValueInfoProto],
               inits: Mapping[str, onnx.TensorProto]) -> list[onnx.ValueInfoProto]:
    import onnxruntime as ort

    inputs: list[onnx.ValueInfoProto] = []
    weights: list[onnx.TensorProto] = []
    fills: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
    for name in dict.fromkeys(i for i in node.input if i):
        if name in inits:
            weights.append(inits[name])
            continue
        vi = known.get(name)
        if vi is None or not is_static(vi):
            return []
        inputs.append(vi)
        dims = static_dims(vi)
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dtype.kind in "OSU":  # strings: empty, then one character
            fills[0][name], fills[1][name] = np.full(dims, "", object), np.full(dims, "a", object)
            continue
        fills[0][name] = np.zeros(dims, dtype)
        fills[1][name] = (np.arange(int(np.prod(dims)), dtype=np.int64) % 3 + 1).reshape(dims).astype(dtype)
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    alone = helper.make_model(helper.make_graph([node], "alone", inputs, outputs, weights),
                              opset_imports=list(model.opset_import), ir_version=model.ir_version)
    so = ort.SessionOptions()
    so.log_severity_level = 4  # a refusal is an answer here
    try:
        session = ort.InferenceSession(alone.SerializeToString(), so, providers=["CPUExecutionProvider"])
        first, second = (session.run(None, fill) for fill in fills)
        if not all(isinstance(a, np.ndarray) for a in [*first, *second]) \
                or [a.shape for a in first] != [a.shape for a in second]:
            return []  # a sequence or map, or a size that follows the values
        return [helper.make_tensor_value_info(o.name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                for o, a in zip(outputs, first)]
    except Exception:  # noqa: BLE001 - ONNX Runtime cannot run it on these values: the node stays unsized
        return []
