"""Range candidates: narrow cuts, convex segments/prefixes/suffixes, and the coarse mix they allow."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from collage import zoo
from collage.search import Candidate, dp_search
from collage.search.ranges import crossings, narrow_cuts, range_candidates
from tests.helpers import all_supported, assert_valid, dags, make_dag


def residual_chain(blocks: int) -> tuple:
    """``blocks`` residual blocks (Relu -> Relu -> Add with the block input), then a Relu."""
    spec: list[tuple[str, tuple[int, ...]]] = [("Relu", (-1,))]
    ends = []
    for _ in range(blocks):
        start = len(spec) - 1
        spec += [("Relu", (start,)), ("Relu", (start + 1,)), ("Add", (start + 2, start))]
        ends.append(len(spec))
    spec.append(("Relu", (len(spec) - 1,)))
    return make_dag(spec), ends


def test_cuts_are_the_block_ends():
    g, ends = residual_chain(10)
    live = crossings(g)
    cuts = narrow_cuts(g)
    assert cuts == [e for e in ends if 2 <= e <= len(g) - 2]  # inside a block two tensors are live
    assert all(live[c] == 1 for c in cuts)
    assert max(live) == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(min_nodes=4, max_nodes=14))
def test_ranges_are_convex_and_supported(g):
    sup = all_supported(g, ["a", "b"])
    mid = len(g) // 2
    sup["b"][mid] = False  # b does not take the middle node
    cands = range_candidates(g, sup)
    k = len(narrow_cuts(g))
    on_a = {c.nodes for c in cands if c.backend == "a"}
    # a takes every node: k + 1 segments, k prefixes, k suffixes, the first segment a prefix, the last a suffix
    assert len(on_a) == (3 * k - 1 if k else 0)
    # b: exactly a's ranges that leave the middle node out
    assert {c.nodes for c in cands if c.backend == "b"} == {r for r in on_a if mid not in r}
    for c in cands:
        assert g.is_convex(c.nodes)
        assert c.nodes == tuple(range(c.nodes[0], c.nodes[-1] + 1))
        assert 0 < len(c.nodes) < len(g)


def test_every_range_counts_segments_prefixes_and_suffixes():
    g, _ = residual_chain(10)
    k = len(narrow_cuts(g))
    # the first segment is a prefix, the last a suffix
    assert len(range_candidates(g, all_supported(g, ["a"]))) == 3 * k - 1


def test_coarse_mix_found_where_small_pieces_do_not_pay():
    # 'fast' wins the first half by far, 'slow' the second; each hand-over costs more than any one
    # node's difference, so only a mix of big pieces pays: the ranges provide it
    g, _ = residual_chain(10)
    n = len(g)
    half = n // 2

    def node_cost(b: str, i: int) -> float:
        return {"fast": 1.0, "slow": 3.0}[b] if i < half else {"fast": 3.0, "slow": 1.0}[b]
    sup = all_supported(g, ["fast", "slow"])
    cands = [Candidate((i,), b) for b in sup for i in range(n)] + [Candidate(tuple(range(n)), b) for b in sup]
    cands += range_candidates(g, sup)
    costs = {c: sum(node_cost(c.backend, i) for i in c.nodes) for c in cands}

    def transition(a: str, b: str, nbytes: int) -> float:
        return 5.0
    plan = dp_search(g, costs, transition)
    assert_valid(g, plan)
    assert len(plan.partitions) == 2
    assert [p.backend for p in plan.partitions] == ["fast", "slow"]
    two_pieces = min(sum(node_cost("fast", i) for i in range(c)) + sum(node_cost("slow", i) for i in range(c, n))
                     for c in narrow_cuts(g)) + 5.0
    assert plan.predicted_ms == pytest.approx(two_pieces)
    # without the ranges the best plan is one backend on the whole graph, and dearer
    small = {c: v for c, v in costs.items() if len(c.nodes) in (1, n)}
    assert dp_search(g, small, transition).predicted_ms > plan.predicted_ms


@pytest.mark.parametrize("name,width", [("tiny-bert", 2), ("tiny-mobilenetv2", 1)])
def test_zoo_models_have_cuts(name, width):
    g = zoo.load_graph(f"zoo:{name}")
    cuts = narrow_cuts(g)
    live = crossings(g)
    assert len(cuts) >= 8
    assert max(live[c] for c in cuts) <= width
    for c in range_candidates(g, all_supported(g, ["a"])):
        assert g.is_convex(c.nodes)
