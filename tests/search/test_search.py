"""The search: candidate enumeration, the DP against the brute-force reference, plan validity."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collage.errors import CollageError
from collage.graph.ir import Graph
from collage.search import (
    Candidate,
    DpStats,
    Limits,
    cover_cost,
    dp_search,
    enumerate_candidates,
    exhaustive_search,
)
from collage.search.candidates import candidate_counts
from collage.search.cover import usable_costs
from collage.search.dp_tables import quantize
from tests.helpers import BACKENDS, all_supported, assert_valid, dags, make_dag


def random_costs(g: Graph, rng: random.Random, backends, missing: float = 0.2) -> dict[Candidate, float | None]:
    """Per-node costs that differ by backend (so that mixes pay), a random fusion discount per set,
    coarse values (so that ties happen and the partition-count tie-break is exercised), and some
    failed or missing measurements."""
    base = {(b, i): rng.randint(1, 8) * 0.25 for b in backends for i in range(len(g))}
    costs: dict[Candidate, float | None] = {}
    for c in enumerate_candidates(g, all_supported(g, backends), Limits(max_nodes=5)):
        if len(c.nodes) > 1 and rng.random() < missing:
            costs[c] = rng.choice([None, float("inf")])
        else:
            discount = rng.choice([1.0, 1.0, 0.75, 0.5])
            costs[c] = discount * sum(base[c.backend, i] for i in c.nodes)
    return costs


def random_transition(rng: random.Random, backends):
    fixed = {(a, b): rng.choice([0.0, 0.05, 0.25, 1.0]) for a in backends for b in backends}
    per_byte = {(a, b): rng.choice([0.0, 1e-3, 1e-2]) for a in backends for b in backends}

    def transition(src: str, dst: str, nbytes: int) -> float:
        assert src != dst, "transition asked for a same-backend hand-over"
        return fixed[src, dst] + per_byte[src, dst] * nbytes
    return transition


def objective(g, plan, costs, transition) -> int:
    table = usable_costs(g, costs)
    compute, moved = cover_cost(g, [(p.nodes, p.backend) for p in plan.partitions], table, transition)
    return quantize(compute + moved)


# ------------------------------------------------------------------------------------- candidates
def brute_candidates(g: Graph, allowed: set[int], limits: Limits) -> set[tuple[int, ...]]:
    n = len(g)
    out = set()
    for m in range(1, 1 << n):
        ids = g.ids(m)
        if not set(ids) <= allowed or len(ids) > limits.max_nodes:
            continue
        if sum(g.op_type(i) in limits.heavy_ops for i in ids) > limits.max_heavy:
            continue
        if g.is_convex(m) and g.is_connected(m):
            out.add(tuple(ids))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(min_nodes=1, max_nodes=10), st.integers(0, 2**16))
def test_enumeration_is_complete_and_sound(g, seed):
    rng = random.Random(seed)
    allowed = {i for i in range(len(g)) if rng.random() < 0.85}
    limits = Limits(max_nodes=rng.randint(1, 6), heavy_ops=frozenset({"Add"}), max_heavy=rng.randint(0, 3))
    cands = enumerate_candidates(g, {"a": {i: i in allowed for i in range(len(g))}}, limits)
    got = [c.nodes for c in cands]
    assert len(got) == len(set(got)), "duplicates"
    want = brute_candidates(g, allowed, limits)
    want |= {(i,) for i in allowed}  # single nodes always, whatever the limits
    if len(allowed) == len(g):
        want.add(tuple(range(len(g))))  # the whole graph always
    assert set(got) == want
    assert got == sorted(got, key=lambda t: (len(t), t)), "deterministic order"


def test_enumeration_per_backend_support_and_fuses_heavy():
    # x -> Relu(0) -> Add(1: 0+0) -> Relu(2) -> Add(3: 2+2)
    g = make_dag([("Relu", (-1,)), ("Add", (0, 0)), ("Relu", (1,)), ("Add", (2, 2))])
    limits = Limits(max_nodes=4, heavy_ops=frozenset({"Add"}), max_heavy=1, fuses_heavy=frozenset({"b"}))
    sup = {"a": {i: True for i in range(4)}, "b": {i: True for i in range(4)}, "c": {0: True, 1: True, 3: True}}
    cands = enumerate_candidates(g, sup, limits)
    by = {b: {c.nodes for c in cands if c.backend == b} for b in "abc"}
    assert (0, 1, 2, 3) in by["a"]  # whole graph, despite two heavy ops
    assert (1, 2, 3) not in by["a"] and (1, 2, 3) in by["b"]  # b fuses heavy ops
    assert by["c"] == {(0,), (1,), (3,), (0, 1)}
    assert candidate_counts(cands) == {"a": len(by["a"]), "b": len(by["b"]), "c": 4}
    assert Candidate((3, 1), "a").nodes == (1, 3) and Candidate((1, 3), "a").mask == 0b1010


def test_enumeration_max_depth_and_cap():
    g = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,)), ("Relu", (2,)), ("Relu", (3,))])
    sup = {"a": {i: True for i in range(5)}}
    depth2 = {c.nodes for c in enumerate_candidates(g, sup, Limits(max_depth=2))}
    assert max(len(c) for c in depth2 if len(c) < 5) == 2 and (0, 1, 2, 3, 4) in depth2
    capped = enumerate_candidates(g, sup, Limits(max_per_backend=7))
    assert [c.nodes for c in capped] == [(0,), (1,), (2,), (3,), (4,), (0, 1), (1, 2), (0, 1, 2, 3, 4)]


# ------------------------------------------------------------------------------------------ search
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(min_nodes=1, max_nodes=12), st.integers(0, 2**16), st.integers(2, 3))
def test_dp_equals_exhaustive(g, seed, nb):
    rng = random.Random(seed)
    backends = BACKENDS[:nb]
    costs = random_costs(g, rng, backends)
    transition = random_transition(rng, backends)
    dp = dp_search(g, costs, transition)
    ref = exhaustive_search(g, costs, transition)
    assert_valid(g, dp)
    assert_valid(g, ref)
    assert objective(g, dp, costs, transition) == objective(g, ref, costs, transition)
    assert len(dp.partitions) == len(ref.partitions)  # same tie-break: fewest partitions
    assert dp.predicted_ms == pytest.approx(ref.predicted_ms)
    assert quantize(dp.predicted_ms) == objective(g, dp, costs, transition)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(min_nodes=1, max_nodes=8), st.integers(0, 2**16), st.sampled_from([1, 4, 5]))
def test_dp_equals_exhaustive_one_or_many_backends(g, seed, nb):
    # 1 backend: no hand-overs at all; 4 and 5: frontier digits of 2 and 3 bits, values up to the digit's top
    rng = random.Random(seed)
    backends = ["ort", "ov", "tvm", "trt", "xla"][:nb]
    costs = random_costs(g, rng, backends)
    transition = random_transition(rng, backends)
    dp = dp_search(g, costs, transition)
    ref = exhaustive_search(g, costs, transition)
    assert_valid(g, dp)
    assert objective(g, dp, costs, transition) == objective(g, ref, costs, transition)
    assert len(dp.partitions) == len(ref.partitions)


def test_dp_runs_prerequisite_partition_first():
    # edges 0->2, 1->2: the cover {0,2},{1} must run {1} first although node 0 is the first node
    g = make_dag([("Relu", (-1,)), ("Relu", (-2,)), ("Add", (0, 1))])
    costs = {Candidate((0,), "a"): 5.0, Candidate((1,), "a"): 1.0, Candidate((2,), "a"): 5.0,
             Candidate((0, 2), "a"): 1.0}
    plan = dp_search(g, costs)
    assert [p.nodes for p in plan.partitions] == [(1,), (0, 2)]
    assert plan.predicted_ms == pytest.approx(2.0)
    assert_valid(g, plan)


def chain_with_branch() -> Graph:
    # 0 Relu(x) -> 1 Relu -> 2 Relu ; 3 Relu(0) ; 4 Add(2, 3) -> 5 Relu
    return make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,)), ("Relu", (0,)), ("Add", (2, 3)),
                     ("Relu", (4,))])


def test_one_backend_everywhere_gives_one_partition():
    g = chain_with_branch()
    cands = enumerate_candidates(g, all_supported(g), Limits(max_nodes=3))
    factor = {"ort": 1.0, "ov": 0.5, "tvm": 2.0}
    costs = {c: factor[c.backend] * len(c.nodes) for c in cands}
    plan = dp_search(g, costs, lambda a, b, n: 0.0)
    assert [(p.nodes, p.backend) for p in plan.partitions] == [(tuple(range(6)), "ov")]
    assert plan.predicted_ms == pytest.approx(3.0)
    assert plan.partitions[0].runner_up == ("ort", 6.0)


def test_one_backend_without_whole_graph_uses_fewest_partitions():
    g = chain_with_branch()
    sup = all_supported(g)
    sup["ov"][5] = False  # ov cannot take the last node, so no whole-graph candidate on it
    cands = enumerate_candidates(g, sup, Limits(max_nodes=3))
    factor = {"ort": 1.0, "ov": 0.5, "tvm": 2.0}
    costs = {c: factor[c.backend] * len(c.nodes) for c in cands}
    plan = dp_search(g, costs)
    ref = exhaustive_search(g, costs)
    assert len(plan.partitions) == len(ref.partitions) == 3  # 5 ov nodes need 2 sets of <= 3, then ort
    assert plan.predicted_ms == pytest.approx(0.5 * 5 + 1.0)
    assert_valid(g, plan)


def test_mix_wins_when_cheapest_and_transitions_are_counted():
    g = chain_with_branch()
    cands = enumerate_candidates(g, all_supported(g, ["ort", "ov"]), Limits(max_nodes=6))
    # ov is cheap on Relu chains, ort is cheap on the Add; mixing saves more than the hand-overs cost
    def cost(c: Candidate) -> float:
        add = 4 in c.nodes
        per = {"ort": 1.0, "ov": 0.2}[c.backend]
        return per * len(c.nodes) + (5.0 if add and c.backend == "ov" else 0.0)
    costs = {c: cost(c) for c in cands}
    moves = []

    def transition(a, b, nbytes):
        moves.append((a, b, nbytes))
        return 0.1

    plan = dp_search(g, costs, transition)
    assert set(plan.backends) == {"ort", "ov"}
    assert plan.node_backend()[4] == "ort"
    assert_valid(g, plan)
    assert plan.predicted_ms == pytest.approx(exhaustive_search(g, costs, transition).predicted_ms)
    # with a prohibitive hand-over the mix no longer pays: one backend for everything
    plan2 = dp_search(g, costs, lambda a, b, n: 100.0)
    assert len(plan2.backends) == 1


def test_tensor_read_twice_by_a_partition_pays_one_transition():
    # node 0 feeds both 1 and 2; {1,2,3} reads t0 twice
    g = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Identity", (0,)), ("Add", (1, 2))])
    costs = {Candidate((0,), "a"): 1.0, Candidate((1, 2, 3), "b"): 1.0}
    seen = []
    plan = dp_search(g, costs, lambda a, b, n: seen.append(n) or 0.5)
    assert plan.predicted_ms == pytest.approx(2.5)
    assert [p.inputs for p in plan.partitions] == [("x",), ("t0",)]


def test_missing_cover_names_the_node():
    g = chain_with_branch()
    costs = {c: 1.0 for c in enumerate_candidates(g, all_supported(g, ["ort"]), Limits(max_nodes=2))}
    for c in list(costs):
        if 4 in c.nodes:
            costs[c] = None  # every measurement of node 4 failed
    with pytest.raises(CollageError, match=r"#4 Add"):
        dp_search(g, costs)
    with pytest.raises(CollageError, match=r"#4 Add"):
        dp_search(g, {Candidate(c.nodes, c.backend): v for c, v in costs.items() if v is not None})


def test_no_executable_cover_is_a_clear_error():
    # only the pair {0,2} covers 0 and 2, but 2 needs node 1 which is only in {1,3}, and 3 needs 2
    g = make_dag([("Relu", (-1,)), ("Relu", (-2,)), ("Add", (0, 1)), ("Add", (1, 2))])
    costs = {Candidate((0, 2), "a"): 1.0, Candidate((1, 3), "a"): 1.0}
    with pytest.raises(CollageError, match="no executable exact cover"):
        dp_search(g, costs)


def test_plan_metadata():
    g = chain_with_branch()
    cands = enumerate_candidates(g, all_supported(g, ["ort", "ov"]), Limits(max_nodes=1))
    costs = {c: (1.0 if c.backend == "ort" else 2.0) * len(c.nodes) for c in cands}
    plan = dp_search(g, costs)
    assert len(plan.partitions) == 1  # whole graph on ort is 6.0, same as six singles; fewer wins
    p = plan.partitions[0]
    assert p.inputs == ("x",) and p.outputs == ("t5",) and p.fingerprint == g.fingerprint(p.nodes)
    assert p.cost_ms == 6.0 and p.runner_up == ("ov", 12.0)


def test_search_stats_counts_states():
    g = chain_with_branch()
    costs = {c: 1.0 for c in enumerate_candidates(g, all_supported(g), Limits(max_nodes=3))}
    stats = DpStats()
    dp_search(g, costs, lambda a, b, n: 0.1, stats=stats)
    assert stats.expanded >= 1 and stats.pushed >= stats.expanded - 1


def test_safety_valve_returns_greedy_plan():
    g = chain_with_branch()
    cands = enumerate_candidates(g, all_supported(g), Limits(max_nodes=3))
    rng = random.Random(5)
    costs = {c: rng.uniform(0.5, 2.0) * len(c.nodes) for c in cands}
    plan = dp_search(g, costs, lambda a, b, n: 0.1, max_states=1)
    assert_valid(g, plan)
    assert "not proven optimal" in plan.notes[-1]
    assert plan.predicted_ms >= dp_search(g, costs, lambda a, b, n: 0.1).predicted_ms


def test_an_option_beaten_after_every_hand_over_is_dropped_and_one_within_them_is_kept():
    """Chain 0 -> 1 -> 2, nodes 0 and 2 cheap only on "ort", node 1 1.0 ms on "ort" and 0.5 on "ov". With
    0.3 ms per hand-over, "ov" for node 1 saves 0.5 and pays two hand-overs (in and out, 0.6): the plan is all
    "ort" and "ort" for node 1 must stay an option (a rule counting only the hand-over in would drop it,
    and the search would return ort, ov, ort at 0.1 ms more). At 0.1 ms per hand-over "ov" beats "ort" for
    node 1 whatever its neighbours run on, and "ort"'s option is dropped."""
    g = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,))])
    costs = {Candidate((0,), "ort"): 1.0, Candidate((0,), "ov"): 9.0, Candidate((1,), "ort"): 1.0,
             Candidate((1,), "ov"): 0.5, Candidate((2,), "ort"): 1.0, Candidate((2,), "ov"): 9.0}
    stats = DpStats()
    plan = dp_search(g, costs, lambda a, b, n: 0.3, stats=stats)
    assert [p.backend for p in plan.partitions] == ["ort"] * 3 and plan.predicted_ms == pytest.approx(3.0)
    assert stats.dropped == 2  # ov for nodes 0 and 2 (8 ms dearer), not ort for node 1
    plan = dp_search(g, costs, lambda a, b, n: 0.1, stats=stats)
    assert [p.backend for p in plan.partitions] == ["ort", "ov", "ort"] and plan.predicted_ms == pytest.approx(2.7)
    assert stats.dropped == 3
