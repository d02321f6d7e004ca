"""How long the search takes on real architectures (candidate enumeration + the DP).

    python -m benchmarks.search_time            # bert-base + resnet50 (~10 s; +1 min the first time, building bert-base)
    python -m benchmarks.search_time --quick    # tiny-bert + tiny-resnet (seconds)

Writes results/search-time.md (results/search-time-quick.md with --quick).

The costs are SYNTHETIC (this benchmark times the search, not the backends): every node is supported
on three backends, and a candidate's cost on a backend is derived deterministically from its nodes'
FLOPs and output sizes with per-backend speed factors per op class, a per-call overhead, a discount for
elementwise ops fused with others, and a +-25% per-(node, backend) jitter from a hash, so that the
winner changes from node to node and the DP has a real mix to find. Transition cost: 0.02 ms + bytes
at 4 GB/s.
"""
from __future__ import annotations

import argparse
import datetime
import logging
import statistics
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from collage import zoo
from collage.graph.ir import Graph
from collage.search import Limits, SearchStats, candidate_counts, enumerate_candidates, search
from collage.search.ranges import range_candidates
from collage.search.candidates import Candidate
from collage.util import machine_id

log = logging.getLogger("benchmarks.search_time")

BACKENDS = ("onnxruntime", "openvino", "tvm")
#: GFLOP/s per backend and op class, ms of overhead per call (synthetic, see the module docstring).
SPEED = {
    "onnxruntime": {"conv": 40.0, "matmul": 45.0, "other": 4.0, "overhead": 0.010},
    "openvino": {"conv": 44.0, "matmul": 50.0, "other": 3.5, "overhead": 0.020},
    "tvm": {"conv": 30.0, "matmul": 55.0, "other": 6.0, "overhead": 0.004},
}


def node_flops(graph: Graph, i: int) -> tuple[str, float]:
    """(op class, FLOPs) of one node, estimated from its shapes."""
    node = graph.op(i)
    out = graph.tensor(node.output[0])
    n_out = float(np.prod(out.shape, dtype=np.float64)) if out.shape else 1.0
    if node.op_type in ("Conv", "ConvTranspose"):
        w = graph.tensor(node.input[1]).shape
        return "conv", 2.0 * n_out * float(np.prod(w[1:], dtype=np.float64))
    if node.op_type in ("MatMul", "Gemm"):
        a = graph.tensor(node.input[0]).shape
        k = a[-1] if node.op_type == "MatMul" or not any(at.name == "transA" and at.i for at in node.attribute) else a[0]
        return "matmul", 2.0 * n_out * float(k)
    return "other", n_out


def synthetic_costs(graph: Graph, cands: list[Candidate]) -> dict[Candidate, float]:
    per_node = {}
    for i in range(len(graph)):
        cls, flops = node_flops(graph, i)
        for b in BACKENDS:
            jitter = 0.75 + 0.5 * (zlib.crc32(f"{graph.node_label(i)}|{b}".encode()) % 1000) / 1000
            per_node[i, b] = (cls, jitter * flops / (SPEED[b][cls] * 1e6))  # ms
    costs = {}
    for c in cands:
        heavy = any(per_node[i, c.backend][0] != "other" for i in c.nodes)
        total = SPEED[c.backend]["overhead"]
        for i in c.nodes:
            cls, ms = per_node[i, c.backend]
            total += ms * (0.6 if heavy and cls == "other" else 1.0)  # elementwise fused into a heavy op
        costs[c] = total
    return costs


def transition(src: str, dst: str, nbytes: int) -> float:
    return 0.02 + nbytes / 4e9 * 1e3


def bench(name: str, repeats: int) -> dict:
    graph = zoo.load_graph(f"zoo:{name}")
    supports = {b: {i: True for i in range(len(graph))} for b in BACKENDS}
    enum_s, dp_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        cands = enumerate_candidates(graph, supports, Limits())
        known = set(cands)
        cands += [c for c in range_candidates(graph, supports) if c not in known]  # as collage.tuner.job adds them
        enum_s.append(time.perf_counter() - t0)
    costs = synthetic_costs(graph, cands)
    stats = SearchStats()
    for _ in range(repeats):
        t0 = time.perf_counter()
        plan = search(graph, costs, transition, stats=stats)
        dp_s.append(time.perf_counter() - t0)
    return {"model": name, "nodes": len(graph), "counts": candidate_counts(cands),
            "enum_s": statistics.median(enum_s), "dp_s": statistics.median(dp_s), "expanded": stats.expanded,
            "pushed": stats.pushed, "partitions": len(plan.partitions), "backends": plan.backends,
            "predicted_ms": plan.predicted_ms}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny-bert and tiny-resnet only")
    ap.add_argument("--models", nargs="*", help="zoo names (default: bert-base resnet50)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    models = args.models or (["tiny-bert", "tiny-resnet"] if args.quick else ["bert-base", "resnet50"])
    out = args.output or Path("results") / ("search-time-quick.md" if args.quick else "search-time.md")
    rows = []
    for name in models:
        log.info("%s ...", name)
        rows.append(bench(name, args.repeats))
        log.info("%s", rows[-1])
    lines = [
        "# Search time",
        "",
        f"`python -m benchmarks.search_time{' --quick' if args.quick else ''}` on {machine_id()}, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; median of {args.repeats} runs.",
        "",
        "Costs are **synthetic** (this times the search, not the backends): all nodes supported on "
        f"{', '.join(BACKENDS)}; a candidate's cost comes from its nodes' estimated FLOPs with per-backend "
        "speed factors per op class, a per-call overhead, a fusion discount and a deterministic +-25% "
        "per-(node, backend) jitter; transitions cost 0.02 ms + bytes at 4 GB/s. Default `Limits()` "
        "(max 12 nodes, at most 1 heavy op per candidate) plus the coarse range candidates the tuner adds "
        "(`collage.search.ranges`). DP s is the whole `search()` call; states expanded: "
        "kept after dominance and expanded; states reached: state records created or improved.",
        "",
        "| model | nodes | candidates per backend | enumeration s | DP s | states expanded | states reached "
        "| plan partitions | plan backends |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        counts = ", ".join(f"{b} {n}" for b, n in r["counts"].items())
        lines.append(f"| {r['model']} | {r['nodes']} | {counts} | {r['enum_s']:.3f} | {r['dp_s']:.3f} | "
                     f"{r['expanded']} | {r['pushed']} | {r['partitions']} | {', '.join(r['backends'])} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
