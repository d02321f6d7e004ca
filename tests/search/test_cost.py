"""What a candidate costs, as the search reads a cost table (collage.search.cost): a value, failed or unknown."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from collage.search import Candidate, Cost
from collage.search.cover import usable_costs
from tests.helpers import make_dag


@dataclass
class Record:
    """A measurement record as collage.measure writes them (median_ms, error)."""

    median_ms: float | None
    error: str | None = None


@pytest.mark.parametrize(("raw", "state", "ms"), [
    (2.5, "value", 2.5), (0, "value", 0.0), (Record(1.25), "value", 1.25), (Cost.value(3.0), "value", 3.0),
    (None, "unknown", None), (math.nan, "unknown", None), (Record(None), "unknown", None), (object(), "unknown", None),
    (math.inf, "failed", None), (-1.0, "failed", None), (Record(None, "compile failed: no kernel"), "failed", None),
    (Record(4.0, "timed out"), "failed", None),
])
def test_raw_costs_read_into_three_states(raw, state, ms):
    cost = Cost.of(raw)
    assert cost.state.value == state
    assert (cost.is_value, cost.is_failed, cost.is_unknown) == (state == "value", state == "failed", state == "unknown")
    if ms is None:
        with pytest.raises(ValueError, match=f"a {state} cost has no ms"):
            _ = cost.ms
    else:
        assert cost.ms == ms


def test_a_failure_keeps_its_error_and_values_are_checked():
    assert Cost.of(Record(None, "compile failed: no kernel")).why == "compile failed: no kernel"
    assert "compile failed" in str(Cost.of(Record(None, "compile failed: no kernel")))
    for bad in (-0.5, math.inf, math.nan):
        with pytest.raises(ValueError, match="finite, non-negative"):
            Cost.value(bad)


def test_rank_puts_values_first_by_ms_then_unknown_then_failed():
    costs = [Cost.failed("x"), Cost.unknown(), Cost.value(2.0), Cost.value(1.0)]
    assert sorted(costs, key=Cost.rank) == [Cost.value(1.0), Cost.value(2.0), Cost.unknown(), Cost.failed("x")]


def test_only_values_enter_the_search():
    g = make_dag([("Relu", (-1,)), ("Relu", (0,)), ("Relu", (1,))])
    costs = {Candidate((0,), "a"): 1.0, Candidate((1,), "a"): Record(2.0), Candidate((2,), "a"): math.inf,
             Candidate((2,), "b"): Record(None, "failed"), Candidate((0, 1), "b"): None,
             Candidate((1, 2), "b"): math.nan, Candidate((0, 1, 2), "a"): Cost.value(5.0)}
    assert usable_costs(g, costs) == {(0,): {"a": 1.0}, (1,): {"a": 2.0}, (0, 1, 2): {"a": 5.0}}
