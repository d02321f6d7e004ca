"""An AVX2-only CPU, emulated for OpenVINO: the whole model per backend with oneDNN capped at AVX2 and not.

    collage zoo fetch nudenet-320n                # once: the real model among the defaults (trained weights)
    python -m benchmarks.isa_cap                  # -> results/demo/avx2-emulated.md (+ .json: every round)
    python -m benchmarks.isa_cap --models inception_v2 --rounds 5 --out /tmp/isa.md
    python -m benchmarks.isa_cap --out results/demo/avx2-native.md   # on a real AVX2-only CPU

On a CPU whose widest extension is AVX2 without VNNI (``cpu_class() == "avx2"``) the cap is a no-op: both processes
run the same real AVX2 kernels (a control of each other), their rounds are pooled, and the report compares int8 with
fp32 as they are, no emulation. ``--render RUN.json`` writes the report again from a run's saved rounds.

Issue 40 asks `make demo` to show > 1.3x over the best single fp32 backend on an AVX2-only CPU, and until
2026-12-05 no such CPU had been lent to a session (results/demo/avx2-native.md: a Zen 1). OpenVINO's CPU kernels are
oneDNN's, which take their widest instruction set from ``ONEDNN_MAX_CPU_ISA`` (``AVX2``: the kernels an AVX2-only
CPU runs, on this CPU's cores); ONNX Runtime's MLAS picks its kernels from CPUID alone, with no such cap, so its rows
are the native ones in both processes (a control: the two processes' ONNX Runtime rows should agree).

For each model: int8 ranges calibrated as ``make demo``'s tune does (minmax on 2 seeded random samples,
:func:`collage.backends.qdq.calibrate`); two worker processes, one with ``ONEDNN_MAX_CPU_ISA=AVX2``, one without,
each compiling the whole model on every backend; ``--rounds`` rounds, each running both workers in a fresh random
order and, in each, every backend for a block (>= 0.15 s, >= 3 calls) in a fresh random order; per runner the
median of its block medians, paired round by round (:func:`collage.tuner.checks.paired_medians`). Each worker
also reports the kernels OpenVINO chose for its convolutions and matmuls (``primitiveType``): the proof of the cap;
and each backend's error against ONNX Runtime fp32 (rel, cos: :mod:`collage.measure.accuracy`, worst over 4 seeded
random inputs other than the calibration's): int8 kernels of another instruction set round differently.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks._common import backend_as_tuned, header, md_table, write_report
from benchmarks.budget import load_line

BACKENDS = ("onnxruntime", "openvino", "onnxruntime-int8", "openvino-int8")
INT8 = {"onnxruntime-int8", "openvino-int8"}
WORKERS = {"native": {}, "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}
#: evaluation inputs for the error figures: seeds EVAL_SEED.. (the calibration's are 0 and 1)
EVAL, EVAL_SEED = 4, 100
#: the kernels counted: the ops that carry the model's arithmetic
HEAVY = ("Convolution", "FullyConnected", "MatMul", "GroupConvolution")


def real_shapes(model: str) -> dict[str, tuple[int, ...]] | None:
    """The input sizes a real (fetched) model is loaded with; None for a zoo model the project builds."""
    from collage.zoo.real import REAL_BY_NAME

    return dict(REAL_BY_NAME[model].shapes) if model in REAL_BY_NAME else None


def kernels(compiled) -> dict[str, int]:
    """OpenVINO's chosen kernel per heavy op of a compiled model, counted (``brgconv_avx2_I8``: 12, ...); {} for
    another runtime."""
    if not hasattr(compiled, "kernels"):
        return {}
    return dict(Counter(kernel for op, kernel in compiled.kernels() if op in HEAVY))


def errors(graph, compiled: dict) -> dict[str, list[float]]:
    """Each backend's [rel, cos] against ONNX Runtime fp32 in this process, worst over ``EVAL`` seeded random
    inputs (other seeds than the calibration's): collage.measure.accuracy's figures, as a tune judges them."""
    from collage.graph.inputs import random_inputs
    from collage.measure.accuracy import ErrorMeasure, compare

    feeds = [random_inputs(graph, seed=EVAL_SEED + k) for k in range(EVAL)]
    refs = [{k: np.array(v, copy=True) for k, v in compiled["onnxruntime"].run(f).items()} for f in feeds]
    out = {}
    for b, c in compiled.items():
        err = ErrorMeasure()
        for f, ref in zip(feeds, refs):
            compare({k: np.array(v, copy=True) for k, v in c.run(f).items()}, ref, list(ref), err)
        out[b] = [err.rel, err.cos]
    return out


def serve(model: str, ranges: str) -> None:
    """A worker: compile the whole model on every backend, warm up, print the kernels, then one block round per
    line read."""
    from collage.graph.inputs import random_inputs
    from collage.graph.ir import Graph
    from collage.tuner.checks import median_ms
    from collage.zoo import model_path

    graph = Graph.load(model_path(model), shapes=real_shapes(model))
    feeds = random_inputs(graph, seed=0)
    compiled = {b: backend_as_tuned(b, ranges, INT8).compile(graph.model)
                for b in BACKENDS}
    calls = {b: (lambda c=c: c.run(feeds)) for b, c in compiled.items()}
    for fn in calls.values():
        median_ms(fn, min_runs=3, min_time_s=0.3)
    print(json.dumps({"kernels": {b: kernels(c) for b, c in compiled.items()},
                      "errors": errors(graph, compiled)}), flush=True)
    rng = random.Random(os.getpid())
    for _ in sys.stdin:
        order = list(calls)
        rng.shuffle(order)
        print(json.dumps({b: median_ms(calls[b], min_runs=3, min_time_s=0.15) for b in order}), flush=True)


def calibrated(model: str, folder: Path) -> Path:
    """The model's int8 ranges as the demo's tune calibrates them: minmax over 2 seeded random samples."""
    from collage.backends.qdq import calibrate, save_ranges
    from collage.graph.inputs import random_inputs
    from collage.graph.ir import Graph
    from collage.zoo import model_path

    graph = Graph.load(model_path(model), shapes=real_shapes(model))
    ranges = calibrate(graph.model, [random_inputs(graph, seed=s) for s in range(2)])
    return save_ranges(ranges, folder / f"{model}.json")


def measure(model: str, ranges: Path, rounds: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """Both workers' rounds, interleaved: ``{"native:openvino": [ms per round], ...}`` and each worker's kernels."""
    procs, seen = {}, {}
    try:
        for tag, env in WORKERS.items():
            p = subprocess.Popen([sys.executable, "-m", "benchmarks.isa_cap", "--serve", model, str(ranges)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, **env})
            procs[tag] = p
            seen[tag] = json.loads(p.stdout.readline())  # {"kernels": ..., "errors": ...}
        per: dict[str, list[float]] = {}
        rng = random.Random(0)
        for _ in range(rounds):
            tags = list(procs)
            rng.shuffle(tags)
            for tag in tags:
                procs[tag].stdin.write("go\n")
                procs[tag].stdin.flush()
                for b, ms in json.loads(procs[tag].stdout.readline()).items():
                    per.setdefault(f"{tag}:{b}", []).append(ms)
        return per, seen
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(timeout=60)


def native_avx2() -> bool:
    """True on a CPU whose widest extension is AVX2 without VNNI (``cpu_class() == "avx2"``): there the cap changes
    nothing and the rows are real AVX2 (an AVX-VNNI CPU's int8 kernels are not AVX2's; another architecture's,
    or unreadable flags, are not known to be)."""
    from collage.util import cpu_class

    return cpu_class() == "avx2"


def kernel_text(k: dict[str, int]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in sorted(k.items(), key=lambda kv: -kv[1])) or "-"


def error_line(seen: dict[str, dict]) -> str:
    """OpenVINO int8's error with native and with AVX2 kernels, and whether it moved (1 - cos more than 20% apart)."""
    (nrel, ncos), (arel, acos) = seen["native"]["errors"]["openvino-int8"], seen["avx2"]["errors"]["openvino-int8"]
    far = max(1 - ncos, 1 - acos) > 1.2 * min(1 - ncos, 1 - acos)
    return (f"- OpenVINO int8's error against ONNX Runtime fp32: rel {nrel:.4f}, cos {ncos:.6f} with this CPU's "
            f"kernels; rel {arel:.4f}, cos {acos:.6f} with AVX2's: "
            + ("the int8 kernels round differently, so an accuracy budget judged on one CPU class's int8 kernels "
               "does not carry over to another's." if far else "within 20% of each other (1 - cos)."))


def model_lines(model: str, per: dict[str, list[float]], seen: dict[str, dict], native: bool) -> list[str]:
    from collage.tuner.checks import paired_medians

    ms = paired_medians(per)
    rows = []
    for b in BACKENDS:
        nat, cap = ms[f"native:{b}"], ms[f"avx2:{b}"]
        capped = "yes" if b.startswith("openvino") else "no (MLAS: no cap)"
        (nrel, ncos), (arel, acos) = seen["native"]["errors"][b], seen["avx2"]["errors"][b]
        rows.append([b, capped, f"{nat:.3f}", f"{cap:.3f}", f"{cap / nat:.2f}", f"{nrel:.4f} / {ncos:.6f}",
                     f"{arel:.4f} / {acos:.6f}", kernel_text(seen["avx2"]["kernels"][b]),
                     kernel_text(seen["native"]["kernels"][b])])
    lines = [f"## {model}", ""]
    lines += md_table(["backend", "capped at AVX2", "native ms", "AVX2 ms", "AVX2 / native",
                       "native rel / cos", "AVX2 rel / cos", "AVX2 kernels", "native kernels"], rows)

    def speedups(a: str, b: str) -> np.ndarray:
        """``a``'s speedup over ``b`` per round (b's ms / a's ms, both from one process's round): keys with their
        process (``avx2:openvino``), or a bare backend on a real AVX2 CPU, where both processes' rounds count."""
        tags = [""] if ":" in a else list(WORKERS)
        return np.concatenate([np.array(per[f"{t}:{b}" if t else b]) / np.array(per[f"{t}:{a}" if t else a])
                               for t in tags])

    def ratio(a: str, b: str) -> str:
        x = speedups(a, b)
        return (f"{np.median(x):.2f}x (median of {len(x)} rounds; per round {np.percentile(x, 10):.2f}-"
                f"{np.percentile(x, 90):.2f}, p10-p90; faster in {(x > 1).sum()} of {len(x)})")

    if native:
        best_fp32 = min(("onnxruntime", "openvino"), key=lambda b: ms[f"native:{b}"] + ms[f"avx2:{b}"])
        lines += [
            f"- This CPU is AVX2-only: every row is its real kernels, and both processes' rounds count (the cap is a "
            f"no-op). OpenVINO int8 over the best fp32 backend ({best_fp32}): **{ratio('openvino-int8', best_fp32)}**; "
            f"over OpenVINO fp32: {ratio('openvino-int8', 'openvino')}.",
            f"- ONNX Runtime int8 over ONNX Runtime fp32: {ratio('onnxruntime-int8', 'onnxruntime')}.",
            f"- Control: the capped process against the native one: OpenVINO fp32 "
            f"{ms['avx2:openvino'] / ms['native:openvino']:.3f}x, ONNX Runtime fp32 "
            f"{ms['avx2:onnxruntime'] / ms['native:onnxruntime']:.3f}x (1.00 expected).", ""]
        return lines
    ov_penalty = ms["avx2:openvino"] / ms["native:openvino"]
    ort_scaled = ms["native:onnxruntime"] * ov_penalty
    best_int8 = "avx2:openvino-int8"
    lines += [
        f"- OpenVINO int8 over OpenVINO fp32, both at AVX2: **{ratio('avx2:openvino-int8', 'avx2:openvino')}**.",
        f"- OpenVINO int8 at AVX2 over ONNX Runtime fp32 as it runs here (AVX-512 kernels; an AVX2 CPU runs "
        f"narrower ones, presumably no faster): {ratio(best_int8, 'native:onnxruntime')}.",
        f"- If ONNX Runtime's fp32 lost to AVX2 what OpenVINO's did ({ov_penalty:.2f}x, an assumption: MLAS cannot "
        f"be capped), its AVX2 fp32 would be {ort_scaled:.3f} ms and the best fp32 backend "
        f"{min(ort_scaled, ms['avx2:openvino']):.3f} ms: OpenVINO int8 at AVX2 "
        f"{min(ort_scaled, ms['avx2:openvino']) / ms[best_int8]:.2f}x over it. OpenVINO int8 alone clears 1.3x over "
        f"the best fp32 backend on an AVX2 CPU if ONNX Runtime's fp32 there is at least {1.3 * ms[best_int8]:.3f} ms "
        f"({1.3 * ms[best_int8] / ms['native:onnxruntime']:.2f}x its time here).",
        error_line(seen),
        f"- Control: ONNX Runtime fp32 in the capped process against the native one "
        f"{ms['avx2:onnxruntime'] / ms['native:onnxruntime']:.3f}x (1.00 expected: the cap does not reach it).", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["inception_v2", "resnet50", "mobilenetv2", "nudenet-320n"],
                    help="zoo models; a real one (trained weights) once `collage zoo fetch NAME` has fetched it")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default="results/demo/avx2-emulated.md")
    ap.add_argument("--render", metavar="JSON", help="write the report from a run's saved rounds (its .json), "
                    "measuring nothing")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    if args.render:
        return render(Path(args.render), args.out)
    from collage.zoo.real import REAL_BY_NAME, is_fetched

    command = "python -m benchmarks.isa_cap" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    t0 = time.monotonic()
    native = native_avx2()
    body: list[str] = []
    rounds: dict[str, dict[str, list[float]]] = {}
    kernels_seen: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="collage-isa-") as tmp:
        for model in args.models:
            if model in REAL_BY_NAME and not is_fetched(model):
                body += [f"## {model}", "", f"Not fetched: `collage zoo fetch {model}` first.", ""]
                continue
            per, seen = measure(model, calibrated(model, Path(tmp)), args.rounds)
            rounds[model], kernels_seen[model] = per, seen
            body += model_lines(model, per, seen, native)
            print(f"{model}: done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    raw = Path(args.out).with_suffix(".json")  # every round's block medians, for a second look
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps({"command": command, "native_avx2": native, "rounds": rounds, "kernels": kernels_seen},
                              indent=1) + "\n")
    notes = (f"{args.rounds} rounds per model, both workers in each; {load_line()}; "
             f"{time.monotonic() - t0:.0f} s in all. ")
    title, about = titled(native)
    write_report(args.out, header(title, command, notes + about) + body)
    return 0


def titled(native: bool) -> tuple[str, str]:
    """The report's title and what its two processes mean."""
    if native:
        return ("int8 against fp32 on a real AVX2-only CPU (issue 40, item 3)",
                "This CPU's widest extension is AVX2 (no AVX-512, no VNNI): *native* and *AVX2* run the same kernels "
                "(the cap is a no-op: a control of the noise), and these are a real AVX2 CPU's numbers.")
    return ("AVX2-only CPU, emulated for OpenVINO (issue 40, item 3)",
            "*native*: this CPU's widest kernels; *AVX2*: oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`), which "
            "only OpenVINO honours. An emulation: an AVX2-only CPU (Zen 2/3, pre-Ice Lake Xeon) has other cores, "
            "caches and clocks; the ratios, not the milliseconds, carry over.")


def render(raw: Path, out: str) -> int:
    """The report again from a run's saved rounds (its ``.json``), measuring nothing: the run's own command and
    rounds, this code's summaries. A file from before ``native_avx2`` was saved is read as this machine's class."""
    data = json.loads(raw.read_text())
    native = bool(data.get("native_avx2", native_avx2()))
    body: list[str] = []
    for model, per in data["rounds"].items():
        body += model_lines(model, per, data["kernels"][model], native)
    n = {len(v) for per in data["rounds"].values() for v in per.values()}
    notes = (f"Rendered by `python -m benchmarks.isa_cap --render {raw} --out {out}` from the rounds that run saved "
             f"({'/'.join(map(str, sorted(n)))} rounds per model, both workers in each; the machine and commit above "
             f"are the rendering's). ")
    title, about = titled(native)
    write_report(out, header(title, data["command"], notes + about) + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
