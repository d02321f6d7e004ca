"""Helpers shared by the backends: one-node models cut from a plain ModelProto, finding the node a
backend rejects when a whole-model compile fails, and the thread hand-over settings.

This works on a bare ``onnx.ModelProto`` (not a ``Graph``) because a failed compile may be of a model
that ``Graph`` itself would refuse (an op from an unknown domain).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

import onnx
from onnx import helper, shape_inference

log = logging.getLogger(__name__)

#: At most this many distinct node signatures are probed one by one to explain a failed compile.
MAX_PROBES = 64


def value_types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as e:  # noqa: BLE001 - an unknown op can make inference itself fail
        log.debug("shape inference failed while probing: %s", e)
        inferred = model
    g = inferred.graph
    out: dict[str, onnx.ValueInfoProto] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi
    return out


def single_node_models(model: onnx.ModelProto) -> Iterator[tuple[onnx.NodeProto, onnx.ModelProto]]:
    """Yield ``(node, one-node model)`` for each node of ``model``, one per distinct signature."""
    types = value_types(model)
    inits = {t.name: t for t in model.graph.initializer}
    seen: set[bytes] = set()
    for node in model.graph.node:
        inputs, weights = [], []
        for t in node.input:
            if not t:
                continue
            if t in inits:
                weights.append(inits[t])
            elif t in types:
                inputs.append(types[t])
            else:
                inputs = None
                break
        if inputs is None:
            continue
        outputs = [types[t] if t in types else helper.make_empty_tensor_value_info(t) for t in node.output if t]
        key = node.SerializeToString() + b"|".join(vi.SerializeToString() for vi in inputs)
        if key in seen:
            continue
        seen.add(key)
        one = helper.make_model(helper.make_graph([node], f"probe_{node.op_type}", inputs, outputs, weights),
                                opset_imports=list(model.opset_import))
        one.ir_version = model.ir_version
        yield node, one


def _mentioned(node: onnx.NodeProto, message: str) -> bool:
    return (bool(node.name) and node.name in message
            and re.search(rf"\b{re.escape(node.op_type)}\b", message) is not None)


def find_unsupported_node(model: onnx.ModelProto, check: Callable[[onnx.ModelProto], str | None],
                          message: str = "") -> tuple[onnx.NodeProto, str] | None:
    """The first node of ``model`` the backend rejects, with the reason, or None.

    A node the runtime's ``message`` names (by node name and op type) is checked first; then every
    distinct node signature in order (at most ``MAX_PROBES``) with ``check``.
    """
    candidates = list(single_node_models(model))
    candidates.sort(key=lambda nm: not _mentioned(nm[0], message))
    for k, (node, one) in enumerate(candidates):
        if k >= MAX_PROBES:
            log.info("stopped probing after %d node signatures", MAX_PROBES)
            break
        try:
            reason = check(one)
        except Exception as e:  # noqa: BLE001 - a probe that raises is a "no" with its reason
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            return node, reason
    return None


#: element types numpy holds exactly: what collage can feed, return and hand over between partitions
NUMPY_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT8,
    onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})


def uncarried_type(model: onnx.ModelProto) -> str | None:
    """Why ``model`` has a graph input or output whose element type numpy cannot hold (bfloat16, float8,
    int4, ...: a backend would see it through another type), or None."""
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for vi in values:
            if not vi.type.HasField("tensor_type"):
                continue
            t = vi.type.tensor_type.elem_type
            if t and t not in NUMPY_TYPES:
                return (f"graph {kind} {vi.name!r} has element type {onnx.TensorProto.DataType.Name(t).lower()}, "
                        "which has no exact numpy form; run it on another backend")
    return None
