"""How the int8 ranges are calibrated, chosen by measured error: ``python -m benchmarks.int8_calibration``.

For each model: the ranges by min/max, percentile (ORT default 99.999) and entropy over the same 2 seeded
random samples tune uses (``load_calibration``), each with the two op sets of ``collage.backends.qdq``
("core": Conv/MatMul/Gemm; "all": every op ORT's QDQ quantizer knows); the whole model quantized with
them and run by onnxruntime-int8 and openvino-int8; error vs the ONNX Runtime fp32 reference (max |err| /
output range, min cosine). Writes ``results/precision/int8-calibration.md``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import write_atomic
from collage.util import source_commit

MODELS = ["mobilenetv2", "resnet50", "squeezenet"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.int8_calibration")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--out", default="results/precision/int8-calibration.md")
    args = p.parse_args(argv)
    from collage import zoo
    from collage.backends import get_backend, qdq
    from collage.measure.accuracy import load_calibration, reference_runs, run_error

    command = "python -m benchmarks.int8_calibration " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = ["# INT8 calibration: min/max vs percentile vs entropy, core vs all ops", "",
             f"Command: `{command}` at commit {source_commit()}", "",
             "Error of the whole model in int8 (QDQ, weights int8 per channel, activations uint8) vs ONNX Runtime "
             "fp32 on the 2 seeded random samples that also calibrate; rel = max |err| / output range, cos = min "
             "cosine similarity.", "",
             "| model | method | ops | calibrate s | onnxruntime-int8 rel / cos | openvino-int8 rel / cos |",
             "|---|---|---|---:|---|---|"]
    for name in [m for m in args.models.split(",") if m]:
        g = zoo.load_graph(f"zoo:{name}")
        calib = load_calibration(g, None)
        refs = reference_runs(g, calib)
        for method in qdq.METHODS:
            for ops in ("core", "all"):
                t0 = time.monotonic()
                ranges = qdq.calibrate(g.model, calib.samples, method, ops)
                secs = time.monotonic() - t0
                with tempfile.TemporaryDirectory() as tmp:
                    path = str(qdq.save_ranges(ranges, Path(tmp) / "r.json"))
                    cells = []
                    for b in ("onnxruntime-int8", "openvino-int8"):
                        bits = qdq.tuned_weight_bits(get_backend(b))
                        e = run_error(get_backend(b, ranges=path, ops=ops, weight_bits=bits).compile(g.model).run,
                                      calib, refs, g.outputs)
                        cells.append(f"{e.rel:.4f} / {e.cos:.6f}")
                lines.append(f"| {name} | {method} | {ops} | {secs:.1f} | {cells[0]} | {cells[1]} |")
                print(lines[-1], flush=True)
        write_atomic(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
