"""A fresh cost DB starts warm (issue 40, item 2): the guided measuring prices a variant the DB has too few rows
of with the shipped cost model, scaled by the probe and refined by the tune's measurements; guided is the
default measuring order under a budget."""
from __future__ import annotations

import time

import numpy as np
import pytest

from collage.cost_models.features import features_by_fingerprint
from collage.cost_models.learned import LinePlusTrees, Variant
from collage.cost_models.shipped import ShippedCosts, line_to_dict
from collage.graph.ir import Graph
from collage.measure.db import SQLiteCostDB
from collage.search import solve as search_exact
from collage.tuner.guided import GuidedSettings
from tests.tuner.test_guided import RATES, FakeBackend, Recording, candidates, fake_measure, mixed_chain, true_ms


def shipped_for(graph: Graph, probe_ms: float = 10.0) -> ShippedCosts:
    """A shipped model of the synthetic machine, fitted on another graph's candidates (as the training script
    fits the project's measurements): lines only, through JSON."""
    cands = candidates(graph)
    nodes = sorted({c.nodes for c in cands})
    feats = features_by_fingerprint(graph, nodes, {n: str(n) for n in nodes})
    lines = {}
    for b in RATES:
        mine = [(feats[str(c.nodes)], true_ms(graph, c)) for c in cands if c.backend == b]
        y = np.array([m for _, m in mine])
        lines[f"{b}|{{}}"] = [line_to_dict(LinePlusTrees.fit([f for f, _ in mine], y, seed=0, trees=False,
                                                             per_op=k)) for k in (False, True)]
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.json"
        p.write_text(json.dumps({"meta": {"probe_ms": probe_ms, "machine_class": "avx512"}, "variants": lines}))
        return ShippedCosts.load(p)


def test_a_fresh_db_is_priced_by_the_shipped_model_not_seeded(tmp_path):
    """Fails on the code before it (GuidedSettings took no shipped model; a fresh DB was seeded at random)."""
    db = SQLiteCostDB(tmp_path / "c.sqlite")
    backends = {b: FakeBackend(b) for b in RATES}
    shipped = shipped_for(Graph.load(mixed_chain("MRSMTRMSMRRMTSMMRTSM", 48)))
    shipped.calibrate(10.0)  # the same machine
    graph = Graph.load(mixed_chain("MMRSTMRRSMTTMRSRMTMMRRSSMT", 64))
    calls: list = []
    measure = fake_measure(graph, db, backends, calls)

    def limited(batch, left):  # a budget: 40 measurements in all
        done = sum(len(b) for b in calls)
        return measure(list(batch)[:max(0, 40 - done)], left)

    g = Recording(graph, candidates(graph), list(backends.values()), db,
                  GuidedSettings(measure=limited, search=lambda costs: search_exact(graph, costs),
                                 deadline=time.monotonic() + 60, shipped=shipped))
    table = g.run()
    assert not any(w == "seed" for w, _ in g.phases), g.phases
    assert any(w.startswith("round") for w, _ in g.phases), g.phases
    rep = g.report()
    assert rep["shipped"]["priced"] == sorted(RATES) and rep["shipped"]["scale"] == pytest.approx(1.0)
    assert set(rep["shipped"]["refined_rows"]) == set(RATES)
    assert rep["error"]["n"] > 0 and rep["error"]["median_ape"] < 50.0, rep["error"]
    assert rep["estimated"] > 0 and all(cost.ok for cost in table.values())
    assert len(table) == sum(1 for c in g.cands if g.is_measured(c))  # estimates never in the measured table


def test_the_probe_scales_and_measurements_refine_the_shipped_model():
    graph = Graph.load(mixed_chain("MRSMTRMSMRRMTSMMRTSM", 48))
    shipped = shipped_for(graph, probe_ms=10.0)
    v = Variant("mm", "1", "cpu", "{}", "m")
    feats = list(features_by_fingerprint(graph, [(0, 1), (2, 3, 4)], {(0, 1): "a", (2, 3, 4): "b"}).values())
    base = [e.mid_ms for e in shipped.estimate(v, feats)]
    shipped.calibrate(25.0)  # this machine is 2.5x slower on the probe
    assert shipped.scale == pytest.approx(2.5)
    assert [e.mid_ms for e in shipped.estimate(v, feats)] == pytest.approx([2.5 * b for b in base])
    shipped.refine(v, feats, [2 * 2.5 * b for b in base])  # measured 2x the scaled estimate
    assert shipped.correction["mm"] == pytest.approx(2.0)
    assert [e.mid_ms for e in shipped.estimate(v, feats)] == pytest.approx([5.0 * b for b in base])
    assert shipped.estimate(Variant("other", "1", "cpu", "{}", "m"), feats) is None
    other = shipped.estimate(Variant("mm", "2", "cpu", '{"threads":8}', "m2"), feats)  # other options: the backend's
    assert [e.mid_ms for e in other] == pytest.approx([5.0 * b for b in base])


def test_guided_is_the_default_under_a_budget_only():
    pytest.importorskip("xgboost")
    pytest.importorskip("scipy")
    import argparse

    from collage.commands.tune import add_arguments
    from collage.tuner.options import TuneOptions

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["m.onnx", "-o", "out"]).measure_order == "auto"
    assert p.parse_args(["m.onnx", "-o", "out", "--measure-order", "enumeration"]).measure_order == "enumeration"

    assert TuneOptions(budget_s=60.0).order() == "guided"
    assert TuneOptions().order() == "enumeration"
    assert TuneOptions(budget_s=60.0, measure_order="enumeration").order() == "enumeration"
