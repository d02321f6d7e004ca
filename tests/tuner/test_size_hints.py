"""The sizes a file declares past its inputs are hints, dropped at load: ``--shape`` decides.

A torch dynamo export of an LSTM declared an intermediate ``getitem`` [1, 20, 64] and the output [1, 20, 5] (its
example's 20 steps) for an input [1, 'Tx', 16]. ONNX Runtime trusts such hints: its MatMul + Add fusion reshapes to
[20, 64], so the file fails in ONNX Runtime at 24 steps, and so did collage's reference run of the model as read:
``collage tune lstm.onnx --shape x=1,24,16`` ended after its measurements with "onnxruntime: tensor 'linear' has
non-static shape [1, None, 5]". The model itself is fine at 24 steps (the artifact now equals torch's output there,
4e-8). Here the same hints by hand.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

import collage
from collage.search.candidates import Limits

STEPS, EXAMPLE, WIDTH = 24, 20, 64


def _hinted(path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((WIDTH, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["hid"], name="relu"),
                           helper.make_node("MatMul", ["hid", "W"], ["mm"], name="mm"),
                           helper.make_node("Add", ["mm", "b"], ["y"], name="add")], "hinted",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, "T", WIDTH])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, EXAMPLE, 5])],
                          [nh.from_array(w, "W"), nh.from_array(b, "b")],
                          value_info=[helper.make_tensor_value_info("hid", T.FLOAT, [1, EXAMPLE, WIDTH]),
                                      helper.make_tensor_value_info("mm", T.FLOAT, [1, EXAMPLE, 5])])
    onnx.save(helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w, b


def test_a_model_whose_hints_hold_the_export_size_tunes_at_another(tmp_path) -> None:
    w, b = _hinted(tmp_path / "hinted.onnx")
    x = np.random.default_rng(1).standard_normal((1, STEPS, WIDTH)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    with pytest.raises(Exception, match="cannot be reshaped"):  # the file as ONNX Runtime runs it
        ort.InferenceSession(str(tmp_path / "hinted.onnx"), so).run(None, {"x": x})
    collage.tune(str(tmp_path / "hinted.onnx"), tmp_path / "out", shapes={"x": (1, STEPS, WIDTH)},
                 backends=["onnxruntime", "openvino"], db=str(tmp_path / "costs.sqlite"), limits=Limits(max_nodes=1),
                 progress=False)
    _assert_runs(tmp_path / "out", x, w, b)


def test_a_size_not_tuned_runs_past_the_files_hints(tmp_path) -> None:
    """A multi-size artifact runs an untuned size on the whole original model: without its hints too."""
    w, b = _hinted(tmp_path / "hinted.onnx")
    collage.tune(str(tmp_path / "hinted.onnx"), tmp_path / "out", shapes=[{"x": (1, 24, WIDTH)}, {"x": (1, 32, WIDTH)}],
                 backends=["onnxruntime"], db=str(tmp_path / "costs.sqlite"), limits=Limits(max_nodes=1),
                 progress=False)
    _assert_runs(tmp_path / "out", np.random.default_rng(2).standard_normal((1, 28, WIDTH)).astype(np.float32), w, b)


def _assert_runs(artifact, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> None:
    """The artifact computes relu(x) @ w + b."""
    art = collage.load(artifact)
    try:
        got = art.run({"x": x})["y"]
    finally:
        art.close()
    np.testing.assert_allclose(got, np.maximum(x, 0) @ w + b, rtol=1e-5, atol=1e-5)


def test_an_input_passed_through_as_an_output_keeps_the_size_given() -> None:
    """With the outputs' declared sizes dropped, an output that is an input (a passthrough) is the input's size:
    left unsized, ONNX's inference sized no output at all ("tensor 'y' (output of node 'relu') has no static
    shape after inference")."""
    from collage.graph.ir import Graph

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "through",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("x", T.FLOAT, [2, 4])])
    graph = Graph.load(helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]),
                       shapes={"x": (64, 4)})
    assert graph.outputs == ["y", "x"] and graph.tensor("y").shape == (64, 4) and graph.tensor("x").shape == (64, 4)


def test_an_output_only_its_declaration_sizes_keeps_that_size() -> None:
    """A Loop's scan output over a constant trip count: ONNX's inference leaves it unsized, the file declares
    [4, 3]. The declaration is used where nothing computes the size (dropping every declared size refused it)."""
    from collage.graph.ir import Graph

    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Add", ["x", "one"], ["step"])], "body",
                             [helper.make_tensor_value_info("i", T.INT64, []),
                              helper.make_tensor_value_info("cond_in", T.BOOL, [])],
                             [helper.make_tensor_value_info("cond_out", T.BOOL, []),
                              helper.make_tensor_value_info("step", T.FLOAT, [3])],
                             [nh.from_array(np.ones(3, np.float32), "one")])
    g = helper.make_graph([helper.make_node("Loop", ["M", ""], ["y"], body=body, name="loop")], "scan",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [4, 3])],
                          [nh.from_array(np.array(4, np.int64), "M")])
    graph = Graph.load(helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]))
    assert graph.tensor("y").shape == (4, 3)


def test_a_graph_output_nothing_computes_is_refused_in_one_line() -> None:
    from collage.errors import ModelError
    from collage.graph.ir import Graph

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "ghost",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("zz", T.FLOAT, [2, 4])])
    with pytest.raises(ModelError) as e:
        Graph.load(helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]))
    assert "graph output 'zz' is not computed by any node" in str(e.value) and "\n" not in str(e.value)
