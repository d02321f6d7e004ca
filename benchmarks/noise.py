"""Measurement noise: do two separate runs of collage's measurement agree?

    python -m benchmarks.noise --blocks 12      # resnet50 + bert-base, ORT + OpenVINO, two runs (~4-5 min, 2 cores)
    python -m benchmarks.noise --quick          # tiny-resnet + tiny-bert, few subgraphs (~1-2 min)
    python -m benchmarks.noise --protocols single,rounds --blocks 6   # A/B of measurement protocols

Writes results/measurement/noise.md (results/measurement/noise-quick.md with --quick):

1. Two **genuinely separate runs** per protocol: each run is its own process
   (``python -m benchmarks.noise --run-one``) calling ``measure_candidates`` (the tuner's path) on a
   fresh cost DB, over every distinct single node of each model, a seeded sample of multi-node
   candidates and the whole model. With several protocols the runs alternate (A1 B1 A2 B2), so that
   an A/B is taken in the same period. Agreement of the two runs' costs for subgraphs above 1 ms (the
   target: within 5%), and the same for other statistics of the same windows (lowest round, pooled p10).
2. Whether a statistic still predicts end to end: sum over all nodes of the single-node costs vs the
   whole model's cost, per statistic.
3. CV of single calls per backend and size class (first run of the first protocol).
4. Candidates vs distinct fingerprints for each model (what deduplication saves).
5. /proc/stat steal time and the CPU clock over the whole benchmark.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from collage import zoo
from collage.backends import get_backend, unavailable_reason
from collage.graph.ir import Graph
from collage.util import machine_id, physical_cores, source_commit

from benchmarks._common import write_atomic

log = logging.getLogger("benchmarks.noise")

CLASSES = [(0.0, 0.1, "< 0.1 ms"), (0.1, 1.0, "0.1-1 ms"), (1.0, 10.0, "1-10 ms"), (10.0, float("inf"), ">= 10 ms")]


def _class(ms: float) -> str:
    return next(name for lo, hi, name in CLASSES if lo <= ms < hi)


def subgraphs(graph: Graph, supports: dict[str, dict[int, bool]], n_multi: int,
              seed: int) -> list[tuple[tuple[int, ...], str]]:
    """Distinct single nodes, a seeded sample of multi-node candidates, the whole model: (nodes, kind)."""
    from collage.search.candidates import Limits, enumerate_candidates

    out: list[tuple[tuple[int, ...], str]] = []
    seen: set[str] = set()
    for i in range(len(graph)):
        fp = graph.fingerprint([i])
        if fp not in seen and all(s.get(i) for s in supports.values()):
            seen.add(fp)
            out.append(((i,), "node"))
    both = {i for i in range(len(graph)) if all(s.get(i) for s in supports.values())}
    cands = enumerate_candidates(graph, {"all": {i: i in both for i in range(len(graph))}}, Limits(max_nodes=8))
    multi = [c.nodes for c in cands if 2 <= len(c.nodes) < len(graph)]
    rng = random.Random(seed)
    picked = []
    for nodes in rng.sample(multi, min(len(multi), n_multi * 3)):
        fp = graph.fingerprint(nodes)
        if fp not in seen:
            seen.add(fp)
            picked.append((tuple(nodes), "block"))
        if len(picked) >= n_multi:
            break
    out.extend(sorted(picked))
    if len(both) == len(graph):
        out.append((tuple(range(len(graph))), "whole"))
    return out


#: Measurement protocols (``measure_candidates`` keyword arguments) the benchmark can compare.
PROTOCOLS: dict[str, dict] = {
    "single": {"rounds": 1, "window": 1},  # one window per candidate (collage's default)
    "rounds": {"rounds": 3},  # 3 windows, round robin over DEFAULT_WINDOW keys
    "rounds5": {"rounds": 5},
    "rounds-wide": {"window": 40},
    "rounds-procs": {"round_workers": True},
    "rounds-probe": {"probe": True},
}


def run_one(graph: Graph, subs, backends: list[str], cap_s: float, protocol: str, db: str) -> list[dict]:
    """One run: ``measure_candidates`` on a fresh DB; one row per (subgraph, backend)."""
    from collage.measure.schedule import measure_candidates

    items = [(nodes, b) for nodes, _ in subs for b in backends]
    table = measure_candidates(graph, items, db=db, cap_s=cap_s, progress=True, **PROTOCOLS[protocol])
    kinds = dict(subs)
    rows = []
    for (nodes, b), cost in table.items():
        if not cost.ok:
            log.warning("%s %s nodes %s failed: %s", graph.name, b, nodes[:4], cost.error)
            continue
        st = table.stats.get(cost.key)
        rows.append({"model": graph.name, "nodes": list(nodes), "kind": kinds[nodes], "backend": b,
                     "fingerprint": cost.fingerprint, "median_ms": cost.median_ms, "p10_ms": cost.p10_ms,
                     "p90_ms": cost.p90_ms, "samples": cost.samples,
                     "cv": st.cv if st else None, "ci": st.ci if st else None,
                     "round_ms": st.round_ms if st else [cost.median_ms]})
    return rows


def cpu_snapshot() -> dict:
    """Steal jiffies (/proc/stat) and the CPU clocks (/proc/cpuinfo)."""
    out: dict = {"steal": None, "total": None, "mhz": []}
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        vals = [int(x) for x in fields]
        out["steal"], out["total"] = vals[7] if len(vals) > 7 else 0, sum(vals)
        out["mhz"] = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("cpu MHz")]
    except (OSError, ValueError, IndexError):
        pass
    return out


def candidate_counts(graph: Graph, supports: dict[str, dict[int, bool]], max_nodes: int) -> tuple[int, int, dict]:
    from collage.search.candidates import Limits, enumerate_candidates

    cands = enumerate_candidates(graph, supports, Limits(max_nodes=max_nodes))
    fps: dict[tuple[int, ...], str] = {}
    per: dict[str, tuple[int, set]] = {}
    for c in cands:
        fp = fps.setdefault(c.nodes, graph.fingerprint(c.nodes))
        n, s = per.get(c.backend, (0, set()))
        s.add(fp)
        per[c.backend] = (n + 1, s)
    total_distinct = sum(len(s) for _, s in per.values())
    return len(cands), total_distinct, {b: (n, len(s)) for b, (n, s) in per.items()}


STATS = {"cost (median of rounds)": lambda r: r["median_ms"], "lowest round": lambda r: min(r["round_ms"]),
         "pooled p10": lambda r: r["p10_ms"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, few subgraphs (a smoke run)")
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default resnet50,bert-base)")
    ap.add_argument("--backends", default="onnxruntime,openvino")
    ap.add_argument("--blocks", type=int, default=None, help="multi-node candidates sampled per model")
    ap.add_argument("--cap", type=float, default=None, help="timing cap per candidate (all rounds), seconds")
    ap.add_argument("--max-nodes", type=int, default=None, help="candidate size limit for the counts")
    ap.add_argument("--protocols", default="single,rounds",
                    help=f"comma-separated measurement protocols to compare, of {', '.join(PROTOCOLS)} "
                         "(default: single,rounds)")
    ap.add_argument("--agree-above", type=float, default=None,
                    help="compare the two runs for subgraphs above this many ms (default 1; --quick 0.05)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--run-one", default=None, help=argparse.SUPPRESS)  # internal: one run, rows as JSON here
    ap.add_argument("--protocol", default="rounds", help=argparse.SUPPRESS)
    ap.add_argument("--db", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = (args.models or ("tiny-resnet,tiny-bert" if args.quick else "resnet50,bert-base")).split(",")
    blocks = args.blocks if args.blocks is not None else (4 if args.quick else 24)
    cap_s = args.cap if args.cap is not None else (0.3 if args.quick else 2.0)
    above = args.agree_above if args.agree_above is not None else (0.05 if args.quick else 1.0)
    max_nodes = args.max_nodes if args.max_nodes is not None else (4 if args.quick else 12)
    protocols = [p for p in args.protocols.split(",") if p]
    for p in protocols + [args.protocol]:
        if p not in PROTOCOLS:
            ap.error(f"unknown protocol {p!r}; known: {', '.join(PROTOCOLS)}")
    out = Path(args.out or ("results/measurement/noise-quick.md" if args.quick else "results/measurement/noise.md"))
    backends = [b for b in args.backends.split(",") if b]
    for b in list(backends):
        why = unavailable_reason(b)
        if why:
            log.warning("skipping %s: %s", b, why)
            backends.remove(b)
    if args.run_one:  # the child: one separate run
        rows = []
        for name in models:
            graph = zoo.load_graph(f"zoo:{name}")
            supports = {b: get_backend(b).supports_all(graph) for b in backends}
            rows += run_one(graph, subgraphs(graph, supports, blocks, seed=0), backends, cap_s, args.protocol, args.db)
        Path(args.run_one).write_text(json.dumps(rows))
        return 0

    t0 = time.time()
    cpu0 = cpu_snapshot()
    runs: dict[str, list[list[dict]]] = {p: [] for p in protocols}
    durations: dict[str, list[float]] = {p: [] for p in protocols}
    with tempfile.TemporaryDirectory(prefix="collage-noise-") as tmp:
        for rep in (1, 2):
            for proto in protocols:  # A1 B1 A2 B2: an A/B is taken in one period
                js, db = Path(tmp) / f"{proto}-{rep}.json", Path(tmp) / f"{proto}-{rep}.sqlite"
                cmd = [sys.executable, "-m", "benchmarks.noise", "--run-one", str(js), "--protocol", proto,
                       "--db", str(db), "--models", ",".join(models), "--backends", ",".join(backends),
                       "--blocks", str(blocks), "--cap", str(cap_s)]
                print(f"run {rep} of protocol {proto} ...", file=sys.stderr)
                t = time.time()
                subprocess.run(cmd, check=True,
                               env=dict(os.environ, COLLAGE_CACHE=str(Path(tmp) / f"cache-{proto}-{rep}")))
                durations[proto].append(time.time() - t)
                runs[proto].append(json.loads(js.read_text()))
    cpu1 = cpu_snapshot()
    counts = []
    for name in models:
        graph = zoo.load_graph(f"zoo:{name}")
        supports = {b: get_backend(b).supports_all(graph) for b in backends}
        counts.append((name, len(graph), *candidate_counts(graph, supports, max_nodes)))
    elapsed = time.time() - t0
    write(out, args, backends, models, cap_s, max_nodes, above, protocols, runs, durations, counts, (cpu0, cpu1),
          elapsed)
    print(f"wrote {out} in {elapsed:.0f} s")
    return 0


def agreement(run1: list[dict], run2: list[dict], above: float, stat) -> list[tuple[dict, float, float, float]]:
    """(row, run 1 value, run 2 value, relative difference) for subgraphs at least ``above`` ms in both runs."""
    second = {(r["model"], tuple(r["nodes"]), r["backend"]): r for r in run2}
    out = []
    for r in run1:
        r2 = second.get((r["model"], tuple(r["nodes"]), r["backend"]))
        if r2 is None or min(r["median_ms"], r2["median_ms"]) < above:
            continue
        a, b = stat(r), stat(r2)
        out.append((r, a, b, abs(a - b) / ((a + b) / 2)))
    return out


def end_to_end(run: list[dict], graphs: dict[str, Graph], stat) -> list[tuple[str, str, float, float]]:
    """(model, backend, sum over all nodes of single-node costs, whole-model cost) per model and backend."""
    out = []
    for name, graph in graphs.items():
        for b in sorted({r["backend"] for r in run if r["model"] == graph.name}):
            rows = [r for r in run if r["model"] == graph.name and r["backend"] == b]
            single = {r["fingerprint"]: stat(r) for r in rows if r["kind"] == "node"}
            whole = next((stat(r) for r in rows if r["kind"] == "whole"), None)
            fps = [graph.fingerprint([i]) for i in range(len(graph))]
            if whole is None or not all(fp in single for fp in fps):
                continue
            out.append((name, b, sum(single[fp] for fp in fps), whole))
    return out


def write(out: Path, args, backends, models, cap_s, max_nodes, above, protocols, runs, durations, counts, cpu,
          elapsed) -> None:
    cmd = "python -m benchmarks.noise" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    from collage.measure import schedule as M

    cpu0, cpu1 = cpu
    steal = (f"{(cpu1['steal'] - cpu0['steal']) / max(1, cpu1['total'] - cpu0['total']):.2%} of CPU time"
             if cpu0["steal"] is not None else "unknown")
    mhz = sorted(set(cpu0["mhz"] + cpu1["mhz"]))
    lines = [f"# Measurement noise{' (quick smoke run)' if args.quick else ''}", "",
             f"Command: `{cmd}` at commit {source_commit()} ({elapsed:.0f} s). Machine: {machine_id()}, "
             f"{physical_cores()} cores; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Models: "
             f"{', '.join(models)}; backends: {', '.join(backends)}; timing cap {cap_s} s per candidate (all its "
             f"rounds together). Steal time during the benchmark: {steal}; CPU clock seen: "
             f"{', '.join(f'{x:.0f}' for x in mhz) or 'unknown'} MHz.", "",
             f"Protocol `rounds` (`measure_candidates(rounds=3)`): every candidate measured in "
             f"3 windows of cap/3 (warm-up, single timed calls until the median's "
             f"95% CI is within 2% or the window's cap), a compile each, taken round robin over "
             f"{M.DEFAULT_WINDOW} candidates in flight; cost = median of the round medians. Protocol `single`: one "
             "window of the whole cap per candidate (collage's default, `rounds=1`). Each run is a separate process "
             "with a fresh cost DB.", "",
             f"## Same subgraph, two separate runs (subgraphs above {above:g} ms)", "",
             "| protocol | statistic | pairs | median difference | p90 | max | within 5% | run seconds |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for proto in protocols:
        r1, r2 = runs[proto]
        for sname, stat in STATS.items():
            ag = agreement(r1, r2, above, stat)
            if not ag:
                continue
            d = np.array([x[3] for x in ag])
            lines.append(f"| {proto} | {sname} | {len(ag)} | {np.median(d):.1%} | {np.percentile(d, 90):.1%} | "
                         f"{d.max():.1%} | {np.mean(d <= 0.05):.0%} | "
                         f"{' + '.join(f'{x:.0f}' for x in durations[proto])} |")
    graphs = {name: zoo.load_graph(f"zoo:{name}") for name in models}
    lines += ["", "## Does the statistic predict end to end? Sum of all single-node costs / whole-model cost", "",
              "| protocol | statistic | " + " | ".join(f"{m} {b}" for m in models for b in backends) + " |",
              "|---|---|" + "---:|" * (len(models) * len(backends))]
    for proto in protocols:
        for sname, stat in STATS.items():
            e2e = {(m, b): s / w for m, b, s, w in end_to_end(runs[proto][0], graphs, stat)}
            lines.append(f"| {proto} | {sname} | " + " | ".join(
                f"{e2e[(m, b)]:.2f}" if (m, b) in e2e else "-" for m in models for b in backends) + " |")
    main_proto = protocols[0]
    r1, r2 = runs[main_proto]
    ag = sorted(agreement(r1, r2, above, STATS["cost (median of rounds)"]), key=lambda x: -x[3])
    lines += ["", f"Largest differences, protocol `{main_proto}`:", "",
              "| subgraph | backend | run 1 ms | run 2 ms | difference | run 1 rounds ms | run 2 rounds ms |",
              "|---|---|---:|---:|---:|---|---|"]
    r2_by = {(r["model"], tuple(r["nodes"]), r["backend"]): r for r in r2}
    for r, a, b, d in ag[:25]:
        g = graphs.get(r["model"]) or next(iter(graphs.values()))
        label = (f"{r['model']} {r['kind']} "
                 f"{g.node_label(r['nodes'][0]) if r['kind'] == 'node' else len(r['nodes'])}")
        rr2 = r2_by[(r["model"], tuple(r["nodes"]), r["backend"])]
        lines.append(f"| {label} | {r['backend']} | {a:.3f} | {b:.3f} | {d:.1%} | "
                     f"{', '.join(f'{x:.3f}' for x in r['round_ms'])} | "
                     f"{', '.join(f'{x:.3f}' for x in rr2['round_ms'])} |")
    lines += ["", f"## CV of single calls, per backend and size class (protocol `{main_proto}`, run 1)", "",
              "CV (std/mean, pooled over a candidate's rounds) is pulled up by rare outliers on a shared machine; "
              "(p90-p10)/median is the robust spread; the last column is the half-range of the round medians "
              "(the CI half-width of the median for `single`).", "",
              "| backend | size class | subgraphs | median CV | p90 CV | median (p90-p10)/median | median spread of "
              "rounds | median samples |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    cv_rows: dict[tuple[str, str], list[dict]] = {}
    for r in r1:
        cv_rows.setdefault((r["backend"], _class(r["median_ms"])), []).append(r)
    for (b, cls) in sorted(cv_rows, key=lambda k: (k[0], [c[2] for c in CLASSES].index(k[1]))):
        rows = cv_rows[(b, cls)]
        cv = np.array([r["cv"] or 0.0 for r in rows])
        ci = np.array([r["ci"] if r["ci"] is not None and np.isfinite(r["ci"]) else np.nan for r in rows])
        spread = np.median([(r["p90_ms"] - r["p10_ms"]) / r["median_ms"] for r in rows])
        lines.append(f"| {b} | {cls} | {len(rows)} | {np.median(cv):.1%} | {np.percentile(cv, 90):.1%} | {spread:.1%} "
                     f"| {np.nanmedian(ci) if np.isfinite(ci).any() else float('nan'):.1%} | "
                     f"{int(np.median([r['samples'] for r in rows]))} |")
    lines += ["", f"## Candidates vs distinct fingerprints (candidates up to {max_nodes} nodes)", "",
              "| model | nodes | candidates | distinct (fingerprint, backend) | per backend: candidates / distinct |",
              "|---|---:|---:|---:|---|"]
    for name, n, total, distinct, per in counts:
        detail = "; ".join(f"{b} {c} / {d}" for b, (c, d) in sorted(per.items()))
        lines.append(f"| {name} | {n} | {total} | {distinct} ({distinct / max(total, 1):.0%}) | {detail} |")
    write_atomic(out, lines)


if __name__ == "__main__":
    sys.exit(main())
