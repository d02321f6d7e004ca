"""Measurement noise: how stable are the costs collage measures?

    python -m benchmarks.noise             # resnet50 + bert-base, onnxruntime + openvino (~25-40 min, 2 cores)
    python -m benchmarks.noise --quick     # tiny-resnet + tiny-bert, few subgraphs (~1-2 min)

Writes results/noise.md (results/noise-quick.md with --quick):

1. CV per backend and size class: every distinct single node of each model, a seeded sample of
   multi-node candidates and the whole model, each measured the way the tuner measures (a worker
   process, warm-up, timed calls until the median's 95% CI is within 2% or the cap).
2. The same subgraphs measured again in a second, separate pass (fresh worker processes): the
   agreement of the two medians, for subgraphs above 1 ms (the target: within 5%).
3. Candidates vs distinct fingerprints for each model (what deduplication saves).
"""
from __future__ import annotations

import argparse
import datetime
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from collage import zoo
from collage.backends import get_backend, unavailable_reason
from collage.cost_models.measure import Measurer
from collage.graph import Graph
from collage.util import machine_id, physical_cores

log = logging.getLogger("benchmarks.noise")

CLASSES = [(0.0, 0.1, "< 0.1 ms"), (0.1, 1.0, "0.1-1 ms"), (1.0, 10.0, "1-10 ms"), (10.0, float("inf"), ">= 10 ms")]


def _class(ms: float) -> str:
    return next(name for lo, hi, name in CLASSES if lo <= ms < hi)


def subgraphs(graph: Graph, supports: dict[str, dict[int, bool]], n_multi: int, seed: int) -> list[tuple[tuple[int, ...], str]]:
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


def measure_pass(graph: Graph, subs, backends: list[str], cap_s: float, desc: str) -> dict:
    res = {}
    with tqdm(total=len(subs) * len(backends), desc=desc, file=sys.stderr) as bar:
        for b in backends:
            with Measurer() as m:
                for nodes, kind in subs:
                    r = m.measure(graph.extract(nodes), b, {}, cap_s=cap_s)
                    res[(nodes, b)] = (kind, r)
                    bar.update(1)
    return res


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, few subgraphs (a smoke run)")
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default resnet50,bert-base)")
    ap.add_argument("--backends", default="onnxruntime,openvino")
    ap.add_argument("--blocks", type=int, default=None, help="multi-node candidates sampled per model")
    ap.add_argument("--cap", type=float, default=None, help="timing cap per measurement, seconds")
    ap.add_argument("--max-nodes", type=int, default=None, help="candidate size limit for the counts")
    ap.add_argument("--agree-above", type=float, default=None,
                    help="compare the two runs for subgraphs above this many ms (default 1; --quick 0.05)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = (args.models or ("tiny-resnet,tiny-bert" if args.quick else "resnet50,bert-base")).split(",")
    blocks = args.blocks if args.blocks is not None else (4 if args.quick else 24)
    cap_s = args.cap if args.cap is not None else (0.3 if args.quick else 2.0)
    above = args.agree_above if args.agree_above is not None else (0.05 if args.quick else 1.0)
    max_nodes = args.max_nodes if args.max_nodes is not None else (4 if args.quick else 12)
    out = Path(args.out or ("results/noise-quick.md" if args.quick else "results/noise.md"))
    backends = [b for b in args.backends.split(",") if b]
    for b in list(backends):
        why = unavailable_reason(b)
        if why:
            log.warning("skipping %s: %s", b, why)
            backends.remove(b)
    t0 = time.time()
    cv_rows: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
    agree: list[tuple[str, str, str, float, float]] = []
    counts = []
    for name in models:
        graph = zoo.load_graph(f"zoo:{name}")
        supports = {b: get_backend(b).supports_all(graph) for b in backends}
        subs = subgraphs(graph, supports, blocks, seed=0)
        first = measure_pass(graph, subs, backends, cap_s, f"{name} pass 1")
        second = measure_pass(graph, subs, backends, cap_s, f"{name} pass 2")
        for key, (kind, r) in first.items():
            r2 = second[key][1]
            if not (r.ok and r2.ok):
                log.warning("%s %s %s failed: %s", name, key[1], kind, r.error or r2.error)
                continue
            spread = (r.p90_ms - r.p10_ms) / r.median_ms
            cv_rows.setdefault((key[1], _class(r.median_ms)), []).append((r.cv, r.ci, r.median_ms, r.samples, spread))
            if min(r.median_ms, r2.median_ms) >= above:
                label = f"{name} {kind} {graph.node_label(key[0][0]) if kind == 'node' else len(key[0])}"
                agree.append((label, key[1], kind, r.median_ms, r2.median_ms))
        counts.append((name, len(graph), *candidate_counts(graph, supports, max_nodes)))
    elapsed = time.time() - t0
    write(out, args, backends, models, cap_s, max_nodes, above, cv_rows, agree, counts, elapsed)
    print(f"wrote {out} in {elapsed:.0f} s")
    return 0


def write(out: Path, args, backends, models, cap_s, max_nodes, above, cv_rows, agree, counts, elapsed) -> None:
    cmd = "python -m benchmarks.noise" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    lines = [f"# Measurement noise{' (quick smoke run)' if args.quick else ''}", "",
             f"Command: `{cmd}` ({elapsed:.0f} s). Machine: {machine_id()}, {physical_cores()} cores; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Models: {', '.join(models)}; "
             f"backends: {', '.join(backends)}; timing cap {cap_s} s per measurement.", "",
             "Each measurement: a fresh worker process, warm-up, then single timed calls until the median's "
             "distribution-free 95% CI is within 2% of it or the cap passes.", "",
             "## CV of single calls, per backend and size class", "",
             "CV (std/mean) is pulled up by rare outliers on a shared machine; (p90-p10)/median is the robust spread.",
             "", "| backend | size class | subgraphs | median CV | p90 CV | median (p90-p10)/median | median CI half-width "
             "| median samples |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (b, cls) in sorted(cv_rows, key=lambda k: (k[0], [c[2] for c in CLASSES].index(k[1]))):
        rows = cv_rows[(b, cls)]
        cv = np.array([r[0] for r in rows])
        ci = np.array([r[1] for r in rows])
        spread = np.median([r[4] for r in rows])
        lines.append(f"| {b} | {cls} | {len(rows)} | {np.median(cv):.1%} | {np.percentile(cv, 90):.1%} | {spread:.1%} | "
                     f"{np.median(ci):.1%} | {int(np.median([r[3] for r in rows]))} |")
    lines += ["", f"## Same subgraph, two separate runs (subgraphs above {above:g} ms)", ""]
    if agree:
        diffs = np.array([abs(a - b) / ((a + b) / 2) for _, _, _, a, b in agree])
        lines += [f"{len(agree)} subgraph x backend pairs; median difference {np.median(diffs):.1%}, p90 "
                  f"{np.percentile(diffs, 90):.1%}, max {diffs.max():.1%}; within 5%: {np.mean(diffs <= 0.05):.0%}.", "",
                  "| subgraph | backend | run 1 ms | run 2 ms | difference |", "|---|---|---:|---:|---:|"]
        for (label, b, _, m1, m2), d in sorted(zip(agree, diffs), key=lambda x: -x[1])[:40]:
            lines.append(f"| {label} | {b} | {m1:.3f} | {m2:.3f} | {d:.1%} |")
    else:
        lines.append(f"No subgraph above {above:g} ms was measured.")
    lines += ["", f"## Candidates vs distinct fingerprints (candidates up to {max_nodes} nodes)", "",
              "| model | nodes | candidates | distinct (fingerprint, backend) | per backend: candidates / distinct |",
              "|---|---:|---:|---:|---|"]
    for name, n, total, distinct, per in counts:
        detail = "; ".join(f"{b} {c} / {d}" for b, (c, d) in sorted(per.items()))
        lines.append(f"| {name} | {n} | {total} | {distinct} ({distinct / max(total, 1):.0%}) | {detail} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
