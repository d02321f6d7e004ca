"""The graph IR: an ONNX model as a DAG of nodes (:mod:`.ir`), how a model file is read and normalised
(:mod:`.load`), and what a model is made of before anything runs (:mod:`.stats`)."""
from __future__ import annotations

from collage.graph.ir import Graph, parse_shapes

__all__ = ["Graph", "parse_shapes"]
