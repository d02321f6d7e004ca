"""Refinement of the DP plan by (here: synthetic) measured end-to-end latency."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from collage.errors import CollageError
from collage.graph.ir import Graph
from collage.plan import Plan
from collage.search import Limits, check_plan, cover_cost, dp_search, enumerate_candidates
from collage.search.cover import usable_costs
from collage.search.refine import RefineOptions, RefineResult, refine


def ladder() -> Graph:
    """x -> 8 Relu/Add nodes with a skip connection (a small residual chain)."""
    nodes = [helper.make_node("Relu", ["x"], ["t0"]), helper.make_node("Relu", ["t0"], ["t1"]),
             helper.make_node("Relu", ["t1"], ["t2"]), helper.make_node("Add", ["t2", "t0"], ["t3"]),
             helper.make_node("Relu", ["t3"], ["t4"]), helper.make_node("Relu", ["t4"], ["t5"]),
             helper.make_node("Add", ["t5", "t3"], ["t6"]), helper.make_node("Relu", ["t6"], ["t7"])]
    graph = helper.make_graph(nodes, "ladder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("t7", TensorProto.FLOAT, [1, 8])])
    return Graph.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.fixture()
def setup():
    g = ladder()
    cands = enumerate_candidates(g, {b: {i: True for i in range(len(g))} for b in ("a", "b")}, Limits(max_nodes=3))
    # predicted: b is cheaper on Relu, a on Add: the DP plan mixes them in several partitions
    per = {("a", "Relu"): 1.0, ("a", "Add"): 0.5, ("b", "Relu"): 0.6, ("b", "Add"): 1.5}
    costs = {c: sum(per[c.backend, g.op_type(i)] for i in c.nodes) + 0.1 for c in cands}
    plan = dp_search(g, costs, lambda s, d, n: 0.05)
    return g, costs, plan


class Measured:
    """A synthetic end-to-end measurement: the truth disagrees with the costs (on 'a' the nodes 4-7 are
    fast when run together), so there is something to find. Checks every plan it is handed."""

    def __init__(self, g: Graph, costs, fail_at: int | None = None) -> None:
        self.g, self.table, self.calls, self.fail_at = g, usable_costs(g, costs), [], fail_at
        self.values: list[float] = []  # what each call returned, in order

    def __call__(self, plan) -> float:
        check_plan(self.g, plan)  # exact cover, convex, executable order
        self.calls.append(tuple((p.nodes, p.backend) for p in plan.partitions))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt  # the tuning job is killed mid-measurement
        total = 0.0
        for p in plan.partitions:
            if p.backend == "a" and set(p.nodes) >= {4, 5, 6}:
                total += 0.3 * len(p.nodes)
            else:
                total += self.table[p.nodes][p.backend] if p.backend in self.table.get(p.nodes, {}) else 5.0
        self.values.append(total + 0.05 * (len(plan.partitions) - 1))
        return self.values[-1]


def test_refine_finds_better_and_never_worse(setup):
    g, costs, plan = setup
    evaluate = Measured(g, costs)
    res = refine(g, plan, costs, evaluate, options=RefineOptions(n_trials=40, seed=1))
    assert isinstance(res, RefineResult)
    assert evaluate.calls[0] == tuple((p.nodes, p.backend) for p in plan.partitions)  # trial 0 = start plan
    measured = list(evaluate.values)  # every trial's measurement, the start plan first
    assert res.start_ms == pytest.approx(evaluate(plan))
    assert res.measured_ms == pytest.approx(min(measured))  # the best measured...
    assert res.measured_ms < res.start_ms  # ...and better than the start plan
    assert res.measured_ms == pytest.approx(evaluate(res.plan))
    check_plan(g, res.plan)
    assert res.trials == 40 and res.new_trials == 40
    assert len(set(evaluate.calls)) == len(evaluate.calls) - 2  # no plan measured twice (+ 2 calls above)
    assert res.improved and any(p.backend == "a" for p in res.plan.partitions)
    assert "refined" in res.plan.notes[-1]


def test_refine_keeps_start_plan_when_nothing_beats_it(setup):
    g, costs, plan = setup
    start = tuple((p.nodes, p.backend) for p in plan.partitions)

    def evaluate(p):
        check_plan(g, p)
        return 1.0 if tuple((q.nodes, q.backend) for q in p.partitions) == start else 2.0

    res = refine(g, plan, costs, evaluate, options=RefineOptions(n_trials=15))
    assert res.measured_ms == res.start_ms == 1.0
    assert res.plan is plan and not res.improved


def test_refine_resumes_from_storage(setup, tmp_path):
    g, costs, plan = setup
    url = f"sqlite:///{tmp_path / 'costs.db'}"
    first = Measured(g, costs)
    r1 = refine(g, plan, costs, first, options=RefineOptions(storage=url, study_name="s", n_trials=6))
    assert r1.trials == 6 and len(first.calls) <= 6
    second = Measured(g, costs)
    r2 = refine(g, plan, costs, second, options=RefineOptions(storage=url, study_name="s", n_trials=12))
    assert r2.trials == 12 and r2.new_trials == 6
    assert r2.start_ms == r1.start_ms
    assert tuple((p.nodes, p.backend) for p in plan.partitions) not in second.calls  # start not re-measured
    assert not set(first.calls) & set(second.calls)  # nothing measured twice across calls
    assert r1.measured_ms == pytest.approx(min(first.values))
    assert r2.measured_ms == pytest.approx(min(first.values + second.values))  # the best over both calls
    # another start plan under the same study name gets a study of its own
    other = Measured(g, costs)
    alt = refine(g, Plan.single("a", len(g), 8.0), costs, other,
                 options=RefineOptions(storage=url, study_name="s", n_trials=3))
    assert alt.study_name != "s" and alt.trials == 3 and len(other.calls) >= 1
    # a finished study does nothing more
    third = Measured(g, costs)
    r3 = refine(g, plan, costs, third, options=RefineOptions(storage=url, study_name="s", n_trials=12))
    assert third.calls == [] and r3.trials == 12 and r3.measured_ms == r2.measured_ms


def test_refine_resumes_after_interruption(setup, tmp_path):
    g, costs, plan = setup
    url = f"sqlite:///{tmp_path / 'study.db'}"
    killed = Measured(g, costs, fail_at=3)
    with pytest.raises(KeyboardInterrupt):
        refine(g, plan, costs, killed, options=RefineOptions(storage=url, study_name="k", n_trials=10))
    measured_before = set(killed.calls[:2])
    again = Measured(g, costs)
    res = refine(g, plan, costs, again, options=RefineOptions(storage=url, study_name="k", n_trials=10))
    assert res.trials == 10
    assert not measured_before & set(again.calls)  # the two finished measurements were kept
    assert res.start_ms == pytest.approx(Measured(g, costs)(plan))


def test_refine_time_budget(setup):
    import time
    g, costs, plan = setup

    def slow(p):
        time.sleep(0.2)
        return 1.0

    res = refine(g, plan, costs, slow, options=RefineOptions(n_trials=1000, timeout_s=0.5))
    # each trial takes >= 0.2 s, and no trial starts after 0.5 s: at most 3 (the clock cannot make it more)
    assert 1 <= res.trials <= 3


def test_refine_failed_measurement_fails_only_that_trial(setup):
    g, costs, plan = setup
    start = tuple((p.nodes, p.backend) for p in plan.partitions)

    def evaluate(p):
        if tuple((q.nodes, q.backend) for q in p.partitions) != start:
            raise CollageError("openvino could not compile partition 2")
        return 3.0

    res = refine(g, plan, costs, evaluate, options=RefineOptions(n_trials=8))
    assert res.measured_ms == 3.0 and res.trials == 8


def test_refine_can_run_widens_the_neighbourhood(setup):
    g, costs, plan = setup
    # no costs for merged sets beyond 3 nodes, but backend 'a' says it can run anything
    seen = []

    def can_run(nodes, backend):
        seen.append((nodes, backend))
        return backend == "a"

    evaluate = Measured(g, costs)
    res = refine(g, plan, costs, evaluate, options=RefineOptions(n_trials=30, seed=3), can_run=can_run)
    assert seen and res.measured_ms == pytest.approx(min(evaluate.values))
    table = usable_costs(g, costs)
    # the widened neighbourhood was measured: some trial ran a node set that has no cost, on 'a'
    assert any(nodes not in table and b == "a" for call in evaluate.calls for nodes, b in call)
    check_plan(g, res.plan)


def test_predicted_cost_of_refined_plan(setup):
    g, costs, plan = setup
    transition = lambda s, d, n: 0.05  # noqa: E731 - as the DP was searched with
    res = refine(g, plan, costs, Measured(g, costs), options=RefineOptions(n_trials=25, seed=2),
                 transition=transition)
    assert res.improved and res.plan is not plan
    compute, moved = cover_cost(g, [(p.nodes, p.backend) for p in res.plan.partitions], usable_costs(g, costs),
                                transition)
    assert moved > 0 and res.plan.predicted_ms == pytest.approx(compute + moved)


@pytest.mark.slow
def test_refine_on_a_real_small_model(tmp_path):
    import statistics
    import time

    import numpy as np

    from collage import zoo
    from collage.backends import get_backend

    g = zoo.load_graph("zoo:tiny-resnet")
    names = ["onnxruntime", "openvino"]
    backends = {}
    for name in names:
        b = get_backend(name)
        if b.available():
            pytest.skip(f"{name}: {b.available()}")
        backends[name] = b
    rng = np.random.default_rng(0)
    feeds = {t: rng.standard_normal(g.tensor(t).shape).astype(g.tensor(t).dtype) for t in g.inputs}
    cands = enumerate_candidates(g, {b: {i: True for i in range(len(g))} for b in names}, Limits(max_nodes=4))
    # costs: a cheap stand-in proportional to size (this test is about the refine loop on real runtimes)
    costs = {c: (1.0 if c.backend == "onnxruntime" else 1.1) * len(c.nodes) for c in cands}
    plan = dp_search(g, costs, lambda s, d, n: 0.2)
    compiled_cache = {}

    def evaluate(p) -> float:
        parts = []
        for part in p.partitions:
            key = (part.nodes, part.backend)
            if key not in compiled_cache:
                compiled_cache[key] = backends[part.backend].compile(g.extract(part.nodes))
            parts.append((part, compiled_cache[key]))

        def run_once():
            env = dict(feeds)
            for part, comp in parts:
                env.update(comp.run({t: env[t] for t in part.inputs}))
            return env

        run_once()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            run_once()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    res = refine(g, plan, costs, evaluate, options=RefineOptions(storage=f"sqlite:///{tmp_path / 'r.db'}", n_trials=6,
                                                                seed=0), can_run=lambda nodes, b: True)
    measured = [ms for _, ms, _ in res.history if ms is not None]
    assert res.measured_ms == min(measured) and res.start_ms in measured and res.trials == 6
    assert res.evaluated >= 2 and compiled_cache  # real compilations and end-to-end timings happened
    check_plan(g, res.plan)
