"""What runs where in a tuned artifact, and why: pandas tables, Markdown, and an HTML page with a
picture of the graph coloured by backend.

Inputs are the artifact's ``manifest.json`` (partitions, ops, measured costs, runner-ups; see
``collage.tuner.export``) and ``report.json``, which the tuner fills with this schema (every key
optional; the report shows what is there)::

    {
      "model": "resnet50", "source": "/path/model.onnx", "target": "cpu",
      "backends": ["onnxruntime", "openvino"],              # backends the tuner considered
      "baselines": {"onnxruntime": 30.1, "openvino": 29.8},  # whole model on one backend, median ms
                                                             # (null or {"error": "..."} when it failed)
      "plan_ms": 27.9,            # measured end-to-end median of the stitched artifact (same run)
      "predicted_ms": 26.5,       # the search's objective (partition costs + transition costs)
      "numerics": {"max_abs_err": 3e-6,                      # vs the ONNX Runtime fp32 reference
                   "tolerance": 1e-3 | {"atol": 1e-4, "rtol": 1e-3},
                   "ok": true,                               # optional; else max_abs_err <= tolerance
                   "per_output": {"logits": 3e-6 | {"max_abs_err": 3e-6, ...}}},
      "boundary_overhead_ms": 0.05 | {<Artifact.boundary_overhead().to_dict()>},
      "notes": ["never worse: fell back to onnxruntime", ...],
      "candidates": {"total": 812, "onnxruntime": 406, ...}, # counts by kind, free-form
      "measurements": {"candidates": 812, "with_cost": 800, "failed": 12, ...},
      "search_s": 0.4, "tune_s": 512.0,
      "precision": {                    # only under --accuracy (collage.tuner.precision.tuner.PrecisionTuner.report)
        "budget": {"min_cos": 0.999, "max_rel": 0.01}, "budget_text": "cos>=0.999, rel<=0.01",
        "calibration": {"source": "inputs.npz", "samples": 8, "hash": "...", "random": false},
        "partitions": [{"index": 0, "backend": "openvino-bf16", "precision": "bf16", "rel": 2e-3,
                        "cos": 0.99999, "finite": true, "budget_share": 0.2}],
        "end_to_end": {"rel": 3e-3, "cos": 0.99998, "finite": true, "within_budget": true},
        "rounds": [{"lambda": 0.0, "low_partitions": 3, "predicted_ms": 5.1, "ok": true, "error": {...}}],
        "fallback_fp32": false, "notes": ["..."]}
    }

A partition's "ms" is its measured cost as the search used it (``cost_ms`` in the manifest: the
median of a full call on its backend, timed alone); "share" is its part of the sum of those costs.

CLI: ``collage report OUT [--format md|html|csv]`` prints Markdown (or CSV) and writes
``OUT/report.html``.
"""
from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from collage.runtime.manifest import REPORT_FILE, read_manifest
from collage.errors import ArtifactError
from collage.report.svg import num as _num, op_summary as _op_summary, render_svg

# ---------------------------------------------------------------------- inputs
def _sources(source: Any, report: dict | None = None) -> tuple[dict, dict]:
    """(manifest, report) from an artifact directory, a manifest path, a manifest dict, or
    ``{"manifest": ..., "report": ...}``."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        manifest = read_manifest(path)
        root = path if path.is_dir() else path.parent
        rpath = root / manifest.get("report", REPORT_FILE)
        if report is None:
            try:
                report = json.loads(rpath.read_text()) if rpath.is_file() else {}
            except (OSError, json.JSONDecodeError) as e:
                raise ArtifactError(f"{rpath}: unreadable report ({e}); re-run `collage tune`") from None
        report = dict(report or {})
        ppath = root / manifest.get("plan", "plan.json")
        if report.get("predicted_ms") is None and ppath.is_file():  # the search's objective, from plan.json
            try:
                report["predicted_ms"] = json.loads(ppath.read_text()).get("predicted_ms")
            except (OSError, json.JSONDecodeError, AttributeError):
                pass
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
def partition_table(source: Any, report: dict | None = None) -> pd.DataFrame:
    """One row per partition: index, backend, ops, op types, ms, runner-up and its ms, share (%)."""
    manifest, report = _sources(source, report)
    rows = []
    for p in manifest["partitions"]:
        ru = p.get("runner_up") or None
        ops = list(p.get("ops") or [])
        rows.append({"partition": int(p["index"]), "backend": p["backend"], "ops": len(p["nodes"]),
                     "op_types": _op_summary(ops) if ops else "", "ms": _num(p.get("cost_ms")),
                     "runner_up": ru[0] if ru else None, "runner_up_ms": _num(ru[1]) if ru else None})
    df = pd.DataFrame(rows, columns=["partition", "backend", "ops", "op_types", "ms", "runner_up", "runner_up_ms"])
    df["ms"] = pd.to_numeric(df["ms"], errors="coerce")
    df["runner_up_ms"] = pd.to_numeric(df["runner_up_ms"], errors="coerce")
    total = df["ms"].sum(min_count=1)
    df["share_pct"] = df["ms"] / total * 100.0 if total and total > 0 else float("nan")
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
    df["plan_speedup"] = df["ms"] / plan_ms if plan_ms else float("nan")
    if df["error"].isna().all():
        df = df.drop(columns="error")
    return df.sort_values("ms", na_position="last").reset_index(drop=True)


def summary(source: Any, report: dict | None = None) -> dict[str, Any]:
    """Headline figures: plan vs best baseline, predicted vs measured, overhead, numerics."""
    manifest, report = _sources(source, report)
    parts = partition_table(manifest)
    base = {k: _num(v) for k, v in (report.get("baselines") or {}).items()}
    base = {k: v for k, v in base.items() if v is not None}
    best = min(base.items(), key=lambda kv: kv[1]) if base else None
    plan_ms = _num(report.get("plan_ms"))
    total, per, nb = _overhead(report)
    num = report.get("numerics") or {}
    return {
        "model": report.get("model") or manifest["model"].get("name"), "target": report.get("target") or manifest.get("target"),
        "partitions": len(parts), "backends": list(dict.fromkeys(parts["backend"])), "plan_ms": plan_ms,
        "predicted_ms": _num(report.get("predicted_ms")), "sum_parts_ms": _num(parts["ms"].sum(min_count=1)),
        "best_baseline": best[0] if best else None, "best_baseline_ms": best[1] if best else None,
        "speedup": (best[1] / plan_ms) if best and plan_ms else None,
        "overhead_total_ms": total, "overhead_per_boundary_ms": per,
        "boundaries": nb if nb is not None else max(0, len(parts) - 1),
        "max_abs_err": _num(num.get("max_abs_err")), "tolerance": _tolerance(num.get("tolerance")),
        "numerics_ok": _numerics_ok(num),
        "per_output": num.get("per_output") or {}, "notes": list(report.get("notes") or []),
    }


# ---------------------------------------------------------------------- Markdown
def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v).replace("|", "\\|")


def _md_table(df: pd.DataFrame, digits: dict[str, int] | None = None) -> str:
    digits = digits or {}
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(df[c]) else "---" for c in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, digits.get(c, 3)) for c, v in zip(cols, row)) + " |")
    return "\n".join(lines)


def _sci(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}"


def _err(v: Any) -> float | None:
    return _num(v.get("max_abs_err") if isinstance(v, dict) else v)


def render_markdown(out_dir: Any) -> str:
    """The report as Markdown (headline, partitions, baselines, prediction, numerics, notes)."""
    manifest, report = _sources(out_dir)
    s = summary(manifest, report)
    parts = partition_table(manifest, report)
    if "rel_err" in parts:  # errors span decades: scientific notation
        parts["rel_err"] = [_sci(v) if pd.notna(v) else "–" for v in parts["rel_err"]]
    lines = [f"# collage report: {s['model']} on {s['target']}", ""]
    head = f"Plan: {s['partitions']} partition(s) on {', '.join(s['backends'])}"
    if s["plan_ms"] is not None:
        head += f"; measured end to end **{s['plan_ms']:.3f} ms**"
    if s["best_baseline"]:
        head += (f"; best single backend {s['best_baseline']} {s['best_baseline_ms']:.3f} ms"
                 + (f" (plan is {s['speedup']:.2f}x)" if s["speedup"] else ""))
    lines += [head + ".", "", "## Partitions", "",
              _md_table(parts, {"share_pct": 1, "rel_err": 6, "cos": 6}), "", *_precision_lines(report),
              "## Whole model on one backend", ""]
    base = baselines_table(manifest, report)
    lines += [_md_table(base, {"plan_speedup": 2}) if len(base) else "(no baselines recorded)", ""]
    lines += ["## Predicted vs measured", "",
              f"- predicted by the search (parts + transitions): {_fmt(s['predicted_ms'])} ms",
              f"- sum of partition costs (each timed alone): {_fmt(s['sum_parts_ms'])} ms",
              f"- measured end to end (stitched artifact): {_fmt(s['plan_ms'])} ms"]
    if s["overhead_per_boundary_ms"] is not None and not s["boundaries"]:
        lines.append("- stitching overhead: none (a single partition)")
    elif s["overhead_per_boundary_ms"] is not None:
        lines.append(f"- stitching overhead: {_fmt(s['overhead_per_boundary_ms'])} ms per boundary over "
                     f"{s['boundaries']} boundaries" + (f" ({_fmt(s['overhead_total_ms'])} ms in all)"
                                                       if s["overhead_total_ms"] is not None else ""))
    lines += ["", "## Numerics (vs ONNX Runtime fp32 reference)", ""]
    if s["max_abs_err"] is not None:
        lines.append(f"- max abs error {s['max_abs_err']:.3g}" + _verdict(s))
        for name, v in s["per_output"].items():
            lines.append(f"  - {name}: {_sci(_err(v))}")
    else:
        lines.append("- not recorded")
    if s["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in s["notes"]]
    return "\n".join(lines) + "\n"


def _precision_lines(report: dict) -> list[str]:
    """The accuracy budget, its calibration inputs and the end-to-end error against it (collage.tuner.precision.tuner)."""
    prec = report.get("precision")
    if not prec:
        return []
    cal = prec.get("calibration") or {}
    e2e = prec.get("end_to_end") or {}
    lines = ["## Precision (accuracy budget)", "",
             f"- budget: {prec.get('budget_text') or '–'} (per output: cosine similarity, max error / output range)",
             f"- judged on: {cal.get('source', '–')}, {cal.get('samples', '–')} sample(s)"
             + (" — random inputs, not representative data" if cal.get("random") else "")]
    if e2e:
        verdict = "within budget" if e2e.get("within_budget") else "OVER BUDGET"
        err = "NaN/inf outputs" if e2e.get("finite") is False else f"rel {_sci(_num(e2e.get('rel')))}, cos {_fmt(_num(e2e.get('cos')), 6)}"
        lines.append(f"- end to end (stitched artifact vs fp32 reference): {err}: **{verdict}**")
    if prec.get("fallback_fp32"):
        lines.append("- no plan with lower-precision partitions met the budget: the plan is fp32")
    lines += [f"- {n}" for n in prec.get("notes") or []]
    for k, r in enumerate(prec.get("rounds") or []):
        e = r.get("error") or {}
        lines.append(f"  - round {k}: lambda {_sci(_num(r.get('lambda')))}, {r.get('low_partitions')} lower-precision "
                     f"partition(s), predicted {_fmt(_num(r.get('predicted_ms')))} ms"
                     + (f", rel {_sci(_num(e.get('rel')))}, cos {_fmt(_num(e.get('cos')), 6)}" if e else "")
                     + (": ok" if r.get("ok") else ": over budget"))
    return lines + [""]


# ---------------------------------------------------------------------- HTML
_CSS = """body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:nth-child(2),td:nth-child(4)
{text-align:left}.ok{color:#2a7d2a}.bad{color:#b00020;font-weight:bold}.figure{overflow:auto;border:1px solid #ddd}"""


def render_html(out_dir: str | os.PathLike) -> Path:
    """Write ``out_dir/report.html`` (tables, the graph picture, prediction, numerics, notes); return it."""
    root = Path(out_dir)
    manifest, report = _sources(root)
    s = summary(manifest, report)
    e = html.escape
    parts = partition_table(manifest, report)
    base = baselines_table(manifest, report)
    fmt = {c: (lambda v: _fmt(v)) for c in ("ms", "runner_up_ms")} | {"share_pct": lambda v: _fmt(v, 1),
                                                                      "plan_speedup": lambda v: _fmt(v, 2)}
    body = [f"<h1>collage report: {e(str(s['model']))} on {e(str(s['target']))}</h1>",
            f"<p>{s['partitions']} partition(s) on {e(', '.join(s['backends']))}. Measured end to end: "
            f"<b>{_fmt(s['plan_ms'])} ms</b>; best single backend: {e(str(s['best_baseline']))} "
            f"{_fmt(s['best_baseline_ms'])} ms" + (f" (plan is {s['speedup']:.2f}x)" if s["speedup"] else "") + ".</p>",
            "<h2>Partitions</h2>", parts.to_html(index=False, na_rep="–", formatters=fmt, escape=True),
            "<h2>Graph, coloured by backend</h2>", f'<div class="figure">{render_svg(manifest)}</div>',
            *([f"<pre>{e(chr(10).join(_precision_lines(report)))}</pre>"] if report.get("precision") else []),
            "<h2>Whole model on one backend</h2>",
            base.to_html(index=False, na_rep="–", formatters=fmt, escape=True) if len(base) else "<p>(none recorded)</p>",
            "<h2>Predicted vs measured</h2><ul>",
            f"<li>predicted by the search (parts + transitions): {_fmt(s['predicted_ms'])} ms</li>",
            f"<li>sum of partition costs (each timed alone): {_fmt(s['sum_parts_ms'])} ms</li>",
            f"<li>measured end to end (stitched artifact): {_fmt(s['plan_ms'])} ms</li>"]
    if s["overhead_per_boundary_ms"] is not None and s["boundaries"]:
        body.append(f"<li>stitching overhead: {_fmt(s['overhead_per_boundary_ms'])} ms per boundary over "
                    f"{s['boundaries']} boundaries</li>")
    body.append("</ul><h2>Numerics (vs ONNX Runtime fp32 reference)</h2>")
    if s["max_abs_err"] is not None:
        ok = s["numerics_ok"] is not False
        body.append(f'<p class="{"ok" if ok else "bad"}">max abs error {s["max_abs_err"]:.3g}' + e(_verdict(s))
                    + "</p><ul>" + "".join(f"<li>{e(str(k))}: {_sci(_err(v))}</li>" for k, v in s["per_output"].items())
                    + "</ul>")
    else:
        body.append("<p>not recorded</p>")
    if s["notes"]:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(str(n))}</li>" for n in s["notes"]) + "</ul>")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>collage report: {e(str(s['model']))}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    dest = root / "report.html"
    tmp = dest.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, dest)
    return dest
