"""The conformance suite every backend passes (like Optuna's storage tests), parametrised over every
registered CPU backend; a backend that cannot run here is skipped with the reason ``available()``
(or its failed import) gives. A backend added to the registry is picked up automatically.

Per backend: single ops and subgraphs cut from zoo models match the ONNX Runtime fp32 reference
(rtol 1e-4, atol 1e-5); save -> load in a fresh process gives the same outputs; an op the backend
cannot take gives ``supports()`` False and a compile error naming the op and the node; the support
cache answers a second run without asking the backend again.

Backends in ``SLOW_BACKENDS`` (untuned TVM compiles slowly) run under ``-m slow`` only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.helpers import model_feeds, ort_reference, run_chain
from collage import zoo
from collage.backends import backend_names, get_backend, unavailable_reason
from collage.errors import CollageError, CompileError, UnsupportedError
from collage.graph.ir import Graph

RTOL, ATOL = 1e-4, 1e-5
SLOW_BACKENDS = {"tvm"}
OPSET = 17


def _params(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_BACKENDS else n for n in names]


CPU_BACKENDS = _params(backend_names("cpu"))


@pytest.fixture(params=CPU_BACKENDS, scope="module")
def backend(request):
    name = request.param
    reason = unavailable_reason(name)
    if reason is not None:
        pytest.skip(f"backend {name} unavailable: {reason}")
    return get_backend(name)


# ---------------------------------------------------------------------- models
def _model(nodes, inputs, outputs, inits=(), opset=OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "case", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _w(*shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.2


F = T.FLOAT
X4 = ("x", F, [1, 8, 16, 16])


def _single_ops() -> dict[str, onnx.ModelProto]:
    n = helper.make_node
    return {
        "Conv": _model([n("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1], name="conv")], [X4],
                       [("y", F, [1, 16, 16, 16])], [("W", _w(16, 8, 3, 3)), ("B", _w(16, seed=1))]),
        "Relu": _model([n("Relu", ["x"], ["y"], name="relu")], [X4], [("y", F, [1, 8, 16, 16])]),
        "Add": _model([n("Add", ["x", "b"], ["y"], name="add")], [X4], [("y", F, [1, 8, 16, 16])],
                      [("b", _w(8, 1, 1))]),
        "Mul": _model([n("Mul", ["x", "z"], ["y"], name="mul")], [X4, ("z", F, [1, 8, 16, 16])],
                      [("y", F, [1, 8, 16, 16])]),
        "MatMul": _model([n("MatMul", ["x", "W"], ["y"], name="matmul")], [("x", F, [1, 16, 32])],
                         [("y", F, [1, 16, 24])], [("W", _w(32, 24))]),
        "Gemm": _model([n("Gemm", ["x", "W", "C"], ["y"], transB=1, name="gemm")], [("x", F, [4, 32])],
                       [("y", F, [4, 16])], [("W", _w(16, 32)), ("C", _w(16, seed=2))]),
        "Softmax": _model([n("Softmax", ["x"], ["y"], axis=-1, name="softmax")], [("x", F, [2, 4, 16])],
                          [("y", F, [2, 4, 16])]),
        "LayerNormalization": _model(
            [n("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5, name="ln")],
            [("x", F, [2, 16, 32])], [("y", F, [2, 16, 32])], [("s", _w(32) + 1), ("b", _w(32, seed=3))]),
        "Erf": _model([n("Erf", ["x"], ["y"], name="erf")], [("x", F, [2, 64])], [("y", F, [2, 64])]),
        "Concat": _model([n("Concat", ["x", "z"], ["y"], axis=1, name="concat")],
                         [X4, ("z", F, [1, 4, 16, 16])], [("y", F, [1, 12, 16, 16])]),
        "Reshape": _model([n("Reshape", ["x", "shape"], ["y"], name="reshape")], [("x", F, [2, 4, 16])],
                          [("y", F, [2, 64])], [("shape", np.array([2, 64], np.int64))]),
        "Transpose": _model([n("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3], name="transpose")],
                            [("x", F, [1, 4, 8, 16])], [("y", F, [1, 8, 4, 16])]),
        "MaxPool": _model([n("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                             name="maxpool")], [X4], [("y", F, [1, 8, 8, 8])]),
        "AveragePool": _model([n("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="avgpool")],
                              [X4], [("y", F, [1, 8, 8, 8])]),
        "GlobalAveragePool": _model([n("GlobalAveragePool", ["x"], ["y"], name="gap")], [X4],
                                    [("y", F, [1, 8, 1, 1])]),
        "BatchNormalization": _model(
            [n("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")], [X4], [("y", F, [1, 8, 16, 16])],
            [("s", _w(8) + 1), ("b", _w(8, seed=4)), ("m", _w(8, seed=5)), ("v", np.abs(_w(8, seed=6)) + 0.5)]),
        "Clip": _model([n("Clip", ["x", "lo", "hi"], ["y"], name="clip")], [X4], [("y", F, [1, 8, 16, 16])],
                       [("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32))]),
        "Tanh": _model([n("Tanh", ["x"], ["y"], name="tanh")], [("x", F, [2, 64])], [("y", F, [2, 64])]),
        "Gather": _model([n("Gather", ["E", "ids"], ["y"], axis=0, name="gather")], [("ids", T.INT64, [1, 8])],
                         [("y", F, [1, 8, 16])], [("E", _w(32, 16))]),
        "ReduceMean": _model([n("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1, name="reducemean")],
                             [("x", F, [2, 16, 32])], [("y", F, [2, 16, 1])]),
    }


SINGLE_OPS = _single_ops()


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    return model_feeds(model, seed, int_high=8)


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return ort_reference(model, feeds, optimize=False)


def _check_matches(backend, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    expected = _reference(model, feeds)
    compiled = backend.compile(model)
    assert sorted(compiled.output_names) == sorted(expected)
    got = {k: np.array(v, copy=True) for k, v in compiled.run(feeds).items()}
    for name, want in expected.items():
        assert got[name].shape == want.shape, name
        assert got[name].dtype == want.dtype, name
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=f"{backend.name}: {name}")
    # a second call on fresh arrays (rebinding) still gives the same answer
    again = compiled.run({k: v.copy() for k, v in feeds.items()})
    for name, want in expected.items():
        np.testing.assert_allclose(again[name], want, rtol=RTOL, atol=ATOL)
    return got


# ---------------------------------------------------------------------- numerics
@pytest.mark.parametrize("op", sorted(SINGLE_OPS))
def test_single_op_matches_reference(backend, op):
    model = SINGLE_OPS[op]
    graph = Graph.load(model)
    assert backend.supports(graph, 0), f"{backend.name} should take {op}: {backend.support_reason(graph, 0)}"
    _check_matches(backend, graph.extract([0]), _feeds(model))


def _cut(graph: Graph, ids: list[int]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Extract ``ids`` and the tensors entering it, computed by the reference on the zoo's inputs."""
    entering, _ = graph.boundary(ids)
    inputs = zoo.random_inputs(graph)
    whole = _reference(graph.with_outputs(entering), inputs)
    feeds = {t: inputs[t] if t in inputs else whole[t] for t in entering}
    return graph.extract(ids), feeds


def _zoo_cuts() -> dict[str, tuple[str, str]]:
    # contiguous ranges of the topological order are always convex, so any [a, b) is a valid cut
    return {
        "tiny-resnet/whole": ("tiny-resnet", "all"),
        "tiny-resnet/stem": ("tiny-resnet", "head"),
        "tiny-resnet/middle": ("tiny-resnet", "middle"),
        "tiny-bert/whole": ("tiny-bert", "all"),
        "tiny-bert/layer": ("tiny-bert", "layer"),
    }


def _range(graph: Graph, which: str) -> list[int]:
    n = len(graph)
    if which == "all":
        return list(range(n))
    if which == "head":
        return list(range(n // 3))
    if which == "middle":
        return list(range(n // 3, 2 * n // 3))
    if which == "layer":  # from the first LayerNormalization to the second one (one encoder layer's body)
        ln = [i for i in range(n) if graph.op_type(i) == "LayerNormalization"]
        return list(range(ln[0] + 1, ln[1] + 1))
    raise ValueError(which)


@pytest.mark.parametrize("cut", sorted(_zoo_cuts()))
def test_zoo_subgraph_matches_reference(backend, cut):
    name, which = _zoo_cuts()[cut]
    graph = zoo.load_graph(f"zoo:{name}")
    ids = _range(graph, which)
    model, feeds = _cut(graph, ids)
    _check_matches(backend, model, feeds)


# ---------------------------------------------------------------------- linked partitions
@pytest.mark.parametrize("model_name", ["tiny-resnet", "tiny-bert"])
def test_compile_linked_chain_matches_reference(backend, model_name):
    """Pieces compiled together (``compile_linked``) and run in order, passing arrays by name: whatever
    form the linked tensors take in between, the graph outputs match the reference and keep their layout."""
    from collage.search.ranges import narrow_cuts

    graph = zoo.load_graph(f"zoo:{model_name}")
    bounds = [0, *narrow_cuts(graph, max_cuts=4), len(graph)]
    assert len(bounds) >= 4, bounds  # at least three pieces, two linked boundaries
    parts = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
    models = [graph.extract(p) for p in parts]
    compiled = backend.compile_linked(models, plain=graph.outputs)
    assert len(compiled) == len(models)
    feeds = zoo.random_inputs(graph)
    env = run_chain(graph, parts, compiled, feeds)
    want = _reference(graph.model, feeds)
    for name in graph.outputs:
        assert env[name].shape == want[name].shape, name
        np.testing.assert_allclose(env[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


# ---------------------------------------------------------------------- save / load
_LOADER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    from collage.backends import get_backend
    d = Path(sys.argv[1])
    meta = json.loads((d / "meta.json").read_text())
    compiled = get_backend(meta["backend"]).load(d / "part", meta["entry"])
    out = compiled.run(dict(np.load(d / "feeds.npz")))
    np.savez(d / "out.npz", **out)
""")


def test_save_load_in_fresh_process(backend, tmp_path):
    graph = zoo.load_graph("zoo:tiny-resnet")
    model, feeds = _cut(graph, _range(graph, "middle"))
    compiled = backend.compile(model)
    want = {k: np.array(v, copy=True) for k, v in compiled.run(feeds).items()}
    entry = compiled.save(tmp_path / "part")
    json.dumps(entry)  # JSON-able
    assert entry["files"], entry
    for f in entry["files"]:
        assert (tmp_path / "part" / f).is_file(), f
    (tmp_path / "meta.json").write_text(json.dumps({"backend": backend.name, "entry": entry}))
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = dict(np.load(tmp_path / "out.npz"))
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


# ---------------------------------------------------------------------- unsupported ops
def _front(dtype: int, shape: list[int], odd: onnx.NodeProto, out: tuple) -> onnx.ModelProto:
    # a node every backend takes in front, so the error has to find the right node
    return _model([helper.make_node("Identity", ["x"], ["t"], name="front"), odd], [("x", dtype, shape)], [out])


def _relu_int16() -> onnx.ModelProto:  # valid ONNX (Relu takes int16 since opset 14); no ORT CPU kernel
    return _front(T.INT16, [4], helper.make_node("Relu", ["t"], ["y"], name="odd_relu"), ("y", T.INT16, [4]))


def _det() -> onnx.ModelProto:  # no OpenVINO ONNX frontend converter, no TVM relax converter
    return _front(F, [3, 3], helper.make_node("Det", ["t"], ["y"], name="odd_det"), ("y", F, []))


#: backend -> (op type, node name, model) it cannot take; backends not listed use the default
UNSUPPORTED = {"onnxruntime": ("Relu", "odd_relu", _relu_int16)}
UNSUPPORTED_DEFAULT = ("Det", "odd_det", _det)


def test_unsupported_op_is_refused(backend):
    op, node, build = UNSUPPORTED.get(backend.name, UNSUPPORTED_DEFAULT)
    model = build()
    graph = Graph.load(model)
    assert [graph.op_type(i) for i in range(len(graph))] == ["Identity", op]
    assert backend.supports_all(graph) == {0: True, 1: False}
    reason = backend.support_reason(graph, 1)
    assert reason, "support_reason must say why"
    with pytest.raises(UnsupportedError) as info:
        backend.compile(model)
    assert op in str(info.value) and node in str(info.value), str(info.value)
    assert isinstance(info.value, CollageError) and not isinstance(info.value, CompileError)


# ---------------------------------------------------------------------- support cache
def test_support_cache_second_run_asks_nothing(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))
    graph = zoo.load_graph("zoo:tiny-resnet")
    calls: list[int] = []

    def counting(b):
        real = b._check_supported

        def wrapper(model):
            calls.append(1)
            return real(model)
        monkeypatch.setattr(b, "_check_supported", wrapper)
        return b

    first = counting(get_backend(backend.name))
    answers = first.supports_all(graph)
    assert set(answers) == set(range(len(graph)))
    assert all(answers.values()), {graph.node_label(i): first.support_reason(graph, i) for i, ok in answers.items()
                                   if not ok}
    n_distinct = len({graph.fingerprint([i]) for i in range(len(graph))})
    assert len(calls) == n_distinct < len(graph)  # one check per distinct node signature
    path = first.support_cache_path()
    assert path.is_file() and path.is_relative_to(tmp_path / "support")
    assert len(json.loads(path.read_text())) == n_distinct

    calls.clear()
    second = counting(get_backend(backend.name))  # fresh instance: nothing in memory, all on disk
    assert second.supports_all(graph) == answers
    assert all(second.supports(graph, i) for i in range(len(graph)))
    assert calls == []
