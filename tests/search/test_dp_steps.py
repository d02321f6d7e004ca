"""The DP's step rule against its definition: from a covered set, the candidates it expands are exactly
those disjoint from it, with every outside input covered, whose first node is at most the smallest
unblocked ready node (collage.search.dp's module docstring). ``steps_from`` finds them through buckets of
groups (same first node, same outside predecessors); these tests pin the buckets to the definition."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collage.search import Candidate, DpStats, Limits, enumerate_candidates
from collage.search.cover import usable_costs
from collage.search.dp import CoverSearch
from tests.helpers import all_supported, dags, make_dag


def expected_steps(cs: CoverSearch, covered: int) -> set[tuple[int, ...]]:
    """The rule, straight from its definition (no buckets, no shortcuts)."""
    graph, n = cs.graph, cs.n
    uncovered = cs.full & ~covered
    sets = [(g.nodes, g.mask, g.ext_pred) for g in (grp for bucket in cs.by_min for b in bucket for grp in b.groups)]
    free = [(nodes, mask, ext) for nodes, mask, ext in sets if not mask & covered]
    star = n
    for r in range(n):
        if not (uncovered >> r) & 1 or any(not (covered >> p) & 1 for p in graph.dag.predecessors(r)):
            continue  # covered, or not ready
        if all(not ext & uncovered for nodes, mask, ext in free if (mask >> r) & 1):
            star = r  # the smallest unblocked ready node
            break
    return {nodes for nodes, mask, ext in free if not ext & uncovered and nodes[0] <= star}


def check_every_covered_set(g, costs, transition=None) -> int:
    cs = CoverSearch(g, usable_costs(g, costs), transition)
    cs.run(DpStats(), 1_000_000)
    count = len(cs.covs)
    for cid in range(count):
        if cs.covs[cid] == cs.full:
            continue
        got = [mv.group.nodes for mv in cs.steps_from(cid)]
        assert len(got) == len(set(got))
        assert set(got) == expected_steps(cs, cs.covs[cid]), f"covered {g.ids(cs.covs[cid])}"
    return count


def test_bucket_with_a_covered_member_still_blocks():
    # 0 a, 1 x, 2 b (sources); 3 c = f(a, b); 4 y = f(x, a). Node 0 starts {0,3} and {0,1,3,4}: both need
    # node 2 from outside (one bucket). Once {1} is covered, {0,1,3,4} overlaps it but {0,3} still needs
    # node 2, so node 0 is blocked and {2} must be offered too.
    g = make_dag([("Relu", (-1,)), ("Relu", (-1,)), ("Relu", (-1,)), ("Add", (0, 2)), ("Add", (1, 0))])
    costs = {Candidate(nodes, "a"): float(len(nodes)) for nodes in [(0,), (1,), (2,), (3,), (4,), (0, 3), (0, 1, 3, 4)]}
    cs = CoverSearch(g, usable_costs(g, costs), None)
    cid = cs.register(0b10, 0b10)
    assert {mv.group.nodes for mv in cs.steps_from(cid)} == expected_steps(cs, 0b10)
    assert (2,) in {mv.group.nodes for mv in cs.steps_from(cid)}
    check_every_covered_set(g, costs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(min_nodes=2, max_nodes=9), st.integers(0, 2**16))
def test_steps_match_the_rule_on_random_dags(g, seed):
    rng = random.Random(seed)
    backends = ("a", "b")
    costs = {c: rng.randint(1, 6) * 0.5
             for c in enumerate_candidates(g, all_supported(g, backends), Limits(max_nodes=4))}
    check_every_covered_set(g, costs)


def test_deadline_stops_the_dp_in_any_thread():
    import threading
    import time

    import pytest

    from collage.search import dp_search
    from collage.search.dp import OutOfTime

    g = make_dag([("Relu", (-1,))] + [("Relu", (i,)) for i in range(40)])
    costs = {c: 1.0 for c in enumerate_candidates(g, all_supported(g, ("a", "b")), Limits(max_nodes=3))}
    errors = []

    def run():
        try:
            dp_search(g, costs, deadline=time.monotonic() - 1.0)
        except OutOfTime as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert len(errors) == 1 and "deadline" in str(errors[0])
    assert len(dp_search(g, costs, deadline=time.monotonic() + 60).partitions) == 1  # the whole graph
    with pytest.raises(OutOfTime):
        dp_search(g, costs, deadline=time.monotonic() - 1.0)
