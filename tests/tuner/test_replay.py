"""Pricing a plan replayed from CUDA graphs (collage.tuner.replay): in-graph figures where every partition can be
captured, eager ones around a partition that cannot, nothing changed off target cuda."""
from __future__ import annotations

import pytest

from collage.measure.device_transitions import DeviceFigures
from collage.search import Candidate, dp_search
from collage.tuner import replay
from collage.tuner.stitching import PartitionCharge, charge_costs
from tests.helpers import make_dag

A, B = "torch", "torch-bf16"
#: eager chains: 1 ms a partition after another, 1 ms a switch; inside one graph: nothing, and 0.01 ms a switch
EAGER_CHARGES = {A: PartitionCharge(1.0, 1.0), B: PartitionCharge(1.0, 1.0)}
IN_GRAPH = DeviceFigures("graph", cut={A: 0.0, B: 0.0}, switch={(A, B): (0.01, 0.0), (B, A): (0.01, 0.0)})
#: two nodes: A is faster on node 0, B on node 1 and on the whole model (2.5 ms against the mix's 1.5 + charges)
COSTS = {Candidate((0,), A): 1.0, Candidate((1,), A): 2.0, Candidate((0, 1), A): 3.0,
         Candidate((0,), B): 2.0, Candidate((1,), B): 0.5, Candidate((0, 1), B): 2.5}


def eager_switch(src: str, dst: str, nbytes: int) -> float:
    return 0.0 if src == dst else 1.0


@pytest.fixture(autouse=True)
def _replay_on(monkeypatch):
    monkeypatch.delenv("COLLAGE_CUDA_GRAPHS", raising=False)


def plan_for(target: str, refusals: dict[str, str | None]):
    asked: list[frozenset[str]] = []

    def figures(names):
        asked.append(names)
        return IN_GRAPH

    priced = replay.priced_for_target(target, dict(EAGER_CHARGES), eager_switch, refusals, figures)
    g = make_dag([("Relu", (-1,)), ("Relu", (0,))])
    return priced, dp_search(g, charge_costs(COSTS, priced.charges), priced.transition), asked


def test_all_capturable_plan_is_priced_in_graph_and_mixes():
    priced, plan, asked = plan_for("cuda", {A: None, B: None})
    assert asked == [frozenset({A, B})]
    assert priced.charges[A].cut_ms == 0.0 and priced.charges[B].cut_ms == 0.0
    assert priced.charges[B].level == 1.0  # the level stays: only the cut is the graph's
    assert priced.transition(A, B, 1 << 20) == pytest.approx(0.01)
    assert plan.parts() == (((0,), A), ((1,), B))  # 1 + 0.5 + 0.01 beats B alone (2.5)


def test_uncapturable_partition_splits_and_pays_eager():
    priced, plan, asked = plan_for("cuda", {A: None, B: "torch-bf16 does not say"})
    assert asked == [frozenset({A})]
    assert priced.charges[B] == EAGER_CHARGES[B]
    assert priced.transition(A, B, 4) == 1.0 and priced.transition(B, A, 4) == 1.0
    assert plan.parts() == (((0, 1), B),)  # the mix pays 1 + 0.5 + 1 + 1 = 3.5 against 2.5


@pytest.mark.parametrize("target", ["cpu", "x86"])
def test_other_targets_keep_the_same_charges_and_transition(target):
    priced, plan, asked = plan_for(target, {A: None, B: None})
    assert asked == []  # nothing measured or read
    assert priced.charges == EAGER_CHARGES and priced.transition is eager_switch
    assert plan.parts() == (((0, 1), B),)


def test_replay_turned_off_keeps_eager_pricing(monkeypatch):
    monkeypatch.setenv("COLLAGE_CUDA_GRAPHS", "0")
    priced, _, asked = plan_for("cuda", {A: None, B: None})
    assert asked == [] and priced.transition is eager_switch


def test_unmeasured_in_graph_figures_keep_eager_ones():
    priced = replay.priced_for_target("cuda", dict(EAGER_CHARGES), eager_switch, {A: None, B: None},
                                      lambda names: DeviceFigures("graph"))
    assert priced.charges == EAGER_CHARGES
    assert priced.transition(A, B, 4) == 1.0 and priced.transition(A, A, 4) == 0.0


def test_capture_refusals_ask_the_compiled_form():
    class Says:
        def __init__(self, why):
            self.why = why

        def capture_refusal(self):
            return self.why

    got = replay.capture_refusals({A: Says(None), B: Says("Shape builds a tensor"), "tensorrt": object()})
    assert got[A] is None and got[B] == "Shape builds a tensor"
    assert got["tensorrt"] is not None


def _ctx(target: str, db, budgeted: bool = True):
    from types import SimpleNamespace

    from collage.backends import get_backend

    backends = [get_backend(n, device="cpu") for n in (A, B)]
    return SimpleNamespace(options=SimpleNamespace(target=target), names=[A, B], backends=backends, db=db,
                           backend_options={}, clock=SimpleNamespace(budgeted=budgeted)), backends


class _Single:
    def capture_refusal(self):
        return None


def test_search_step_prices_with_the_stored_graph_figures(tmp_path, monkeypatch):
    from collage.measure import device_transitions as dt
    from collage.measure.db import SQLiteCostDB
    from collage.tuner.records import Baselines
    from collage.tuner.steps.search import replay_priced

    monkeypatch.setattr(dt, "measure_device_transition", lambda *a, **k: pytest.fail("measured under a budget"))
    db = SQLiteCostDB(tmp_path / "c.db")
    rows = [{"nbytes": 4096, "cut_a_ms": 0.0, "cut_b_ms": 0.0, "switch_ms": 0.02}]
    base = Baselines({A: _Single(), B: _Single()}, {}, {}, 1.0, transition=eager_switch)
    ctx, backends = _ctx("cuda", db)
    dt.store_fits(db, backends[0], backends[1], "graph", rows)
    priced = replay_priced(ctx, base, dict(EAGER_CHARGES))
    assert priced.charges[A].cut_ms == 0.0 and priced.transition(A, B, 4096) == pytest.approx(0.02)
    cpu = replay_priced(_ctx("cpu", db)[0], base, dict(EAGER_CHARGES))
    assert cpu.charges == EAGER_CHARGES and cpu.transition is eager_switch
