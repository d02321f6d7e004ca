"""Seeded random inputs of a Graph or an ONNX model: its input specs (name, shape, dtype, index range) and
the one rule of :mod:`collage.seeded_inputs` applied to them.

``random_inputs(graph_or_model, seed)`` is what the zoo, the tuner, the cost worker and the tests call; an
artifact draws the same values from its manifest (``Artifact.random_inputs``), without this module.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.seeded_inputs import DEFAULT_INT_HIGH, InputSpec, seeded_inputs

if TYPE_CHECKING:
    import onnx

    from collage.graph.ir import Graph

#: op type -> (position of the index input, position of the data it indexes)
INDEX_INPUTS = {"Gather": (1, 0), "GatherElements": (1, 0), "GatherND": (1, 0),
                "ScatterElements": (1, 0), "ScatterND": (1, 0)}


def _value_shape(vi: Any) -> tuple[int, ...]:
    """A ValueInfoProto's shape, symbolic dimensions as 1."""
    return tuple(max(1, d.dim_value) for d in vi.type.tensor_type.shape.dim)


def index_bounds(model: onnx.ModelProto,
                 shape_of: Callable[[str], tuple[int, ...] | None] | None = None) -> dict[str, int]:
    """Exclusive upper bounds of the tensors used as indices (Gather and friends): the length of the axis
    they index (the smallest, where several nodes index with one tensor). Data shapes come from the
    initializers and value infos, else from ``shape_of``."""
    g = model.graph
    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            shapes.setdefault(vi.name, _value_shape(vi))
    bounds: dict[str, int] = {}
    for node in g.node:
        pos = INDEX_INPUTS.get(node.op_type)
        if pos is None or len(node.input) <= max(pos):
            continue
        idx, data = node.input[pos[0]], node.input[pos[1]]
        dshape = shapes.get(data) or (shape_of(data) if shape_of else None)
        if not dshape:
            bound = 1
        elif node.op_type == "GatherND":
            bound = min(dshape)
        else:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            bound = dshape[axis % len(dshape)]
        bounds[idx] = max(1, min(bounds.get(idx, bound), bound))
    return bounds


def _graph_specs(graph: Graph) -> list[InputSpec]:
    def shape_of(name: str) -> tuple[int, ...] | None:
        try:
            return tuple(graph.tensor(name).shape)
        except (KeyError, AttributeError):
            return None

    bounds = index_bounds(graph.model, shape_of)
    return [InputSpec(n, tuple(graph.tensor(n).shape), graph.tensor(n).dtype, bounds.get(n)) for n in graph.inputs]


def _model_specs(model: onnx.ModelProto) -> list[InputSpec]:
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    bounds = index_bounds(model)
    return [InputSpec(vi.name, _value_shape(vi),
                      np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)),
                      bounds.get(vi.name))
            for vi in model.graph.input if vi.name not in inits]


def input_specs(source: Graph | onnx.ModelProto) -> list[InputSpec]:
    """The specs of a Graph's inputs, or of an ONNX model's non-initializer inputs, in order."""
    return _graph_specs(source) if hasattr(source, "tensor") else _model_specs(source)


def random_inputs(source: Graph | onnx.ModelProto, seed: int = 0, *,
                  int_high: int = DEFAULT_INT_HIGH) -> dict[str, np.ndarray]:
    """Seeded feeds for every input of ``source`` (a Graph or an ONNX model); the rule: :mod:`collage.seeded_inputs`."""
    return seeded_inputs(input_specs(source), seed, int_high=int_high)
