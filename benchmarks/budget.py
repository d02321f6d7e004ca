"""Tuning under a budget: guided vs enumeration-order measuring, against a reference tuned with a long budget.

    python -m benchmarks.budget --train-db DB --models bert-base resnet50 vit-b16 gpt2-small  # ->
    results/budget/budget.md
    python -m benchmarks.budget --train-db DB --models tiny-resnet --budget 15s --reference 60s --out /tmp/b.md

Issue 20's question: does a plan tuned under ``--budget 2m`` come within 3% of the plan tuned with every
candidate measured (or a 30-minute budget)? Per zoo model (``--models``):

1. **Training DB.** A copy of ``--train-db`` (SQLite) without this model's rows: every fingerprint of a
   candidate the tuner could enumerate for it (every node taken as supported, ``Limits(max_nodes=max(12,
   --max-nodes))`` plus the coarse ranges: a superset) is deleted from every table keyed by fingerprint
   (costs, claims, numeric errors, features). Identical blocks of other models go too: the model is new,
   and guided measuring starts from what the *other* models taught the learned cost model. The features of
   the rows kept are stored in the copy where it lacks them (computed from the zoo graphs, as
   ``benchmarks.cost_model`` does: a DB filled by enumeration-order tunes holds costs without features, and
   the learned model trains only on rows with features).
2. **Three tunes**, each on its own copy of that DB, same ``--max-nodes`` and backends: ``enumeration``
   (``--budget B``, measuring in enumeration order: today's default, the baseline column), ``guided``
   (``--budget B --measure-order guided``), ``reference`` (``--reference R``, enumeration order; ``none``:
   no budget, every candidate measured).
3. **One interleaved run.** The three artifacts are loaded in this process and run on the same seeded inputs
   in interleaved rounds (each round a block of calls of every artifact, in a fresh random order; ``--rounds``
   after warm-up: :func:`interleaved_ms`); the medians, paired round by round, are compared with the
   reference's.

The table: per run, the plan (partitions; nodes per backend), candidates measured / estimated (guided only:
priced by the learned model, never exported) / distinct, the tune's wall time, the tune's own end-to-end
measurement of its plan, the interleaved median and its ratio to the reference. The machine's load average
is stated: on a busy machine the medians are noisy and the tunes' budgets buy fewer measurements. Time: per
model two budgets B, the reference R and each tune's compile / verify / export (minutes for a large model), so
about 45 minutes per model with the defaults on 2 cores. ``--train-db``: an SQLite file (only read).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import header, md_table, write_report
from benchmarks.cost_model import model_fingerprints
from collage import zoo
from collage.measure.connect import get_db
from collage.cost_models.features import FEATURES_KIND
from collage.search.candidates import Limits, enumerate_candidates
from collage.search.ranges import range_candidates
from collage.tuner.checks import paired_medians
from collage.util import physical_cores

log = logging.getLogger("benchmarks.budget")

#: the runs, in table order
RUNS = ("enumeration", "guided", "reference")
DEFAULT_MODELS = ("bert-base", "resnet50", "vit-b16", "gpt2-small")


def own_fingerprints(name: str, max_nodes: int) -> set[str]:
    """Every fingerprint of a candidate the tuner could enumerate for zoo model ``name`` (a superset)."""
    graph = zoo.load_graph(f"zoo:{name}")
    every = {"any": {i: True for i in range(len(graph))}}
    sets = {c.nodes for c in enumerate_candidates(graph, every, Limits(max_nodes=max(12, max_nodes)))}
    sets |= {c.nodes for c in range_candidates(graph, every)}
    sets.add(tuple(range(len(graph))))
    return {graph.fingerprint(nodes) for nodes in sets}


def zoo_features(db_path: str) -> dict[str, dict[str, float]]:
    """Features of every fingerprint measured in the DB (a snapshot: opened read-write) that a built zoo model's
    candidates have."""
    db = get_db(db_path)
    measured = {c.fingerprint for c in db.all()}
    db.close()
    out: dict[str, dict[str, float]] = {}
    for name in zoo.names():
        if zoo.is_built(name):
            feats = model_fingerprints(name)
            out.update({fp: f for fp, f in feats.items() if fp in measured})
    return out


def snapshot(src: str | Path, dest: Path) -> None:
    """``src`` copied to ``dest`` with SQLite's backup (consistent while another process writes it, WAL included;
    ``src`` is only read)."""
    s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    d = sqlite3.connect(dest)
    try:
        s.backup(d)
    finally:
        s.close()
        d.close()


def training_copy(src: Path, dest: Path, fingerprints: set[str],
                  features: dict[str, dict[str, float]]) -> dict[str, int]:
    """``src`` copied to ``dest`` without the rows of ``fingerprints`` in any table with a ``fingerprint`` column,
    with ``features`` of the rest stored where missing. Returns the cost rows kept and removed, and the
    fingerprints with features."""
    snapshot(src, dest)
    d = sqlite3.connect(dest)
    with d:
        d.execute("CREATE TEMP TABLE gone (fp TEXT PRIMARY KEY)")
        d.executemany("INSERT OR IGNORE INTO gone VALUES (?)", [(fp,) for fp in fingerprints])
        tables = [r[0] for r in d.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        removed = 0
        for t in tables:
            if "fingerprint" in [c[1] for c in d.execute(f"PRAGMA table_info({t})")]:
                n = d.execute(f"DELETE FROM {t} WHERE fingerprint IN (SELECT fp FROM gone)").rowcount
                removed += n if t.startswith("costs") else 0
        kept = sum(d.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables if t.startswith("costs"))
    d.close()
    db = get_db(str(dest))
    have = db.get_features(FEATURES_KIND)
    new = {fp: f for fp, f in features.items() if fp not in fingerprints and fp not in have}
    db.put_features(FEATURES_KIND, new)
    db.close()
    return {"kept": kept, "removed": removed, "features": len(new) + len(have)}


def plan_text(plan: Any) -> str:
    """``7 partitions: onnxruntime 120 nodes, openvino 43``."""
    nodes: Counter = Counter()
    for p in plan.partitions:
        nodes[p.backend] += len(p.nodes)
    n = len(plan.partitions)
    return f"{n} partition{'s' * (n != 1)}: " + ", ".join(f"{b} {k}" for b, k in nodes.most_common())


def tune_one(model: str, run: str, out: Path, db: Path, budget: str | None, args: argparse.Namespace) -> dict:
    import collage

    t0 = time.monotonic()
    res = collage.tune(f"zoo:{model}", out, backends=args.backends, budget=budget, db=db, progress=False,
                       limits=Limits(max_nodes=args.max_nodes), seed=args.seed,
                       measure_order="guided" if run == "guided" else "enumeration")
    took = time.monotonic() - t0
    cov = res.report.get("coverage") or {}
    est = cov.get("estimates") or {}
    return {"run": run, "budget": budget or "none", "artifact": str(res.out_dir), "plan": plan_text(res.plan),
            "distinct": cov.get("distinct"), "measured": cov.get("with_cost"),
            "estimated": est.get("estimated") if est else None, "unpriced": est.get("unpriced") if est else None,
            "model_error": (est.get("error") or {}).get("median_ape") if est else None,
            "training_rows": est.get("training_rows") if est else None, "stopped": est.get("stopped") if est else None,
            "tune_s": took, "tune_ms": float(res.plan_ms), "predicted_ms": res.plan.predicted_ms}


@contextlib.contextmanager
def artifact_runners(artifacts: Mapping[str, str | Path], seed: int) -> Iterator[dict[str, Callable[[], object]]]:
    """Each artifact loaded in this process, as a call on its own seeded inputs (the same seed for all), gc off
    while they run; closed on leaving."""
    import collage

    loaded = {k: collage.load(p) for k, p in artifacts.items()}
    feeds = {k: a.check_feeds(a.random_inputs(seed)) for k, a in loaded.items()}
    gc.disable()
    try:
        yield {k: (lambda k=k: loaded[k].run(feeds[k])) for k in loaded}
    finally:
        gc.enable()
        for a in loaded.values():
            a.close()


def interleaved_ms(artifacts: dict[str, str], rounds: int, seed: int, block_s: float = 0.15) -> dict[str, list[float]]:
    """Each artifact loaded in this process and timed in ``rounds`` interleaved rounds on the same seeded inputs,
    a fresh random order per round (gc off): per round, its block median in ms (a block: at least ``block_s`` and
    3 calls; ``collage.tuner.checks.interleaved_rounds``). Blocks, not one call each: the first call after another
    artifact pays to bring its weights and threads back (shufflenet, ~2.5 ms a call: ~0.4 ms, and ~0.1 ms more
    after another runtime: results/budget/timing-method.md), which a deployed model running alone never pays;
    single calls charged the runtime with fewer artifacts in the round the switch more often."""
    from collage.tuner.checks import interleaved_rounds

    with artifact_runners(artifacts, seed) as runners:
        return interleaved_rounds(runners, rounds=rounds, min_time_s=block_s, shuffle=random.Random(seed))


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def bench_model(model: str, args: argparse.Namespace, work: Path, features: dict[str, dict[str, float]] | None,
                earlier: dict | None = None) -> dict:
    """``earlier``: this model's result from an earlier run in ``work`` (--rerun): its training copy and the
    artifacts of the runs not named in --rerun are kept, the named runs tuned again, all timed anew
    (``features`` is only read to make a training copy, so it is None then)."""
    mdir = work / model
    t0 = time.monotonic()
    base = mdir / "train.sqlite"
    if earlier is None:
        own = own_fingerprints(model, args.max_nodes)
        shutil.rmtree(mdir, ignore_errors=True)
        mdir.mkdir(parents=True)
        fps, kept = len(own), training_copy(work / "snapshot.sqlite", base, own, features or {})
    else:
        fps, kept = earlier["fingerprints"], earlier["kept"]
    print(f"{model}: {fps} candidate fingerprints; training DB keeps {kept['kept']} cost rows "
          f"({kept['features']} fingerprints with features), {kept['removed']} of this model's removed "
          f"({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    budgets = {"enumeration": args.budget, "guided": args.budget,
               "reference": None if args.reference == "none" else args.reference}
    rows: dict[str, dict] = {}
    for run in RUNS:
        if earlier is not None and run not in args.rerun:
            drop = ("e2e_ms", "e2e_p10", "e2e_p90", "ratio")
            rows[run] = {k: v for k, v in earlier["rows"][run].items() if k not in drop}
            rows[run]["reused"] = True
            continue
        shutil.rmtree(mdir / f"out-{run}", ignore_errors=True)
        db = mdir / f"{run}.sqlite"
        snapshot(base, db)
        load_before = os.getloadavg()[0]
        rows[run] = tune_one(model, run, mdir / f"out-{run}", db, budgets[run], args)
        rows[run]["load"] = (load_before + os.getloadavg()[0]) / 2
        print(f"{model} {run}: {rows[run]['plan']}; measured {rows[run]['measured']} of {rows[run]['distinct']}; "
              f"{rows[run]['tune_s']:.0f} s; {rows[run]['tune_ms']:.3f} ms", file=sys.stderr)
    load_before = os.getloadavg()[0]
    samples = interleaved_ms({r: rows[r]["artifact"] for r in RUNS}, args.rounds, args.seed)
    paired = paired_medians(samples)
    for run in RUNS:
        rows[run]["e2e_ms"] = paired[run]
        rows[run]["e2e_p10"], rows[run]["e2e_p90"] = (float(np.percentile(samples[run], q)) for q in (10, 90))
    ref = rows["reference"]["e2e_ms"]
    for run in RUNS:
        rows[run]["ratio"] = rows[run]["e2e_ms"] / ref
    return {"model": model, "rows": rows, "kept": kept, "fingerprints": fps,
            "timing_load": (load_before + os.getloadavg()[0]) / 2}


def table(results: list[dict]) -> list[str]:
    head = ["model", "run", "budget", "plan", "measured / estimated / distinct", "tune s", "tune's e2e ms",
            "interleaved e2e ms (p10-p90)", "vs reference", "load"]
    out = []
    for res in results:
        for run in RUNS:
            r = res["rows"][run]
            est = "-" if r["estimated"] is None else str(r["estimated"])
            out.append([res["model"], run + (" (earlier tune)" if r.get("reused") else ""), r["budget"], r["plan"],
                        f"{r['measured']} / {est} / {r['distinct']}",
                        f"{r['tune_s']:.0f}", f"{r['tune_ms']:.3f}",
                        f"{r['e2e_ms']:.3f} ({r['e2e_p10']:.3f}-{r['e2e_p90']:.3f})",
                        "1 (reference)" if run == "reference" else f"{r['ratio']:.3f}", f"{r['load']:.1f}"])
    return md_table(head, out)


def goal_lines(results: list[dict]) -> list[str]:
    lines = []
    for res in results:
        rows = res["rows"]
        g, e = rows["guided"]["ratio"], rows["enumeration"]["ratio"]
        lines.append(f"- {res['model']}: guided {100 * (g - 1):+.1f}% vs the reference "
                     f"({'within' if g <= 1.03 else 'NOT within'} 3%), enumeration order {100 * (e - 1):+.1f}%; "
                     f"guided measured {rows['guided']['measured']} of {rows['guided']['distinct']} "
                     f"({rows['guided']['estimated']} estimated; the learned model's median error on this run's "
                     f"measurements {_pct(rows['guided']['model_error'])}; {rows['guided']['stopped']}); "
                     f"training DB: {res['kept']['kept']} cost rows of other models, {res['kept']['features']} "
                     f"fingerprints with features ({res['kept']['removed']} of this model's rows removed); "
                     f"interleaved timing at load "
                     f"{res['timing_load']:.1f}.")
    return lines + [""]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-db", required=True, help="SQLite cost DB of other models' measurements (read only)")
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="zoo models")
    ap.add_argument("--budget", default="2m", help="the budget of the enumeration and guided runs")
    ap.add_argument("--reference", default="30m", help="the reference run's budget ('none': measure every candidate)")
    ap.add_argument("--max-nodes", type=int, default=6, help="Limits.max_nodes of every tune (default 6)")
    ap.add_argument("--backends", default="onnxruntime,openvino")
    ap.add_argument("--rounds", type=int, default=50,
                    help="interleaved rounds (each times a block of calls of every artifact)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", help="folder for the DB copies and artifacts (default: a temporary one, removed)")
    ap.add_argument("--out", default="results/budget/budget.md")
    ap.add_argument("--rerun", nargs="+", choices=RUNS, default=None,
                    help="with --work of an earlier run: tune only these runs again (e.g. guided after the learned "
                         "cost model changed), keep the others' artifacts, time all three interleaved anew")
    args = ap.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    command = "python -m benchmarks.budget " + " ".join(argv if argv is not None else sys.argv[1:])
    logging.basicConfig(level=logging.WARNING)
    start_load = load_line()
    started = datetime.datetime.now(datetime.UTC)
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="collage-budget-")
    work = Path(args.work or tmp.name)
    results = []
    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    earlier: dict[str, dict] = {}
    if args.rerun:
        if not args.work or not (work / "budget.json").exists():
            sys.exit(f"benchmarks.budget: --rerun needs --work of an earlier run (no {work / 'budget.json'})")
        earlier = {r["model"]: r for r in json.loads((work / "budget.json").read_text())}
        missing = [m for m in args.models if m not in earlier]
        if missing:
            sys.exit(f"benchmarks.budget: --rerun: {work / 'budget.json'} has no {', '.join(missing)}")
    features = None  # only a new training copy reads them
    if not args.rerun:
        snapshot(args.train_db, work / "snapshot.sqlite")
        features = zoo_features(str(work / "snapshot.sqlite"))
        print(f"features of {len(features)} measured fingerprints from the zoo graphs ({time.monotonic() - t0:.0f} s)",
              file=sys.stderr)
    try:
        for model in args.models:
            results.append(bench_model(model, args, work, features, earlier.get(model)))
            (work / "budget.json").write_text(json.dumps(results, indent=1, default=str))
    finally:
        if tmp is not None:
            tmp.cleanup()
    lines = header("Tuning under a budget: guided vs enumeration-order measuring", command,
                   f"Per model: a copy of `{args.train_db}` without the model's own rows (leave-one-model-out), then "
                   f"three tunes on copies of it (`--max-nodes {args.max_nodes}`, {', '.join(args.backends)}): "
                   f"`--budget {args.budget}` in enumeration order (today's default: the baseline), `--budget "
                   f"{args.budget} --measure-order guided`, and the reference (`--budget {args.reference}`, "
                   "enumeration order; 'none': every candidate measured). The three artifacts then run in one "
                   f"process on the same seeded inputs, interleaved ({args.rounds} rounds, a fresh random order "
                   "each; a block of calls an artifact a round; medians paired round by round). Measured / "
                   "estimated / distinct: distinct candidates with a measured cost / priced by the "
                   "learned cost model and never exported (guided only) / distinct candidates (fingerprint x "
                   "backend). Goal (issue 20): guided within 3% of the reference."
                   + (f" This run (--rerun {' '.join(args.rerun)}) tuned only {', '.join(args.rerun)} again; the "
                      "other runs' artifacts (marked 'earlier tune') come from the earlier run in the same --work "
                      "folder, on the same training copy; all three were timed anew, interleaved."
                      if args.rerun else ""))
    lines += [f"Machine load: {start_load} when the run started ({started:%H:%M} UTC), {load_line()} when it "
              f"ended; {physical_cores()} physical cores. 'load' column: the 1-minute load average around each tune.",
              ""]
    lines += table(results)
    lines += goal_lines(results)
    write_report(args.out, lines)


if __name__ == "__main__":
    main()
