"""End to end: tune -> artifact -> `collage run` in a fresh process -> outputs vs the ORT reference.

The fast tier tunes the tiny zoo models with ONNX Runtime and OpenVINO on a small candidate limit;
the slow tier does the same on real zoo architectures. Every run uses a fresh cost DB.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from collage import zoo
from collage.measure.db import SQLiteCostDB
from collage.errors import CollageError
from collage.search.candidates import Limits
from collage.tuner.job import parse_budget, tune
from collage.tuner.stitching import Stitching

BACKENDS = ["onnxruntime", "openvino"]


def _ort_reference(graph, feeds):
    import onnxruntime as ort

    sess = ort.InferenceSession(graph.model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _round_trip(spec: str, tmp_path: Path, *, max_nodes: int, budget: str = "3m") -> None:
    out = tmp_path / "art"
    res = tune(spec, out, backends=BACKENDS, db=str(tmp_path / "costs.sqlite"), budget_s=parse_budget(budget),
               limits=Limits(max_nodes=max_nodes), progress=False)
    graph = zoo.load_graph(spec)
    # never worse: a mixed plan is only kept when it beat every single backend in the same run
    if len(res.plan.partitions) > 1:
        assert res.plan_ms < min(res.baselines.values()), (res.plan_ms, res.baselines)
    else:
        assert res.plan.partitions[0].backend == min(res.baselines, key=res.baselines.get) or \
            res.plan_ms <= min(res.baselines.values())
    res.plan.check_cover(len(graph))
    report = json.loads((out / "report.json").read_text())
    assert report["numerics"]["ok"] is True
    assert set(report["baselines"]) == set(BACKENDS)

    # run the artifact in a fresh process through the CLI, on inputs written to .npy files
    feeds = zoo.random_inputs(graph, seed=3)
    args = []
    for name, arr in feeds.items():
        path = tmp_path / f"in{len(args)}.npy"
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    outdir = tmp_path / "outputs"
    proc = subprocess.run([sys.executable, "-m", "collage.cli", "run", str(out), *args, "--output", str(outdir)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    ref = _ort_reference(graph, feeds)
    for name, want in ref.items():
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        got = np.load(outdir / f"{safe}.npy")
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3, err_msg=f"{spec}: output {name}")


@pytest.mark.parametrize("spec", ["zoo:tiny-resnet",
                                  pytest.param("zoo:tiny-mobilenetv2", marks=pytest.mark.slow),
                                  pytest.param("zoo:tiny-bert", marks=pytest.mark.slow)])
def test_round_trip_tiny(spec, tmp_path):
    _round_trip(spec, tmp_path, max_nodes=3, budget="10s")


# squeezenet's whole tune runs twice in tests/measure/test_cluster.py
@pytest.mark.slow
@pytest.mark.parametrize("spec", ["zoo:mobilenetv2", "zoo:inception_v1"])
def test_round_trip_real(spec, tmp_path):
    _round_trip(spec, tmp_path, max_nodes=2, budget="30s")  # a cover and an artifact, not plan quality


def test_retune_reuses_every_measurement(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where tune's scratch folder goes
    db = str(tmp_path / "costs.sqlite")
    first = tune("zoo:tiny-resnet", tmp_path / "a", backends=BACKENDS, db=db, limits=Limits(max_nodes=1),
                 progress=False)
    second = tune("zoo:tiny-resnet", tmp_path / "b", backends=BACKENDS, db=db, limits=Limits(max_nodes=1),
                  progress=False)
    assert first.report["measurements"]["with_cost"] > 0
    assert second.report["measurements"]["measured_now"] == 0
    assert second.report["measurements"]["reused"] == second.report["measurements"]["distinct_keys"] > 0
    # each backend's partition charge (level, cost per cut) was measured once, stored, and taken from the DB
    # (a figure measured again would differ in its last digits)
    assert second.report["partition_charges"] == first.report["partition_charges"]
    for what in ("partition_cut", "partition_level"):
        stored = [t for t in SQLiteCostDB(db).all_transitions() if what in t.settings]
        assert {t.src for t in stored} == set(first.report["partition_charges"]) == set(BACKENDS), what
    # a level is a ratio of two timings of the same model: near 1, but a busy machine (the suite runs two workers)
    # moved one to 2.15 in a CI run; a figure in the wrong unit or upside down would be off by ~1000x
    assert all(0.25 < c["level"] < 4.0 for c in first.report["partition_charges"].values()), \
        (first.report["partition_charges"], first.report["time"].get("others"))
    # the plan the cost DB alone gives is the same for both tunes (their final plans rest on end-to-end timings)
    on_disk = json.loads((tmp_path / "b" / "report.json").read_text())
    assert on_disk["cost_db_plan"] == second.report["cost_db_plan"] == first.report["cost_db_plan"]
    n = len(zoo.load_graph("zoo:tiny-resnet"))
    for key in ("cost_db_plan", "searched_plan"):
        parts = on_disk[key]["partitions"]
        assert sorted(i for p in parts for i in p["nodes"]) == list(range(n)), key
        assert {p["backend"] for p in parts} <= set(BACKENDS) and on_disk[key]["predicted_ms"] > 0
    parts = on_disk["searched_plan"]["partitions"]
    assert on_disk["searched_plan"]["measured_ms"] > 0  # end to end, in the verification
    assert on_disk["searched_plan"]["best_single_measured_ms"] == min(on_disk["baselines"].values())
    if len(parts) > 1:  # timed inside the plan's verification runs
        assert all(p["in_plan_ms"] > 0 for p in parts), parts
    assert not list(scratch.glob("collage-tune-*"))  # the exported attempts do not pile up in /tmp
    assert (tmp_path / "b" / "manifest.json").is_file()


def test_never_worse_names_the_partition_furthest_over_its_price():
    from collage.plan import Partition, Plan
    from collage.tuner.steps.verify import furthest_over_price

    plan = Plan([Partition((0, 1), "openvino", 2.0), Partition((2,), "onnxruntime", 1.0),
                 Partition((3, 4, 5), "openvino", 3.0)], 6.0)
    tail = furthest_over_price(plan, [2.1, 4.5, 2.0])
    assert "partition 1 on onnxruntime, 1 node(s), took 4.500 ms, 3.500 ms over its price of 1.000 ms" in tail
    assert furthest_over_price(plan, [1.9, 0.9, 2.9]) == ""  # every partition within its price
    assert furthest_over_price(plan, None) == "" and furthest_over_price(plan, [1.0, 2.0]) == ""


def test_interleaved_measuring_says_when_the_warm_up_is_over():
    # the verification drops the plan's warm-up calls from its per-partition times there: a fast plan makes many
    from collage.tuner.checks import measure_interleaved

    calls: list[str] = []
    log: list[str] = []
    measure_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=2,
                        min_time_s=0.0, warmup_s=0.01, warmed=lambda: log.append(f"{len(calls)} {calls.clear()}"))
    assert len(log) == 1 and int(log[0].split()[0]) >= 6  # once, after every runner's warm-up calls
    assert sorted(calls) == ["a"] * 6 + ["b"] * 6  # then 2 rounds of at least 3 calls each, nothing else


def test_a_budget_used_up_before_measuring_still_measures_every_whole_model(tmp_path, monkeypatch):
    # benchmarks.precision once ran bert-base's 3-minute budget down in the precision prescreen: two whole
    # models got a cost, and the verification's faster whole-model bf16 plan had nothing to be predicted from
    from collage.tuner.steps import budget

    monkeypatch.setattr(budget, "budget_left", lambda ctx, *whole: 0.0)
    db = str(tmp_path / "costs.sqlite")
    res = tune("zoo:tiny-resnet", tmp_path / "out", backends=BACKENDS, db=db, budget="30s",
               limits=Limits(max_nodes=1), progress=False)
    n = len(zoo.load_graph("zoo:tiny-resnet"))
    m = res.report["measurements"]
    assert m["measured_now"] == len(BACKENDS) and m["with_cost"] == len(BACKENDS) < m["distinct_keys"]
    assert res.report["searched_plan"]["predicted_ms"] > 0
    assert [len(p["nodes"]) for p in res.report["searched_plan"]["partitions"]] == [n]


def context(**given):
    """A tune's context for a step under test: ``given`` fields, the others empty."""
    import time

    from collage.tuner.context import JobContext

    fields = {"graph": None, "options": None, "work": None, "clock": None, "backends": [], "names": list(BACKENDS),
              "backend_options": {}, "feeds": {}, "db": None, "precision": None, "t_start": time.monotonic(),
              "t_wall": time.time()}
    return JobContext(**{**fields, **given})


def test_measuring_the_whole_models_is_counted_in_the_budget():
    # issue 40: --budget is the whole tune's wall clock, the whole models' measuring inside it (before, it was
    # left out: on a slow machine level bert-base-masked's 7 whole models took 90 s of its 240 s budget, and a
    # 60 s resnet50 tune took 4 min); the candidates get what is left less the later steps' reserve
    import time

    from collage.search.candidates import Candidate
    from collage.tuner.clock import Deadline
    from collage.tuner.steps.measure import measure_whole_first

    ctx = context(graph=zoo.load_graph("zoo:tiny-resnet"),
                  options=type("O", (), {"budget_s": 10.0, "progress": False})(),
                  clock=Deadline(10.0), precision=type("P", (), {"low": set()})())
    n = len(ctx.graph)
    cands = [Candidate(tuple(range(n)), b) for b in BACKENDS] + [Candidate((0,), b) for b in BACKENDS]
    given = []

    class Table(dict):
        measured = reused = 0

    def measure(items, within_s):
        given.append((len(items), within_s))
        if within_s is None:
            time.sleep(1.0)
        return Table()

    measure_whole_first(ctx, measure, cands)
    assert given[0] == (len(BACKENDS), None) and given[1][0] == len(cands)
    assert given[1][1] <= 9.0  # the second call gets what is left: the second spent on the whole models is in it


def test_op_no_backend_takes_is_named(tmp_path):
    # Det: a standard op that ONNX Runtime runs and OpenVINO does not take; tuned with OpenVINO alone
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Det", ["x"], ["y"], name="the_det")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    with pytest.raises(CollageError, match="the_det"):
        tune(str(path), tmp_path / "out", backends=["openvino"], db=str(tmp_path / "c.sqlite"), progress=False)
    # with ONNX Runtime beside it the same model tunes
    res = tune(str(path), tmp_path / "out2", backends=["onnxruntime", "openvino"], db=str(tmp_path / "c.sqlite"),
               progress=False)
    assert res.plan.backends == ["onnxruntime"]


def test_unavailable_or_unknown_backend_is_refused(tmp_path):
    with pytest.raises(CollageError, match="nosuch"):
        tune("zoo:tiny-resnet", tmp_path / "out", backends=["nosuch"], db=str(tmp_path / "c.sqlite"), progress=False)


@pytest.mark.slow
def test_cli_tune_and_report(tmp_path):
    out = tmp_path / "art"
    proc = subprocess.run([sys.executable, "-m", "collage.cli", "tune", "zoo:tiny-bert", "-o", str(out),
                           "--max-nodes", "2", "--db", str(tmp_path / "c.sqlite"), "--budget", "20s"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "measured end to end" in proc.stdout
    rep = subprocess.run([sys.executable, "-m", "collage.cli", "report", str(out)], capture_output=True, text=True,
                         timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert "onnxruntime" in rep.stdout or "openvino" in rep.stdout
    assert (out / "report.html").exists()


@pytest.mark.slow
def test_bench_writes_ratios(tmp_path):
    from collage.tuner.bench import bench

    rows = bench(["zoo:tiny-resnet"], backends=BACKENDS, db=str(tmp_path / "c.sqlite"), limits=Limits(max_nodes=1),
                 out_dir=tmp_path / "results", backend_options={"openvino": {"threads": 1}})
    assert rows[0]["model"] == "tiny-resnet" and "error" not in rows[0]
    ov_rows = [c for c in SQLiteCostDB(tmp_path / "c.sqlite").all() if c.backend == "openvino"]
    assert ov_rows and all(json.loads(c.options)["threads"] == 1 for c in ov_rows)  # the option reached the tune
    assert rows[0]["speedup_vs_best"] >= 1.0  # never worse: a mixed plan is kept only when faster
    # the searched plan, whatever the never-worse rule kept: what it was searched for, its prediction, its time
    assert rows[0]["searched"] and rows[0]["searched_for_ms"] > 0 and rows[0]["searched_predicted_ms"] > 0
    assert rows[0]["searched_measured_ms"] > 0
    # and its gain over the best single backend, predicted and measured
    assert rows[0]["searched_predicted_speedup"] > 0 and rows[0]["searched_measured_speedup"] > 0
    # in how many of the verification's rounds the plan was ahead of the best other single backend (unbudgeted: 7)
    wins, rounds = map(int, rows[0]["rounds_ahead"].split("/"))
    assert rounds == 7 and 0 <= wins <= rounds
    md = next((tmp_path / "results").glob("*-cpu.md")).read_text()
    assert "tiny-resnet" in md and "speedup_vs_best" in md
    assert next((tmp_path / "results").glob("*-cpu.csv")).exists()


def test_one_node_model_tunes(tmp_path):
    """A model of one node, which both backends run: no switch inside it to price (the model-scale switch
    measurement once cut it into an empty piece and a whole one: IndexError in its error message)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "one",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    res = tune(model, tmp_path / "art", backends=BACKENDS, db=str(tmp_path / "c.sqlite"), progress=False)
    assert [len(p.nodes) for p in res.plan.partitions] == [1] and set(res.baselines) == set(BACKENDS)


def test_bench_checks_every_model_first_and_overwrites_no_results(tmp_path):
    from collage.errors import ModelError
    from collage.tuner.bench import bench, model_names, results_stem

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path, other = tmp_path / "a" / "m.onnx", tmp_path / "b" / "m.onnx"
    for p in (path, other):
        p.parent.mkdir()
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    # a path's rows and artifact folders are named by the file's stem (an absolute path once named the model file)
    assert model_names(["zoo:tiny-resnet", str(path), str(other)]) == {"zoo:tiny-resnet": "tiny-resnet",
                                                                         str(path): "m", str(other): "m-2"}
    res = tmp_path / "results"
    first = results_stem(res, "cpu")
    res.mkdir()
    first.with_suffix(".md").write_text("an earlier run")
    assert results_stem(res, "cpu") == first.with_name(first.name + "-2")
    with pytest.raises(ModelError, match="'nope'"):  # before the first model's tune
        bench(["zoo:tiny-resnet", "zoo:nope"], backends=BACKENDS, db=str(tmp_path / "c.sqlite"), out_dir=res)
    assert first.with_suffix(".md").read_text() == "an earlier run" and sorted(p.name for p in res.iterdir()) == \
        [first.with_suffix(".md").name]
    assert not (tmp_path / "c.sqlite").exists()


def test_stale_cost_db_is_called_out():
    from collage.tuner.checks import stale_costs

    assert stale_costs({"onnxruntime": 10.0, "openvino": 9.0}, {"onnxruntime": 9.0, "openvino": 10.5}) is None
    msg = stale_costs({"onnxruntime": 30.0, "openvino": 9.0}, {"onnxruntime": 9.0, "openvino": 10.0})
    assert msg and "onnxruntime 30.000 ms in the DB vs 9.000 ms now" in msg and "openvino" not in msg.split("(")[1]


class _Prec:
    """What ``whole_if_one_backend`` asks of a PrecisionTuner: ``low``, and two calls."""

    def __init__(self, within: list) -> None:
        self.low, self._within, self.used = {"openvino-bf16"}, within, []

    def whole_model_within_budget(self) -> list:
        return self._within

    def use_whole_model(self, outcome, backend: str, note: str):
        self.used.append((backend, note))
        return outcome


def test_one_backend_in_pieces_becomes_its_whole_model():
    from collage.plan import Partition, Plan
    from collage.search.candidates import Candidate
    from collage.tuner.stitching import whole_if_one_backend as merged_plan

    def whole_if_one_backend(*args):
        return merged_plan(*args)[0]

    graph = list(range(4))  # only its length is read
    whole = {b: Candidate((0, 1, 2, 3), b) for b in ("onnxruntime", "openvino-bf16")}
    costs = {whole["onnxruntime"]: 2.0, whole["openvino-bf16"]: 1.0}

    def plan(*backends: str) -> Plan:
        return Plan([Partition((0, 1), backends[0], 0.4), Partition((2, 3), backends[1], 0.4)], predicted_ms=0.8)

    over, within = _Prec([]), _Prec([whole["openvino-bf16"]])  # openvino-bf16's whole model over / within budget
    merged = whole_if_one_backend(graph, plan("onnxruntime", "onnxruntime"), costs, over)
    assert [(p.backend, p.nodes) for p in merged.partitions] == [("onnxruntime", (0, 1, 2, 3))]
    assert merged.predicted_ms == 2.0 and "one backend in 2 partitions" in merged.notes[-1]
    mixed = plan("onnxruntime", "openvino-bf16")
    assert whole_if_one_backend(graph, mixed, costs, over) is mixed  # two backends: as searched
    unmeasured = plan("openvino", "openvino")
    assert whole_if_one_backend(graph, unmeasured, costs, over) is unmeasured  # no whole-model cost: as searched
    # lower precision: only where the whole model's own error is within the budget
    bf16 = plan("openvino-bf16", "openvino-bf16")
    assert whole_if_one_backend(graph, bf16, costs, over) is bf16 and not over.used
    merged = whole_if_one_backend(graph, bf16, costs, within)
    assert [(p.backend, p.nodes) for p in merged.partitions] == [("openvino-bf16", (0, 1, 2, 3))]
    assert within.used and within.used[0][0] == "openvino-bf16"
    # another backend's whole model priced under the plan's own: that one (squeezenet's OpenVINO pieces
    # became OpenVINO's whole model at 6.269 ms where ONNX Runtime's was 5.50)
    costs[Candidate((0, 1, 2, 3), "openvino")] = 1.5
    merged = whole_if_one_backend(graph, plan("onnxruntime", "onnxruntime"), costs, over)
    assert [(p.backend, p.nodes) for p in merged.partitions] == [("openvino", (0, 1, 2, 3))]
    assert merged.predicted_ms == 1.5 and "against onnxruntime's whole model at 2.000 ms" in merged.notes[-1]
    # a lower-precision whole model is not taken for an fp32 plan's (its own error was not asked for)
    assert whole_if_one_backend(graph, plan("openvino", "openvino"), costs, within).partitions[0].backend == "openvino"
    # cheaper, but within the search's 10% band: the plan's own backend (convnext-t's OpenVINO pieces went to
    # ONNX Runtime's whole model priced 0.24% under OpenVINO's, and ONNX Runtime measured 16-28% slower)
    costs[Candidate((0, 1, 2, 3), "openvino")] = 1.9
    assert whole_if_one_backend(graph, plan("onnxruntime", "onnxruntime"), costs, over).partitions[0].backend == (
        "onnxruntime")
    # lower-precision pieces: their own whole model, however cheap an fp32 one is
    costs[Candidate((0, 1, 2, 3), "openvino")] = 0.1
    merged = whole_if_one_backend(graph, bf16, costs, within)
    assert [(p.backend, p.nodes) for p in merged.partitions] == [("openvino-bf16", (0, 1, 2, 3))]


def test_partition_charges_level_every_partition_and_cut_all_but_the_first():
    """A plan of P partitions pays P - 1 cuts (the partition holding node 0 is called first) and every
    partition runs at its backend's level, so one backend on the whole model is predicted at level x its own
    cost, without a cut (squeezenet in bf16 was predicted 1.27 ms with a per-partition overhead charged,
    measured 1.01 ms)."""
    from collage.search.candidates import Candidate
    from collage.tuner.stitching import PartitionCharge, charge_costs

    costs = {Candidate((0, 1, 2, 3), "openvino-bf16"): 1.0, Candidate((0, 1), "openvino-bf16"): 0.6,
             Candidate((2, 3), "openvino-bf16"): 0.5, Candidate((2, 3), "onnxruntime"): 2.0}
    charges = {"openvino-bf16": PartitionCharge(level=1.1, cut_ms=0.3)}
    got = charge_costs(costs, charges)
    assert got[Candidate((0, 1, 2, 3), "openvino-bf16")] == pytest.approx(1.1)  # one call: no cut
    assert got[Candidate((0, 1), "openvino-bf16")] == pytest.approx(0.66)
    assert got[Candidate((2, 3), "openvino-bf16")] == pytest.approx(0.85)  # after a cut
    assert got[Candidate((2, 3), "onnxruntime")] == 2.0  # no charge measured: its own cost
    assert PartitionCharge(1.1, 0.3).to_dict() == {"level": 1.1, "cut_ms": 0.3}


@pytest.mark.parametrize("whole_ms, chain_ms, level, cut", [
    (11.0, 12.0, 1.1, 1.0),   # level = whole / its worker cost, cut = (chain - whole) / (K - 1)
    (17.0, 11.6, 1.16, 0.0),  # the chain timed under the whole model: no cut, the lower level (chain / parts)
])
def test_calibration_takes_level_from_the_whole_model_and_the_cut_from_the_chain(monkeypatch, tmp_path,
                                                                                  whole_ms, chain_ms, level, cut):
    from collage.graph.ir import Graph
    from collage.search.candidates import Candidate
    from collage.tuner import stitching
    from tests.helpers import chain_model

    g = Graph.load(chain_model(4))
    costs = {Candidate((0, 1), "openvino"): 5.0, Candidate((2, 3), "openvino"): 5.0,
             Candidate((0, 1, 2, 3), "openvino"): 10.0}
    monkeypatch.setattr(stitching, "artifact_runner", lambda graph, plan, *a: len(plan.partitions))
    monkeypatch.setattr(stitching, "measure_interleaved",
                        lambda runners, rounds: {k: {1: whole_ms, 2: chain_ms}[v] for k, v in runners.items()})
    charges = stitching.calibrate_partition_charges(g, costs, None, ["openvino", "onnxruntime"],
                                                      stitching.Stitching({}, tmp_path, progress=False),
                                                      whole_costs={"openvino": 10.0})
    assert charges["openvino"].level == pytest.approx(level) and charges["openvino"].cut_ms == pytest.approx(cut)
    # a backend with nothing measured takes the others' medians
    assert charges["onnxruntime"] == charges["openvino"]


class _Cand(str):
    """A candidate of the fake search tests: only its nodes and backend are read."""

    def __new__(cls, name: str, nodes: tuple[int, ...], backend: str):
        c = super().__new__(cls, name)
        c.nodes, c.backend = nodes, backend
        return c


def _fake_plan_runs(monkeypatch, runs: dict[tuple, tuple[float, list[float]]],
                    singles_ms: float | dict[tuple, float] = 0.0) -> list:
    """search_checked's plans exported, loaded and timed without a runtime: a plan of shape
    ``((nodes, backend), ...)`` measures ``runs[shape] = (end to end ms, each partition's call ms)``, and any
    other runner timed beside it (a single backend) ``singles_ms`` (or ``singles_ms[shape]``). Returns the list
    of shapes measured, in order."""
    import collage.tuner.export
    import collage.runtime.artifact
    from collage.tuner import stitching as tune_search

    measured: list[tuple] = []

    class _Art:
        def __init__(self, plan):
            self.partitions = plan.partitions
            self.shape = plan.parts()

        def run(self, feeds, times):
            times.extend(runs[self.shape][1])

    def fake_measure(runners, rounds=3, warmed=None):
        clock = runners["p"]
        clock()
        measured.append(clock.artifact.shape)
        shape = clock.artifact.shape
        single = singles_ms[shape] if isinstance(singles_ms, dict) else singles_ms
        return {"p": runs[shape][0], **{k: single for k in runners if k != "p"}}

    monkeypatch.setattr(collage.tuner.export, "export", lambda graph, plan, path, target="cpu", **kw: plan)
    monkeypatch.setattr(collage.runtime.artifact, "load", _Art)
    monkeypatch.setattr(tune_search, "measure_interleaved", fake_measure)
    return measured


def test_a_winning_but_mispredicted_plan_is_searched_again(monkeypatch, tmp_path):
    """Plan A beats the best single backend but measures 2x its prediction (an OpenVINO -> ONNX Runtime
    switch does that): its excess is charged to its backends, its partitions are priced as they ran in it,
    and the search runs again; B, measured as predicted, is kept, priced as it ran. The old rule stopped at
    A because it won."""
    from collage.tuner import stitching as tune_search
    from collage.plan import Partition, Plan

    head, ort, ov = (_Cand("bf16-head", (0, 1), "openvino-bf16"), _Cand("ort-tail", (2, 3), "onnxruntime"),
                     _Cand("ov-tail", (2, 3), "openvino"))
    searched: list[dict] = []

    def do_search(charged):
        searched.append(dict(charged))
        tail = ort if charged[ort] <= charged[ov] else ov
        return Plan([Partition((0, 1), "openvino-bf16", charged[head]), Partition((2, 3), tail.backend, charged[tail])],
                    predicted_ms=charged[head] + charged[tail])

    a, b = (((0, 1), "openvino-bf16"), ((2, 3), "onnxruntime")), (((0, 1), "openvino-bf16"), ((2, 3), "openvino"))
    measured = _fake_plan_runs(monkeypatch, {a: (20.0, [4.0, 12.0]), b: (12.5, [5.5, 7.0])})
    plan, charged, attempts, searched_for, single_ms = tune_search.search_checked(
        list(range(4)), {head: 5.0, ort: 5.0, ov: 7.0}, {}, do_search, Stitching({}, tmp_path, progress=False), 30.0)
    assert plan.parts() == b and attempts == 2 and measured == [a, b]
    # A's excess, (20 - 10) over its one cut, on its backends' cuts; A's parts priced as they ran in it instead
    # (its calls, 16 ms, scaled to its 20 ms)
    assert searched[1] == {head: 5.0, ort: 15.0, ov: 7.0}
    # B kept as it ran (predicted 12.5 ms, measured 12.5 ms), and what it was searched for (12 ms) beside it
    assert plan.predicted_ms == 12.5 and charged == {head: 5.5, ort: 15.0, ov: 7.0}
    assert [p.cost_ms for p in plan.partitions] == [5.5, 7.0]
    assert searched_for.predicted_ms == 12.0 and searched_for.parts() == b
    assert plan.notes[-1].endswith("12.500 ms end to end; searched for 12.000 ms")
    # report.json's searched_plan and the bench's columns keep both prices
    from collage.tuner.bench import searched_columns
    from collage.tuner.assemble import plan_summary

    summary = plan_summary(plan, searched_for, single_ms)
    assert summary["predicted_ms"] == 12.5 and summary["searched_for_ms"] == 12.0
    assert [(p["cost_ms"], p["searched_cost_ms"]) for p in summary["partitions"]] == [(5.5, 5.0), (7.0, 7.0)]
    # the gain over the best single backend, predicted (30 ms: no singles timed beside it here, the baselines'
    # best) and measured (26 ms beside the plan's 13 ms in the verification)
    assert single_ms == 30.0
    cols = searched_columns({**summary, "measured_ms": 13.0, "best_single_measured_ms": 26.0})
    assert cols == {"searched": "2: openvino-bf16+openvino", "searched_for_ms": 12.0, "searched_predicted_ms": 12.5,
                    "searched_measured_ms": 13.0, "searched_predicted_over_measured": 0.962,
                    "searched_predicted_speedup": 2.4, "searched_measured_speedup": 2.0,
                    "searched_speedup_predicted_over_measured": 1.2}


def test_reference_runs_never_make_the_process_wide_pool():
    """A tune asked for per-session ONNX Runtime pools (``onnxruntime.shared_pool=false``) must keep them: the
    fp32 reference runs (numerics check, accuracy references) join a process-wide pool where one exists but
    never create it, or every later session in the process (a bench's next model) would silently join it."""
    code = textwrap.dedent("""
        from collage import zoo
        from collage.backends.onnxruntime.session import global_pool_threads
        from collage.measure.accuracy import Calibration, reference_runs
        from collage.graph.inputs import random_inputs
        from collage.tuner.checks import _reference_outputs
        g = zoo.load_graph("zoo:tiny-resnet")
        feeds = random_inputs(g, seed=0)
        _reference_outputs(g, feeds)
        reference_runs(g, Calibration([feeds], "x", "random", True))
        print("POOL", global_pool_threads())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "POOL None" in out.stdout, out.stdout


def test_an_over_predicted_plan_gets_its_cuts_lowered_and_ships_predicted_as_measured(monkeypatch, tmp_path):
    """A 2-partition plan predicted at 10 ms measures 8.5 ms (0.85x: the precision run shipped two strict plans
    predicted at 0.84-0.85x their measurements this way). Its backends' cuts are lowered by the difference
    per cut, its parts priced as they ran, the search runs again, the same plan comes back and is not
    measured again: it ships predicted at its measurement. The old check accepted any winning plan measured
    under its prediction."""
    from collage.tuner import stitching as tune_search
    from collage.tuner.stitching import PartitionCharge
    from collage.plan import Partition, Plan

    head, tail = _Cand("head", (0, 1), "openvino-bf16"), _Cand("tail", (2,), "openvino")

    def do_search(charged):  # the same partitions whatever the charges
        return Plan([Partition((0, 1), "openvino-bf16", charged[head]), Partition((2,), "openvino", charged[tail])],
                    predicted_ms=charged[head] + charged[tail])

    shape = (((0, 1), "openvino-bf16"), ((2,), "openvino"))
    measured = _fake_plan_runs(monkeypatch, {shape: (8.5, [6.0, 2.0])})
    charges = {"openvino": PartitionCharge(1.0, 2.0), "openvino-bf16": PartitionCharge(1.0, 2.0)}
    plan, charged, attempts, *_ = tune_search.search_checked(list(range(3)), {head: 6.0, tail: 2.0}, charges,
                                                            do_search, Stitching({}, tmp_path, progress=False), 12.0)
    # predicted 10 (6 + 2 + the 2 ms cut), measured 8.5: 1.5 ms less on the one cut, on both backends
    assert charges["openvino"].cut_ms == 0.5 and charges["openvino-bf16"].cut_ms == 0.5
    # the calls (8 ms) scaled to the plan's 8.5 ms
    assert plan.predicted_ms == 8.5 and charged == {head: 6.375, tail: 2.125}
    assert attempts == 2 and measured == [shape]


def test_a_plan_measured_in_an_earlier_attempt_is_kept_priced_as_it_ran(monkeypatch, tmp_path):
    """The best measured plan is A (first attempt, 3 partitions, mispredicted); the second attempt's B measures
    slower and the third search goes to one backend. A is returned priced from its own run (its calls and
    its share of the time outside them, plus its priced transitions), not at the prediction it was found
    with, and the costs returned say so."""
    from collage.tuner import stitching as tune_search
    from collage.plan import Note, NoteKind, Partition, Plan

    x, y, z = _Cand("x", (0,), "onnxruntime"), _Cand("y", (1,), "openvino"), _Cand("z", (2,), "onnxruntime")
    y2 = _Cand("y2", (1, 2), "openvino")
    first = Plan([Partition((0,), "onnxruntime", 1.0), Partition((1,), "openvino", 1.0),
                  Partition((2,), "onnxruntime", 1.0)],
                 predicted_ms=3.5, notes=[Note(NoteKind.TRANSITIONS,
                                               "transitions between backends: 0.500 ms of the predicted 3.500 ms")])
    plans = iter([  # three attempts, and no fourth search (a fourth call raises StopIteration)
        first, Plan([Partition((0,), "onnxruntime", 1.0), Partition((1, 2), "openvino", 2.0)], predicted_ms=3.0),
        Plan([Partition((0, 1, 2), "openvino", 3.0)], predicted_ms=3.0)])
    a = (((0,), "onnxruntime"), ((1,), "openvino"), ((2,), "onnxruntime"))
    b = (((0,), "onnxruntime"), ((1, 2), "openvino"))
    _fake_plan_runs(monkeypatch, {a: (6.5, [2.0, 1.0, 2.0]), b: (7.0, [1.0, 5.0])})
    plan, charged, attempts, searched_for, _ = tune_search.search_checked(
        list(range(3)), {x: 1.0, y: 1.0, z: 1.0, y2: 2.0}, {}, lambda charged: next(plans),
            Stitching({}, tmp_path, progress=False), 9.0)
    assert plan.parts() == a and attempts == 3 and searched_for is first
    # 6.5 ms end to end, 0.5 ms of it priced transitions: the 5 ms of calls scaled to 6 ms
    assert [p.cost_ms for p in plan.partitions] == pytest.approx([2.4, 1.2, 2.4])
    assert plan.predicted_ms == pytest.approx(6.5)
    assert [charged[c] for c in (x, y, z)] == pytest.approx([2.4, 1.2, 2.4])  # A's own, not B's 1.167 for x
    assert plan.notes[0] == "transitions between backends: 0.500 ms of the predicted 6.500 ms"
    assert plan.notes[0].kind == NoteKind.TRANSITIONS  # rewritten by its kind, not its wording
    assert plan.notes[-1].endswith("6.500 ms end to end; searched for 3.500 ms")


def test_the_kept_plan_gets_back_what_its_own_search_left(monkeypatch, tmp_path):
    """The tune keeps the first attempt's plan after a second attempt searched another: the precision outcome
    (rounds, notes) is the one the first search returned with it, not the last search's, nor searched again
    (a budgeted search keeps the errors it measured, so the same costs can give another plan the second time)."""
    from collage.plan import Partition, Plan
    from collage.tuner import stitching
    from collage.tuner.clock import Deadline
    from collage.tuner.records import Baselines, Measured
    from collage.tuner.steps.search import search

    graph = zoo.load_graph("zoo:tiny-resnet")
    n = len(graph)
    a = Plan([Partition(tuple(range(3)), "onnxruntime", 1.0), Partition(tuple(range(3, n)), "openvino", 2.0)], 3.0)
    b = Plan([Partition(tuple(range(4)), "onnxruntime", 1.0), Partition(tuple(range(4, n)), "openvino", 2.0)], 3.0)

    class Prec:
        low: frozenset = frozenset()

        def __init__(self, found):
            self.found = iter(found)

        def search(self, charged, transition):
            plan = next(self.found)
            return plan, "rounds of A" if plan is a else "rounds of B"

    def two_attempts(graph, costs, charges, do_search, *args, **kw):
        first = do_search({})
        do_search({})
        return stitching.Checked(first, {}, 2, first, 1.0)

    monkeypatch.setattr(stitching, "calibrate_partition_charges", lambda *a, **kw: {})
    monkeypatch.setattr(stitching, "search_checked", two_attempts)
    ctx = context(graph=graph, precision=Prec([a, b, a]), work=tmp_path,
                  options=type("O", (), {"target": "cpu", "progress": False})(),
                  clock=Deadline(None))  # no budget: the tune's clock cuts nothing
    searched = search(ctx, Measured({}, {}, 0), Baselines({}, {}, {}, 5.0))
    assert searched.plan.parts() == a.parts() and searched.single_ms == 1.0
    assert searched.outcome == "rounds of A"

    # a plan the attempts never ran (one partition): its gain is against the single backends priced alike,
    # each whole model's worker cost at its backend's level
    from collage.measure.db import Cost
    from collage.tuner.stitching import PartitionCharge

    one = Plan([Partition(tuple(range(n)), "openvino", 4.4)], 4.4)

    def one_attempt(graph, costs, charges, do_search, *args, **kw):
        return stitching.Checked(do_search({}), {}, 1, None, None)

    monkeypatch.setattr(stitching, "search_checked", one_attempt)
    monkeypatch.setattr(stitching, "calibrate_partition_charges",
                        lambda *a, **kw: {"onnxruntime": PartitionCharge(level=1.5), "openvino": PartitionCharge(1.1)})
    ctx = context(graph=graph, precision=Prec([one]), work=tmp_path, options=ctx.options, clock=ctx.clock)
    whole = {(tuple(range(n)), b): Cost("whole", b, "v", "cpu", "{}", "here", median_ms=ms)
             for b, ms in (("onnxruntime", 3.0), ("openvino", 4.0))}
    searched = search(ctx, Measured(whole, {}, 0), Baselines({"onnxruntime": None, "openvino": None}, {}, {}, 5.0))
    assert searched.single_ms == pytest.approx(4.4)  # openvino's 4.0 x 1.1 (ORT: 3 x 1.5)


def test_a_plan_found_again_after_it_ran_ends_the_attempts(monkeypatch, tmp_path):
    """A mix measured within 10% of its prediction but slower than the best single backend: priced as it ran,
    the search comes back to it, and there the attempts end (it is not measured again; never-worse judges it)."""
    from collage.tuner import stitching as tune_search
    from collage.plan import Partition, Plan

    x, y = _Cand("x", (0,), "onnxruntime"), _Cand("y", (1,), "openvino")
    searched: list[dict] = []

    def do_search(charged):
        searched.append(dict(charged))
        return Plan([Partition((0,), "onnxruntime", charged[x]), Partition((1,), "openvino", charged[y])],
                    predicted_ms=charged[x] + charged[y])

    shape = (((0,), "onnxruntime"), ((1,), "openvino"))
    # (10.7 ms over calls of 3 and 7 ms: priced as it ran, the plan's prediction is 10.7 ms but for the last bit of
    # a float, so it is the plan coming back, not a difference of exactly 0, that ends the attempts)
    measured = _fake_plan_runs(monkeypatch, {shape: (10.7, [3.0, 7.0])})
    plan, charged, attempts, *_ = tune_search.search_checked(list(range(2)), {x: 3.0, y: 7.0}, {}, do_search,
        Stitching({}, tmp_path, progress=False), 9.0, attempts=5)
    assert attempts == 2 and measured == [shape] and len(searched) == 2
    assert plan.predicted_ms == pytest.approx(10.7) and charged == pytest.approx({x: 3.21, y: 7.49})


def test_a_plan_is_judged_against_the_single_backends_timed_beside_it(monkeypatch, tmp_path):
    """The baselines, timed minutes before, had the best single backend at 30 ms; timed in the same rounds as the
    plan it runs 9 ms. The plan (10.5 ms, within 10% of its 10 ms prediction) loses to that, so it is priced as
    it ran and searched again, not kept as a win."""
    from collage.tuner import stitching as tune_search
    from collage.plan import Partition, Plan

    x, y = _Cand("x", (0,), "onnxruntime"), _Cand("y", (1,), "openvino")

    def do_search(charged):
        return Plan([Partition((0,), "onnxruntime", charged[x]), Partition((1,), "openvino", charged[y])],
                    predicted_ms=charged[x] + charged[y])

    shape = (((0,), "onnxruntime"), ((1,), "openvino"))
    measured = _fake_plan_runs(monkeypatch, {shape: (10.5, [4.0, 6.0])}, singles_ms=9.0)
    singles = {"onnxruntime": lambda: None, "openvino": lambda: None}  # timed as 9 ms each beside the plan
    _, charged, attempts, _, single_ms = tune_search.search_checked(list(range(2)), {x: 4.0, y: 6.0}, {}, do_search,
        Stitching({}, tmp_path, progress=False), 30.0, singles=singles)
    assert attempts == 2 and measured == [shape] and charged == pytest.approx({x: 4.2, y: 6.3})
    assert single_ms == 9.0  # the plan's predicted gain is against the singles timed beside it
    # without the singles beside it, the stale 30 ms makes the same plan a win at once
    _, _, attempts, *_ = tune_search.search_checked(list(range(2)), {x: 4.0, y: 6.0}, {}, do_search,
        Stitching({}, tmp_path, progress=False), 30.0)
    assert attempts == 1


def test_a_mix_that_lost_to_the_singles_beside_it_leaves_the_search_on_one_backend(monkeypatch, tmp_path):
    """The mix (predicted 9 ms from its parts) runs 10.5 ms, the single backends 9 ms beside it. Priced as they
    ran there (the whole models were priced 11-12 ms at their worker costs), the singles win the next search,
    and that one-backend plan is the search's choice: the losing mix is not kept as "searched" for the
    verification to measure and never-worse to drop (shufflenet, 8.73 ms beside OpenVINO's 6.9)."""
    from collage.tuner import stitching as tune_search
    from collage.plan import Partition, Plan

    x, y = _Cand("x", (0,), "onnxruntime"), _Cand("y", (1,), "openvino")
    w_ort, w_ov = _Cand("w-ort", (0, 1), "onnxruntime"), _Cand("w-ov", (0, 1), "openvino")
    searched: list[dict] = []

    def do_search(charged):  # the cheaper of the mix and the two whole models
        searched.append(dict(charged))
        w = min((w_ov, w_ort), key=charged.__getitem__)
        if charged[w] <= charged[x] + charged[y]:
            return Plan([Partition((0, 1), w.backend, charged[w])], predicted_ms=charged[w])
        return Plan([Partition((0,), "onnxruntime", charged[x]), Partition((1,), "openvino", charged[y])],
                    predicted_ms=charged[x] + charged[y])

    shape = (((0,), "onnxruntime"), ((1,), "openvino"))
    measured = _fake_plan_runs(monkeypatch, {shape: (10.5, [4.0, 6.0])}, singles_ms=9.0)
    singles = {"onnxruntime": lambda: None, "openvino": lambda: None}
    plan, _, attempts, searched_for, single_ms = tune_search.search_checked(
        list(range(2)), {x: 4.0, y: 5.0, w_ort: 12.0, w_ov: 11.0}, {}, do_search,
            Stitching({}, tmp_path, progress=False), 30.0, singles=singles)
    assert attempts == 2 and measured == [shape]
    assert searched[1][w_ort] == searched[1][w_ov] == 9.0  # the whole models as they ran beside the mix
    assert len(plan.partitions) == 1 and plan.predicted_ms == 9.0
    assert searched_for is None and single_ms == 9.0
    assert plan.notes[-1].startswith("no mix the search measured ran faster")
    assert "10.500 ms beside 9.000" in plan.notes[-1]


def test_a_mix_that_won_in_its_rounds_is_kept_over_one_faster_in_ms_that_lost_in_its_own(monkeypatch, tmp_path):
    """The machine's level moves between attempts: mix A runs 10 ms beside single backends at 9 (lost), mix B
    11 ms beside them at 12 (won, but 1.375x its 8 ms prediction), then the search goes to one backend. B won
    where A lost: B is the search's plan (judged by its time over the singles beside it, not in ms), and
    the one-backend plan is not taken, since a mix won."""
    from collage.tuner import stitching as tune_search
    from collage.plan import Partition, Plan

    x, y = _Cand("x", (0,), "onnxruntime"), _Cand("y", (1,), "openvino")
    a = Plan([Partition((0,), "onnxruntime", 4.0), Partition((1,), "openvino", 5.5)], predicted_ms=9.5)
    b = Plan([Partition((0,), "openvino", 3.0), Partition((1,), "onnxruntime", 5.0)], predicted_ms=8.0)
    one = Plan([Partition((0, 1), "openvino", 9.0)], predicted_ms=9.0)
    plans = iter([a, b, one])
    sa, sb = a.parts(), b.parts()
    _fake_plan_runs(monkeypatch, {sa: (10.0, [4.0, 6.0]), sb: (11.0, [4.0, 7.0])}, singles_ms={sa: 9.0, sb: 12.0})
    singles = {"onnxruntime": lambda: None, "openvino": lambda: None}
    plan, _, attempts, searched_for, single_ms = tune_search.search_checked(
        list(range(2)), {x: 4.0, y: 5.0}, {}, lambda charged: next(plans),
            Stitching({}, tmp_path, progress=False), 30.0, singles=singles)
    assert attempts == 3 and plan.parts() == sb and searched_for is b and single_ms == 12.0


def test_a_real_mixed_plan_is_priced_as_it_ran(monkeypatch, tmp_path):
    """tiny-resnet cut in two, ONNX Runtime then OpenVINO, its parts given made-up costs (1 ms each): the
    stitched plan is exported, loaded and timed for real, and comes back priced from that run: each
    partition's cost its own call in the plan plus its share of the time outside the calls, the plan's
    prediction its measurement, with the made-up prediction it was searched for in its notes."""
    pytest.importorskip("openvino")
    from collage.graph.inputs import random_inputs
    from collage.search.candidates import Candidate
    from collage.search.cover import plan_from_parts
    from collage.tuner import stitching as tune_search

    graph = zoo.load_graph("zoo:tiny-resnet")
    n, cut = len(graph), len(graph) // 2
    head, tail = Candidate(tuple(range(cut)), "onnxruntime"), Candidate(tuple(range(cut, n)), "openvino")
    costs = {head: 1.0, tail: 1.0}
    timed: list[float] = []
    real_measure = tune_search.measure_interleaved

    def measure(runners, **kw):
        got = real_measure(runners, **kw)
        timed.append(got["p"])
        return got

    monkeypatch.setattr(tune_search, "measure_interleaved", measure)

    def do_search(charged):
        return tune_search.fill_boundaries(graph, plan_from_parts(graph, [(head.nodes, "onnxruntime"),
                                                                          (tail.nodes, "openvino")],
                                                                  charged, lambda a, b, nbytes: 0.01))

    searched_for = do_search(costs).predicted_ms  # 2 ms and the transitions (0.01 ms a tensor crossing the cut)
    plan, charged, *_ = tune_search.search_checked(graph, costs, {}, do_search,
        Stitching(random_inputs(graph, seed=0), tmp_path, progress=False), 1e9)
    assert len(timed) == 1  # measured once: searched again, the same plan, not measured again
    assert plan.predicted_ms == pytest.approx(timed[0])
    assert charged[head] == plan.partitions[0].cost_ms and charged[tail] == plan.partitions[1].cost_ms
    assert charged[head] + charged[tail] + (searched_for - 2.0) == pytest.approx(timed[0])
    assert 0 < charged[head] != 1.0 and 0 < charged[tail] != 1.0
    assert plan.notes[-1].endswith(f"{timed[0]:.3f} ms end to end; searched for {searched_for:.3f} ms")
