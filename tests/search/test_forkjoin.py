"""The module-by-module search (collage.search.forkjoin) against the DP: same cost, same partition count."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collage.errors import CollageError
from collage.search import Candidate, Limits, dp_search, enumerate_candidates
from collage.search import forkjoin
from collage.search.solver import SolveStats, solve
from tests.helpers import BACKENDS, all_supported, assert_valid, make_dag
from tests.search.test_search import objective, random_costs, random_transition


@st.composite
def fork_joins(draw, max_modules: int = 3):
    """Random series of fork-join modules: a separator, parallel chains of 0-3 Relu/Identity nodes reading it,
    a Sum of the chains' ends (and of the separator, for a chain of none), and so on; chains before the first
    separator read the graph input, those after the last are graph outputs."""
    spec: list[tuple[str, tuple[int, ...]]] = []
    unary = st.sampled_from(["Relu", "Identity"])

    def chains(source: int) -> list[int]:
        ends = []
        for _ in range(draw(st.integers(1, 3))):
            prev = source
            for _ in range(draw(st.integers(0 if source >= 0 else 1, 3))):
                spec.append((draw(unary), (prev,)))
                prev = len(spec) - 1
            ends.append(prev)
        return ends

    ends = chains(-1) if draw(st.booleans()) else []
    if not ends:
        spec.append(("Relu", (-1,)))
        ends = [0]
    for _ in range(draw(st.integers(1, max_modules))):
        spec.append(("Sum", tuple(ends)) if len(ends) > 1 else (draw(unary), tuple(ends)))
        ends = chains(len(spec) - 1)
    if draw(st.booleans()):  # a last module, or end on a separator
        spec.append(("Sum", tuple(ends)) if len(ends) > 1 else (draw(unary), tuple(ends)))
    return make_dag(spec)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fork_joins(), st.integers(0, 2**16), st.integers(1, 3), st.sampled_from([0.0, 0.2]))
def test_forkjoin_equals_dp(g, seed, nb, missing):
    rng = random.Random(seed)
    backends = BACKENDS[:nb]
    costs = random_costs(g, rng, backends, missing=missing)
    for c in costs:  # single nodes missing too: a separator then only in a hub that holds the next one
        if len(c.nodes) == 1 and rng.random() < missing:
            costs[c] = None
    transition = random_transition(rng, backends)
    stats = forkjoin.ForkJoinStats()
    plan = forkjoin.forkjoin_search(g, costs, transition, stats=stats)
    assert stats.applicable, stats.why_not
    try:
        dp = dp_search(g, costs, transition)
    except CollageError:  # no cover (a failed measurement left a node without one): the DP says which
        assert plan is None
        return
    assert plan is not None
    assert_valid(g, plan)
    assert objective(g, plan, costs, transition) == objective(g, dp, costs, transition)
    assert len(plan.partitions) == len(dp.partitions)  # the same tie-break: fewest partitions
    assert plan.predicted_ms == pytest.approx(dp.predicted_ms)


def two_chains_into_one_hub():
    """x -> 0 (the separator); chains [1] and [2] read it; 3 = Sum(1, 2) then 4 = Relu(3)."""
    return make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (0,)), ("Sum", (1, 2)), ("Relu", (3,))])


def test_a_hub_reading_the_separator_through_two_chains_pays_one_hand_over():
    # {1, 2, 3} on "ov" reads node 0's tensor twice (through both chains): one distinct tensor, one hand-over
    g = two_chains_into_one_hub()
    costs = {Candidate((0,), "ort"): 1.0, Candidate((1,), "ort"): 5.0, Candidate((2,), "ort"): 5.0,
             Candidate((3,), "ort"): 5.0, Candidate((4,), "ort"): 1.0, Candidate((1, 2, 3), "ov"): 1.0,
             Candidate((4,), "ov"): 1.0}
    plan = forkjoin.forkjoin_search(g, costs, lambda a, b, n: 4.0)
    assert [(p.nodes, p.backend) for p in plan.partitions] == [((0,), "ort"), ((1, 2, 3), "ov"), ((4,), "ov")]
    assert plan.predicted_ms == pytest.approx(1.0 + 4.0 + 1.0 + 1.0)
    assert plan.predicted_ms == pytest.approx(dp_search(g, costs, lambda a, b, n: 4.0).predicted_ms)


def test_other_shapes_are_left_to_the_dp():
    # node 3 reads node 0 and node 2: 0's output is still read past node 1, so 1 is no separator, and the
    # module after node 0 is not parallel chains (node 3 reads the separator and a chain's middle)
    g = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,)), ("Add", (0, 2)), ("Add", (1, 3))])
    stats = forkjoin.ForkJoinStats()
    costs = {c: 1.0 for c in enumerate_candidates(g, all_supported(g, ["ort"]), Limits())}
    assert forkjoin.forkjoin_search(g, costs, stats=stats) is None
    assert not stats.applicable and "not parallel chains" in stats.why_not
    exact = SolveStats()
    assert_valid(g, solve(g, costs, stats=exact))
    assert exact.method == "dp"


def test_a_candidate_across_two_chains_is_left_to_the_dp():
    g = two_chains_into_one_hub()
    costs = {c: 1.0 for c in enumerate_candidates(g, all_supported(g, ["ort"]), Limits())}
    costs[Candidate((1, 2), "ort")] = 0.5  # two parallel nodes as one partition: not a stretch of one chain
    stats = forkjoin.ForkJoinStats()
    assert forkjoin.forkjoin_search(g, costs, stats=stats) is None
    assert "not a stretch of one chain" in stats.why_not
    assert solve(g, costs).predicted_ms == pytest.approx(dp_search(g, costs).predicted_ms)


def test_solve_answers_module_by_module_where_it_can():
    g = two_chains_into_one_hub()
    rng = random.Random(3)
    costs = random_costs(g, rng, BACKENDS, missing=0.0)
    tr = random_transition(rng, BACKENDS)
    stats = SolveStats()
    plan = solve(g, costs, tr, stats=stats)
    assert stats.method == "forkjoin" and stats.forkjoin.modules == 4 and stats.forkjoin.chains == 3
    assert objective(g, plan, costs, tr) == objective(g, dp_search(g, costs, tr), costs, tr)
    stats = SolveStats()
    solve(g, costs, tr, strategy="dp-ilp", stats=stats)
    assert stats.method == "dp"


@pytest.mark.parametrize("name", ["tiny-resnet", "inception_v1", "squeezenet",
                                  pytest.param("inception_v2", marks=pytest.mark.slow),
                                  pytest.param("densenet121", marks=pytest.mark.slow)])
def test_forkjoin_equals_dp_on_zoo_models(name):
    from benchmarks.search_time import transition, zoo_problem

    g, costs = zoo_problem(name)
    stats = forkjoin.ForkJoinStats()
    plan = forkjoin.forkjoin_search(g, costs, transition, stats=stats)
    assert stats.solved, stats.why_not
    dp = dp_search(g, costs, transition)
    assert objective(g, plan, costs, transition) == objective(g, dp, costs, transition)
    assert len(plan.partitions) == len(dp.partitions)


def test_a_separator_only_in_a_hub_that_holds_the_next_one():
    # a chain 0 -> 1 -> 2 with no candidate for node 1 alone: {0, 1} holds two separators, and no hub starts
    # at separator 1 (the module after node 0 is empty)
    g = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,))])
    costs = {Candidate((0,), "ort"): 1.0, Candidate((0, 1), "ort"): 1.5, Candidate((2,), "ort"): 1.0}
    stats = forkjoin.ForkJoinStats()
    plan = forkjoin.forkjoin_search(g, costs, stats=stats)
    assert plan is not None, stats.why_not
    assert [(p.nodes, p.backend) for p in plan.partitions] == [((0, 1), "ort"), ((2,), "ort")]


def test_costs_past_what_the_keys_hold_are_left_to_the_dp():
    g = two_chains_into_one_hub()
    costs = {c: 1.0 for c in enumerate_candidates(g, all_supported(g, ["ort", "ov"]), Limits())}
    stats = SolveStats()
    plan = solve(g, costs, lambda a, b, n: 1e9, stats=stats)  # a hand-over of 1e9 ms: never taken
    assert plan.predicted_ms == pytest.approx(dp_search(g, costs, lambda a, b, n: 1e9).predicted_ms)
    costs = {Candidate(tuple(range(5)), "ort"): 1e12}  # the one plan costs 1e12 ms: more than the keys hold
    stats = SolveStats()
    plan = solve(g, costs, stats=stats)
    assert stats.method == "dp" and "no plan found module by module" in stats.forkjoin.why_not
    assert plan.predicted_ms == pytest.approx(1e12)
