"""Values that are not tensors (sequences, maps, optionals) are refused in one line that says so.

Before, a ``SplitToSequence`` output was refused as a tensor with "no static shape after inference ... ONNX's
shape inference could not follow SplitToSequence", skl2onnx's ``ZipMap`` the same way, and a sequence graph input
as having "symbolic dims [] ... fix them with --shape s=": each sent the user after a size no ``--shape`` gives.
"""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from collage.errors import ModelError
from collage.graph.ir import Graph


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           ml: bool = False) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ai.onnx.ml", 3)] if ml else [])
    return helper.make_model(helper.make_graph(nodes, "values", inputs, outputs), ir_version=9, opset_imports=opsets)


def _refusal(model: onnx.ModelProto) -> str:
    with pytest.raises(ModelError) as e:
        Graph.load(model)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_sequence_between_nodes_is_named_as_a_sequence() -> None:
    m = _model([helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, name="split"),
                helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=1, name="cat")],
               [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
               [helper.make_tensor_value_info("y", T.FLOAT, None)])
    msg = _refusal(m)
    assert "value 'seq' (output of node 'split', SplitToSequence) is a sequence, not a tensor" in msg, msg


def test_sklearn_zipmap_output_is_refused_with_the_converter_option_that_drops_it() -> None:
    seq_of_maps = helper.make_sequence_type_proto(helper.make_map_type_proto(T.INT64, helper.make_tensor_type_proto(
        T.FLOAT, [])))
    m = _model([helper.make_node("LinearClassifier", ["x"], ["label", "prob"], domain="ai.onnx.ml",
                                 classlabels_ints=[0, 1, 2], coefficients=[0.1] * 12, intercepts=[0.0] * 3,
                                 name="lin"),
                helper.make_node("ZipMap", ["prob"], ["probabilities"], domain="ai.onnx.ml",
                                 classlabels_int64s=[0, 1, 2], name="zipmap")],
               [helper.make_tensor_value_info("x", T.FLOAT, [1, 4])],
               [helper.make_tensor_value_info("label", T.INT64, [1]),
                helper.make_value_info("probabilities", seq_of_maps)], ml=True)
    msg = _refusal(m)
    assert "'probabilities' (output of node 'zipmap', ZipMap) is a sequence" in msg and "'zipmap': False" in msg, msg


def test_a_sequence_graph_input_is_refused_as_a_sequence_not_as_a_missing_size() -> None:
    m = _model([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, name="cat")],
               [helper.make_value_info("s", helper.make_sequence_type_proto(helper.make_tensor_type_proto(T.FLOAT,
                                                                                                          [2, 3])))],
               [helper.make_tensor_value_info("y", T.FLOAT, None)])
    msg = _refusal(m)
    assert "input 's' is a sequence, not a tensor" in msg and "--shape" not in msg, msg
