"""``ai.onnx.ml`` ops (what skl2onnx writes for an sklearn pipeline) are sized by ONNX Runtime where ONNX's
inference does not size them.

ONNX has no shape function for ``Scaler`` (nor for several other ``ai.onnx.ml`` ops), so a pipeline
``Scaler -> TreeEnsembleRegressor`` was refused at load: "tensor 'xs' (output of node 'scaler') has no static shape
after inference". They are now asked of ONNX Runtime as ``com.microsoft`` ops are (``collage.graph.contrib``).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper

import collage
from collage.graph.ir import Graph
from collage.search.candidates import Limits


def _pipeline() -> onnx.ModelProto:
    trees = helper.make_node(
        "TreeEnsembleRegressor", ["xs"], ["y"], domain="ai.onnx.ml", name="trees", n_targets=1,
        nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2], nodes_featureids=[0, 0, 0, 2, 0, 0],
        nodes_values=[0.5, 0, 0, 0.1, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2,
        nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
        target_treeids=[0, 0, 1, 1], target_nodeids=[1, 2, 1, 2], target_ids=[0, 0, 0, 0],
        target_weights=[1.0, 2.0, 10.0, 20.0], post_transform="NONE", aggregate_function="SUM")
    g = helper.make_graph([helper.make_node("Scaler", ["x"], ["xs"], domain="ai.onnx.ml", name="scaler",
                                            offset=[0.5, 0.0, 0.0, 0.0], scale=[1.0, 2.0, 1.0, 1.0]), trees],
                          "pipeline", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["N", 1])])
    return helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("", 17),
                                                             helper.make_opsetid("ai.onnx.ml", 3)])


def test_an_sklearn_pipeline_loads_with_every_tensor_sized() -> None:
    g = Graph.load(_pipeline(), shapes={"x": (64, 4)})
    assert g.tensor("xs").shape == (64, 4) and g.tensor("y").shape == (64, 1)


def test_an_sklearn_pipeline_tunes_and_runs_as_onnx_runtime_does(tmp_path) -> None:
    onnx.save(_pipeline(), tmp_path / "pipeline.onnx")
    collage.tune(str(tmp_path / "pipeline.onnx"), tmp_path / "out", shapes={"x": (64, 4)},
                 backends=["onnxruntime", "openvino"], db=str(tmp_path / "costs.sqlite"), limits=Limits(max_nodes=2),
                 progress=False)
    x = np.random.default_rng(0).random((64, 4)).astype(np.float32)
    want = ort.InferenceSession(str(tmp_path / "pipeline.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    art = collage.load(tmp_path / "out")
    try:
        got = art.run({"x": x})["y"]
    finally:
        art.close()
    np.testing.assert_array_equal(got, want)
