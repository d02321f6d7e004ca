"""How long the search takes on real architectures (candidate enumeration + the exact search).

    python -m benchmarks.search_time            # every zoo model + a wide stress graph (~5 min; + building the zoo)
    python -m benchmarks.search_time --quick    # tiny-bert + tiny-resnet (seconds)
    python -m benchmarks.search_time --models bert-base resnet50 --no-stress
    python -m benchmarks.search_time --undropped  # also each search with the DP's option dropping off

The search timed is the tuner's, ``collage.search.solve`` (strategy "auto"): module by module where the graph
is a series of fork-join modules of chains (``collage.search.forkjoin``), else the DP, and the ILP (HiGHS)
where the DP's frontier passes its valve; where the module-by-module search answers, the DP is also run
by itself and the two compared. Unless ``--no-ilp``, the ILP (``collage.search.ilp.ilp_search``) also
solves every model on its own, and the table says whether the two exact answers agree (same cost in
integer ns, same number of partitions). The stress graph (``--stress``, on by default without
``--models``) is a ladder of parallel MatMul+Relu chains mixed pairwise by Adds every second step: its
frontier is as wide as the ladder, so the DP passes its valve and the ILP has to answer.

Writes results/search/search-time.md (results/search/search-time-quick.md with --quick).

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
from unittest import mock

import numpy as np

from collage import zoo
from collage.graph.ir import Graph
from collage.search import Limits, candidate_counts, dp, enumerate_candidates
from collage.search.cover import cover_cost, usable_costs
from collage.search.dp_tables import quantize
from collage.search.solver import DP_STATES, SolveStats, ilp_held, solve
from collage.search.ranges import range_candidates
from collage.search.candidates import Candidate
from collage.util import machine_id, source_commit

from benchmarks._common import write_atomic

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
        k = a[-1] if node.op_type == "MatMul" or not any(at.name == "transA" and at.i
                                                         for at in node.attribute) else a[0]
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


def ladder(width: int = 4, steps: int = 24, dim: int = 256, rows: int = 256) -> Graph:
    """The stress graph: ``width`` chains of MatMul ([rows, dim] x [dim, dim]) + Relu, chain c += chain c+1 every
    second step (the MatMuls are big enough that the synthetic costs make a mix pay)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    cur = ["x"] * width
    for s in range(steps):
        nxt = []
        for c in range(width):
            w = f"w{s}_{c}"
            inits.append(numpy_helper.from_array(np.zeros((dim, dim), np.float32), w))
            nodes.append(helper.make_node("MatMul", [cur[c], w], [f"m{s}_{c}"], name=f"m{s}_{c}"))
            nodes.append(helper.make_node("Relu", [f"m{s}_{c}"], [f"r{s}_{c}"], name=f"r{s}_{c}"))
            nxt.append(f"r{s}_{c}")
        if s % 2:
            for c in range(width):
                nodes.append(helper.make_node("Add", [nxt[c], nxt[(c + 1) % width]], [f"a{s}_{c}"], name=f"a{s}_{c}"))
            nxt = [f"a{s}_{c}" for c in range(width)]
        cur = nxt
    nodes.append(helper.make_node("Sum", cur, ["y"], name="sum"))
    graph = helper.make_graph(nodes, f"ladder-{width}x{steps}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, dim])],
                              initializer=inits)
    return Graph.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def tuner_candidates(graph: Graph, backends: tuple[str, ...] = BACKENDS) -> list[Candidate]:
    """Every node supported on ``backends``: the candidates of default ``Limits()`` plus the coarse ranges the
    tuner adds (``collage.tuner.job``)."""
    supports = {b: {i: True for i in range(len(graph))} for b in backends}
    cands = enumerate_candidates(graph, supports, Limits())
    known = set(cands)
    return cands + [c for c in range_candidates(graph, supports) if c not in known]


def zoo_problem(name: str) -> tuple[Graph, dict[Candidate, float]]:
    """A zoo model and the synthetic costs of its candidates on the three backends (for the search's tests)."""
    graph = zoo.load_graph(f"zoo:{name}")
    return graph, synthetic_costs(graph, tuner_candidates(graph))


def _price(graph: Graph, plan, costs) -> int:
    compute, moved = cover_cost(graph, [(p.nodes, p.backend) for p in plan.partitions], usable_costs(graph, costs),
                                transition)
    return quantize(compute + moved)


def bench(name: str, repeats: int, ilp: bool = True, graph: Graph | None = None,
          backends: tuple[str, ...] = BACKENDS, undropped: bool = False) -> dict:
    graph = graph if graph is not None else zoo.load_graph(f"zoo:{name}")
    enum_s, exact_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        cands = tuner_candidates(graph, backends)
        enum_s.append(time.perf_counter() - t0)
    costs = synthetic_costs(graph, cands)
    kept_s: list[float] = []
    for _ in range(repeats):
        stats = SolveStats()
        t0 = time.perf_counter()
        plan = solve(graph, costs, transition, stats=stats)
        exact_s.append(time.perf_counter() - t0)
    fj = stats.forkjoin
    dstats, dplan = stats, plan
    if stats.method == "forkjoin":  # the DP on the same costs by itself (its ILP where it runs out), to compare
        dstats = SolveStats()
        dplan = solve(graph, costs, transition, strategy="dp-ilp", stats=dstats)
    if undropped:  # the DP with every backend option kept, right after (the DP before it dropped any)
        with mock.patch.object(dp, "drop_dominated_options", lambda *a: 0):
            t0 = time.perf_counter()
            kept = solve(graph, costs, transition, strategy="dp-ilp")
            kept_s.append(time.perf_counter() - t0)
        if _price(graph, kept, costs) != _price(graph, plan, costs) or len(kept.partitions) != len(plan.partitions):
            raise AssertionError(f"{name}: the search with every option kept found another optimum")
    counts = candidate_counts(cands)
    greedy = any("not proven optimal" in n for n in plan.notes)
    proven = (stats.ilp is None or stats.ilp.optimal) and not greedy
    dp_proven = (dstats.ilp is None or dstats.ilp.optimal) and not any("not proven optimal" in n for n in dplan.notes)
    row = {"model": name, "nodes": len(graph), "counts": counts,
           "enum_s": statistics.median(enum_s), "exact_s": statistics.median(exact_s), "method": stats.method,
           "fj_shape": f"{fj.modules} / {fj.chains}" if fj.solved else fj.why_not.split(":")[0],
           "dp_s": dstats.dp_s, "dp_method": dstats.method, "expanded": dstats.dp.expanded, "pushed": dstats.dp.pushed,
           "dropped": dstats.dp.dropped, "options": sum(counts.values()),
           "dp_agree": None if dplan is plan or not (proven and dp_proven) else
           (_price(graph, dplan, costs) == _price(graph, plan, costs)
            and len(dplan.partitions) == len(plan.partitions)),
           "kept_s": statistics.median(kept_s) if kept_s else None,
           "partitions": len(plan.partitions), "backends": plan.backends, "predicted_ms": plan.predicted_ms,
           "proven": proven, "greedy": greedy}
    if ilp:
        held = SolveStats()
        t0 = time.perf_counter()
        alone = ilp_held(graph, costs, transition, stats=held)  # stopped ILP_GRACE_S past its limit if need be
        ist = held.ilp
        status = ist.status if alone is not None else f"stopped after {time.perf_counter() - t0:.0f} s"
        both = alone is not None and ist.optimal and row["proven"]
        row.update(ilp_s=time.perf_counter() - t0, ilp_status=status, ilp_cuts=ist.cuts, ilp_bb=ist.nodes,
                   agree=None if not both else (_price(graph, alone, costs) == _price(graph, plan, costs)
                                                and len(alone.partitions) == len(plan.partitions)))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny-bert and tiny-resnet only")
    ap.add_argument("--models", nargs="*", help="zoo names (default: bert-base resnet50)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-ilp", dest="ilp", action="store_false", help="do not solve each model with the ILP as well")
    ap.add_argument("--stress", action=argparse.BooleanOptionalAction, default=None,
                    help="add the wide ladder graph (default: on unless --models or --quick)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help=f"backends every node is taken as supported on (default {','.join(BACKENDS)}; the tuner's "
                         "default is onnxruntime,openvino)")
    ap.add_argument("--undropped", action="store_true",
                    help="also time each exact search with every backend option kept (the DP's option dropping off), "
                         "right after it, and check both find the same optimum")
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args(argv)
    backends = tuple(b for b in args.backends.split(",") if b)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        ap.error(f"--backends: no synthetic costs for {', '.join(unknown)} (known: {', '.join(BACKENDS)})")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    models = args.models or (["tiny-bert", "tiny-resnet"] if args.quick else zoo.names())
    stress = args.stress if args.stress is not None else not (args.models or args.quick)
    out = args.output or Path("results/search") / ("search-time-quick.md" if args.quick else "search-time.md")
    rows = []
    for name in models:
        log.info("%s ...", name)
        rows.append(bench(name, args.repeats, args.ilp, backends=backends, undropped=args.undropped))
        log.info("%s", rows[-1])
    if stress:
        g = ladder()
        log.info("%s (stress) ...", g.name)
        rows.append(bench(f"{g.name} (stress, not a zoo model)", args.repeats, args.ilp, graph=g, backends=backends,
                          undropped=args.undropped))
        log.info("%s", rows[-1])
    command = "python -m benchmarks.search_time" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    lines = [
        "# Search time",
        "",
        f"`{command}` at commit {source_commit()} on {machine_id()}, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; median of {args.repeats} run(s). "
        "The machine's speed level moves 13-25% between runs minutes apart (results/measurement/machine-level.md): "
        "compare within a table.",
        "",
        "Costs are **synthetic** (this times the search, not the backends): all nodes supported on "
        f"{', '.join(backends)}; a candidate's cost comes from its nodes' estimated FLOPs with per-backend "
        "speed factors per op class, a per-call overhead, a fusion discount and a deterministic +-25% "
        "per-(node, backend) jitter; transitions cost 0.02 ms + bytes at 4 GB/s. Default `Limits()` "
        "(max 12 nodes, at most 1 heavy op per candidate) plus the coarse range candidates the tuner adds "
        "(`collage.search.ranges`).",
        "",
        f"**exact s** is the tuner's search, `collage.search.solve`: module by module where the graph is a series of "
        "fork-join modules of plain chains (`collage.search.forkjoin`; **method** forkjoin), else the DP, and where "
        f"the DP passes {DP_STATES} expanded states, the ILP (HiGHS) started from the DP's greedy plan; **method** "
        "says which answered. **proven**: the answer is a proven optimum (no valve, no greedy fallback). "
        "**modules / chains**: the module-by-module search's shape, or why the graph has none. "
        "**DP s / states**: the DP (by itself where the module-by-module search answered: `solve(..., "
        "strategy=\"dp-ilp\")`; states expanded: kept after dominance and expanded; reached: records created or "
        "improved; options dropped: (node set, backend) options another backend on the same set beats whatever "
        "the rest of the plan, of all of them; \"(ilp)\": the DP ran out and the ILP answered); **DP agrees**: the "
        "DP's plan and the module-by-module one have the same cost (integer ns) and the same number of partitions "
        "(\"-\": the DP answered the exact search itself, or one of the two is not a proven optimum). "
        "**options kept s** (with `--undropped`): the DP with no option dropped, timed right after (the same "
        "optimum: checked). **ILP alone s**: `ilp_search` on the same costs by itself (in a process stopped 30 s "
        "past its 60 s limit: `collage.search.solver.ilp_held`); **agree**: its plan and the exact search's "
        "have the same cost (integer ns) and the same number of partitions (\"-\": one of them is not a proven "
        "optimum).",
        "",
        "| model | nodes | candidates per backend | enumeration s | exact s | method | proven | modules / chains | DP "
        "s | DP states expanded | DP states reached | options dropped | options kept s | DP agrees | ILP alone s | "
        "ILP status | agree | plan partitions | plan backends |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        counts = ", ".join(f"{b} {n}" for b, n in r["counts"].items())
        agree = "-" if r.get("agree") is None else "yes" if r["agree"] else "**no**"
        ilp_cells = (f"{r['ilp_s']:.2f} | {r['ilp_status']} | {agree}" if "ilp_s" in r
                     else "- | - | -")
        dp_agree = "-" if r["dp_agree"] is None else "yes" if r["dp_agree"] else "**no**"
        dp_cell = f"{r['dp_s']:.2f}" + ("" if r["dp_method"] == "dp" else f" ({r['dp_method']})")
        lines.append(f"| {r['model']} | {r['nodes']} | {counts} | {r['enum_s']:.2f} | {r['exact_s']:.2f} | "
                     f"{r['method']} | {'yes' if r['proven'] else '**no**'} | {r['fj_shape']} | {dp_cell} | "
                     f"{r['expanded']} | {r['pushed']} | {r['dropped']} of {r['options']} | "
                     f"{'-' if r['kept_s'] is None else format(r['kept_s'], '.2f')} | {dp_agree} | {ilp_cells} | "
                     f"{r['partitions']} | {', '.join(r['backends'])} |")
    write_atomic(out, lines)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
