"""Helpers shared by the test files (importable because pytest puts tests/ on sys.path)."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper


def need_backends(*names: str) -> None:
    """Skip the calling test, with the backend's own reason, unless every named backend can run here."""
    from collage.backends import get_backend

    for name in names:
        reason = get_backend(name).available()
        if reason:
            pytest.skip(f"backend {name} unavailable: {reason}")


def model_feeds(model: onnx.ModelProto, seed: int = 0, int_high: int = 8) -> dict[str, np.ndarray]:
    """Seeded inputs for every non-initializer graph input (:func:`collage.graph.inputs.random_inputs`: the one
    rule), integers with no index range in [0, int_high)."""
    from collage.graph.inputs import random_inputs

    return random_inputs(model, seed, int_high=int_high)


def ort_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *,
                  optimize: bool = True) -> dict[str, np.ndarray]:
    """The ONNX Runtime CPU outputs of ``model`` on ``feeds``, by output name."""
    from collage.backends.onnxruntime.session import make_session

    sess = make_session(model, optimize=optimize)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def pieces_ending_after(graph, ends) -> list[list[int]]:
    """Contiguous node-id pieces, each ending after one of ``ends`` (the last piece runs to the end)."""
    out, start = [], 0
    for e in [*sorted(set(ends)), len(graph) - 1]:
        if e >= start:
            out.append(list(range(start, e + 1)))
            start = e + 1
    return out


def residual_pieces(graph) -> list[list[int]]:
    """A ResNet cut after the stem's MaxPool and after every residual block's closing Relu."""
    ends = [i for i in range(len(graph)) if graph.op_type(i) == "MaxPool"][:1]
    ends += [i for i in range(len(graph)) if graph.op_type(i) == "Relu"
             and graph.op_type(graph.producer(graph.op(i).input[0]) or 0) in ("Sum", "Add")]
    return pieces_ending_after(graph, ends)


def layer_pieces(graph) -> list[list[int]]:
    """A BERT cut after each LayerNormalization."""
    return pieces_ending_after(graph, [i for i in range(len(graph)) if graph.op_type(i) == "LayerNormalization"])


def run_chain(graph, parts, compiled, feeds) -> dict:
    """Run compiled pieces (node-id lists ``parts`` of ``graph``) in order, handing tensors over by name;
    every tensor made, by name (copied: a backend may reuse its output buffers)."""
    env = dict(feeds)
    for ids, c in zip(parts, compiled):
        entering, _ = graph.boundary(ids)
        env.update({k: np.array(v, copy=True) for k, v in c.run({t: env[t] for t in entering}).items()})
    return env


# ---------------------------------------------------------------------- precision (bf16)
@functools.cache
def bf16_reason() -> str | None:
    """None when openvino-bf16 runs natively here, else why not (no OpenVINO, no bf16 in this CPU, ...)."""
    from collage.backends import get_backend
    from collage.backends.openvino.lowp import cpu_bf16_reason

    return get_backend("openvino").available() or cpu_bf16_reason() or get_backend("openvino-bf16").available()


def bf16_mark() -> pytest.MarkDecorator:
    """``@needs_bf16``: skip, with the reason, where bf16 does not run natively."""
    return pytest.mark.skipif(bf16_reason() is not None, reason=f"no bf16 here: {bf16_reason()}")


def chain_model(n: int = 4, width: int = 64, seed: int = 0) -> onnx.ModelProto:
    """x -> (MatMul W_k) x n: every candidate holds a MatMul, so bf16 always moves the outputs."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for k in range(n):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{k}"], [f"h{k}"], name=f"mm{k}"))
        prev = f"h{k}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, width])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def synthetic_precision(monkeypatch, errs: dict[tuple[int, ...], float], n: int = 4, prefixes: bool = False):
    """A chain of n MatMuls; bf16 is 4x faster; its error per candidate is given; end to end = sum.
    ``prefixes``: every prefix of the chain is a candidate too (as range candidates are).
    Returns (a PrecisionTuner with measure_errors / OutputErrors.measure / end_to_end faked, costs)."""
    from collage.backends import get_backend
    from collage.measure.accuracy import Budget, Calibration, ErrorMeasure
    from collage.graph.ir import Graph
    from collage.search.candidates import Candidate, Limits, enumerate_candidates
    from collage.tuner.precision import tuner as P

    g = Graph.load(chain_model(n))
    bks = [get_backend("onnxruntime"), get_backend("openvino-bf16")]
    cands = enumerate_candidates(g, {b.name: {i: True for i in range(n)} for b in bks}, Limits(max_nodes=n))
    if prefixes:
        cands += [Candidate(tuple(range(k)), b.name) for b in bks for k in range(2, n + 1)]
    costs = {c: len(c.nodes) * (1.0 if c.backend == "onnxruntime" else 0.25) + 0.01 for c in cands}

    def fake_errors(graph, cs, backends, calib, db=None, progress=False, budget_s=None):
        return {c: ErrorMeasure(rel=errs.get(c.nodes, sum(errs.get((i,), 0.0) for i in c.nodes))) for c in cs}

    monkeypatch.setattr("collage.tuner.precision.budgeted.measure_errors", fake_errors)  # where the search calls it
    # range candidates' errors at the model's outputs (collage.tuner.precision.output_errors): the same synthetic
    # figures
    monkeypatch.setattr(P.OutputErrors, "measure", lambda self, cs, budget_s=None, progress=False:
                        fake_errors(g, [c for c in cs if self.span(c) is not None], None, None))
    cal = Calibration([{"x": np.zeros((4, 64), np.float32)}], "h", "test", False)
    tuner = P.PrecisionTuner(g, Budget(None, 1.0), cal, {b.name: b for b in bks}, {"openvino-bf16"}, progress=False)

    def fake_e2e(plan, tag):
        return ErrorMeasure(rel=sum(errs.get(p.nodes, sum(errs.get((i,), 0.0) for i in p.nodes))
                                    for p in plan.partitions if p.backend == "openvino-bf16"))

    monkeypatch.setattr(tuner, "end_to_end", fake_e2e)
    return tuner, costs


def export_mixed_plan(out, spec: str = "zoo:tiny-resnet", backends=("onnxruntime", "openvino"), parts: int = 3,
                      report: dict | None = None):
    """Export a hand-made ``parts``-partition plan of a zoo model (contiguous node ranges, backends
    alternating, costs made up in proportion to the nodes) as an artifact at ``out``; return its path.
    Skips the calling test unless every backend is available."""
    from collage import zoo
    from collage.plan import Partition, Plan
    from collage.tuner.export import export

    need_backends(*backends)
    graph = zoo.load_graph(spec)
    n = len(graph)
    cuts = [round(n * k / parts) for k in range(parts + 1)]
    plan = Plan([Partition(tuple(range(cuts[k], cuts[k + 1])), backends[k % len(backends)],
                           0.01 * (cuts[k + 1] - cuts[k]) * (1 + k),
                           (backends[(k + 1) % len(backends)], 0.012 * (cuts[k + 1] - cuts[k]) * (1 + k)))
                 for k in range(parts)], predicted_ms=0.5)
    return export(graph, plan, out, report={"source": graph.source, **(report or {})})


# ---------------------------------------------------------------------- search (synthetic DAGs)
#: backend names of the synthetic search tests
BACKENDS = ["ort", "ov", "tvm"]


def make_dag(spec: list[tuple[str, tuple[int, ...]]]):
    """A model whose node k runs ``op`` on the given sources: -1/-2 are the graph inputs
    (shapes [1, 4] and [3, 4]), j >= 0 the output of node j. Unread outputs become graph outputs."""
    nodes = []
    names = {-1: "x", -2: "y"}
    read: set[int] = set()
    for k, (op, srcs) in enumerate(spec):
        nodes.append(helper.make_node(op, [names[s] for s in srcs], [f"t{k}"], name=f"n{k}"))
        names[k] = f"t{k}"
        read.update(srcs)
    outputs = [helper.make_tensor_value_info(f"t{k}", TensorProto.FLOAT, None)
               for k in range(len(spec)) if k not in read]
    graph = helper.make_graph(nodes, "dag", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                              helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                              outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from collage.graph.ir import Graph

    g = Graph.load(model)
    assert len(g) == len(spec)
    return g


@st.composite
def dags(draw, min_nodes: int = 1, max_nodes: int = 9):
    """Random small DAGs of Relu/Identity/Add (a hypothesis strategy)."""
    n = draw(st.integers(min_nodes, max_nodes))
    spec = []
    for k in range(n):
        sources = list(range(-2, k))
        if draw(st.booleans()) and k > 0:
            a = draw(st.sampled_from(sources))
            b = draw(st.sampled_from(sources))
            spec.append(("Add", (a, b)))
        else:
            # prefer recent nodes so that graphs are connected and deep, not a fan of inputs
            src = draw(st.sampled_from(sources[-3:]))
            spec.append((draw(st.sampled_from(["Relu", "Identity"])), (src,)))
    return make_dag(spec)


def all_supported(g, backends=BACKENDS) -> dict[str, dict[int, bool]]:
    return {b: {i: True for i in range(len(g))} for b in backends}


def assert_valid(g, plan) -> None:
    plan.check_cover(len(g))
    from collage.search import check_plan

    check_plan(g, plan)  # convex, executable order
    produced = set(g.inputs)
    for p in plan.partitions:
        assert g.is_convex(p.nodes)
        assert set(p.inputs) <= produced, (p, produced)
        for i in p.nodes:
            produced.update(g.op(i).output)
