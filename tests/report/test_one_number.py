"""One number per thing (issue #40 item 4): a partition shows its measured time, a prediction is labelled
"predicted" wherever it shows and flagged with why when it is more than 25% off; the chart's runner-up ratio
is the table's; progress counters count one thing; the stale-cost warning is about an earlier run's costs only
and reads like every other line; the search's internals are printed only under -v."""
from __future__ import annotations

import calendar
import copy
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from collage.report.render import baselines_table, html_page, partition_table, render_markdown
from tests.commands.test_bad_inputs import _cli
from tests.report.test_report import _manifest, _write

BACKENDS = "onnxruntime,openvino"


def _one_partition() -> tuple[dict, dict]:
    """The resnet50 case: one partition on OpenVINO predicted 214.406 ms (level 2.18 x 98.35 ms alone), measured
    98.276 ms end to end, ONNX Runtime (the runner-up) 165.5 ms beside it."""
    m = _manifest(1, backends=("openvino", "onnxruntime"))
    m["partitions"][0].update(cost_ms=214.406, runner_up=["onnxruntime", 167.99])
    report = {"model": "synthetic", "target": "cpu", "baselines": {"openvino": 98.276, "onnxruntime": 165.5},
              "plan_ms": 98.276, "predicted_ms": 214.406, "alone_ms": [98.35],
              "partition_charges": {"openvino": {"level": 2.18, "cut_ms": 0.0},
                                    "onnxruntime": {"level": 1.1, "cut_ms": 0.0}},
              "searched_plan": {"partitions": [{"backend": "openvino", "nodes": m["partitions"][0]["nodes"],
                                                "cost_ms": 214.406, "searched_cost_ms": 214.406}],
                                "predicted_ms": 214.406, "measured_ms": 98.276}}
    return m, report


def _table_rows(md: str, first_cell: str) -> list[tuple[list[str], list[str]]]:
    """(header cells, row cells) of each Markdown table row whose first cell is ``first_cell``."""
    out, header = [], None
    for line in md.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            header = None if not line.startswith("|") else header
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif cells[0] == first_cell:
            out.append((header, cells))
    return out


def test_one_partition_shows_one_measured_number_and_the_prediction_labelled(tmp_path):
    m, report = _one_partition()
    df = partition_table({"manifest": m, "report": report})
    assert df["ms"][0] == pytest.approx(98.276) and df["ms_is"][0] == "end to end"
    assert df["predicted_ms"][0] == pytest.approx(214.406)
    md = render_markdown(_write(tmp_path, copy.deepcopy(m), report))
    (header, row), = _table_rows(md, "0")
    assert row[header.index("ms")] == "98.276", (header, row)
    # the prediction shows only where it is called one: a column or a line that says "predicted"
    for line in md.splitlines():
        if "214.406" in line and line.startswith("|"):
            assert "predicted" in header[row.index("214.406")], (header, row)
        elif "214.406" in line:
            assert "predicted" in line, line


def test_a_prediction_off_by_more_than_a_quarter_is_flagged_with_why(tmp_path):
    m, report = _one_partition()
    md = render_markdown(_write(tmp_path, m, report))
    flag = next((line for line in md.splitlines() if "predicted 214.406 ms, measured 98.276 ms" in line), None)
    assert flag is not None, md
    # why: the level charged (measured before the search) against the level it ran at in the verification
    assert "level 2.180" in flag and "98.350 ms" in flag and "level 0.999" in flag and "moved" in flag, flag
    # within 25%: no flag
    close = {**report, "predicted_ms": 110.0}
    assert "**predicted" not in render_markdown({"manifest": m, "report": close})


def test_a_partition_measured_in_the_plan_off_its_prediction_is_flagged_with_its_cut_charge():
    m = _manifest(2)
    m["partitions"][0]["cost_ms"], m["partitions"][1]["cost_ms"] = 4.0, 1.0
    report = {"plan_ms": 7.5, "predicted_ms": 5.2, "alone_ms": [3.9, 0.8],
              "partition_charges": {"onnxruntime": {"level": 1.0, "cut_ms": 0.0},
                                    "openvino": {"level": 1.0, "cut_ms": 0.2}},
              "searched_plan": {"partitions": [
                  {"backend": p["backend"], "nodes": p["nodes"], "cost_ms": p["cost_ms"],
                   "searched_cost_ms": p["cost_ms"],
                   "in_plan_ms": ms} for p, ms in zip(m["partitions"], (4.1, 3.0))]}}
    df = partition_table({"manifest": m, "report": report})
    assert list(df["ms"]) == [4.1, 3.0] and list(df["ms_is"]) == ["in plan", "in plan"]
    md = render_markdown({"manifest": m, "report": report})
    lines = [line for line in md.splitlines() if line.startswith("- **")]
    assert any("predicted 5.200 ms, measured 7.500 ms" in line for line in lines), md
    part = [line for line in lines if "partition 1 on openvino: predicted 1.000 ms, measured 3.000 ms" in line]
    assert part and "cut charge of 0.200 ms" in part[0] and "0.800 ms" in part[0], lines
    assert not any("partition 0" in line for line in lines)  # 4.0 vs 4.1: within 25%


def test_the_chart_and_the_table_give_the_same_runner_up_ratio():
    m, report = _one_partition()
    src = {"manifest": m, "report": report}
    table = baselines_table(src).set_index("backend")["plan_speedup"]["onnxruntime"]
    page = html_page(src)
    chart = page[page.index("<svg", page.index("Time per partition against the runner-up")):]
    shown = re.search(r"runner-up onnxruntime ([0-9.]+) ms[^(]*\(([0-9.]+)× the chosen\)", chart)
    assert shown, chart[:2000]
    assert (shown.group(2), shown.group(1)) == (f"{table:.2f}", "165.500") and f"{table:.2f}" == "1.68"
    assert "measured alone" not in page
    assert partition_table(src)["runner_up_ratio"][0] == table  # one computation


# ---------------------------------------------------------------------- the tune's own lines
def _rewrite_earlier_run(db: Path, copy_to: Path, factor: float, when: float) -> None:
    """A copy of the cost DB whose costs an earlier run stored: each median ``factor`` times, taken at ``when``."""
    shutil.copy(db, copy_to)
    with sqlite3.connect(copy_to) as conn:
        conn.execute("UPDATE costs_v1 SET median_ms = median_ms * ?, created = ? WHERE median_ms IS NOT NULL",
                     (factor, when))


@pytest.fixture(scope="module")
def first_tune(tmp_path_factory) -> tuple[Path, str]:
    """A tiny tune on a fresh cost DB, default output: (its cost DB, its stderr). In enumeration order: the
    candidates' counter below is that order's (guided measuring, the default under a budget, counts only the
    whole models: its rounds are not one counter)."""
    d = tmp_path_factory.mktemp("one-number")
    proc = _cli(d, ["tune", "zoo:tiny-resnet", "-o", str(d / "out"), "--backends", BACKENDS, "--budget", "8s",
                    "--db", str(d / "costs.sqlite"), "--measure-order", "enumeration"])
    assert proc.returncode == 0, proc.stderr
    return d / "costs.sqlite", proc.stderr


def test_default_progress_is_in_plain_words_and_counts_one_thing(first_tune):
    _, err = first_tune
    assert "level" not in err and "per cut" not in err, err
    # the whole models on each backend: a counter of their own, not the candidates'
    assert re.search(r"collage: measuring tiny-resnet: the whole model on each backend: 2/2 backend\(s\)", err), err
    assert re.search(r"collage: measuring tiny-resnet: candidates: \d+/\d+ cand", err), err
    # every cost was measured in this run: no stale-cost warning
    assert "disagree" not in err and "earlier run" not in err, err


def test_stale_costs_of_an_earlier_run_are_said_with_its_date_and_internals_under_v(first_tune, tmp_path):
    db, _ = first_tune
    when = calendar.timegm((2026, 11, 1, 12, 0, 0))
    _rewrite_earlier_run(db, tmp_path / "earlier.sqlite", 5.0, when)
    # single nodes only: measuring them leaves the budget time to measure the partition charges (the internals
    # -v shows) on a loaded machine too (with every candidate, measuring took the budget's share and the charges
    # were skipped: "partition charges not measured (7 s left of the budget)")
    proc = _cli(tmp_path, ["-v", "tune", "zoo:tiny-resnet", "-o", str(tmp_path / "out"), "--backends", BACKENDS,
                           "--budget", "25s", "--max-nodes", "1", "--no-ranges", "--db",
                           str(tmp_path / "earlier.sqlite")])
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "disagree" in line]
    assert len(warned) == 1, proc.stderr
    assert warned[0].startswith("collage: warning: the cost DB's whole-model costs from an earlier run"), warned
    assert "measured 2026-11-01 12:00 UTC" in warned[0], warned
    # -v: the search's internals, as progress lines
    assert any(line.startswith("collage: ") and "level" in line for line in proc.stderr.splitlines()), proc.stderr


def test_the_stale_cost_check_leaves_out_costs_this_run_measured():
    """The verification times the whole model in-process; this run's worker timing of it differs by the
    machine's level (the partition charges' business), which the old check called a stale cost DB."""
    from collage import zoo
    from collage.measure.db import Cost
    from collage.plan import Plan
    from collage.tuner.context import JobContext
    from collage.tuner.records import Baselines, Measured, Verified
    from collage.tuner.steps.verify import note_baselines

    graph = zoo.load_graph("zoo:tiny-resnet")
    ctx = JobContext(graph, None, None, None, [], [], {}, {}, None, None, time.monotonic(), time.time())
    n = len(graph)

    def note(created: float) -> list[str]:
        raw = {(tuple(range(n)), "onnxruntime"): Cost("fp", "onnxruntime", "v", "cpu", "{}", "m", 2.0, created=created)}
        verified = Verified(Plan.single("onnxruntime", n, 2.0), 1.0, None, {"onnxruntime": 1.0}, {"onnxruntime": 1.0})
        base = Baselines({}, {}, {"onnxruntime": 2.0}, 1.0)
        note_baselines(ctx, verified, base, Measured(raw, {}, 0))
        return verified.plan.notes

    assert note(time.time() + 1.0) == []  # measured in this run, 2x the verification: the machine's level
    earlier = note(calendar.timegm((2026, 11, 1, 12, 0, 0)))
    assert len(earlier) == 1 and "earlier run" in earlier[0] and "2026-11-01 12:00 UTC" in earlier[0], earlier
