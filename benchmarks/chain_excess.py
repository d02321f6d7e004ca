"""What a stitched chain of one backend's pieces costs beyond the sum of its pieces, per chain shape:
``python -m benchmarks.chain_excess --models resnet50,inception_v1`` -> results/chains/chain-excess.md.

The input to the partition charges the tuner measures (``collage.tuner.stitching.PartitionCharge``). Per model
and backend, chains of contiguous pieces, each exported and loaded as an artifact
(``search_step.artifact_runner``, as the tuner's calibration does) and timed interleaved in one process: ``1`` the whole
model as one partition, ``tM`` the model less its last M nodes + those M nodes (a small tail after a narrow cut), ``K``
K pieces of equal node count. The pieces' own costs come from ``measure_candidates`` into a fresh cost DB just before
(measurement workers, called back to back, as the tune measures candidates). ``excess`` = chain - sum of pieces; ``vs
whole chain`` = chain - the ``1`` chain of the same round set: the cost of the cuts alone, with the pieces' measurement
noise and the offset between a worker's back-to-back timing and an in-process interleaved call left out.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import header, md_table, write_report


def pieces_of(graph, shape: str) -> list[tuple[int, ...]]:
    from collage.measure.transitions import contiguous_pieces

    n = len(graph)
    if shape.startswith("t"):
        m = int(shape[1:])
        return [tuple(range(0, n - m)), tuple(range(n - m, n))]
    k = int(shape)
    return [tuple(range(n))] if k == 1 else contiguous_pieces(graph, k)


def run_model(model: str, backends: list[str], shapes: list[str], rounds: int, work: Path) -> list[list[object]]:
    from collage import zoo
    from collage.measure.schedule import measure_candidates
    from collage.graph.inputs import random_inputs
    from collage.plan import Partition, Plan
    from collage.tuner.stitching import artifact_runner, fill_boundaries
    from collage.tuner.checks import measure_interleaved

    graph = zoo.load_graph(f"zoo:{model}")
    feeds = random_inputs(graph)
    inputs = set(graph.inputs)
    rows = []
    for b in backends:
        runners, info = {}, {}
        for s in shapes:
            pieces = pieces_of(graph, s)
            costs = measure_candidates(graph, [(p, b) for p in pieces], db=str(work / "fresh.sqlite"), progress=False)
            if not all(costs.get((p, b)) and costs[(p, b)].ok for p in pieces):
                print(f"{model} {b} {s}: a piece failed", file=sys.stderr)
                continue
            parts = [costs[(p, b)].median_ms for p in pieces]
            cut = sum(graph.tensor(t).nbytes for p in pieces[1:] for t in graph.boundary(p)[0] if t not in inputs)
            plan = fill_boundaries(graph,
                                   Plan([Partition(tuple(p), b, ms) for p, ms in zip(pieces, parts)], sum(parts)))
            runners[s] = artifact_runner(graph, plan, work / f"{model}-{b}-{s}", feeds, "cpu", None)
            info[s] = (len(pieces), sum(parts), cut, parts)
        ms = measure_interleaved(runners, rounds=rounds)
        whole = ms.get("1")
        for s in runners:
            k, parts_ms, cut, parts = info[s]
            ex = ms[s] - parts_ms
            rows.append([model, b, s, k, f"{cut / 1e6:.2f}", f"{parts_ms:.3f}", f"{ms[s]:.3f}", f"{ex:+.3f}",
                         f"{ex / parts_ms:+.1%}", "-" if whole is None else f"{ms[s] - whole:+.3f}",
                         " + ".join(f"{x:.3f}" for x in parts) if k <= 4 else "-"])
            print(" | ".join(str(c) for c in rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="resnet50,inception_v1")
    p.add_argument("--backends", default="openvino-bf16,openvino-fp16,openvino,onnxruntime")
    p.add_argument("--shapes", default="1,t3,t5,2,4,8")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default="results/chains/chain-excess.md")
    args = p.parse_args()
    command = "python -m benchmarks.chain_excess " + " ".join(sys.argv[1:])
    t0 = time.monotonic()
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="collage-chain-excess-") as tmp:
        for m in args.models.split(","):
            rows += run_model(m.strip(), args.backends.split(","), args.shapes.split(","), args.rounds, Path(tmp))
    lines = header("Stitched chains of one backend: the cost beyond the sum of the pieces, per chain shape", command,
                   f"Chains timed interleaved in one process, {args.rounds} rounds, median ms; pieces measured just "
                   "before in measurement workers (a fresh cost DB). Shapes: `1` the whole model as one partition, "
                   "`tM` the model less its last M nodes + those M nodes, `K` K pieces of equal node count. "
                   f"Total {(time.monotonic() - t0) / 60:.1f} min.")
    lines += md_table(["model", "backend", "shape", "partitions", "cut MB", "sum of pieces", "chain", "excess",
                       "excess / pieces", "vs whole chain", "pieces"], rows)
    write_report(args.out, lines, echo=False)


if __name__ == "__main__":
    main()
