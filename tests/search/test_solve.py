"""The one entry of the search (collage.search.solve): every strategy answers the same question at the same
prices, and the old names the tuner called still work."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collage.errors import CollageError
from collage.search import STRATEGIES, Candidate, SolveLimits, SolveStats, solve
from tests.helpers import BACKENDS, assert_valid, dags, make_dag
from tests.search.test_search import objective, random_costs, random_transition

pytest.importorskip("highspy")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(min_nodes=1, max_nodes=10), st.integers(0, 2**16), st.integers(1, 3))
def test_every_strategy_finds_the_same_optimum(g, seed, nb):
    rng = random.Random(seed)
    backends = BACKENDS[:nb]
    costs = random_costs(g, rng, backends)
    transition = random_transition(rng, backends)
    ref = solve(g, costs, transition, strategy="exhaustive")
    want = (objective(g, ref, costs, transition), len(ref.partitions))
    for strategy in STRATEGIES:
        stats = SolveStats()
        try:
            plan = solve(g, costs, transition, strategy=strategy, stats=stats)
        except CollageError as e:
            assert strategy == "forkjoin" and "not solved module by module" in str(e)
            assert stats.forkjoin.why_not
            continue
        assert_valid(g, plan)
        assert (objective(g, plan, costs, transition), len(plan.partitions)) == want, strategy
        assert stats.method == {"ilp": "ilp", "forkjoin": "forkjoin"}.get(strategy, stats.method)


def test_each_strategy_says_what_it_did():
    chain = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,))])  # a plain chain: module by module
    costs = {Candidate((i,), b): 1.0 + (b == "b") for i in range(3) for b in "ab"}
    stats = SolveStats()
    solve(chain, costs, strategy="auto", stats=stats)
    assert stats.method == "forkjoin" and stats.ilp is None
    stats = SolveStats()
    solve(chain, costs, strategy="dp", stats=stats)
    assert stats.method == "dp" and stats.dp.expanded > 0
    stats = SolveStats()
    solve(chain, costs, strategy="ilp", stats=stats, limits=SolveLimits(ilp_time_limit=30.0))
    assert stats.method == "ilp" and stats.ilp is not None and stats.ilp.optimal


def test_unknown_strategy_is_refused():
    g = make_dag([("Relu", (-1,))])
    with pytest.raises(CollageError, match="unknown search strategy 'greedy'; one of auto, dp-ilp"):
        solve(g, {Candidate((0,), "a"): 1.0}, strategy="greedy")  # type: ignore[arg-type]

