"""Is a chain of partitions priced by its parts? Per ONNX Runtime threading setting: ``python -m benchmarks.pricing``.

    python -m benchmarks.pricing --models resnet50:18 bert-base:12 --settings before,stop -o results/chains/pricing.md

The search prices a plan as the sum of its partitions' own costs (each measured alone, back to back, in a
measurement worker) plus the hand-overs between backends. For each model (cut into ``N`` contiguous pieces of
its topological order, ``collage.measure.transitions.contiguous_pieces``) and each setting, on a fresh
cost DB: every piece is measured on ONNX Runtime and OpenVINO the way the tuner measures candidates
(``measure_candidates``), then the chains all-ORT, all-OV and the two alternating ones are run end to end in
one worker, interleaved (``measure_model_transitions``). The table says, per chain, measured vs the sum of
its parts, and what the tuner would charge: per partition (``overhead``) and per switch, by direction.

A setting whose chains measure close to their parts is one the search prices right; the switch columns say
what a change of runtime costs on top. Settings (``benchmarks.switch_cost.SETTINGS``): ``before`` is
collage's default (one process-wide ONNX Runtime pool), ``stop`` each ONNX Runtime session on its own pool,
spinning while a run lasts and stopped when it returns. Settings run one after another (minutes apart: the
machine's level drifts 13-25% between runs, results/measurement/machine-level.md), so compare chains with their parts
within a setting, not settings with each other.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import header, md_table, write_report
from benchmarks.switch_cost import SETTINGS


def run(model: str, pieces: int, setting: str, cap_s: float) -> dict:
    from collage import zoo
    from collage.measure.db import SQLiteCostDB
    from collage.measure.transitions import contiguous_pieces, measure_model_transitions

    graph = zoo.load_graph(f"zoo:{model}")
    with tempfile.TemporaryDirectory(prefix="collage-pricing-") as tmp:
        db = SQLiteCostDB(Path(tmp) / "costs.sqlite")
        t0 = time.monotonic()
        fit = measure_model_transitions(graph, "onnxruntime", "openvino", db, pieces=contiguous_pieces(graph, pieces),
                                        backend_options=SETTINGS[setting], cap_s=cap_s, reuse=False)
        took = time.monotonic() - t0
    return {"model": model, "pieces": pieces, "setting": setting, "fit": fit, "s": took}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet50:18", "bert-base:12"], help="zoo model:pieces")
    ap.add_argument("--settings", default="before,stop")
    ap.add_argument("--cap-s", type=float, default=3.0, help="timing per chain (seconds)")
    ap.add_argument("-o", "--output", type=Path, default=Path("results/chains/pricing.md"))
    args = ap.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        ap.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    rows, notes = [], []
    for spec in args.models:
        model, _, n = spec.partition(":")
        for setting in settings:
            print(f"{model} in {n or 12} pieces, {setting} ...", file=sys.stderr, flush=True)
            r = run(model, int(n or 12), setting, args.cap_s)
            fit = r["fit"]
            for name, ch in fit.chains.items():
                rows.append([model, r["pieces"], setting, name, f"{ch['measured_ms']:.2f}", f"{ch['parts_ms']:.2f}",
                             f"{ch['measured_ms'] / ch['parts_ms']:.2f}x", int(ch["switches"])])
            notes.append(f"- {model}, {setting}: charged per partition "
                         + ", ".join(f"{b} {v:.3f} ms" for b, v in fit.overhead_ms.items()) + "; per switch "
                         + ", ".join(f"{s} -> {d} {v:.3f} ms" for (s, d), v in fit.switch_by_direction.items())
                         + f" ({r['s']:.0f} s)")
    command = "python -m benchmarks.pricing " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = header("Is a chain priced by its parts? (per ONNX Runtime threading setting)", command,
                   __doc__.split("\n\n")[2].replace("\n", " "))
    lines += ["Settings: " + "; ".join(f"**{s}** `{SETTINGS[s]}`" for s in settings) + ".", ""]
    lines += md_table(["model", "pieces", "setting", "chain", "measured ms", "sum of parts ms", "measured / parts",
                       "hand-overs charged"], rows)
    lines += notes + [""]
    write_report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
