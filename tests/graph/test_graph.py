"""The Graph IR on small hand-built models: convexity against a brute-force path check (property test),
boundary and extraction on random DAGs, fingerprints, and extraction speed on BERT-base."""
from __future__ import annotations

import networkx as nx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from collage import zoo
from collage.errors import ModelError
from collage.graph.ir import Graph, parse_shapes

SHAPE = [2, 3]


@st.composite
def random_dags(draw) -> tuple[onnx.ModelProto, list[list[int]]]:
    """A random DAG of Relu/Identity/Add/Mul nodes written as an ONNX model in topological order;
    node k reads the graph input (-1) or earlier nodes. Returns the model and each node's sources."""
    n = draw(st.integers(1, 12))
    nodes, sources = [], []
    for k in range(n):
        op = draw(st.sampled_from(["Relu", "Identity", "Add", "Mul"]))
        arity = 2 if op in ("Add", "Mul") else 1
        srcs = [draw(st.integers(-1, k - 1)) for _ in range(arity)]
        sources.append(srcs)
        nodes.append(helper.make_node(op, ["x" if s < 0 else f"t{s}" for s in srcs], [f"t{k}"], name=f"n{k}"))
    read = {s for srcs in sources for s in srcs}
    outputs = [f"t{k}" for k in range(n) if k not in read]  # sinks, so nothing is pruned
    graph = helper.make_graph(nodes, "dag", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, SHAPE) for t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, sources


def brute_force_convex(dag: nx.DiGraph, s: set[int]) -> bool:
    """Convex iff no node outside the set lies on a path between two nodes of the set."""
    for w in dag.nodes:
        if w in s:
            continue
        if any(nx.has_path(dag, u, w) for u in s) and any(nx.has_path(dag, w, v) for v in s):
            return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dag=random_dags())
def test_is_convex_matches_brute_force(data, dag) -> None:
    model, sources = dag
    g = Graph.load(model)
    assert len(g) == len(sources)
    ref = nx.DiGraph()
    ref.add_nodes_from(range(len(sources)))
    ref.add_edges_from((s, k) for k, srcs in enumerate(sources) for s in srcs if s >= 0)
    assert set(g.dag.edges) == set(ref.edges)
    for _ in range(5):
        subset = data.draw(st.sets(st.integers(0, len(g) - 1), min_size=1))
        assert g.is_convex(subset) == brute_force_convex(ref, subset), sorted(subset)
        assert g.is_convex(Graph.mask(subset)) == g.is_convex(subset)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dag=random_dags())
def test_extract_convex_pieces_of_random_dags(data, dag) -> None:
    model, _ = dag
    g = Graph.load(model)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    names = [f"t{k}" for k in range(len(g))]
    full = ort.InferenceSession(g.with_outputs(names).SerializeToString(), providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in full.get_outputs()], full.run(None, {"x": x})))
    values["x"] = x
    subset = data.draw(st.sets(st.integers(0, len(g) - 1), min_size=1))
    assume(g.is_convex(subset))  # a non-convex draw is no example (hypothesis draws another)
    piece = g.extract(subset)
    onnx.checker.check_model(piece, full_check=True)
    entering, leaving = g.boundary(subset)
    # what leaves is exactly what the rest of the graph (or the graph's outputs) reads
    for t in leaving:
        assert t in g.outputs or any(c not in subset for c in g.consumers(t))
    sess = ort.InferenceSession(piece.SerializeToString(), providers=["CPUExecutionProvider"])
    for t, got in zip(leaving, sess.run(None, {t: values[t] for t in entering})):
        np.testing.assert_array_equal(got, values[t])


def _conv_chain(alpha2: float = 0.1, c2: int = 8, transb: int = 1, rename: str = "") -> onnx.ModelProto:
    """x -> [Conv 8ch, LeakyRelu(0.1)] -> [Conv c2, LeakyRelu(alpha2)] -> [Conv 8, LeakyRelu(0.1)]."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x, cin = "x", 8
    for k, (cout, alpha) in enumerate([(8, 0.1), (c2, alpha2), (8, 0.1)]):
        w = f"{rename}w{k}"
        inits.append(numpy_helper.from_array(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32), w))
        nodes.append(helper.make_node("Conv", [x, w], [f"{rename}c{k}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("LeakyRelu", [f"{rename}c{k}"], [f"{rename}r{k}"], alpha=alpha))
        x, cin = f"{rename}r{k}", cout
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 8, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_fingerprint_same_block_same_print_and_differences_show() -> None:
    g = Graph.load(_conv_chain())
    assert g.fingerprint([0, 1]) == g.fingerprint([4, 5])  # same op, attrs, shapes; other weights
    assert g.fingerprint([0, 1]) != g.fingerprint([0])
    assert g.fingerprint([0, 1]) != g.fingerprint([0, 1, 2, 3])
    alpha = Graph.load(_conv_chain(alpha2=0.2))  # block 2 differs in one attribute
    assert alpha.fingerprint([2, 3]) != alpha.fingerprint([0, 1])
    assert alpha.fingerprint([0, 1]) == g.fingerprint([0, 1])
    wide = Graph.load(_conv_chain(c2=16))  # block 2 differs in a shape
    assert wide.fingerprint([2, 3]) != g.fingerprint([2, 3])
    renamed = Graph.load(_conv_chain(rename="other_"))  # tensor names do not matter
    assert all(renamed.fingerprint(s) == g.fingerprint(s) for s in ([0, 1], [2, 3], [0, 1, 2, 3, 4, 5]))


def test_boundary_and_masks_on_a_diamond() -> None:
    # x -> a(Relu) -> b(Relu) -> d(Add) ; a -> c(Identity) -> d
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Identity", ["a"], ["c"]), helper.make_node("Add", ["b", "c"], ["d"])]
    graph = helper.make_graph(nodes, "diamond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, SHAPE)])
    g = Graph.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert not g.is_convex([0, 3]) and not g.is_convex([0, 1, 3]) and g.is_convex([0, 1, 2, 3])
    assert g.is_convex([1, 2]) and not g.is_connected([1, 2]) and g.is_connected([0, 1, 2])
    assert g.boundary([1, 2]) == (["a"], ["b", "c"])
    assert g.boundary([3]) == (["b", "c"], ["d"])
    assert Graph.ids(g.desc_mask(0)) == [1, 2, 3] and Graph.ids(g.anc_mask(3)) == [0, 1, 2]
    with pytest.raises(ModelError):
        g.extract([])
    with pytest.raises(ModelError, match="no node with id 9"):
        g.extract([9])


def test_constants_fold_and_dead_nodes_drop() -> None:
    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(SHAPE, np.float32))),
             helper.make_node("Add", ["x", "k"], ["y"]), helper.make_node("Relu", ["x"], ["dead"])]
    graph = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])
    g = Graph.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert len(g) == 1 and g.op_type(0) == "Add" and g.is_weight("k")
    piece = g.extract([0])
    assert [t.name for t in piece.graph.initializer] == ["k"]
    onnx.checker.check_model(piece, full_check=True)


def test_parse_shapes() -> None:
    assert parse_shapes(["a=1,3,224,224", "b:0=2"]) == {"a": (1, 3, 224, 224), "b:0": (2,)}
    for bad in ["noequals", "=1,2", "a=1,x"]:
        with pytest.raises(ModelError, match="--shape"):
            parse_shapes([bad])


def test_validate_passes_on_zoo_models() -> None:
    for name in ("tiny-resnet", "tiny-mobilenetv2", "tiny-bert"):
        g = zoo.load_graph(f"zoo:{name}")
        g.validate()
        assert list(range(len(g))) == sorted(g.dag.nodes)
        assert all(u < v for u, v in g.dag.edges)
        assert all("shape" in d and "dtype" in d and "tensor" in d for _, _, d in g.dag.edges(data=True))


@pytest.mark.slow
def test_extract_does_not_reserialise_the_model() -> None:
    g = zoo.load_graph("zoo:bert-base")
    ids = list(range(0, len(g), max(1, len(g) // 100)))[:100]
    pieces = [g.extract([i]) for i in ids]
    # each piece carries only its own weights (the whole model is ~440 MB); how long extraction takes is
    # benchmarks.search_time's business, not a unit test's
    assert sum(p.ByteSize() for p in pieces) < 2 * g.model.ByteSize()
    assert max(p.ByteSize() for p in pieces) < g.model.ByteSize() / 2  # the embedding table: ~1/5


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-resnet"])
def test_shapes_match_full_shape_inference(name: str) -> None:
    """Graph infers shapes on a weight-less skeleton; the result must equal inference on the full model."""
    g = zoo.load_graph(f"zoo:{name}")
    full = onnx.shape_inference.infer_shapes(zoo.load_model(name), strict_mode=True, data_prop=True)
    infos = list(full.graph.value_info) + list(full.graph.output)
    assert len(infos) >= len(g) - len(g.outputs)
    for vi in infos:
        dims = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        assert g.tensor(vi.name).shape == dims, vi.name
