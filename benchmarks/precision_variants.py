"""OpenVINO's precisions on whole models: ``python -m benchmarks.precision_variants [--models a,b]``.

Which lower-precision variants are worth searching on this CPU? For each model, collage's ``openvino``
(fp32), ``openvino-bf16`` and ``openvino-fp16`` backends on the whole model: latency measured interleaved
(``collage.tuner.checks.measure_interleaved``) and error at the outputs against the ONNX Runtime fp32 reference
on the calibration samples ``tune`` uses (2 seeded random samples). Writes
``results/precision/precision-variants.md``; the default five models take about 2 min.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks._common import write_atomic
from collage.util import source_commit

VARIANTS = ["openvino", "openvino-bf16", "openvino-fp16"]
DEFAULT = ["shufflenet", "squeezenet", "mobilenetv2", "resnet50", "bert-base"]


def measure(name: str, rounds: int) -> dict:
    from collage import zoo
    from collage.backends import get_backend
    from collage.measure.accuracy import load_calibration, reference_runs, run_error
    from collage.tuner.checks import measure_interleaved

    graph = zoo.load_graph(f"zoo:{name}")
    calib = load_calibration(graph, None)
    refs = reference_runs(graph, calib)
    compiled = {b: get_backend(b).compile(graph.model) for b in VARIANTS}
    errors = {b: run_error(c.run, calib, refs, graph.outputs) for b, c in compiled.items()}
    feeds = dict(calib.samples[0])
    ms = measure_interleaved({b: (lambda c=c: c.run(feeds)) for b, c in compiled.items()}, rounds=rounds)
    return {"model": name, "ms": ms, "errors": errors}


def write(path: Path, rows: list[dict], command: str, elapsed: float) -> None:
    head = " | ".join(f"{b} ms | {b} error" for b in VARIANTS)
    lines = ["# OpenVINO on the whole model in fp32, bf16 and fp16", "",
             f"Command: `{command}` at commit {source_commit()}. {elapsed / 60:.1f} min.", "",
             "Latency: median ms of a full call, the three measured interleaved in one process. Error: max |err| / "
             "output range vs the ONNX Runtime fp32 reference on 2 seeded random samples (NaN/inf: not finite). "
             "*x fp32*: fp32 ms / this ms (> 1: faster).", "",
             f"| model | {head} | bf16 x fp32 | fp16 x fp32 |", "|---|" + "---:|---|" * len(VARIANTS) + "---:|---:|"]
    for r in rows:
        ms, e = r["ms"], r["errors"]
        cells = " | ".join(f"{ms[b]:.3f} | {e[b].rel:.2e}" if e[b].finite else f"{ms[b]:.3f} | NaN/inf"
                           for b in VARIANTS)
        lines.append(f"| {r['model']} | {cells} | {ms['openvino'] / ms['openvino-bf16']:.2f}x | "
                     f"{ms['openvino'] / ms['openvino-fp16']:.2f}x |")
    write_atomic(path, lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.precision_variants", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT), help="comma-separated zoo names (default "
                                                               f"{','.join(DEFAULT)})")
    p.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds (default 9)")
    p.add_argument("--out", default="results/precision/precision-variants.md")
    args = p.parse_args(argv)
    command = ("python -m benchmarks.precision_variants " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    from collage.backends import unavailable_reason

    for b in VARIANTS:
        why = unavailable_reason(b)
        if why:
            print(f"benchmarks.precision_variants: {b}: {why}", file=sys.stderr)
            return 2
    t0, rows = time.monotonic(), []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"benchmarks.precision_variants: {name}", file=sys.stderr, flush=True)
        rows.append(measure(name, args.rounds))
        write(Path(args.out), rows, command, time.monotonic() - t0)
    print(f"wrote {args.out} in {(time.monotonic() - t0) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
