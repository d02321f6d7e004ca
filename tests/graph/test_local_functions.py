"""A model's own functions (``ModelProto.functions``) are inlined at load.

``torch.onnx.export(..., export_modules_as_functions={Block})`` writes each ``Block`` as a call to a local
function in a domain named for the Python module that defines ``Block``; onnxscript writes functions too. Before
inlining such a model was refused at load ("node '/b1/Block' uses op 'Block' from unknown domain '__main__'", run
as a script). The inliner is ONNX's; these tests hold the tuner to what it promises of such a model: it loads with
the functions' nodes, tunes, runs as ONNX Runtime runs the file, and the report says what was inlined.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

import collage
from collage.errors import ModelError
from collage.graph.ir import Graph
from collage.report.coverage import load_line
from collage.search.candidates import Limits

WIDTH = 32


def _torch_export_with_functions(path: Path) -> Path:
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.norm = torch.nn.Linear(WIDTH, WIDTH), torch.nn.LayerNorm(WIDTH)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.relu(self.norm(self.lin(x))) + x

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b1, self.b2 = Block(), Block()

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.b2(self.b1(x))

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(Net().eval(), (torch.randn(4, WIDTH),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], export_modules_as_functions={Block})
    m = onnx.load(path)
    assert [f.name for f in m.functions] == ["Block"]  # in a domain named for the module that defines Block
    assert [n.op_type for n in m.graph.node if n.domain == m.functions[0].domain] == ["Block", "Block"]
    return path


def test_a_torch_export_with_module_functions_tunes_and_runs_as_onnx_runtime_runs_the_file(tmp_path) -> None:
    model = _torch_export_with_functions(tmp_path / "blocks.onnx")
    g = Graph.load(model)
    assert {g.op_type(i) for i in range(len(g))} >= {"Gemm", "LayerNormalization", "Relu", "Add"}
    result = collage.tune(str(model), tmp_path / "out", backends=["onnxruntime", "openvino"],
                          db=str(tmp_path / "costs.sqlite"), limits=Limits(max_nodes=2), progress=False)
    block = f"{onnx.load(model).functions[0].domain}::Block"
    assert result.report["load"]["inlined"] == [block]
    assert load_line(result.report["load"]).startswith(f"1 local function(s) inlined ({block}); ")
    x = np.random.default_rng(1).normal(size=(4, WIDTH)).astype(np.float32)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    art = collage.load(tmp_path / "out")
    try:
        got = art.run({"x": x})[onnx.load(model).graph.output[0].name]  # not "y": torch drops output_names here
    finally:
        art.close()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _nested(inner_domain: str = "") -> onnx.ModelProto:
    """``Outer`` calls ``Inner`` (a function calling a function), and an If branch calls ``Outer``."""
    inner = helper.make_function("mine", "Inner", ["a"], ["o"],
                                 [helper.make_node("Sigmoid", ["a"], ["s"], domain=inner_domain),
                                  helper.make_node("Mul", ["a", "s"], ["o"])],
                                 [helper.make_opsetid("", 17)] + ([helper.make_opsetid(inner_domain, 1)]
                                                                 if inner_domain else []))
    outer = helper.make_function("mine", "Outer", ["a", "w"], ["o"],
                                 [helper.make_node("MatMul", ["a", "w"], ["t"]),
                                  helper.make_node("Inner", ["t"], ["o"], domain="mine")],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("mine", 1)])
    branch = helper.make_graph([helper.make_node("Outer", ["x", "W"], ["b"], domain="mine", name="in_branch")],
                               "then", [], [helper.make_tensor_value_info("b", T.FLOAT, [2, 8])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"], name="neg")], "else", [],
                              [helper.make_tensor_value_info("n", T.FLOAT, [2, 8])])
    w = nh.from_array(np.random.default_rng(0).normal(size=(8, 8)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("Outer", ["x", "W"], ["h"], domain="mine", name="top"),
                           helper.make_node("ReduceSum", ["h"], ["s"], keepdims=0, name="sum"),
                           helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
                           helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other, name="if")],
                          "nested", [helper.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 8])],
                          [w, nh.from_array(np.array(0, np.float32), "zero")])
    return helper.make_model(g, ir_version=9, functions=[inner, outer],
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("mine", 1)])


def test_functions_calling_functions_and_calls_inside_a_branch_are_inlined() -> None:
    g = Graph.load(_nested())
    ops = [g.op_type(i) for i in range(len(g))]
    assert ops[:3] == ["MatMul", "Sigmoid", "Mul"] and "Outer" not in ops and "Inner" not in ops
    branch_ops = [n.op_type for n in g.op(ops.index("If")).attribute[0].g.node] + \
                 [n.op_type for n in g.op(ops.index("If")).attribute[1].g.node]
    assert "Outer" not in branch_ops and "MatMul" in branch_ops
    assert "mine" not in {o.domain for o in g.model.opset_import}  # no node uses it any more


def test_the_report_names_the_functions_inlined_not_those_never_called() -> None:
    m = _nested()
    m.functions.append(helper.make_function("mine", "Unused", ["a"], ["o"], [helper.make_node("Relu", ["a"], ["o"])],
                                            [helper.make_opsetid("", 17)]))
    assert Graph.load(m).folding.inlined == ("mine::Inner", "mine::Outer")


def test_a_function_whose_body_uses_an_unknown_domain_is_refused_in_one_line() -> None:
    with pytest.raises(ModelError) as e:
        Graph.load(_nested(inner_domain="com.example"))
    assert "unknown domain 'com.example'" in str(e.value) and "\n" not in str(e.value), e.value
