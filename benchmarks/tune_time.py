"""A tune's wall time against its ``--budget``, and what the budget buys: guided (the shipped cost model) vs
enumeration order on a fresh cost DB, each plan timed against a long-budget reference.

    python -m benchmarks.tune_time --work work/tt    # -> results/budget/tune-time.md (hours: resumable)
    python -m benchmarks.tune_time --work /tmp/tt --models tiny-resnet --budgets 20s --reference 40s --out /tmp/t.md

Issue 40's question: does ``collage tune --budget B`` end within 10% of B, how much of the search space does it
measure on a machine's first tune, and how good is the plan? Per model (``--models``) and budget (``--budgets``):

1. **Two tunes per budget, each a fresh process on a fresh cost DB** (nothing measured before, the zoo model
   already built): ``collage tune zoo:M --budget B --measure-order guided`` (the default under a budget: the
   shipped cost model, scaled by the probe, orders the measuring) and ``--measure-order enumeration``. Wall time
   is the process's, start-up included (the budget's clock starts there too).
2. **The reference**: one tune with ``--reference`` (default 20m) on a cost DB that merges every run's DB of this
   model (``INSERT OR IGNORE``: what any run measured is known, the rest is measured in its own budget): the best
   plan this machine finds for the model in about an hour of measuring.
3. **One interleaved run**: every artifact of the model loaded in this process and run on the same seeded inputs
   in interleaved rounds (a block of calls each, a fresh random order per round, ``--rounds`` after warm-up:
   ``benchmarks.budget.interleaved_ms``); medians paired round by round, against the reference's.

Resumable: a run whose ``run.json`` exists in ``--work`` is not tuned again (the table is rewritten after each
model, so an interrupted series still leaves one). A model's tunes and its interleaved timing run in one go.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._common import header, md_table, write_report
from benchmarks.budget import interleaved_ms, load_line, snapshot
from collage.tuner.checks import paired_medians
from collage.util import machine_id, parse_duration, source_commit

ORDERS = ("guided", "enumeration")
DEFAULT_MODELS = ("whisper-tiny-encoder", "resnet50", "nudenet-320n", "inception_v2", "shufflenet", "densenet121")
#: the --shape arguments a real zoo model needs (collage zoo list)
SHAPES = {"nudenet-320n": ["--shape", "images=1,3,320,320"], "ppocrv4-rec": ["--shape", "x=1,3,48,320"],
          "magika": ["--shape", "bytes=1,2048"]}


def merge_dbs(sources: list[Path], dest: Path) -> int:
    """``dest``: the first source's schema and rows, then every other source's rows ``INSERT OR IGNORE``d (a
    key already present keeps its first measurement). Returns the cost rows in ``dest``."""
    dest.unlink(missing_ok=True)
    first, *rest = sources
    snapshot(first, dest)
    d = sqlite3.connect(dest)
    tables = [r[0] for r in d.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                      "AND name NOT LIKE 'sqlite_%'")]
    with d:
        for i, src in enumerate(rest):
            d.execute(f"ATTACH DATABASE ? AS s{i}", (f"file:{src}?mode=ro",))
            theirs = {r[0] for r in d.execute(f"SELECT name FROM s{i}.sqlite_master WHERE type = 'table'")}
            for t in tables:
                if t in theirs:
                    d.execute(f"INSERT OR IGNORE INTO main.{t} SELECT * FROM s{i}.{t}")
    for i in range(len(rest)):
        d.execute(f"DETACH DATABASE s{i}")
    rows = sum(d.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables if t.startswith("costs"))
    d.close()
    return rows


def collage_command() -> str:
    """The ``collage`` script beside this interpreter (the project's venv), else the one on PATH."""
    here = Path(sys.executable).parent / "collage"
    return str(here) if here.exists() else (shutil.which("collage") or "collage")


def tune_run(model: str, run_dir: Path, budget: str, order: str, db: Path, args: argparse.Namespace) -> dict:
    """One ``collage tune`` process (or its ``run.json`` from an earlier series): wall time, coverage, plan."""
    done = run_dir / "run.json"
    if done.exists():
        return json.loads(done.read_text())
    out = run_dir / "out"
    cmd = [collage_command(), "tune", "-q", f"zoo:{model}", *SHAPES.get(model, []), "-o", str(out),
           "--db", str(db), "--budget", budget, "--backends", args.backends]
    if order != "default":
        cmd += ["--measure-order", order]
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    row = {"model": model, "budget": budget, "order": order, "wall_s": wall, "budget_s": parse_duration(budget),
           "rc": proc.returncode, "stderr": proc.stderr[-2000:], "load": (load_before + os.getloadavg()[0]) / 2,
           "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "artifact": str(out),
           "commit": source_commit()}
    if proc.returncode == 0:
        rep = json.loads((out / "report.json").read_text())
        cov = rep.get("coverage") or {}
        est = cov.get("estimates") or {}
        plan = json.loads((out / "plan.json").read_text())
        nodes: dict[str, int] = {}
        for p in plan["partitions"]:
            nodes[p["backend"]] = nodes.get(p["backend"], 0) + len(p["nodes"])
        row.update(distinct=cov.get("distinct"), with_cost=cov.get("with_cost"), estimated=est.get("estimated"),
                   shipped=bool(est.get("shipped")), tune_s=rep.get("tune_s"), plan_ms=rep.get("plan_ms"),
                   partitions=len(plan["partitions"]),
                   plan=", ".join(f"{b} {n}" for b, n in sorted(nodes.items(), key=lambda kv: -kv[1])),
                   model_error=(est.get("error") or {}).get("median_ape"))
    run_dir.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(row, indent=1))
    print(f"{model} {budget} {order}: rc {proc.returncode}, {wall:.0f} s ({wall / row['budget_s']:.2f}x), measured "
          f"{row.get('with_cost')} of {row.get('distinct')}", file=sys.stderr, flush=True)
    return row


def bench_model(model: str, args: argparse.Namespace, work: Path) -> dict:
    mdir = work / model
    runs = [tune_run(model, mdir / f"{b}-{o}", b, o, mdir / f"{b}-{o}.sqlite", args)
            for b in args.budgets for o in ORDERS]
    timed = mdir / "timed.json"
    if timed.exists():
        return json.loads(timed.read_text())
    ref_db = mdir / "reference.sqlite"
    if not (mdir / "reference" / "run.json").exists():
        merge_dbs([mdir / f"{r['budget']}-{r['order']}.sqlite" for r in runs], ref_db)
    ref = tune_run(model, mdir / "reference", args.reference, "default", ref_db, args)
    ok = {f"{r['budget']}-{r['order']}": r["artifact"] for r in runs + [ref] if r["rc"] == 0}
    ok = {k.replace("-default", ""): v for k, v in ok.items()}
    load_before = os.getloadavg()[0]
    samples = interleaved_ms(ok, args.rounds, args.seed)
    medians = paired_medians(samples)
    result = {"model": model, "runs": runs, "reference": ref, "e2e_ms": medians,
              "timing_load": (load_before + os.getloadavg()[0]) / 2, "machine": machine_id()}
    timed.write_text(json.dumps(result, indent=1))
    return result


def table(results: list[dict]) -> list[str]:
    head = ["model", "budget", "order", "wall s (x budget)", "measured / estimated / distinct", "% measured", "plan",
            "interleaved ms", "vs reference", "load"]
    rows = []
    for res in results:
        ref_ms = res["e2e_ms"].get(f"{res['reference']['budget']}")
        for r in res["runs"] + [res["reference"]]:
            key = f"{r['budget']}-{r['order']}".replace("-default", "")
            ms = res["e2e_ms"].get(key)
            pct = f"{100 * r['with_cost'] / r['distinct']:.0f}%" if r.get("distinct") else "-"
            counts = f"{r.get('with_cost')} / {_dash(r.get('estimated'))} / {r.get('distinct')}"
            rows.append([res["model"], r["budget"], "reference (merged DB)" if r["order"] == "default" else r["order"],
                         f"{r['wall_s']:.0f} ({r['wall_s'] / r['budget_s']:.2f}x)" if r["rc"] == 0 else
                         f"failed (rc {r['rc']})", counts, pct,
                         f"{r.get('partitions')} part.: {r.get('plan')}" + same_plan(r, res["reference"]),
                         "-" if ms is None else f"{ms:.3f}",
                         "-" if ms is None or not ref_ms else f"{ms / ref_ms:.3f}", f"{r['load']:.1f}"])
    return md_table(head, rows)


def plan_key(run: dict) -> tuple | None:
    """The artifact's plan as (backend, nodes) per partition, None where it has none."""
    path = Path(run["artifact"]) / "plan.json"
    if run["rc"] != 0 or not path.exists():
        return None
    return tuple((p["backend"], tuple(p["nodes"])) for p in json.loads(path.read_text())["partitions"])


def same_plan(run: dict, ref: dict) -> str:
    """' (the reference's plan)' where ``run`` chose the very plan the reference did (its ratio is then the timing
    noise alone), else ''."""
    if run is ref:
        return ""
    mine = plan_key(run)
    return " (the reference's plan)" if mine is not None and mine == plan_key(ref) else ""


def _dash(v: object) -> str:
    return "-" if v is None else str(v)


def summary(results: list[dict], budgets: list[str]) -> list[str]:
    runs = [r for res in results for r in res["runs"] if r["rc"] == 0]
    if not runs:
        return []
    cut = [r for r in runs if r["with_cost"] < r["distinct"]]
    ratios = [r["wall_s"] / r["budget_s"] for r in cut]
    lines = [f"- {len(runs) - len(cut)} of {len(runs)} budgeted tunes measured every candidate and ended early."]
    if ratios:
        inside = sum(0.9 <= x <= 1.1 for x in ratios)
        lines.append(f"- Wall time / budget over the {len(cut)} tunes the budget cut: {min(ratios):.2f}-"
                     f"{max(ratios):.2f} (median {np.median(ratios):.2f}); {inside} of {len(cut)} in [0.9, 1.1].")
    for b in budgets:
        frac = {o: [r["with_cost"] / r["distinct"] for r in runs if r["budget"] == b and r["order"] == o
                    and r.get("distinct")] for o in ORDERS}
        if all(frac.values()):
            g, e = (100 * np.median(frac[o]) for o in ORDERS)
            lines.append(f"- {b}: median fraction of distinct candidates measured, guided {g:.0f}%, enumeration "
                         f"{e:.0f}%.")
        vs = {o: [res["e2e_ms"][f"{b}-{o}"] / res["e2e_ms"][res["reference"]["budget"]] for res in results
                  if f"{b}-{o}" in res["e2e_ms"] and res["reference"]["budget"] in res["e2e_ms"]] for o in ORDERS}
        if all(vs.values()):
            shown = {o: ", ".join(f"{v:.3f}" for v in vs[o]) for o in ORDERS}
            lines.append(f"- {b}: plan vs reference (interleaved medians), guided {shown['guided']}"
                         f" ({sum(v <= 1.03 for v in vs['guided'])} of {len(vs['guided'])} within 3%); enumeration "
                         f"{shown['enumeration']} "
                         f"({sum(v <= 1.03 for v in vs['enumeration'])} of {len(vs['enumeration'])} within 3%).")
        same = {o: [bool(same_plan(r, res["reference"])) for res in results for r in res["runs"]
                    if r["budget"] == b and r["order"] == o] for o in ORDERS}
        lines.append(f"- {b}: the reference's very plan chosen by guided {sum(same['guided'])} of "
                     f"{len(same['guided'])}, enumeration {sum(same['enumeration'])} of {len(same['enumeration'])} "
                     "(where it is, the ratio above is the timing noise of two loads of one plan).")
    return lines + [code_line(results), ""]


def code_line(results: list[dict]) -> str:
    """Which commit each model's runs had (``run.json``'s ``commit``; runs before it was recorded: 'not recorded')."""
    parts = []
    for res in results:
        by: dict[str, list[str]] = {}
        for r in res["runs"] + [res["reference"]]:
            name = "reference" if r["order"] == "default" else f"{r['budget']} {r['order']}"
            by.setdefault(r.get("commit") or "not recorded", []).append(name)
        parts.append(f"{res['model']}: " + "; ".join(
            f"{c}" if len(by) == 1 else f"{c} ({', '.join(names)})" for c, names in by.items()))
    return "- Code of the runs (commit): " + " | ".join(parts) + "."


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="zoo models (built or fetched)")
    ap.add_argument("--budgets", nargs="+", default=["1m", "4m", "10m"])
    ap.add_argument("--reference", default="20m", help="the reference tune's budget, on the merged DB")
    ap.add_argument("--backends", default="onnxruntime,openvino")
    ap.add_argument("--rounds", type=int, default=40,
                    help="interleaved rounds (each times a block of calls of every artifact)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", required=True, help="folder for the runs (kept: a second call resumes)")
    ap.add_argument("--out", default="results/budget/tune-time.md")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.tune_time " + " ".join(argv if argv is not None else sys.argv[1:])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    start_load = load_line()
    results = []
    for model in args.models:
        results.append(bench_model(model, args, work))
        machines = sorted({r["machine"] for r in results})
        lines = header("Tune time against `--budget`, and what it buys on a fresh cost DB", command,
                       "Per model and budget, two `collage tune zoo:M --budget B` processes, each on a fresh cost "
                       "DB: `--measure-order guided` (the default under a budget: the shipped cost model orders "
                       "the measuring) and `--measure-order enumeration`; wall time of the whole process. The "
                       f"reference: `--budget {args.reference}` on a DB merging every run's DB of the model. "
                       "Then all of a model's artifacts run interleaved in one process on the same seeded inputs "
                       f"({args.rounds} rounds, a fresh random order each, a block of calls an artifact a round): "
                       "medians paired round by round, and their ratio to the reference's. Measured / estimated "
                       "/ distinct: distinct candidates (fingerprint x backend) "
                       "with a measured cost / priced by a cost model while guiding, never exported (guided only) / "
                       "all. Issue 40's goals: wall / budget in [0.9, 1.1]; plans within 3% of the "
                       "reference at 4m.")
        lines += [f"Machines of these rows: {'; '.join(machines)}. Load when this call started: {start_load}; "
                  f"ended: {load_line()}. 'load': the 1-minute load average around each tune.", ""]
        lines += table(results) + summary(results, args.budgets)
        write_report(args.out, lines, echo=False)


if __name__ == "__main__":
    main()
