"""Precision as a searched dimension: accuracy budgets, measured errors, the budgeted search."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from collage.tuner.precision import tuner as P
from collage.backends import backend_names, get_backend
from collage.measure.accuracy import (Budget, ErrorMeasure, ErrorStore, load_calibration,
                                          measure_errors, parse_accuracy, tensor_error)
from collage.errors import CollageError
from collage.graph.ir import Graph
from collage.search.candidates import Candidate, Limits, enumerate_candidates
from tests.helpers import bf16_mark, bf16_reason, chain_model, synthetic_precision


needs_bf16 = bf16_mark()


def attention_block() -> onnx.ModelProto:
    """Layer 0's attention of zoo:tiny-bert, additive mask included (Cast, 1 - mask, * -big, + scores,
    Softmax), with the mask constant set to float32's lowest value as exporters of HF models write it."""
    from collage import zoo

    g = zoo.load_graph("zoo:tiny-bert")
    nodes = [i for i in range(len(g)) if 4 <= i <= 26]
    assert [g.op_type(i) for i in (4, 23)] == ["Cast", "Softmax"]
    m = g.extract(nodes, name="tiny_bert_attention")
    for init in m.graph.initializer:
        if init.name == "const_1" and float(numpy_helper.to_array(init)) < -1000:
            init.CopyFrom(numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "const_1"))
    return m


# ---------------------------------------------------------------------- budget and error figures
def test_parse_accuracy():
    assert parse_accuracy("cos=0.999,rel=0.01") == Budget(0.999, 0.01)
    assert parse_accuracy(" rel = 1e-3 ") == Budget(None, 1e-3)
    assert parse_accuracy("cos=0.99") == Budget(0.99, None)
    assert parse_accuracy(None) is None and parse_accuracy("") is None
    for bad, word in [("cos", "cos=MIN_COSINE"), ("abs=1", "cos=MIN_COSINE"), ("cos=x", "not a number"),
                      ("cos=2", "[-1, 1]"), ("rel=-1", ">= 0"), ("rel=1,rel=2", "twice"), (",", "empty"),
                      ("rel=nan", "finite")]:
        with pytest.raises(CollageError, match=word.replace("[", r"\[").replace("]", r"\]")):
            parse_accuracy(bad)


def test_error_figures_and_budget_score():
    ref = np.linspace(-1, 1, 100, dtype=np.float32)
    rel, cos, finite = tensor_error(ref + 0.02, ref)
    assert finite and rel == pytest.approx(0.01, rel=1e-3) and 0.99 < cos < 1
    bad = ref.copy()
    bad[3] = np.nan
    assert tensor_error(bad, ref) == (math.inf, -math.inf, False)
    b = Budget(0.99, 0.02)
    e = ErrorMeasure()
    e.add("y", ref + 0.02, ref)
    assert b.score(e) == pytest.approx(0.5, rel=1e-2) and b.allows(e)
    e.add("z", bad, ref)
    assert not e.finite and b.score(e) == math.inf and not b.allows(e)
    assert Budget(None, 0.0).score(ErrorMeasure(rel=0.0)) == 0.0
    assert ErrorMeasure.from_dict(e.to_dict()).rel == math.inf


def test_calibration_file(tmp_path):
    g = Graph.load(chain_model(2))
    x = np.random.default_rng(1).standard_normal((3, 4, 64)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", x=x)
    cal = load_calibration(g, tmp_path / "cal.npz")
    assert len(cal.samples) == 3 and not cal.random and np.array_equal(cal.samples[2]["x"], x[2])
    np.savez(tmp_path / "one.npz", x=x[0])
    assert len(load_calibration(g, tmp_path / "one.npz").samples) == 1
    np.savez(tmp_path / "bad.npz", y=x)
    with pytest.raises(CollageError, match="lacks input"):
        load_calibration(g, tmp_path / "bad.npz")
    np.savez(tmp_path / "shape.npz", x=x[:, :2])
    with pytest.raises(CollageError, match="has shape"):
        load_calibration(g, tmp_path / "shape.npz")
    with pytest.raises(CollageError, match="does not exist"):
        load_calibration(g, tmp_path / "nope.npz")
    rnd = load_calibration(g, None)
    assert rnd.random and "random" in rnd.source


# ---------------------------------------------------------------------- variants and the fp32 default
def test_variants_are_named_apart_and_not_listed():
    b = get_backend("openvino-bf16")
    assert b.name == "openvino-bf16" and b.precision == "bf16" and b.options["precision"] == "bf16"
    assert "bf16" in b.version() and get_backend("openvino").precision == "fp32"
    assert get_backend("openvino-bf16", **b.options).name == "openvino-bf16"  # the runtime rebuilds it so
    assert "openvino-bf16" not in backend_names("cpu") and "openvino-bf16" not in backend_names(None)


def test_lower_precision_refused_without_budget():
    bks = [get_backend("onnxruntime"), get_backend("openvino-bf16")]
    with pytest.raises(CollageError, match=r"openvino-bf16 .*--accuracy"):
        P.check_backends(bks, None)
    assert P.check_backends(bks[:1], None) == []
    assert P.check_backends(bks, Budget(0.999, None)) == ["openvino-bf16"]
    with pytest.raises(CollageError, match="add an fp32 backend"):
        P.check_backends(bks[1:], Budget(0.999, None))


def test_tune_refuses_bf16_without_accuracy(tmp_path):
    from collage.tuner.job import tune

    # without native bf16 (an AVX2-only CPU, say) the backend's own refusal comes first, naming it
    expected = "fp32-faithful" if bf16_reason() is None else "backend 'openvino-bf16' is not available"
    with pytest.raises(CollageError, match=expected):
        tune(chain_model(2), tmp_path / "out", backends=["onnxruntime", "openvino-bf16"], progress=False)


# ---------------------------------------------------------------------- the Lagrangian loop (synthetic)
def test_budgeted_search_tightens_until_within_budget(monkeypatch):
    # each node alone uses 40% of the budget; any three together break it
    tuner, costs = synthetic_precision(monkeypatch, {(0,): 0.4, (1,): 0.4, (2,): 0.4, (3,): 0.4})
    plan, out = tuner.search(costs, None)
    lows = [p for p in plan.partitions if p.backend == "openvino-bf16"]
    assert sum(len(p.nodes) for p in lows) == 2, plan.describe()
    assert out.rounds[-1].ok and not out.rounds[0].ok and len(out.rounds) >= 2
    assert not out.fallback and any("within the accuracy budget" in n for n in plan.notes)


def test_budgeted_search_falls_back_to_fp32(monkeypatch):
    tuner, costs = synthetic_precision(monkeypatch, {(0,): 2.0, (1,): 2.0, (2,): 2.0, (3,): 2.0})
    plan, out = tuner.search(costs, None)
    assert plan.backends == ["onnxruntime"] and out.fallback
    assert any("the plan is fp32" in n for n in plan.notes)


def test_coarse_range_over_budget_keeps_its_sub_ranges(monkeypatch):
    # 16 nodes: bf16 on all of them breaks the budget, the last two are the sensitive ones; dropping
    # every candidate that overlaps the whole (or the longest prefix) would leave nothing but fp32
    errs = {(i,): 0.05 for i in range(14)} | {(14,): 0.6, (15,): 0.6}
    tuner, costs = synthetic_precision(monkeypatch, errs, n=16, prefixes=True)
    plan, out = tuner.search(costs, None)
    lows = [p for p in plan.partitions if p.backend == "openvino-bf16"]
    assert not out.fallback and out.rounds[-1].ok, [(r.lam, r.low_partitions, r.ok) for r in out.rounds]
    assert sorted(i for p in lows for i in p.nodes) == list(range(14)), plan.describe()
    assert max(len(p.nodes) for p in lows) >= 13  # a coarse prefix, not 14 single-node partitions


def test_nan_candidates_are_excluded(monkeypatch):
    tuner, costs = synthetic_precision(monkeypatch, {(0,): math.inf, (1,): 0.1, (2,): 0.1, (3,): 0.1})
    plan, out = tuner.search(costs, None)
    owner = plan.node_backend()
    assert owner[0] == "onnxruntime" and owner[3] == "openvino-bf16" and out.rounds[-1].ok


# ---------------------------------------------------------------------- real bf16 errors
@needs_bf16
def test_errors_measured_and_cached(tmp_path):
    from collage.measure.connect import get_db

    g = Graph.load(chain_model(3))
    bks = {"openvino-bf16": get_backend("openvino-bf16"), "openvino": get_backend("openvino")}
    cal = load_calibration(g, None)
    cands = [Candidate((0, 1, 2), "openvino-bf16"), Candidate((1,), "openvino-bf16"), Candidate((0, 1, 2), "openvino")]
    db = get_db(tmp_path / "costs.sqlite")
    errs = measure_errors(g, cands, bks, cal, db)
    assert errs[cands[0]].rel > 1e-4 and errs[cands[2]].rel < 1e-5  # bf16 moves outputs, fp32 does not
    assert ErrorStore(db).count() == 3
    again = measure_errors(g, cands, bks, cal, get_db(tmp_path / "costs.sqlite"))
    assert again[cands[0]].rel == errs[cands[0]].rel


@needs_bf16
def test_attention_block_gets_plan_within_budget():
    """All-bf16 on the masked attention breaks rel=1e-3; the budgeted plan keeps bf16 where it is safe."""
    g = Graph.load(attention_block())
    bks = [get_backend("onnxruntime"), get_backend("openvino-bf16")]
    cands = enumerate_candidates(g, {b.name: b.supports_all(g) for b in bks}, Limits(max_nodes=3))
    whole = Candidate(tuple(range(len(g))), "openvino-bf16")
    cands.append(whole)
    # synthetic latencies (this test is about the search): bf16 3x faster, so all-bf16 is the fastest plan
    costs = {c: len(c.nodes) * (1.0 if c.backend == "onnxruntime" else 0.3) + 0.05 for c in cands}
    tuner = P.PrecisionTuner.setup(g, bks, P.PrecisionSettings("rel=1e-3", None, progress=False))
    plan, out = tuner.search(costs, None)
    whole_err = tuner.errors[whole]
    assert not tuner.budget.allows(whole_err), whole_err.describe()  # all-bf16 breaks the budget
    assert out.rounds and out.rounds[-1].ok and not out.fallback
    assert "openvino-bf16" in plan.backends and "onnxruntime" in plan.backends
    err = tuner.end_to_end(plan, "check")  # measured again, on the stitched artifact
    assert tuner.budget.allows(err), err.describe()


@needs_bf16
def test_impossible_budget_falls_back_to_fp32():
    g = Graph.load(chain_model(3))
    bks = [get_backend("onnxruntime"), get_backend("openvino-bf16")]
    cands = enumerate_candidates(g, {b.name: b.supports_all(g) for b in bks}, Limits(max_nodes=3))
    costs = {c: len(c.nodes) * (1.0 if c.backend == "onnxruntime" else 0.3) for c in cands}
    tuner = P.PrecisionTuner.setup(g, bks, P.PrecisionSettings("rel=1e-9", None, progress=False))
    plan, out = tuner.search(costs, None)
    assert plan.backends == ["onnxruntime"] and out.fallback
    assert any("the plan is fp32" in n for n in plan.notes)
    assert tuner.report(plan, out)["fallback_fp32"] is True


# ---------------------------------------------------------------------- end to end through tune
@needs_bf16
@pytest.mark.slow
def test_tune_with_accuracy_on_attention(tmp_path):
    import json

    from collage.report.render import partition_table, render_markdown
    from collage.tuner.job import tune

    m = attention_block()
    g = Graph.load(m)
    from collage import zoo

    np.savez(tmp_path / "cal.npz", **zoo.random_inputs(g, seed=7))
    res = tune(m, tmp_path / "out", backends=["onnxruntime", "openvino-bf16"], accuracy="cos=0.9999,rel=1e-3",
               calibration=tmp_path / "cal.npz", limits=Limits(max_nodes=3), db=tmp_path / "costs.sqlite",
               progress=False)
    rep = json.loads((res.out_dir / "report.json").read_text())
    prec = rep["precision"]
    assert prec["calibration"]["random"] is False and prec["budget"] == {"min_cos": 0.9999, "max_rel": 1e-3}
    assert prec["end_to_end"]["within_budget"] is True
    assert rep["numerics"]["within_budget"] is True
    assert "openvino-bf16" not in rep["baselines"]  # lower precision is no fp32 baseline
    table = partition_table(res.out_dir)
    assert {"precision", "rel_err", "cos"} <= set(table.columns)
    assert set(table["precision"]) <= {"fp32", "bf16"}
    md = render_markdown(res.out_dir)
    assert "## Precision (accuracy budget)" in md and "within budget" in md
    if "bf16" in set(table["precision"]):  # the artifact runs again as tuned, bf16 partitions included
        from collage.runtime.artifact import load

        art = load(res.out_dir)
        assert any(p.backend == "openvino-bf16" for p in art.partitions)


@pytest.mark.slow
def test_tune_without_accuracy_is_fp32(tmp_path):
    import json

    from collage.tuner.job import tune

    if get_backend("openvino").available():
        pytest.skip("openvino unavailable")
    res = tune(chain_model(2), tmp_path / "out", backends=["onnxruntime", "openvino"], db=tmp_path / "c.sqlite",
               progress=False)
    manifest = json.loads((res.out_dir / "manifest.json").read_text())
    assert all(p.backend in ("onnxruntime", "openvino") for p in res.plan.partitions)
    assert all((info.get("settings") or {}).get("precision", "fp32") == "fp32"
               for info in manifest["backends"].values())
    assert "precision" not in json.loads((res.out_dir / "report.json").read_text())


def test_tightening_suspects_pieces_judged_by_their_own_error_first(monkeypatch):
    # 16-node chain: the prefix [0, 8) (a range: its error is at the model's outputs) uses 80% of the budget,
    # each later node 35%. Round 0 mixes the prefix with later pieces and breaks the budget; excluding the
    # prefix (the highest score) would leave at most 2 bf16 nodes, excluding the later pieces keeps 8.
    errs = {(i,): 0.1 for i in range(8)} | {(i,): 0.35 for i in range(8, 16)}
    tuner, costs = synthetic_precision(monkeypatch, errs, n=16, prefixes=True)
    plan, out = tuner.search(costs, None)
    lows = sorted(i for p in plan.partitions if p.backend == "openvino-bf16" for i in p.nodes)
    assert out.rounds[-1].ok and not out.rounds[0].ok, [(r.lam, r.low_partitions, r.ok) for r in out.rounds]
    assert lows == list(range(8)), plan.describe()
