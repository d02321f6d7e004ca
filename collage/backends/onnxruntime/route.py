"""Residual routing for ONNX Runtime partitions (``OnnxRuntimeBackend.compile``; why: that module's
docstring, "Residual cuts"): the graph rewrites that route a cut residual input through a 1x1 MaxPool
before ORT optimises the partition, and take the MaxPool out of ORT's optimised graph again."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx  # compile time only (imported where used): loading an artifact never imports onnx

#: Marks the 1x1 MaxPool that ``route_residual_inputs`` adds (the name survives ORT's NCHWc rewrite).
_ROUTE = "__collage_nchwc_route"


def residual_inputs(model: onnx.ModelProto) -> list[str]:
    """Graph inputs (4-D float, not initializers) read by both a Conv and an Add/Sum: cut residual inputs."""
    from onnx import TensorProto

    inits = {t.name for t in model.graph.initializer}
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    out = []
    for value in model.graph.input:
        ttype = value.type.tensor_type
        ops = readers.get(value.name, set())
        if (value.name not in inits and ttype.elem_type == TensorProto.FLOAT and len(ttype.shape.dim) == 4
                and "Conv" in ops and ops & {"Add", "Sum"}):
            out.append(value.name)
    return out


def route_residual_inputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` where each input in ``names`` reaches its readers through a 1x1 MaxPool."""
    import onnx

    routed = onnx.ModelProto()
    routed.CopyFrom(model)
    graph = routed.graph
    alias = {name: f"{name}{_ROUTE}" for name in names}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in alias:
                node.input[k] = alias[name]
    for name in reversed(names):
        graph.node.insert(0, onnx.helper.make_node("MaxPool", [name], [alias[name]], name=alias[name],
                                                   kernel_shape=[1, 1]))
    return routed


def drop_routes(optimized: onnx.ModelProto) -> int:
    """Remove the 1x1 MaxPools of ``route_residual_inputs`` from an ORT-optimised graph; how many went."""
    graph = optimized.graph
    bypass = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "MaxPool" and _ROUTE in n.name}
    if not bypass or {o.name for o in graph.output} & set(bypass):  # an alias is never a partition output
        return 0
    keep = [n for n in graph.node if not (n.op_type == "MaxPool" and _ROUTE in n.name)]
    for node in keep:
        for k, name in enumerate(node.input):
            if name in bypass:
                node.input[k] = bypass[name]
    del graph.node[:]
    graph.node.extend(keep)
    return len(bypass)


__all__ = ["drop_routes", "residual_inputs", "route_residual_inputs"]
