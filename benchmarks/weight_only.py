"""Weight-only quantized MatMuls: each runtime's settings, their speed and their error against float64.

    python -m benchmarks.weight_only          # -> results/backends/weight-only.md

The model is x[1, ROWS, K] @ DequantizeLinear(W8[K, N] int8, a scale per column): what weight-only exporters write.
In one run, interleaved (blocks of calls per round, medians paired round by round: collage.tuner.checks), each
setting's median milliseconds and its max |error| against float64 on the same input:

* ONNX Runtime (level all) as it comes: DequantizeLinear + MatMul fused into MatMulNBits at accuracy level 4
  (activations quantized to int8);
* ONNX Runtime, ``session.qdq_matmulnbits_accuracy_level=1``: the same fusion in fp32;
* collage's ONNX Runtime fp32 backend: the weights dequantized once at load (``session.disable_quant_qdq``), a plain
  fp32 MatMul (collage.backends.onnxruntime.backend);
* OpenVINO f32 as it comes (``DYNAMIC_QUANTIZATION_GROUP_SIZE`` 32: activations quantized in groups of 32), and
  collage's OpenVINO fp32 backend (0).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

from benchmarks._common import header, md_table, write_report
from collage.backends import get_backend
from collage.tuner.checks import interleaved_rounds, paired_medians

ROWS, K, N = 64, 1024, 1024


def model() -> tuple[onnx.ModelProto, np.ndarray]:
    rng = np.random.default_rng(0)
    w8 = rng.integers(-128, 128, (K, N)).astype(np.int8)
    scale = (rng.random(N) * 0.01 + 0.001).astype(np.float32)
    g = helper.make_graph([helper.make_node("DequantizeLinear", ["W8", "scale"], ["W"], axis=1),
                           helper.make_node("MatMul", ["x", "W"], ["y"])], "weight_only",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, ROWS, K])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, ROWS, N])],
                          [nh.from_array(w8, "W8"), nh.from_array(scale, "scale")])
    m = helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    return m, w8.astype(np.float64) * scale.astype(np.float64)


def runners(m: onnx.ModelProto, x: np.ndarray) -> dict[str, tuple[str, object]]:
    """name -> (what it is, a callable returning the output)."""
    import onnxruntime as ort
    import openvino as ov

    data = m.SerializeToString()

    def ort_session(entries: dict[str, str]):  # noqa: ANN202
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        for k, v in entries.items():
            so.add_session_config_entry(k, v)
        s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return lambda: s.run(None, {"x": x})[0]

    ours_ort = get_backend("onnxruntime", shared_pool=False, threads=2).compile(m)
    ours_ov = get_backend("openvino", threads=2).compile(m)
    core = ov.Core()
    default_ov = core.compile_model(core.read_model(data, b""), "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
        "INFERENCE_NUM_THREADS": "2"})
    return {
        "ort-default": ("ONNX Runtime level all, as it comes (MatMulNBits, accuracy level 4)", ort_session({})),
        "ort-acc1": ("ONNX Runtime level all, qdq_matmulnbits_accuracy_level=1",
                     ort_session({"session.qdq_matmulnbits_accuracy_level": "1"})),
        "collage-ort": ("collage's onnxruntime fp32 (weights dequantized at load)",
                        lambda: ours_ort.run({"x": x})["y"]),
        "ov-default": ("OpenVINO f32, as it comes (DYNAMIC_QUANTIZATION_GROUP_SIZE 32)",
                       lambda: default_ov({"x": x})[0]),
        "collage-ov": ("collage's openvino fp32 (DYNAMIC_QUANTIZATION_GROUP_SIZE 0)",
                       lambda: ours_ov.run({"x": x})["y"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("-o", "--output", default="results/backends/weight-only.md")
    args = ap.parse_args(argv)
    m, w = model()
    x = np.random.default_rng(1).standard_normal((1, ROWS, K)).astype(np.float32)
    want = x.astype(np.float64) @ w
    runs = runners(m, x)
    errors = {k: float(np.abs(np.asarray(fn()) - want).max()) for k, (_, fn) in runs.items()}
    medians = paired_medians(interleaved_rounds({k: fn for k, (_, fn) in runs.items()}, rounds=args.rounds))
    base = medians["collage-ort"]
    rows = [[f"`{k}`", what, f"{medians[k]:.3f}", f"{medians[k] / base:.2f}", f"{errors[k]:.1e}"]
            for k, (what, _) in runs.items()]
    lines = header("Weight-only quantized MatMul: settings, speed, error against float64",
                   "python -m benchmarks.weight_only" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
                   f"x[1, {ROWS}, {K}] @ DequantizeLinear(int8 W[{K}, {N}], a scale per column); outputs up to "
                   f"{np.abs(want).max():.0f} in magnitude. {args.rounds} interleaved rounds, blocks of calls, "
                   "medians paired round by round; error: max |output - float64| on one input.")
    lines += md_table(["setting", "what", "median ms", "/ collage-ort", "max abs err vs float64"], rows)
    write_report(args.output, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
