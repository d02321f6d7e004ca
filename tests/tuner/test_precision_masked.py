"""Precision on a model where all-bf16 gives NaN (zoo:tiny-bert-masked) and the whole-model bf16 plan.

zoo:tiny-bert-masked is tiny-bert with a query x key padding mask at float32's lowest value (HF style):
the rows of padded queries are fully masked. In fp32 their softmax is uniform; OpenVINO's bf16 attention
turns -3.4028235e38 into -inf, and a row of -inf has a NaN softmax that reaches every output.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from collage.tuner.precision import tuner as P
from collage import zoo
from collage.backends import get_backend
from collage.measure.accuracy import ErrorMeasure
from collage.search.candidates import Candidate

from tests.helpers import bf16_mark, chain_model, synthetic_precision

needs_bf16 = bf16_mark()

MODEL = "zoo:tiny-bert-masked"


def _nan_in_all_bf16(model: str):
    """``model``'s graph, after checking that fp32 is finite and OpenVINO all-bf16 gives NaN in every output."""
    g = zoo.load_graph(model)
    feeds = zoo.random_inputs(g, seed=0)
    assert 0 < int(feeds["attention_mask"].sum()) < feeds["attention_mask"].size  # some padding
    ref = get_backend("onnxruntime").compile(g.model).run(dict(feeds))
    assert all(np.isfinite(np.asarray(v)).all() for v in ref.values())  # fp32 is finite
    got = get_backend("openvino-bf16").compile(g.model).run(dict(feeds))
    assert all(np.isnan(np.asarray(v)).any() for v in got.values()), f"all-bf16 no longer gives NaN on {model}"
    return g


@needs_bf16
def test_all_bf16_gives_nan_and_the_budgeted_plan_does_not():
    g = _nan_in_all_bf16(MODEL)

    bks = [get_backend("onnxruntime"), get_backend("openvino-bf16")]
    # fp32 single nodes cover the graph; bf16 gets layer 0's attention (nodes 20-30) node by node, its
    # Softmax+MatMul core (NaN in bf16 when fed a fully masked row) and the whole model (NaN)
    cands = [Candidate((i,), "onnxruntime") for i in range(len(g))]
    cands += [Candidate((i,), "openvino-bf16") for i in range(20, 31)]
    labels = [g.op_type(i) for i in (24, 25, 26)]
    assert labels == ["Add", "Softmax", "MatMul"], labels
    core = Candidate((25, 26), "openvino-bf16")
    whole = Candidate(tuple(range(len(g))), "openvino-bf16")
    cands += [core, whole]
    costs = {c: len(c.nodes) * (1.0 if c.backend == "onnxruntime" else 0.3) + 0.05 for c in cands}
    tuner = P.PrecisionTuner.setup(g, bks, P.PrecisionSettings("cos=0.999,rel=0.01", None, progress=False))
    plan, out = tuner.search(costs, None)
    assert not tuner.errors[whole].finite and not tuner.errors[core].finite  # NaN: never in a plan
    assert out.rounds and out.rounds[-1].ok and not out.fallback, [r.to_dict() for r in out.rounds]
    assert "openvino-bf16" in plan.backends  # bf16 where it is safe (the rest of the attention)
    parts = {(p.backend, tuple(p.nodes)) for p in plan.partitions}
    assert ("openvino-bf16", core.nodes) not in parts and ("openvino-bf16", whole.nodes) not in parts
    err = tuner.end_to_end(plan, "check")  # stitched and run again: finite, within budget
    assert err.finite and tuner.budget.allows(err), err.describe()


@needs_bf16
@pytest.mark.slow
def test_bert_base_masked_gives_nan_in_all_bf16():
    """zoo:bert-base-masked (the precision benchmark's NaN model at full size) does what its entry says."""
    _nan_in_all_bf16("zoo:bert-base-masked")


def test_whole_model_bf16_within_budget_is_found(monkeypatch):
    """Mixed plans predicted faster break the budget; bf16 on the whole model is within it on its own
    (its error is end to end) and must not be excluded with the mixed plan's worst partition."""
    whole = (0, 1, 2, 3)
    tuner, costs = synthetic_precision(monkeypatch, {(0,): 0.4, (1,): 0.4, (2,): 0.4, (3,): 0.4, whole: 0.5})
    costs[Candidate(whole, "openvino-bf16")] = 1.2  # slower than 2+2 bf16 pieces (1.02), far faster than fp32 (4.04)
    plan, out = tuner.search(costs, None)
    assert [(p.backend, tuple(p.nodes)) for p in plan.partitions] == [("openvino-bf16", whole)], plan.describe()
    assert not out.rounds[0].ok and out.rounds[-1].ok and not out.fallback
    assert tuner.whole_model_within_budget() == [Candidate(whole, "openvino-bf16")]


def test_nan_whole_model_is_no_alternative(monkeypatch):
    tuner, costs = synthetic_precision(monkeypatch, {(0,): 0.1, (1,): 0.1, (2,): 0.1, (3,): 0.1})
    tuner.errors[Candidate((0, 1, 2, 3), "openvino-bf16")] = ErrorMeasure(rel=float("inf"), finite=False)
    assert tuner.whole_model_within_budget() == []


@needs_bf16
@pytest.mark.slow
def test_tune_masked_model_plan_is_finite_and_within_budget(tmp_path, capsys):
    """`collage tune zoo:tiny-bert-masked --backends onnxruntime,openvino,openvino-bf16 --accuracy ...`."""
    from collage.cli import main
    from collage.runtime.artifact import load

    out = tmp_path / "art"
    rc = main(["tune", MODEL, "-o", str(out), "--backends", "onnxruntime,openvino,openvino-bf16",
               "--accuracy", "cos=0.999,rel=0.01", "--max-nodes", "2", "--budget", "20s",
               "--db", str(tmp_path / "costs.sqlite")])
    assert rc == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["numerics"]["within_budget"] is True and rep["numerics"]["finite"] is True
    prec = rep["precision"]
    assert prec["end_to_end"]["finite"] and prec["end_to_end"]["within_budget"]
    g = zoo.load_graph(MODEL)
    art = load(out)
    for seed in (0, 1, 5):
        got = art.run(zoo.random_inputs(g, seed=seed))
        assert all(np.isfinite(np.asarray(v)).all() for v in got.values())
    # the attention core is never bf16 in the plan: every bf16 partition's own error is finite
    assert all(p["finite"] is not False for p in prec["partitions"])


@needs_bf16
def test_error_budget_measures_the_first_candidates_only(tmp_path):
    """measure_errors(budget_s=0): nothing new is measured (the store's known errors still count)."""
    from collage.measure.accuracy import load_calibration, measure_errors
    from collage.measure.connect import get_db
    from collage.graph.ir import Graph

    g = Graph.load(chain_model(3))
    bks = {"openvino-bf16": get_backend("openvino-bf16")}
    cal = load_calibration(g, None)
    a, b = Candidate((0, 1, 2), "openvino-bf16"), Candidate((1,), "openvino-bf16")
    db = get_db(tmp_path / "costs.sqlite")
    assert measure_errors(g, [a, b], bks, cal, db, budget_s=0.0) == {}
    first = measure_errors(g, [a], bks, cal, db)
    assert set(measure_errors(g, [a, b], bks, cal, db, budget_s=0.0)) == {a}
    assert set(first) == {a}


@needs_bf16
def test_whole_model_alternative_offered_to_the_verification(monkeypatch):
    """tune times bf16 on the whole model (within budget on its own) against the searched plan."""
    from collage.plan import Plan

    whole = (0, 1, 2, 3)
    tuner, costs = synthetic_precision(monkeypatch, {(0,): 0.1, (1,): 0.1, (2,): 0.1, (3,): 0.1, whole: 0.3})
    _, out = tuner.search(costs, None)
    assert tuner.whole_model_within_budget() == [Candidate(whole, "openvino-bf16")]
    alts = tuner.whole_model_alternatives(Plan.single("onnxruntime", 4))
    assert set(alts) == {"openvino-bf16"}
    x = np.zeros((4, 64), np.float32)
    assert np.asarray(alts["openvino-bf16"].run({"x": x})[tuner.graph.outputs[0]]).shape == (4, 64)
    assert tuner.whole_model_alternatives(Plan.single("openvino-bf16", 4)) == {}  # already the plan
    chosen = tuner.use_whole_model(out, "openvino-bf16", "precision: chosen in the verification")
    notes = chosen.notes
    assert not chosen.fallback and notes[-1] == "precision: chosen in the verification"
    assert sum(x.startswith("precision:") for x in notes) == 1


@needs_bf16
@pytest.mark.slow
def test_tune_verification_picks_faster_whole_model_bf16(tmp_path, monkeypatch):
    """The searched plan is fp32 (search forced so); bf16 on the whole model is within budget and much
    faster (big MatMuls): tune's verification times it and ships it; the fp32 baselines stay fp32."""
    from collage.tuner.job import tune

    orig = P.PrecisionTuner.search

    def fp32_only(self, costs, transition, **kw):
        orig(self, costs, transition, **kw)  # errors measured as usual
        return orig(self, {c: v for c, v in costs.items() if c.backend not in self.low}, transition)

    monkeypatch.setattr(P.PrecisionTuner, "search", fp32_only)
    m = chain_model(3, width=1024)
    for inp in list(m.graph.input) + list(m.graph.output):
        inp.type.tensor_type.shape.dim[0].dim_value = 256
    res = tune(m, tmp_path / "out", backends=["onnxruntime", "openvino-bf16"], accuracy="cos=0.99,rel=0.05",
               limits=None, db=tmp_path / "c.sqlite", budget_s=20, progress=False)
    assert [p.backend for p in res.plan.partitions] == ["openvino-bf16"], res.plan.notes
    assert any("faster than the searched plan" in x for x in res.plan.notes)
    assert res.plan_ms < res.baselines["onnxruntime"] and "openvino-bf16" not in res.baselines
    prec = res.report["precision"]
    assert prec["fallback_fp32"] is False and prec["end_to_end"]["within_budget"] is True
