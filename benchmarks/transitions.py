"""Transition costs between backends, and how well parts + transitions predict a stitched chain.

    python -m benchmarks.transitions --switch   # the switch with real work on both sides, before/after the
                                                # issue-19 settings -> results/transitions/transitions.md
                                                (benchmarks.switch_cost)
    python -m benchmarks.transitions            # ORT <-> OpenVINO, 3 sizes, BERT-base chain (~10-15 min, 2 cores)
    python -m benchmarks.transitions --quick    # 2 sizes, tiny-bert chain (~1-2 min)

Without --switch, writes results/transitions/transitions-small.md (results/transitions/transitions-quick.md with
--quick):

1. Per backend pair, fixed and per-byte transition cost (``collage.measure.transitions``: real
   alternation A, B, A, ... of small Add+Relu pieces minus the same-backend chains), with the fast
   hand-over settings (ONNX Runtime spin off, OpenVINO pinning off: collage's defaults) and with the
   runtimes' own defaults (spin on, pinning on).
2. Prediction check: the model cut into its layers (embeddings + one piece per encoder layer); each
   piece measured alone (as the tuner does); chains all-A, all-B and alternating layer by layer
   measured end to end (interleaved, in a worker process); predicted = sum of the parts' costs
   (+ small-piece transitions), and sum of parts + per-partition overhead + per-switch cost measured
   on the model's own pieces (``measure_model_transitions`` on chains of the first ``--fit-pieces``
   pieces only: the rest of the chain is out of sample) against measured.
"""
from __future__ import annotations

import argparse
import datetime
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

from collage import zoo
from collage.backends import unavailable_reason
from collage.measure.db import SQLiteCostDB
from collage.measure.schedule import measure_candidates
from collage.measure.measurer import Measurer
from collage.measure.transitions import (FAST_HANDOVER, QUICK_SIZES, SIZES, SLOW_HANDOVER,
                                             handovers, measure_model_transitions, measure_transition,
                                             transition_model)
from collage.errors import CollageError
from collage.graph.ir import Graph
from collage.util import human_bytes, machine_id, physical_cores, source_commit

log = logging.getLogger("benchmarks.transitions")


def layer_pieces(graph: Graph) -> list[tuple[str, tuple[int, ...]]]:
    """Cut a BERT-like graph by its node names (``...layer.N...``): embeddings, then one piece per layer."""
    pieces: dict[str, list[int]] = {}
    order: list[str] = []
    last = "embeddings"
    for i in range(len(graph)):
        m = re.search(r"layer\.(\d+)\.", graph.op(i).name)
        label = f"layer {int(m.group(1))}" if m else (last if last != "embeddings" else "embeddings")
        if label not in pieces:
            pieces[label] = []
            order.append(label)
        pieces[label].append(i)
        last = label
    out = [(label, tuple(pieces[label])) for label in order]
    for label, nodes in out:
        if not graph.is_convex(nodes):
            raise CollageError(f"{graph.name}: piece {label!r} is not convex; this cut only fits BERT-like models")
    return out


def _predict(graph: Graph, pieces, assign: list[str], costs, transition) -> tuple[float, float]:
    owner = {i: k for k, (_, nodes) in enumerate(pieces) for i in nodes}
    parts = sum(costs[(nodes, b)].median_ms for (_, nodes), b in zip(pieces, assign))
    trans = 0.0
    for _k, ((_, nodes), b) in enumerate(zip(pieces, assign)):
        by_src: dict[str, int] = {}
        for t in graph.boundary(nodes)[0]:
            p = graph.producer(t)
            if p is None:
                continue
            src = assign[owner[p]]
            if src != b:
                by_src[src] = by_src.get(src, 0) + graph.tensor(t).nbytes
        trans += sum(transition(src, b, nbytes) for src, nbytes in by_src.items())
    return parts, parts + trans


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--switch" in argv:
        from benchmarks import switch_cost

        argv.remove("--switch")
        return switch_cost.main(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 sizes, tiny-bert chain (a smoke run)")
    ap.add_argument("--backends", default="onnxruntime,openvino")
    ap.add_argument("--model", default=None, help="BERT-like zoo model for the prediction check (default bert-base)")
    ap.add_argument("--cap", type=float, default=None, help="timing cap per size / per chain set, seconds")
    ap.add_argument("--fit-pieces", type=int, default=5,
                    help="pieces (from the start) whose chains give the model-scale hand-over fit (default 5)")
    ap.add_argument("--db", default=None, help="cost DB to use (default: a fresh temporary one)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    backends = [b for b in args.backends.split(",") if b and not unavailable_reason(b)]
    if len(backends) < 2:
        raise SystemExit(f"need two available backends among {args.backends}")
    model = args.model or ("tiny-bert" if args.quick else "bert-base")
    sizes = QUICK_SIZES if args.quick else SIZES
    cap = args.cap if args.cap is not None else (0.5 if args.quick else 3.0)
    out = Path(args.out or ("results/transitions/transitions-quick.md" if args.quick
                            else "results/transitions/transitions-small.md"))
    db = SQLiteCostDB(args.db or Path(tempfile.mkdtemp(prefix="collage-transitions-")) / "costs.sqlite")
    t0 = time.time()

    fits = []
    for i, a in enumerate(backends):
        for b in backends[i + 1:]:
            for label, settings in (("fast hand-over", FAST_HANDOVER), ("runtime defaults", SLOW_HANDOVER)):
                opts = {k: v for k, v in settings.items() if k in (a, b)}
                print(f"transition {a} <-> {b}, {label} ...", file=sys.stderr)
                fixed, per_byte, rows = measure_transition(a, b, db, backend_options=opts, sizes=sizes, cap_s=cap)
                fits.append((a, b, label, opts, fixed, per_byte, rows))

    graph = zoo.load_graph(f"zoo:{model}")
    pieces = layer_pieces(graph)
    a, b = backends[0], backends[1]
    whole = tuple(range(len(graph)))
    items = [(nodes, x) for _, nodes in pieces for x in (a, b)] + [(whole, a), (whole, b)]
    costs = measure_candidates(graph, items, db=db, cap_s=cap, progress=True)
    transition = transition_model([a, b], db)  # collage's default options = the fast hand-over settings
    fit_k = max(2, min(args.fit_pieces, len(pieces) - 1))
    print(f"hand-over at model scale: chains of the first {fit_k} pieces ...", file=sys.stderr)
    scale = measure_model_transitions(graph, a, b, db, pieces=[nodes for _, nodes in pieces[:fit_k]], cap_s=cap * 4)
    chains = {f"all {a}": [a] * len(pieces), f"all {b}": [b] * len(pieces),
              f"alternating, {a} first": [(a, b)[k % 2] for k in range(len(pieces))],
              f"alternating, {b} first": [(b, a)[k % 2] for k in range(len(pieces))]}
    blobs = [graph.extract(nodes).SerializeToString() for _, nodes in pieces]
    feeds = zoo.random_inputs(graph)
    print(f"timing {len(chains)} chains of {len(pieces)} pieces ...", file=sys.stderr)
    with Measurer() as m:
        measured = m.call("collage.measure.transitions:chain_timings",
                          {"pieces": blobs, "chains": {n: list(enumerate(bs)) for n, bs in chains.items()},
                           "feeds": feeds, "cap_s": cap * 4}, timeout_s=1800)
    check = []
    for name, assign in chains.items():
        parts, with_t = _predict(graph, pieces, assign, costs, transition)
        switches = handovers(graph, [nodes for _, nodes in pieces], assign)
        with_scale = parts + sum(scale.overhead_ms[x] for x in assign) + switches * scale.switch_ms
        check.append((name, measured[name]["median_ms"], parts, with_t, with_scale))
    elapsed = time.time() - t0
    write(out, args, sizes, fits, model, pieces, costs, whole, (a, b), check, elapsed, scale)
    print(f"wrote {out} in {elapsed:.0f} s")
    return 0


def write(out, args, sizes, fits, model, pieces, costs, whole, pair, check, elapsed, scale) -> None:
    cmd = "python -m benchmarks.transitions" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    lines = [f"# Transition costs{' (quick smoke run)' if args.quick else ''}", "",
             f"Command: `{cmd}` at commit {source_commit()} ({elapsed:.0f} s). Machine: {machine_id()}, "
             f"{physical_cores()} cores; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.", "",
             "Per transition = (alternating chain - mean of the two same-backend chains) / (pieces - 1); chains of "
             "Add+Relu pieces on [1, n] float32, timed interleaved. An alternating chain holds as many A->B as B->A "
             "hand-overs: the fit is their mean, stored for both directions.", "",
             "## Fits: fixed + per byte", "",
             "| pair | settings | fixed ms | per MB ms | "
             + " | ".join(f"{human_bytes(s)} ms/transition" for s in sizes) + " |",
             "|---|---|---:|---:|" + "---:|" * len(sizes)]
    for a, b, label, opts, fixed, per_byte, rows in fits:
        lines.append(f"| {a} <-> {b} | {label} `{opts}` | {fixed:.4f} | {per_byte * 2**20:.4f} | "
                     + " | ".join(f"{r['per_transition_ms']:.4f}" for r in rows) + " |")
    lines += ["", "Chains behind the fits (median ms of the whole chain):", "",
              "| pair | settings | size | all A | all B | alternating | rounds |", "|---|---|---|---:|---:|---:|---:|"]
    for a, b, label, _, _, _, rows in fits:
        for r in rows:
            lines.append(f"| {a} <-> {b} | {label} | {human_bytes(r['nbytes'])} | {r['all_a_ms']:.3f} | "
                         f"{r['all_b_ms']:.3f} | {r['alternating_ms']:.3f} | {r['rounds']} |")
    a, b = pair
    lines += ["", f"## Prediction check: {model} cut into {len(pieces)} pieces (embeddings + layers)", "",
              f"Each piece measured alone (worker process, as the tuner does): sum on {a} "
              f"{sum(costs[(n, a)].median_ms for _, n in pieces):.2f} ms, on {b} "
              f"{sum(costs[(n, b)].median_ms for _, n in pieces):.2f} ms; whole model on {a} "
              f"{costs[(whole, a)].median_ms:.2f} ms, on {b} {costs[(whole, b)].median_ms:.2f} ms.", "",
              "Model-scale hand-over (`measure_model_transitions`, fitted on chains of the first "
              f"{scale.chains and next(iter(scale.chains.values()))['pieces']} pieces only, then applied to the "
              f"{len(pieces)}-piece chains): per partition "
              + ", ".join(f"{x} {v:.3f} ms" for x, v in scale.overhead_ms.items())
              + f"; per hand-over (each distinct tensor a piece reads from the other backend, as the search counts) "
              f"{scale.switch_ms:.3f} ms. Fit chains: "
              + "; ".join(f"{n} {c['measured_ms']:.2f} ms measured vs {c['parts_ms']:.2f} ms parts"
                          for n, c in scale.chains.items()) + ".", "",
              "| chain | measured ms | predicted: parts only | error | parts + small-piece transitions | error "
              "| parts + per-partition overhead + model-scale hand-overs | error |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, meas, parts, with_t, with_scale in check:
        lines.append(f"| {name} | {meas:.2f} | {parts:.2f} | {(parts - meas) / meas:+.1%} | {with_t:.2f} | "
                     f"{(with_t - meas) / meas:+.1%} | {with_scale:.2f} | {(with_scale - meas) / meas:+.1%} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
