"""What runs where in a tuned artifact, and why: ONE document model (``document``: sections of text,
bullets, pandas tables and pictures) rendered to Markdown (``render_markdown``), to an HTML page
(``render_html``, with the SVG pictures of :mod:`collage.report.svg`) and to JSON (``report_json``).

Inputs are the artifact's ``manifest.json`` (partitions, ops, measured costs, runner-ups; see
``collage.tuner.export``) and its ``report.json``, read as a :class:`collage.report.model.Report` (its records
say what each key holds; ``report.schema.json`` is the contract the tuner writes to). Every key is optional:
the report shows what is there. Every function that takes a ``report`` takes a Report or report.json's object.

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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from collage.runtime.artifact import artifact_dir, is_archive
from collage.runtime.manifest import read_manifest, read_plan, read_report
from collage.errors import ArtifactError
from collage.extras import backend_extras
from collage.report.coverage import busy_line, estimates_line, load_line, measured_line, refinement_line
from collage.report.model import (BaselineFailure, BoundaryOverhead, Calibration, Coverage, ErrorFigures, Numerics,
                                  PartitionCharge, PlannedPartition, PrecisionPartition, Report, as_report)
from collage.report.records import Record, write_value
from collage.report.rounds import rounds_line
from collage.report.svg import num as _num, op_summary as _op_summary, render_bars, render_svg
from collage.util import INT8_KERNEL_WORDS

#: a report as the functions below take it: a Report, report.json's object, or None (nothing recorded)
ReportLike = Report | dict[str, Any] | None

# ---------------------------------------------------------------------- inputs
def _sources(source: Any, report: ReportLike = None) -> tuple[dict, Report]:
    """(manifest, report) from an artifact directory, a manifest path, a manifest dict, or
    ``{"manifest": ..., "report": ...}``."""
    if isinstance(source, (str, os.PathLike)) and is_archive(source):
        with artifact_dir(source) as root:
            return _sources(root, report)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        manifest = read_manifest(path)
        root = path if path.is_dir() else path.parent
        rep = as_report(read_report(root, manifest) if report is None else report)
        plan = read_plan(root, manifest)  # checked against the manifest, like report.json
        if rep.predicted_ms is None and plan is not None:  # the search's objective, from plan.json
            rep = replace(rep, predicted_ms=_num(plan.get("predicted_ms")))
        return manifest, rep
    if isinstance(source, dict) and "manifest" in source:
        return source["manifest"], as_report(report if report is not None else source.get("report"))
    if isinstance(source, dict) and "partitions" in source:
        return source, as_report(report)
    raise ArtifactError(f"report: expected an artifact directory or a manifest dict, got {type(source).__name__}")


def _overhead(report: Report) -> tuple[float | None, float | None, int | None]:
    """(total ms, mean ms per boundary, boundaries) from the report's ``boundary_overhead_ms``."""
    v = report.boundary_overhead_ms
    if isinstance(v, BoundaryOverhead):
        return _num(v.total_ms), _num(v.mean_per_boundary_ms), v.boundaries
    return None, _num(v), None


def _tolerance(v: Any) -> str | None:
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {x:.3g}" if isinstance(x, (int, float)) else f"{k} {x}" for k, x in v.items()) or None
    n = _num(v)
    return None if n is None else f"{n:.3g}"


def _numerics_ok(num: Numerics) -> bool | None:
    if isinstance(num.ok, bool):
        return num.ok
    err, tol = _num(num.max_abs_err), _num(num.tolerance)
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


def _searched_rows(manifest: dict, report: Report) -> list[PlannedPartition] | None:
    """The report's ``searched_plan`` partitions where they are the manifest's (same nodes and backends)."""
    rows = report.searched_plan.partitions if report.searched_plan is not None else ()
    parts = manifest["partitions"]
    same = len(rows) == len(parts) and all(r.backend == p["backend"] and list(r.nodes) == list(p["nodes"])
                                           for r, p in zip(rows, parts))
    return list(rows) if same else None


def _alone_ms(manifest: dict, report: Report) -> list[float | None]:
    """The report's ``alone_ms`` where it has one per partition of the manifest, else unknowns."""
    n = len(manifest["partitions"])
    return list(report.alone_ms) if len(report.alone_ms) == n else [None] * n


def measured_ms(manifest: dict, report: ReportLike) -> list[tuple[float | None, str]]:
    """Each partition's measured time and what it is: ``(plan_ms, "end to end")`` for a plan of one partition;
    its call inside the plan's verification runs, ``"in plan"`` (report.json ``searched_plan.in_plan_ms``);
    its cost timed alone in a worker, ``"alone"`` (``alone_ms``); else its predicted price (``cost_ms``),
    ``"predicted"`` (an older report, or a manifest without one)."""
    report = as_report(report)
    parts = manifest["partitions"]
    plan_ms = _num(report.plan_ms)
    if len(parts) == 1 and plan_ms is not None:
        return [(plan_ms, "end to end")]
    searched = _searched_rows(manifest, report) or [PlannedPartition()] * len(parts)
    out = []
    for p, row, a in zip(parts, searched, _alone_ms(manifest, report)):
        if _num(row.in_plan_ms) is not None:
            out.append((_num(row.in_plan_ms), "in plan"))
        elif _num(a) is not None:
            out.append((_num(a), "alone"))
        else:
            out.append((_num(p.get("cost_ms")), "predicted"))
    return out


def _runner_up(p: dict, ms: float | None, how: str,
               report: Report) -> tuple[str | None, float | None, float | None, str]:
    """(runner-up backend, its ms, its ms / the chosen one's, what both are): where the plan is one partition
    and the runner-up backend's whole model was measured beside it (its baseline), the two measurements (the
    baselines table's numbers, so its ratio is the table's); else both predicted prices."""
    ru = p.get("runner_up") or None
    if not ru:
        return None, None, None, ""
    base = _num(report.baseline_ms().get(ru[0]))
    if how == "end to end" and base is not None:
        return ru[0], base, ratio(ms, base), "measured"
    return ru[0], _num(ru[1]), ratio(_num(p.get("cost_ms")), _num(ru[1])), "predicted"


def _precision_columns(df: pd.DataFrame, report: Report) -> None:
    """Each partition's precision and measured error (``precision.partitions``), where the report has them."""
    prec = report.precision
    if prec is None or not prec.partitions:
        return
    by_index = {int(q.index): q for q in prec.partitions if q.index is not None}
    rows = [by_index.get(int(k), PrecisionPartition()) for k in df["partition"]]
    df["precision"] = [q.precision if q.precision is not None else "fp32" for q in rows]
    df["rel_err"] = pd.to_numeric([_num(q.rel) if q.finite is not False else float("inf") for q in rows],
                                  errors="coerce")
    df["cos"] = pd.to_numeric([_num(q.cos) for q in rows], errors="coerce")


def partition_table(source: Any, report: ReportLike = None) -> pd.DataFrame:
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
    _precision_columns(df, report)
    return df


def baselines_table(source: Any, report: ReportLike = None) -> pd.DataFrame:
    """The whole model on each single backend (report.json "baselines") next to the plan."""
    _, report = _sources(source, report)
    plan_ms = _num(report.plan_ms)
    rows = []
    for (backend, v), ms in zip(report.baselines.items(), map(_num, report.baseline_ms().values())):
        err = v.error if isinstance(v, BaselineFailure) else (None if ms is not None else "failed")
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


def summary(source: Any, report: ReportLike = None) -> dict[str, Any]:
    """Headline figures: plan vs best baseline, predicted vs measured, overhead, numerics."""
    manifest, report = _sources(source, report)
    parts = partition_table(manifest, report)
    base = {k: _num(v) for k, v in report.baseline_ms().items()}
    base = {k: v for k, v in base.items() if v is not None}
    best = min(base.items(), key=lambda kv: kv[1]) if base else None
    plan_ms = _num(report.plan_ms)
    total, per, nb = _overhead(report)
    num = report.numerics or Numerics()
    return {
        "model": report.model or manifest["model"].get("name"), "target": report.target or manifest.get("target"),
        "partitions": len(parts), "backends": list(dict.fromkeys(parts["backend"])), "plan_ms": plan_ms,
        "predicted_ms": _num(report.predicted_ms), "sum_parts_ms": _num(parts["predicted_ms"].sum(min_count=1)),
        "best_baseline": best[0] if best else None, "best_baseline_ms": best[1] if best else None,
        "speedup": (best[1] / plan_ms) if best and plan_ms else None,
        "overhead_total_ms": total, "overhead_per_boundary_ms": per,
        "boundaries": nb if nb is not None else max(0, len(parts) - 1),
        "max_abs_err": _num(num.max_abs_err), "tolerance": _tolerance(num.tolerance),
        "numerics_ok": _numerics_ok(num),
        "per_output": write_value(num.per_output), "notes": list(report.notes),
        "extras": list(manifest["extras"] if "extras" in manifest else backend_extras(manifest.get("backends") or {})),
        # the int8 kernels each int8 backend's error was judged on (collage.util.int8_kernels)
        "int8_kernels": {name: info["int8_kernels"] for name, info in (manifest.get("backends") or {}).items()
                         if isinstance(info, dict) and info.get("int8_kernels")},
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


def _given(record: Record | None) -> bool:
    """Whether the report holds this part, with something in it (an empty object shows as nothing)."""
    return record is not None and bool(record.to_dict())


def _coverage(report: Report) -> Coverage | None:
    """The report's ``coverage`` (collage.report.coverage), or what older reports' ``measurements`` tell."""
    if _given(report.coverage):
        return report.coverage
    m = report.measurements
    if m is None or m.distinct_keys is None:
        return None
    distinct, left = int(m.distinct_keys), int(m.unmeasured or 0)
    return Coverage.from_dict({"distinct": distinct, "with_cost": distinct - left, "reused": m.reused or 0,
                               "measured_now": m.measured_now or 0, "failed": m.failed_candidates or 0,
                               "unmeasured": left, "budget_s": None, "budget_cut": False, "unmeasured_nodes": None})


def _coverage_section(report: Report) -> Section | None:
    """What was measured, in words (:mod:`collage.report.coverage`, which reads the records' JSON as the tuner
    passes it), and the load-time folding."""
    cov = _coverage(report)
    load = report.load.to_dict() if report.load is not None else None
    others = report.time.others if report.time is not None else None
    busy = busy_line(others.to_dict()) if others is not None else None
    bullets = []
    if cov is not None:
        words = cov.to_dict()
        bullets.append(_cap(measured_line(words)))
        if _given(cov.estimates):
            bullets.append(_cap(estimates_line(words["estimates"])))
        if _given(cov.refinement):
            bullets.append(_cap(refinement_line(words)))
    if load:
        bullets.append(_cap(load_line(load)))
    if busy is not None:
        bullets.append(f"**{_cap(busy)}**")
    return Section("What was measured", bullets=bullets) if bullets else None


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _dash(v: Any) -> Any:
    return "–" if v is None else v


def _precision_section(report: Report) -> Section | None:
    """The accuracy budget, its calibration inputs, the end-to-end error, and the search's rounds as a table."""
    prec = report.precision
    if not _given(prec):
        return None
    cal = prec.calibration or Calibration()
    e2e = prec.end_to_end
    bullets = [f"budget: {prec.budget_text or '–'} (per output: cosine similarity, max error / output range)",
               f"judged on: {_dash(cal.source)}, {_dash(cal.samples)} sample(s)"
               + (" — random inputs, not representative data" if cal.random else "")]
    if _given(e2e):
        verdict = "within budget" if e2e.within_budget else "OVER BUDGET"
        err = "NaN/inf outputs" if e2e.finite is False else f"rel {_sci(_num(e2e.rel))}, cos {_fmt(_num(e2e.cos), 6)}"
        bullets.append(f"end to end (stitched artifact vs fp32 reference): {err}: **{verdict}**")
    if prec.fallback_fp32:
        bullets.append("no plan with lower-precision partitions met the budget: the plan is fp32")
    bullets += [str(n) for n in prec.notes]
    rows = []
    for k, r in enumerate(prec.rounds):
        e = r.error or ErrorFigures()
        rows.append({"round": str(k), "lambda": _sci(_num(r.lam)),
                     "lower-precision partitions": str(_dash(r.low_partitions)),
                     "predicted ms": _fmt(_num(r.predicted_ms)), "rel. error": _sci(_num(e.rel)),
                     "cosine": _fmt(_num(e.cos), 6), "verdict": "ok" if r.ok else "over budget"})
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


def _why(backend: str, predicted: float, measured: float, alone: float | None, report: Report, first: bool,
         as_ran: bool) -> str:
    """Why a partition's (or a one-partition plan's) prediction is off its measurement, from what report.json
    records: the backend's partition charges (level, cut charge) and its cost timed alone."""
    if as_ran:
        return ("the prediction is its time as it ran in one of the search's attempts; the verification measured it "
                "again later: the machine's speed moved between the two")
    charge = report.partition_charges.get(backend) or PartitionCharge()
    level, cut = _num(charge.level), _num(charge.cut_ms) or 0.0
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


def _as_ran(row: PlannedPartition) -> bool:
    """Whether a searched partition's price is its time as it ran in one of the search's attempts."""
    return row.searched_cost_ms not in (None, row.cost_ms)


def mispredictions(manifest: dict, report: ReportLike) -> list[str]:
    """A line for the plan, and for each partition measured in the plan, whose prediction is more than ``OFF_BY``
    off its measurement, saying why (``_why``)."""
    report = as_report(report)
    parts = manifest["partitions"]
    rows = _searched_rows(manifest, report) or [PlannedPartition()] * len(parts)
    alone = _alone_ms(manifest, report)
    out = []
    predicted, plan_ms = _num(report.predicted_ms), _num(report.plan_ms)
    if _off(predicted, plan_ms):
        line = f"**predicted {predicted:.3f} ms, measured {plan_ms:.3f} ms** end to end ({predicted / plan_ms:.2f}x)"
        if len(parts) == 1:
            line += ": " + _why(parts[0]["backend"], predicted, plan_ms, _num(alone[0]), report, True, _as_ran(rows[0]))
        out.append(line)
    for p, (ms, how), row, a in zip(parts, measured_ms(manifest, report), rows, alone):
        cost = _num(p.get("cost_ms"))
        if how == "in plan" and _off(cost, ms):
            as_ran = _as_ran(row)
            out.append(f"**partition {p['index']} on {p['backend']}: predicted {cost:.3f} ms, measured {ms:.3f} ms** "
                       f"in the plan ({cost / ms:.2f}x): " + _why(p["backend"], cost, ms, _num(a), report,
                                                                  0 in p["nodes"], as_ran))
    return out


def document(source: Any, report: ReportLike = None) -> tuple[str, list[Section]]:
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
    judged = sorted(set(s["int8_kernels"].values()))
    if judged:
        need += (f". Its int8 partitions ({', '.join(s['int8_kernels'])}) were judged within the accuracy budget on "
                 f"{' and '.join(INT8_KERNEL_WORDS.get(k, k) for k in judged)} int8 kernels; a CPU with the other kind "
                 "rounds differently: check the outputs there (loading it there warns)")
    sections = [Section("", text=[head + ".", need + "."])]
    cov = _coverage_section(report)
    if cov:
        sections.append(cov)
    sections.append(Section("Partitions", table=display(parts), text=[PARTITIONS_TEXT]))
    sections.append(Section("Graph, coloured by backend", pictures=[render_svg(manifest)]))
    if parts["runner_up_ms"].notna().any() or len(parts) > 1:
        sections.append(Section("Time per partition against the runner-up",
                                pictures=[render_bars(parts.to_dict("records"))],
                                picture_note="(chart in report.html)"))
    prec = _precision_section(report)
    if prec:
        sections.append(prec)
    base = baselines_table(manifest, report)
    steady = rounds_line(report)
    sections.append(Section("Whole model on one backend", table=display(base) if len(base) else None,
                            text=([] if len(base) else ["(no baselines recorded)"])
                            + ([_cap(steady) + "."] if steady else [])))
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


def render_markdown(source: Any, report: ReportLike = None) -> str:
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
            lines += ["| " + " | ".join(_md_cell(str(v)) for v in row) + " |"
                      for row in sec.table.itertuples(index=False)]
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


def html_page(source: Any, report: ReportLike = None) -> str:
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


def report_json(source: Any, report: ReportLike = None) -> dict[str, Any]:
    """What ``collage report --format json`` prints (documented in the README): {"summary": summary(),
    "partitions": [partition_table rows], "baselines": [baselines_table rows], "coverage": {...} | null,
    "precision": report.json's "precision" | null}. NaN becomes null."""
    manifest, report = _sources(source, report)
    rows = lambda df: [{k: _plain(v) for k, v in r.items()} for r in df.to_dict("records")]  # noqa: E731
    return {"summary": {k: _plain(v) for k, v in summary(manifest, report).items()},
            "partitions": rows(partition_table(manifest, report)), "baselines": rows(baselines_table(manifest, report)),
            "coverage": write_value(_coverage(report)), "precision": write_value(report.precision)}
