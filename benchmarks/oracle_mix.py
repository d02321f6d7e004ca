"""How much an fp32 mix of ONNX Runtime and OpenVINO can gain here, from each piece's cost where it runs:
``python -m benchmarks.oracle_mix --models resnet50,gpt2-small -o results/chains/oracle-mix.md``.

The search prices a part by timing it alone, hot, in a measurement worker. This benchmark asks the
question without that step: each model is cut at its narrow cuts (``collage.search.ranges.narrow_cuts``:
the segments between them are the pieces) and run as an artifact with every piece on ONNX Runtime, and
with every piece on OpenVINO, each partition's call timed inside the stitched runs (``Artifact.run(feeds,
times)``); the *oracle mix* takes each piece on the backend whose in-chain median is lower, and is
predicted at the sum of those medians. Then the oracle mix is exported and timed, interleaved with each
backend on the whole model and both single-backend chains (``benchmarks._common.interleaved``, a shuffled
order each round), with its own pieces' in-chain times. The *best split* (one switch: a prefix of the
pieces on one backend, the rest on the other, the cut and order estimated best) is timed beside it: the
mix with the fewest cuts. If neither beats the best single backend by 5%, no plan over these pieces
does by much: the per-piece gains are not there, or the cuts cost more than they bring.

One process per model (nothing of an earlier model's runtimes is there), medians of single calls.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import header, interleaved, md_table, write_report

BACKENDS = ("onnxruntime", "openvino")


def _pieces(graph) -> list[tuple[int, ...]]:
    from collage.search.ranges import narrow_cuts

    bounds = [0, *narrow_cuts(graph), len(graph)]
    return [tuple(range(a, b)) for a, b in zip(bounds, bounds[1:]) if b > a]


def one_model(model: str, rounds: int, work: Path) -> dict:
    """Everything measured for ``model`` (in this process)."""
    from collage import zoo
    from collage.graph.inputs import random_inputs
    from collage.plan import Partition, Plan
    from collage.runtime.artifact import PartitionTimes, load
    from collage.tuner.export import export
    from collage.tuner.stitching import fill_boundaries

    graph = zoo.load_graph(f"zoo:{model}")
    feeds = random_inputs(graph)
    pieces = _pieces(graph)
    n = len(graph)
    k_parts = len(pieces)
    if k_parts < 2:
        raise SystemExit(f"{model}: no narrow cut inside it, nothing to mix")

    def artifact(name: str, parts: list[tuple[tuple[int, ...], str]]):
        plan = fill_boundaries(graph, Plan([Partition(p, b, 0.0) for p, b in parts], 0.0))
        return load(export(graph, plan, work / f"{model}-{name}"))

    # what the tune would price each piece at: measured alone in measurement workers (a fresh cost DB)
    from collage.measure.schedule import measure_candidates

    whole = tuple(range(n))
    costs = measure_candidates(graph, [(p, b) for b in BACKENDS for p in [*pieces, whole]],
                               db=str(work / f"{model}.sqlite"), progress=False)
    worker = {b: [costs[(p, b)].median_ms if costs.get((p, b)) and costs[(p, b)].ok else None for p in pieces]
              for b in BACKENDS}
    worker_whole = {b: costs[(whole, b)].median_ms if costs.get((whole, b)) and costs[(whole, b)].ok else None
                    for b in BACKENDS}

    arts = {f"whole {b}": artifact(f"whole-{b}", [(whole, b)]) for b in BACKENDS}
    arts.update({f"chain {b}": artifact(f"chain-{b}", [(p, b) for p in pieces]) for b in BACKENDS})
    # each artifact's runs keep their partitions' call times; interleaved's 3 warm-up calls are left out below
    clocks = {k: PartitionTimes(a, feeds) for k, a in arts.items()}

    t0 = time.monotonic()
    first = interleaved(clocks, rounds, f"{model}: pieces")
    med = {b: clocks[f"chain {b}"].medians(skip=3) for b in BACKENDS}
    pick = [min(BACKENDS, key=lambda b: med[b][j]) for j in range(k_parts)]
    predicted = sum(med[b][j] for j, b in enumerate(pick))
    row = {"model": model, "nodes": n, "pieces": k_parts,
           "first": {k: float(np.median(v)) for k, v in first.items()},
           "piece_ms": med, "pick": pick, "oracle_predicted": predicted,
           "on": {b: pick.count(b) for b in BACKENDS}, "worker_ms": worker, "worker_whole_ms": worker_whole}
    # the best single switch: a prefix on one backend, the rest on the other, estimated from the whole models
    # (no cuts inside either half) and each half's share of its backend's chain
    whole_ms = {b: row["first"][f"whole {b}"] for b in BACKENDS}
    total = {b: sum(med[b]) for b in BACKENDS}
    splits = [(whole_ms[a] * sum(med[a][:c]) / total[a] + whole_ms[z] * sum(med[z][c:]) / total[z], c, a, z)
              for c in range(1, k_parts) for a in BACKENDS for z in BACKENDS if a != z]
    est, c, a, z = min(splits)
    row["split"] = {"estimate": est, "cut": c, "first": a, "then": z,
                    "nodes": [len(sum(pieces[:c], ())), len(sum(pieces[c:], ()))]}
    arts["best split"] = artifact("split", [(sum(pieces[:c], ()), a), (sum(pieces[c:], ()), z)])
    if len(set(pick)) > 1:
        arts["oracle mix"] = artifact("oracle", list(zip(pieces, pick)))
    clocks = {k: PartitionTimes(a, feeds) for k, a in arts.items()}
    second = interleaved(clocks, rounds, f"{model}: mixes")
    row["second"] = {k: float(np.median(v)) for k, v in second.items()}
    if "oracle mix" in arts:
        row["oracle_piece_ms"] = clocks["oracle mix"].medians(skip=3)
    row["seconds"] = time.monotonic() - t0
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,mobilenetv2,inception_v1,densenet121,bert-base,vit-b16,"
                                        "gpt2-small,convnext-t,whisper-tiny-encoder")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("-o", "--output", type=Path, default=Path("results/chains/oracle-mix.md"))
    ap.add_argument("--one", help=argparse.SUPPRESS)   # worker: one model, JSON to --json
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory(prefix="collage-oracle-") as tmp:
            args.json.write_text(json.dumps(one_model(args.one, args.rounds, Path(tmp))))
        return 0
    command = "python -m benchmarks.oracle_mix " + " ".join(argv if argv is not None else sys.argv[1:])
    t0 = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="collage-oracle-") as tmp:
        for m in args.models.split(","):
            out = Path(tmp) / f"{m}.json"
            proc = subprocess.run([sys.executable, "-m", "benchmarks.oracle_mix", "--one", m, "--rounds",
                                   str(args.rounds),
                                   "--json", str(out)])
            if proc.returncode or not out.exists():
                print(f"{m}: failed (exit {proc.returncode})", file=sys.stderr)
                continue
            rows.append(json.loads(out.read_text()))
            print(json.dumps({k: rows[-1][k] for k in ("model", "pieces", "on", "oracle_predicted", "first")}),
                  file=sys.stderr, flush=True)
    table = []
    for r in rows:
        ms = r.get("second", r["first"])
        best = min(BACKENDS, key=lambda b: ms[f"whole {b}"])
        mix = ms.get("oracle mix")
        sp = r["split"]
        table.append([r["model"], r["pieces"], f"{ms['whole onnxruntime']:.2f}", f"{ms['whole openvino']:.2f}",
                      f"{ms['chain onnxruntime']:.2f}", f"{ms['chain openvino']:.2f}",
                      " + ".join(f"{b} {c}" for b, c in r["on"].items() if c), f"{r['oracle_predicted']:.2f}",
                      "-" if mix is None else f"{mix:.2f}",
                      "-" if mix is None else f"{ms[f'whole {best}'] / mix:.3f}x",
                      f"{sp['first']} {sp['nodes'][0]} + {sp['then']} {sp['nodes'][1]}", f"{sp['estimate']:.2f}",
                      f"{ms['best split']:.2f}", f"{ms[f'whole {best}'] / ms['best split']:.3f}x"])
    lines = header("An oracle fp32 mix of ONNX Runtime and OpenVINO: each piece where it runs faster in a chain",
                   command,
                   f"{args.rounds} interleaved rounds per phase, medians of single calls, one process per model; "
                   f"total {(time.monotonic() - t0) / 60:.1f} min. Pieces: the segments between the model's narrow "
                   "cuts. `oracle predicted`: the sum, over pieces, of the lower of the two in-chain medians (from the "
                   "single-backend chains); `oracle measured`: that mix exported and timed in the second phase, "
                   "interleaved with the other five (their columns are from that phase). "
                   "`gain`: the best whole model / the mix. `best split`: one switch, the pieces before a cut on one "
                   "backend and the rest on the other, the cut and order with the lowest estimate (each half at its "
                   "backend's whole-model time x the half's share of that backend's chain), measured in the second "
                   "phase.")
    lines += md_table(["model", "pieces", "whole ORT ms", "whole OV ms", "ORT chain ms", "OV chain ms",
                       "oracle pieces", "oracle predicted ms", "oracle measured ms", "oracle gain",
                       "best split (nodes)", "split estimate ms", "split measured ms", "split gain"], table)
    lines += ["", "What the tune's pricing would say: each piece (and the whole model) measured alone in measurement "
              "workers, as a tune measures candidates; `in chain / worker`: the piece's in-chain median over its "
              "worker cost, median and p10-p90 over the pieces, beside the same ratio for the whole model (the tune's "
              "`level` is that one number per backend). A spread wider than the runtimes' difference mis-ranks pieces.",
              ""]
    ratio_rows = []
    for r in rows:
        ms = r.get("second", r["first"])
        for b in BACKENDS:
            rs = [c / w for c, w in zip(r["piece_ms"][b], r["worker_ms"][b]) if w]
            ww = r["worker_whole_ms"][b]
            ratio_rows.append([r["model"], b, len(rs), f"{np.median(rs):.3f}" if rs else "-",
                               f"{np.percentile(rs, 10):.3f} - {np.percentile(rs, 90):.3f}" if rs else "-",
                               f"{ms[f'whole {b}'] / ww:.3f}" if ww else "-"])
    lines += md_table(["model", "backend", "pieces priced", "in chain / worker: median", "p10 - p90",
                       "whole model: in-process / worker"], ratio_rows)
    lines += ["", "Per piece, in-chain medians (ms), ORT / OV:", ""]
    for r in rows:
        pairs = [f"{a:.2f}/{b:.2f}" for a, b in zip(r["piece_ms"]["onnxruntime"], r["piece_ms"]["openvino"])]
        lines.append(f"- {r['model']}: " + ", ".join(pairs))
        if r.get("oracle_piece_ms"):
            lines.append("  - its oracle mix, each piece inside that mix: "
                         + ", ".join(f"{b[:3]} {ms:.2f}" for b, ms in zip(r["pick"], r["oracle_piece_ms"])))
    write_report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
