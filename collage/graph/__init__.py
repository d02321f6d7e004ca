"""The graph IR: an ONNX model as a DAG of nodes (:mod:`.ir`), how a model file is read and normalised
(:mod:`.load`), what a model is made of before anything runs (:mod:`.stats`), and THE seeded random inputs
of a Graph or ONNX model (:mod:`.inputs`: specs with index ranges, the rule of :mod:`collage.seeded_inputs`).

The bottom layer: imports no other part of collage but the leaves (util, errors, inputs)."""
from __future__ import annotations

from collage.graph.ir import Graph, parse_shapes

__all__ = ["Graph", "parse_shapes"]
