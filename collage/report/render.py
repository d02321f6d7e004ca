"""What runs where in a tuned artifact, and why: ONE document model (``document``: sections of text,
bullets, pandas tables and pictures) rendered to Markdown (``render_markdown``), to an HTML page
(``render_html``, with the SVG pictures of :mod:`collage.report.svg`) and to JSON (``report_json``).

Inputs are the artifact's ``manifest.json`` (partitions, ops, measured costs, runner-ups; see
``collage.tuner.export``) and ``report.json``, which the tuner fills with this schema (every key
optional; the report shows what is there)::

    {
      "model": "resnet50", "source": "/path/model.onnx", "target": "cpu",
      "model_sha256": "...",      # written by export: the report is refused where it is not the manifest's
      "backends": ["onnxruntime", "openvino"],              # backends the tuner considered
      "baselines": {"onnxruntime": 30.1, "openvino": 29.8},  # whole model on one backend, median ms
                                                             # (null or {"error": "..."} when it failed)
      "plan_ms": 27.9,            # measured end-to-end median of the stitched artifact (same run)
      "predicted_ms": 26.5,       # the search's objective (partition costs + transition costs)
      "searched_plan": {"partitions": [{"backend": "openvino", "nodes": [0, 1, 2], "cost_ms": 3.1}, ...],
                        "predicted_ms": 27.0, "searched_for_ms": 26.0, "measured_ms": 27.9,
                        "best_single_ms": 29.5, "best_single_measured_ms": 29.8},
                                  # the plan the search handed to the end-to-end checks, priced with the
                                  # partition charges measured in this run (partition_charges: level, ms per cut) charged,
                                  # or, for a mix the search's attempts ran, as it ran there: then
                                  # searched_for_ms and each partition's searched_cost_ms are what the search
                                  # priced it at before it ran; measured_ms: its time in the verification;
                                  # best_single_ms: the best single backend priced alike (timed beside the
                                  # plan in that attempt, or beside the closest mix where the search went to
                                  # one backend after its mixes lost, or level x its worker cost), _measured_ms: in the
                                  # verification (the predicted and measured gains are the ratios);
                                  # several partitions: each also has in_plan_ms, its call in those runs;
                                  # the final plan differs where never worse, refinement or a whole-model
                                  # alternative replaced it (the notes say which)
      "cost_db_plan": {...} | null,   # same form: the search over the cost DB's contents alone (candidate and
                                  # transition costs, the partition charges the DB stores; none of this
                                  # run's end-to-end timings charged): the search's first attempt; tunes on the
                                  # same DB contents derive the same one; null under an accuracy budget (that
                                  # search also rests on errors of stitched plans measured in the run)
      "numerics": {"max_abs_err": 3e-6,                      # vs the ONNX Runtime fp32 reference
                   "tolerance": 1e-3 | {"atol": 1e-4, "rtol": 1e-3},
                   "ok": true,                               # optional; else max_abs_err <= tolerance
                   "per_output": {"logits": 3e-6 | {"max_abs_err": 3e-6, ...}}},
      "boundary_overhead_ms": 0.05 | {<Artifact.boundary_overhead().to_dict()>},
      "notes": ["never worse: fell back to onnxruntime", ...],
      "candidates": {"total": 812, "onnxruntime": 406, ...}, # counts by kind, free-form
      "measurements": {"candidates": 812, "with_cost": 800, "failed": 12, ...},
      "coverage": {"distinct": 242, "with_cost": 159, "unmeasured": 83, "budget_cut": true, ...,
                   "refinement": {"requested": 4, "ran": 0, "why_none": "..."}},   # collage.report.coverage
      "alone_ms": [31.2, 0.4],    # each partition of the final plan timed alone in a worker (null: not measured)
      "search_s": 0.4, "tune_s": 512.0,
      "load": {"folded_by": "onnxslim 0.1.98", "nodes_before": 860, "nodes_after": 397, "fold_s": 1.2,
               "applied": true, "error": null},        # load-time folding (collage.graph.load.Folding): node ids number the
                                      # folded model; the numerics reference runs the model as read
      "precision": {                    # only under --accuracy (collage.tuner.precision.tuner.PrecisionTuner.report)
        "budget": {"min_cos": 0.999, "max_rel": 0.01}, "budget_text": "cos>=0.999, rel<=0.01",
        "calibration": {"source": "inputs.npz", "samples": 8, "hash": "...", "random": false},
        "partitions": [{"index": 0, "backend": "openvino-bf16", "precision": "bf16", "rel": 2e-3,
                        "cos": 0.99999, "finite": true, "budget_share": 0.2}],
        "end_to_end": {"rel": 3e-3, "cos": 0.99998, "finite": true, "within_budget": true},
        "rounds": [{"lambda": 0.0, "low_partitions": 3, "predicted_ms": 5.1, "ok": true, "error": {...}}],
        "fallback_fp32": false, "notes": ["..."]}
    }

A partition's "ms" is its MEASURED time (``measured_ms``): where the plan is one partition, the plan's
end-to-end measurement; else its call inside the plan's verification runs (``searched_plan.in_plan_ms``), or
its cost timed alone in a measurement worker (``alone_ms``: report.json's list, one per partition of the final
plan); only where none is recorded its price, labelled "predicted". Its "predicted ms" is the price the search
charged it (``cost_ms`` in the manifest: the median of a full call on its backend timed alone in a worker, times
that backend's level in a stitched plan, plus its cut charge after the first partition; or, for a plan the
search's attempts ran, the call as it ran there); "share" is its part of the sum of the ms. A prediction more
than ``OFF_BY`` (25%) off its measurement is flagged under "Predicted vs measured", with why (``mispredictions``).
Every ratio is ``ratio``: the chart's runner-up ratio is the table's.

CLI: ``collage report OUT [--format md|html|csv|json]`` prints Markdown (or CSV, JSON) and writes
``OUT/report.html``.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from collage.runtime.artifact import artifact_dir, is_archive
from collage.runtime.manifest import read_manifest, read_plan, read_report
from collage.errors import ArtifactError
from collage.extras import backend_extras
from collage.report.coverage import estimates_line, load_line, measured_line, refinement_line
from collage.report.svg import num as _num, op_summary as _op_summary, render_bars, render_svg

# ---------------------------------------------------------------------- inputs
def _sources(source: Any, report: dict | None = None) -> tuple[dict, dict]:
    """(manifest, report) from an artifact directory, a manifest path, a manifest dict, or
    ``{"manifest": ..., "report": ...}``."""
    if isinstance(source, (str, os.PathLike)) and is_archive(source):
        with artifact_dir(source) as root:
            return _sources(root, report)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        manifest = read_manifest(path)
        root = path if path.is_dir() else path.parent
        report = dict(read_report(root, manifest) if report is None else report)
        plan = read_plan(root, manifest)  # checked against the manifest, like report.json
        if report.get("predicted_ms") is None and plan is not None:  # the search's objective, from plan.json
            report["predicted_ms"] = plan.get("predicted_ms")
        return manifest, report
    if isinstance(source, dict) and "manifest" in source:
        return source["manifest"], report if report is not None else (source.get("report") or {})
    if isinstance(source, dict) and "partitions" in source:
        return source, report or {}
    raise ArtifactError(f"report: expected an artifact directory or a manifest dict, got {type(source).__name__}")


def _overhead(report: dict) -> tuple[float | None, float | None, int | None]:
    """(total ms, mean ms per boundary, boundaries) from report['boundary_overhead_ms']."""
    v = report.get("boundary_overhead_ms")
    if isinstance(v, dict):
        return _num(v.get("total_ms")), _num(v.get("mean_per_boundary_ms")), v.get("boundaries")
    return None, _num(v), None


def _tolerance(v: Any) -> str | None:
    if isinstance(v, dict):
        return ", ".join(f"{k} {x:.3g}" if isinstance(x, (int, float)) else f"{k} {x}" for k, x in v.items()) or None
    n = _num(v)
    return None if n is None else f"{n:.3g}"


def _numerics_ok(num: dict) -> bool | None:
    if isinstance(num.get("ok"), bool):
        return num["ok"]
    err, tol = _num(num.get("max_abs_err")), _num(num.get("tolerance"))
    return None if err is None or tol is None else err <= tol


def _verdict(s: dict) -> str:
    ok = s["numerics_ok"]
    verdict = "" if ok is None else ("ok" if ok else "EXCEEDED")
    if s["tolerance"] is None:
        return f" ({verdict})" if verdict else ""
    return f" (tolerance {s['tolerance']}" + (f": {verdict})" if verdict else ")")


# ---------------------------------------------------------------------- tables
#: a prediction this far from its measurement (either way) is flagged in the report, with why
OFF_BY = 0.25


def ratio(ms: float | None, other_ms: float | None) -> float | None:
    """``other_ms / ms``: the one computation behind every "x times" in the report (the baselines table's
    baseline ms / plan ms, the partitions' runner-up ratio, the chart's)."""
    return other_ms / ms if ms and other_ms is not None else None


def _searched_rows(manifest: dict, report: dict) -> list[dict] | None:
    """report.json's ``searched_plan`` partitions where they are the manifest's (same nodes and backends)."""
    rows = (report.get("searched_plan") or {}).get("partitions") or []
    parts = manifest["partitions"]
    same = len(rows) == len(parts) and all(r.get("backend") == p["backend"] and list(r.get("nodes") or []) ==
                                           list(p["nodes"]) for r, p in zip(rows, parts))
    return rows if same else None


def measured_ms(manifest: dict, report: dict) -> list[tuple[float | None, str]]:
    """Each partition's measured time and what it is: ``(plan_ms, "end to end")`` for a plan of one partition;
    its call inside the plan's verification runs, ``"in plan"`` (report.json ``searched_plan.in_plan_ms``);
    its cost timed alone in a worker, ``"alone"`` (``alone_ms``); else its predicted price (``cost_ms``),
    ``"predicted"`` (an older report, or a manifest without one)."""
    parts = manifest["partitions"]
    plan_ms = _num(report.get("plan_ms"))
    if len(parts) == 1 and plan_ms is not None:
        return [(plan_ms, "end to end")]
    searched = _searched_rows(manifest, report) or [{}] * len(parts)
    alone = list(report.get("alone_ms") or [])
    alone = alone if len(alone) == len(parts) else [None] * len(parts)
    out = []
    for p, row, a in zip(parts, searched, alone):
        if _num(row.get("in_plan_ms")) is not None:
            out.append((_num(row["in_plan_ms"]), "in plan"))
        elif _num(a) is not None:
            out.append((_num(a), "alone"))
        else:
            out.append((_num(p.get("cost_ms")), "predicted"))
    return out


def _runner_up(p: dict, ms: float | None, how: str, report: dict) -> tuple[str | None, float | None, float | None, str]:
    """(runner-up backend, its ms, its ms / the chosen one's, what both are): where the plan is one partition
    and the runner-up backend's whole model was measured beside it (its baseline), the two measurements (the
    baselines table's numbers, so its ratio is the table's); else both predicted prices."""
    ru = p.get("runner_up") or None
    if not ru:
        return None, None, None, ""
    base = _num((report.get("baselines") or {}).get(ru[0]))
    if how == "end to end" and base is not None:
        return ru[0], base, ratio(ms, base), "measured"
    return ru[0], _num(ru[1]), ratio(_num(p.get("cost_ms")), _num(ru[1])), "predicted"


def partition_table(source: Any, report: dict | None = None) -> pd.DataFrame:
    """One row per partition: index, backend, ops, op types, ms (measured: ``ms_is`` says how, see
    ``measured_ms``), runner-up, its ms and ``runner_up_ratio`` (both measured, ``ratio_of`` "measured", where
    the plan is one partition and the runner-up's baseline ran; else both predicted), share (%) of the ms, and
    ``predicted_ms``: the partition's price as the search charged it (``cost_ms``)."""
    manifest, report = _sources(source, report)
    rows = []
    for p, (ms, how) in zip(manifest["partitions"], measured_ms(manifest, report)):
        ops = list(p.get("ops") or [])
        ru, ru_ms, ru_ratio, ratio_of = _runner_up(p, ms, how, report)
        rows.append({"partition": int(p["index"]), "backend": p["backend"], "ops": len(p["nodes"]),
                     "op_types": _op_summary(ops) if ops else "", "ms": ms, "runner_up": ru, "runner_up_ms": ru_ms,
                     "ms_is": how, "predicted_ms": _num(p.get("cost_ms")), "runner_up_ratio": ru_ratio,
                     "ratio_of": ratio_of})
    cols = ["partition", "backend", "ops", "op_types", "ms", "runner_up", "runner_up_ms", "ms_is", "predicted_ms",
            "runner_up_ratio", "ratio_of"]
    df = pd.DataFrame(rows, columns=cols)
    for c in ("ms", "runner_up_ms", "predicted_ms", "runner_up_ratio"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    total = df["ms"].sum(min_count=1)
    df.insert(7, "share_pct", df["ms"] / total * 100.0 if total and total > 0 else float("nan"))
    prec = (report or {}).get("precision") or {}
    if prec.get("partitions"):  # precision + measured error per partition (collage.tuner.precision.tuner)
        by_index = {int(q["index"]): q for q in prec["partitions"]}
        df["precision"] = [by_index.get(int(k), {}).get("precision", "fp32") for k in df["partition"]]
        df["rel_err"] = pd.to_numeric([_num(by_index.get(int(k), {}).get("rel")) if by_index.get(int(k), {}).get("finite")
                                       is not False else float("inf") for k in df["partition"]], errors="coerce")
        df["cos"] = pd.to_numeric([_num(by_index.get(int(k), {}).get("cos")) for k in df["partition"]], errors="coerce")
    return df


def baselines_table(source: Any, report: dict | None = None) -> pd.DataFrame:
    """The whole model on each single backend (report.json "baselines") next to the plan."""
    _, report = _sources(source, report)
    plan_ms = _num(report.get("plan_ms"))
    rows = []
    for backend, v in (report.get("baselines") or {}).items():
        ms = _num(v)
        err = v.get("error") if isinstance(v, dict) else (None if ms is not None else "failed")
        rows.append({"backend": backend, "ms": ms, "error": err})
    if plan_ms is not None:
        rows.append({"backend": "collage plan", "ms": plan_ms, "error": None})
    df = pd.DataFrame(rows, columns=["backend", "ms", "error"])
    df["ms"] = pd.to_numeric(df["ms"], errors="coerce")
    df["plan_speedup"] = [ratio(plan_ms, ms) for ms in df["ms"]]  # the partitions' runner-up ratio alike
    df["plan_speedup"] = pd.to_numeric(df["plan_speedup"], errors="coerce")
    if df["error"].isna().all():
        df = df.drop(columns="error")
    return df.sort_values("ms", na_position="last").reset_index(drop=True)


def summary(source: Any, report: dict | None = None) -> dict[str, Any]:
    """Headline figures: plan vs best baseline, predicted vs measured, overhead, numerics."""
    manifest, report = _sources(source, report)
    parts = partition_table(manifest, report)
    base = {k: _num(v) for k, v in (report.get("baselines") or {}).items()}
    base = {k: v for k, v in base.items() if v is not None}
    best = min(base.items(), key=lambda kv: kv[1]) if base else None
    plan_ms = _num(report.get("plan_ms"))
    total, per, nb = _overhead(report)
    num = report.get("numerics") or {}
    return {
        "model": report.get("model") or manifest["model"].get("name"), "target": report.get("target") or manifest.get("target"),
        "partitions": len(parts), "backends": list(dict.fromkeys(parts["backend"])), "plan_ms": plan_ms,
        "predicted_ms": _num(report.get("predicted_ms")), "sum_parts_ms": _num(parts["predicted_ms"].sum(min_count=1)),
        "best_baseline": best[0] if best else None, "best_baseline_ms": best[1] if best else None,
        "speedup": (best[1] / plan_ms) if best and plan_ms else None,
        "overhead_total_ms": total, "overhead_per_boundary_ms": per,
        "boundaries": nb if nb is not None else max(0, len(parts) - 1),
        "max_abs_err": _num(num.get("max_abs_err")), "tolerance": _tolerance(num.get("tolerance")),
        "numerics_ok": _numerics_ok(num),
        "per_output": num.get("per_output") or {}, "notes": list(report.get("notes") or []),
        "extras": list(manifest["extras"] if "extras" in manifest else backend_extras(manifest.get("backends") or {})),
    }


# ---------------------------------------------------------------------- the document (one source)
#: readable column names of the tables as shown (the DataFrames keep their API names)
COLUMN_NAMES = {"partition": "#", "backend": "backend", "ops": "ops", "op_types": "op types", "ms": "ms",
                "runner_up": "runner-up", "runner_up_ms": "runner-up ms", "share_pct": "share of time %",
                "precision": "precision", "rel_err": "rel. error", "cos": "cosine", "error": "error",
                "plan_speedup": "baseline ms / plan ms", "ms_is": "ms measured", "predicted_ms": "predicted ms",
                "runner_up_ratio": "runner-up / chosen", "ratio_of": "runner-up ms"}
_DIGITS = {"share_pct": 1, "plan_speedup": 2, "cos": 6, "runner_up_ratio": 2}


@dataclass
class Section:
    """A part of the report: a title, paragraphs (``**bold**`` allowed), bullets, a table, pictures (SVG,
    HTML only; Markdown points to report.html)."""

    title: str
    text: list[str] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)
    table: pd.DataFrame | None = None
    pictures: list[str] = field(default_factory=list)
    #: what Markdown says in place of the pictures
    picture_note: str = "(picture in report.html)"


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        if v == math.inf:
            return "inf"
        return f"{v:.{digits}f}"
    return str(v)


def _sci(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}"


def _err(v: Any) -> float | None:
    return _num(v.get("max_abs_err") if isinstance(v, dict) else v)


def display(df: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: every cell a string (3 decimals, share 1, errors in scientific notation),
    readable column names."""
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        if c == "rel_err":
            out[c] = [_sci(v) if pd.notna(v) else "–" for v in df[c]]
        else:
            out[c] = [_fmt(v, _DIGITS.get(c, 3)) for v in df[c]]
    return out.rename(columns=COLUMN_NAMES)


def _coverage(report: dict) -> dict | None:
    """report['coverage'] (collage.report.coverage), or what older reports' 'measurements' tell."""
    if report.get("coverage"):
        return report["coverage"]
    m = report.get("measurements") or {}
    if m.get("distinct_keys") is None:
        return None
    distinct, left = int(m["distinct_keys"]), int(m.get("unmeasured") or 0)
    return {"distinct": distinct, "with_cost": distinct - left, "reused": m.get("reused") or 0,
            "measured_now": m.get("measured_now") or 0, "failed": m.get("failed_candidates") or 0,
            "unmeasured": left, "budget_s": None, "budget_cut": False, "unmeasured_nodes": None}


def _coverage_section(report: dict) -> Section | None:
    cov = _coverage(report)
    load = report.get("load")
    if cov is None:
        return Section("What was measured", bullets=[_cap(load_line(load))]) if load else None
    bullets = [measured_line(cov)[0].upper() + measured_line(cov)[1:]]
    if cov.get("estimates"):
        bullets.append(estimates_line(cov["estimates"])[0].upper() + estimates_line(cov["estimates"])[1:])
    if cov.get("refinement"):
        bullets.append(refinement_line(cov)[0].upper() + refinement_line(cov)[1:])
    if load:
        bullets.append(_cap(load_line(load)))
    return Section("What was measured", bullets=bullets)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _precision_section(report: dict) -> Section | None:
    """The accuracy budget, its calibration inputs, the end-to-end error, and the search's rounds as a table."""
    prec = report.get("precision")
    if not prec:
        return None
    cal = prec.get("calibration") or {}
    e2e = prec.get("end_to_end") or {}
    bullets = [f"budget: {prec.get('budget_text') or '–'} (per output: cosine similarity, max error / output range)",
               f"judged on: {cal.get('source', '–')}, {cal.get('samples', '–')} sample(s)"
               + (" — random inputs, not representative data" if cal.get("random") else "")]
    if e2e:
        verdict = "within budget" if e2e.get("within_budget") else "OVER BUDGET"
        err = "NaN/inf outputs" if e2e.get("finite") is False else \
            f"rel {_sci(_num(e2e.get('rel')))}, cos {_fmt(_num(e2e.get('cos')), 6)}"
        bullets.append(f"end to end (stitched artifact vs fp32 reference): {err}: **{verdict}**")
    if prec.get("fallback_fp32"):
        bullets.append("no plan with lower-precision partitions met the budget: the plan is fp32")
    bullets += [str(n) for n in prec.get("notes") or []]
    rows = []
    for k, r in enumerate(prec.get("rounds") or []):
        e = r.get("error") or {}
        rows.append({"round": str(k), "lambda": _sci(_num(r.get("lambda"))),
                     "lower-precision partitions": str(r.get("low_partitions", "–")),
                     "predicted ms": _fmt(_num(r.get("predicted_ms"))), "rel. error": _sci(_num(e.get("rel"))),
                     "cosine": _fmt(_num(e.get("cos")), 6), "verdict": "ok" if r.get("ok") else "over budget"})
    return Section("Precision (accuracy budget)", bullets=bullets, table=pd.DataFrame(rows) if rows else None)


def _speed_words(s: dict) -> str:
    sp = s["speedup"]
    if not sp:
        return ""
    if abs(sp - 1.0) < 0.005:
        return " (the plan is as fast)"
    return f" (the plan is {sp:.2f}x faster)" if sp > 1 else f" (the plan is {1 / sp:.2f}x slower)"


#: what the partitions table's columns are
PARTITIONS_TEXT = ("ms: the partition's measured time (\"ms measured\" says which: end to end, where the plan is "
                   "one partition; in plan, its call inside the plan's verification runs; alone, its cost timed alone "
                   "in a measurement worker; predicted, where nothing was measured); predicted ms: its price as the "
                   "search charged it; runner-up: the next best backend for the same nodes, its ms and ratio measured "
                   "where it ran the whole model beside a one-partition plan (the baselines below), else both "
                   "predicted")


def _off(predicted: float | None, measured: float | None) -> bool:
    return bool(predicted and measured) and abs(predicted / measured - 1.0) > OFF_BY


def _why(backend: str, predicted: float, measured: float, alone: float | None, report: dict, first: bool,
         as_ran: bool) -> str:
    """Why a partition's (or a one-partition plan's) prediction is off its measurement, from what report.json
    records: the backend's partition charges (level, cut charge) and its cost timed alone."""
    if as_ran:
        return ("the prediction is its time as it ran in one of the search's attempts; the verification measured it "
                "again later: the machine's speed moved between the two")
    charge = (report.get("partition_charges") or {}).get(backend) or {}
    level, cut = _num(charge.get("level")), _num(charge.get("cut_ms")) or 0.0
    if level is None:
        return "report.json records no partition charges to tell why"
    text = (f"the prediction charged {backend}'s cost timed alone in a measurement worker"
            + (f" ({alone:.3f} ms)" if alone is not None else "") + f" at its level {level:.3f} (its calls from an "
            "artifact against the worker's, measured before the search)"
            + ("" if first or not cut else f" plus a cut charge of {cut:.3f} ms"))
    if alone:
        now = (measured - (0.0 if first else cut)) / alone
        text += (f"; in the verification it ran at level {now:.3f}: the machine's level moved between the two "
                 "measurements (other work on the machine, or costs from an earlier run)")
    return text


def mispredictions(manifest: dict, report: dict) -> list[str]:
    """A line for the plan, and for each partition measured in the plan, whose prediction is more than ``OFF_BY``
    off its measurement, saying why (``_why``)."""
    parts = manifest["partitions"]
    rows = _searched_rows(manifest, report) or [{}] * len(parts)
    alone = list(report.get("alone_ms") or [])
    alone = alone if len(alone) == len(parts) else [None] * len(parts)
    out = []
    predicted, plan_ms = _num(report.get("predicted_ms")), _num(report.get("plan_ms"))
    if _off(predicted, plan_ms):
        line = f"**predicted {predicted:.3f} ms, measured {plan_ms:.3f} ms** end to end ({predicted / plan_ms:.2f}x)"
        if len(parts) == 1:
            as_ran = rows[0].get("searched_cost_ms") not in (None, rows[0].get("cost_ms"))
            line += ": " + _why(parts[0]["backend"], predicted, plan_ms, _num(alone[0]), report, True, as_ran)
        out.append(line)
    for p, (ms, how), row, a in zip(parts, measured_ms(manifest, report), rows, alone):
        cost = _num(p.get("cost_ms"))
        if how == "in plan" and _off(cost, ms):
            as_ran = row.get("searched_cost_ms") not in (None, row.get("cost_ms"))
            out.append(f"**partition {p['index']} on {p['backend']}: predicted {cost:.3f} ms, measured {ms:.3f} ms** "
                       f"in the plan ({cost / ms:.2f}x): " + _why(p["backend"], cost, ms, _num(a), report,
                                                                  0 in p["nodes"], as_ran))
    return out


def document(source: Any, report: dict | None = None) -> tuple[str, list[Section]]:
    """The report as (title, sections): the one source both renderers walk."""
    manifest, report = _sources(source, report)
    s = summary(manifest, report)
    parts = partition_table(manifest, report)
    title = f"collage report: {s['model']} on {s['target']}"
    head = f"Plan: {s['partitions']} partition(s) on {', '.join(s['backends'])}"
    if s["plan_ms"] is not None:
        head += f"; measured end to end **{s['plan_ms']:.3f} ms**"
    if s["best_baseline"]:
        head += f"; best single backend {s['best_baseline']} {s['best_baseline_ms']:.3f} ms" + _speed_words(s)
    need = ("To run it elsewhere: pip install " + " ".join(f"'collage[{e}]'" for e in s["extras"]) if s["extras"]
            else "To run it elsewhere: pip install collage (its partitions need ONNX Runtime only)")
    sections = [Section("", text=[head + ".", need + "."])]
    cov = _coverage_section(report)
    if cov:
        sections.append(cov)
    sections.append(Section("Partitions", table=display(parts), text=[PARTITIONS_TEXT]))
    sections.append(Section("Graph, coloured by backend", pictures=[render_svg(manifest)]))
    if parts["runner_up_ms"].notna().any() or len(parts) > 1:
        sections.append(Section("Time per partition against the runner-up",
                                pictures=[render_bars(parts.to_dict("records"))], picture_note="(chart in report.html)"))
    prec = _precision_section(report)
    if prec:
        sections.append(prec)
    base = baselines_table(manifest, report)
    sections.append(Section("Whole model on one backend", table=display(base) if len(base) else None,
                            text=[] if len(base) else ["(no baselines recorded)"]))
    pvm = [f"predicted by the search (parts + transitions): {_fmt(s['predicted_ms'])} ms",
           f"sum of the partitions' predicted prices (as charged): {_fmt(s['sum_parts_ms'])} ms",
           f"measured end to end (stitched artifact): {_fmt(s['plan_ms'])} ms"]
    if s["overhead_per_boundary_ms"] is not None and not s["boundaries"]:
        pvm.append("stitching overhead: none (a single partition)")
    elif s["overhead_per_boundary_ms"] is not None:
        pvm.append(f"stitching overhead: {_fmt(s['overhead_per_boundary_ms'])} ms per boundary over "
                   f"{s['boundaries']} boundaries" + (f" ({_fmt(s['overhead_total_ms'])} ms in all)"
                                                     if s["overhead_total_ms"] is not None else ""))
    sections.append(Section("Predicted vs measured", bullets=pvm + mispredictions(manifest, report)))
    if s["max_abs_err"] is not None:
        num = Section("Numerics (vs ONNX Runtime fp32 reference)",
                      bullets=[f"max abs error {s['max_abs_err']:.3g}" + _verdict(s)])
        if s["per_output"]:
            num.table = pd.DataFrame({"output": list(s["per_output"]),
                                      "max abs error": [_sci(_err(v)) for v in s["per_output"].values()]})
    else:
        num = Section("Numerics (vs ONNX Runtime fp32 reference)", bullets=["not recorded"])
    sections.append(num)
    if s["notes"]:
        sections.append(Section("Notes", bullets=[str(n) for n in s["notes"]]))
    return title, sections


# ---------------------------------------------------------------------- renderers of the document
def _md_cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")


def render_markdown(source: Any, report: dict | None = None) -> str:
    """The report as Markdown."""
    title, sections = document(source, report)
    lines = [f"# {title}", ""]
    for sec in sections:
        if sec.title:
            lines += [f"## {sec.title}", ""]
        lines += sec.text + ([sec.picture_note] if sec.pictures else [])
        if sec.text or sec.pictures:
            lines.append("")
        lines += [f"- {b}" for b in sec.bullets] + ([""] if sec.bullets else [])
        if sec.table is not None:
            cols = list(sec.table.columns)
            lines += ["| " + " | ".join(map(_md_cell, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
            lines += ["| " + " | ".join(_md_cell(str(v)) for v in row) + " |" for row in sec.table.itertuples(index=False)]
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


#: (nothing wider than the window: a long model, backend or tensor name with nowhere to break wraps anyway,
#: a number never (td.n); a table still too wide for the page scrolls in its own box)
_CSS = """body{font-family:sans-serif;margin:2em auto;max-width:1160px;padding:0 1em;color:#111;overflow-wrap:anywhere}
.table{overflow-x:auto;margin:1em 0}table{border-collapse:collapse}
td,th{border:1px solid #bbb;padding:3px 8px;text-align:left}th,td.n{overflow-wrap:normal;white-space:nowrap}
th{background:#eee}.figure{max-width:100%;border:1px solid #ddd;padding:4px}.bad{color:#a00000;font-weight:bold}"""


def _inline(text: str) -> str:
    """Escaped text; ``**x**`` -> <b>x</b>; OVER BUDGET / EXCEEDED marked."""
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(text))
    return re.sub(r"\b(EXCEEDED|OVER BUDGET)\b", r'<span class="bad">\1</span>', out)


#: a table cell that holds a number (as ``display`` writes them: 0.130, 1e-06, inf, –)
_NUMBER_CELL = re.compile(r"<td>([-+–0-9.e]+|inf)</td>")


def html_page(source: Any, report: dict | None = None) -> str:
    """The report as one HTML page (a string)."""
    title, sections = document(source, report)
    body = [f"<h1>{html.escape(title)}</h1>"]
    for sec in sections:
        if sec.title:
            body.append(f"<h2>{html.escape(sec.title)}</h2>")
        body += [f"<p>{_inline(t)}</p>" for t in sec.text]
        if sec.bullets:
            body.append("<ul>" + "".join(f"<li>{_inline(b)}</li>" for b in sec.bullets) + "</ul>")
        if sec.table is not None:
            body.append('<div class="table">' + _NUMBER_CELL.sub(r'<td class="n">\1</td>', sec.table.to_html(
                index=False, escape=True, border=0)) + "</div>")
        body += [f'<div class="figure">{svg}</div>' for svg in sec.pictures]
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<meta name='viewport' content='width=device-width'><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def render_html(out_dir: str | os.PathLike, dest: str | os.PathLike | None = None) -> Path:
    """Write the HTML page to ``dest`` (default ``out_dir/report.html``); return its path."""
    page = html_page(out_dir)
    dest = Path(dest) if dest is not None else Path(out_dir) / "report.html"
    tmp = dest.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, dest)
    return dest


def _plain(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if hasattr(v, "item"):
        return _plain(v.item())
    return v


def report_json(source: Any, report: dict | None = None) -> dict[str, Any]:
    """What ``collage report --format json`` prints (documented in the README): {"summary": summary(),
    "partitions": [partition_table rows], "baselines": [baselines_table rows], "coverage": {...} | null,
    "precision": report.json's "precision" | null}. NaN becomes null."""
    manifest, report = _sources(source, report)
    rows = lambda df: [{k: _plain(v) for k, v in r.items()} for r in df.to_dict("records")]  # noqa: E731
    return {"summary": {k: _plain(v) for k, v in summary(manifest, report).items()},
            "partitions": rows(partition_table(manifest, report)), "baselines": rows(baselines_table(manifest, report)),
            "coverage": _coverage(report), "precision": report.get("precision")}
