"""report.json as records (issue #39): a tune's report.json is valid against the JSON Schema in the package
(collage/report/report.schema.json), ``Report`` reads it and writes the same JSON back, the schema refuses a
broken report, and the schema's objects are the records' (one key list, two places)."""
from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="the test extra: pip install 'collage[test]'")

from collage.errors import ArtifactError  # noqa: E402
from collage.report import model  # noqa: E402
from collage.report.model import REPORT_VERSION, Report, as_report, schema  # noqa: E402
from collage.report.records import Record, _fields  # noqa: E402
from tests.helpers import need_backends  # noqa: E402


def _validator() -> jsonschema.Draft202012Validator:
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def _errors(report: dict) -> list[str]:
    """Every error, those inside an anyOf (``record | null``) included: 'path/to/key: message'."""
    out, todo = [], list(_validator().iter_errors(report))
    while todo:
        e = todo.pop()
        out.append(f"{'/'.join(map(str, e.absolute_path))}: {e.message}")
        todo += e.context
    return out


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict:
    """report.json of a tiny tune (tiny-resnet, ONNX Runtime and OpenVINO, an 8 s budget)."""
    need_backends("onnxruntime", "openvino")
    import collage

    d = tmp_path_factory.mktemp("report-model")
    res = collage.tune("zoo:tiny-resnet", d / "out", backends=["onnxruntime", "openvino"], budget="8s",
                       db=d / "costs.sqlite", progress=False)
    return json.loads((res.out_dir / "report.json").read_text())


def test_a_tuned_report_json_is_valid_against_its_schema(tuned):
    assert next(iter(tuned)) == "version" and tuned["version"] == REPORT_VERSION
    assert _errors(tuned) == []


def test_the_report_reads_and_writes_the_same_json(tuned):
    report = Report.from_dict(tuned)
    assert json.dumps(report.to_dict()) == json.dumps(tuned)  # same keys, same order, same values
    assert report.model == "tiny-resnet" and report.numerics is not None and report.coverage is not None
    assert report.searched_plan is not None and report.searched_plan.partitions[0].nodes == tuple(range(40))


def test_the_verification_rounds_are_the_times_the_report_gives(tuned):
    """report.json's plan_ms and baselines are the medians of its ``verification`` rounds, paired round by round
    (collage.tuner.checks.paired_medians), and its ``plan`` names the rounds the final plan's time is."""
    from collage.tuner.checks import paired_medians

    v = tuned["verification"]
    assert v["rounds"] >= 1 and all(len(r) == v["rounds"] for r in v["round_ms"].values())
    paired = paired_medians(v["round_ms"])
    assert paired[v["plan"]] == pytest.approx(tuned["plan_ms"], rel=1e-3)
    assert {k: paired[k] for k in tuned["baselines"]} == pytest.approx(tuned["baselines"], rel=1e-3)


def test_a_broken_report_fails_its_schema(tuned):
    missing = copy.deepcopy(tuned)
    del missing["plan_ms"]
    assert any("'plan_ms' is a required property" in e for e in _errors(missing))
    wrong = copy.deepcopy(tuned)
    wrong["plan_ms"] = "fast"
    assert any(e.startswith("plan_ms:") for e in _errors(wrong))
    nested = copy.deepcopy(tuned)
    nested["coverage"]["refinement"]["ran"] = "none"
    assert any(e.startswith("coverage/refinement/ran:") for e in _errors(nested))
    unknown = {**tuned, "plan_msec": 1.0}  # a misspelt key
    assert any("plan_msec" in e for e in _errors(unknown))
    newer = {**tuned, "version": REPORT_VERSION + 1}
    assert any(e.startswith("version:") for e in _errors(newer))


#: the sections a tiny fp32 tune does not write, as the tuner writes them (an --accuracy tune's precision, a
#: guided tune's estimates, TVM's tuning, an old-style baseline that failed), copied from real tunes
SECTIONS = {
    "precision": {"budget": {"min_cos": 0.99, "max_rel": 0.05}, "budget_text": "cos>=0.99, rel<=0.05",
                  "calibration": {"source": "random (seed 0)", "samples": 2, "hash": "69096ad6", "random": True},
                  "low_precision_backends": ["openvino-bf16"], "int8": None,
                  "partitions": [{"index": 0, "backend": "onnxruntime", "precision": "fp32", "rel": 0.0, "cos": 1.0,
                                  "finite": True, "budget_share": 0.0}],
                  "end_to_end": {"rel": 0.0, "cos": 1.0, "finite": True, "within_budget": True},
                  "rounds": [{"lambda": 0.0, "excluded": 0, "low_partitions": 0, "predicted_ms": 0.055, "ok": True,
                              "error": {"rel": "inf", "cos": 0.5, "finite": False}}],
                  "fallback_fp32": False, "errors_measured": 2, "notes": ["precision: the plan is fp32"]},
    "estimates": {"distinct": 308, "measured": 2, "estimated": 0, "unpriced": 306,
                  "error": {"n": 0, "median_ape": None, "p90_ape": None, "in_range": None},
                  "error_by_backend": {"onnxruntime": {"n": 3, "median_ape": 12.0, "p90_ape": 40.0, "in_range": 0.7}},
                  "training_rows": {}, "rounds": 0, "converged_levels": [], "last_rounds": [],
                  "stopped": "the budget ran out", "optimistic_plan": None, "fit_s": 0.0, "search_s": 0.0},
    "tvm_tuning": {"budget_s": 60.0, "spent_s": 12.0, "won": {"tvm_partitions": 0, "gained_ms": 0.0, "partitions": []}},
}


def test_the_other_sections_read_back_and_are_valid(tuned):
    full = copy.deepcopy(tuned)
    full["precision"], full["tvm_tuning"] = SECTIONS["precision"], SECTIONS["tvm_tuning"]
    full["coverage"]["estimates"] = SECTIONS["estimates"]
    full["baselines"]["tvm"] = {"error": "did not compile"}
    full["numerics"].update(rel=0.0, cos=1.0, finite=True, budget="cos>=0.99, rel<=0.05", within_budget=True)
    assert _errors(full) == []
    report = Report.from_dict(full)
    assert json.dumps(report.to_dict()) == json.dumps(full)
    assert report.precision.rounds[0].lam == 0.0 and report.precision.rounds[0].error.rel == "inf"
    assert report.coverage.estimates.error_by_backend["onnxruntime"].median_ape == 12.0
    assert report.baseline_ms()["tvm"] is None


def test_older_and_partial_reports_read():
    """report.json before ``version`` (and hand-made ones with a few keys): read as version 1, written back
    with the keys they had, ``version`` first; a value of the wrong type reads as unknown; a newer version is
    refused."""
    old = {"model": "m", "plan_ms": 5, "baselines": {"onnxruntime": 7.5, "tvm": None}, "notes": ["hello"],
           "a_key_of_a_newer_tuner": {"x": 1}}
    report = Report.from_dict(old)
    assert report.version == REPORT_VERSION and report.plan_ms == 5 and report.numerics is None
    assert report.to_dict() == {"version": REPORT_VERSION, **old} and list(report.to_dict())[1:] == list(old)
    assert Report.from_dict({"plan_ms": "fast"}).plan_ms is None
    assert as_report(None) == Report() and as_report(report) is report
    with pytest.raises(ArtifactError, match="version 2"):
        Report.from_dict({"version": 2})


def test_the_schema_describes_the_records():
    """Each record of collage.report.model is the $defs entry of its name (the Report: the top level), with the
    same keys; and every $defs entry is a record."""
    s = schema()
    records = {c.__name__: c for _, c in inspect.getmembers(model, inspect.isclass)
               if issubclass(c, Record) and c is not Record}
    assert set(s["$defs"]) == set(records) - {"Report"}
    for name, cls in records.items():
        obj = s if name == "Report" else s["$defs"][name]
        assert list(obj["properties"]) == [key for _, key, _ in _fields(cls)], name
        assert set(obj.get("required", ())) <= set(obj["properties"]), name


def test_the_schema_is_package_data():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "report.schema.json" in pyproject["tool"]["setuptools"]["package-data"]["collage.report"]


def test_the_renderers_take_the_report_as_a_record_or_its_json():
    from collage.report.render import render_markdown, report_json
    from tests.report.test_report import REPORT, _manifest

    m = _manifest(3)
    as_json = render_markdown({"manifest": m, "report": REPORT})
    assert render_markdown({"manifest": m}, Report.from_dict(REPORT)) == as_json
    assert report_json({"manifest": m}, Report.from_dict(REPORT)) == report_json({"manifest": m}, REPORT)
