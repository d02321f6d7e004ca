"""How steady is this machine? Fixed workloads timed in short slices over several minutes.

    python -m benchmarks.machine_level                 # 300 s, writes results/measurement/machine-level.md
    python -m benchmarks.machine_level --seconds 60 --quick   # results/measurement/machine-level-quick.md

Two runs of collage's measurement disagree by a median ~10% (results/measurement/noise.md). This benchmark asks
what floor the machine itself sets, with no compile, no worker process and no candidate changing: the
same few partitions (a 3x3 convolution and a BERT-sized MatMul through collage's ONNX Runtime and
OpenVINO backends, the ORT convolution also on one thread) plus the reference probe the measurer can
time next to a window (``collage.measure.worker.reference_probe``) and a 64 MB memory copy, taken
round robin in slices of ``--slice`` seconds (a measurement window's length), each slice's median of
single calls kept with its time. Reported per workload:

* the spread of slice medians (p10, p90, max/min) and their level over time (30 s buckets);
* **slices at least a minute apart** (what two separate runs of a candidate are): median difference
  and the share within 5%, raw and divided by the reference probe of the nearest slice (does a probe
  tell the level?).
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import os
import sys
import time

# numpy's BLAS threads and a runtime's pool fighting over the 2 cores made the probe 100x slower in a
# first trial; one BLAS thread, as in a measuring worker's probe between windows (set before numpy loads).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tqdm import tqdm

from benchmarks.noise import cpu_snapshot
from collage.backends import get_backend, unavailable_reason
from collage.measure.worker import reference_probe
from collage.util import machine_id, physical_cores, source_commit

from benchmarks._common import write_atomic

APART_S = 60.0
BUCKET_S = 30.0


def _one_node(op: str, x: list[int], w: np.ndarray, y: list[int], **attrs) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node(op, ["x", "w"], ["y"], **attrs)], op.lower(),
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def workloads() -> dict[str, Callable[[], object]]:
    """Name -> one call. Partitions run through collage's backends (their fast call paths)."""
    rng = np.random.default_rng(0)
    conv = _one_node("Conv", [1, 64, 56, 56], rng.standard_normal((64, 64, 3, 3)).astype(np.float32),
                     [1, 64, 56, 56], pads=[1, 1, 1, 1])
    matmul = _one_node("MatMul", [1, 128, 768], rng.standard_normal((768, 3072)).astype(np.float32), [1, 128, 3072])
    feeds = {"conv": {"x": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)},
             "matmul": {"x": rng.standard_normal((1, 128, 768)).astype(np.float32)}}
    out: dict[str, Callable[[], object]] = {}
    for backend, opts, label in [("onnxruntime", {}, "onnxruntime"), ("openvino", {}, "openvino"),
                                 ("onnxruntime", {"threads": 1, "shared_pool": False}, "onnxruntime 1 thread")]:
        if unavailable_reason(backend):
            continue
        b = get_backend(backend, **opts)
        for name, model in [("conv", conv), ("matmul", matmul)]:
            if name == "matmul" and opts:
                continue
            c = b.compile(model)
            out[f"{name} 3x3 64x56x56, {label}" if name == "conv" else f"matmul 128x768x3072, {label}"] = \
                lambda c=c, f=feeds[name]: c.run(f)
    src = np.ones(16 * 1024 * 1024, np.float32)
    dst = np.empty_like(src)
    out["memory copy 64 MB"] = lambda: np.copyto(dst, src)
    out["reference probe"] = lambda: reference_probe(reps=1)
    return out


def _slice(fn: Callable[[], object], seconds: float) -> tuple[float, int]:
    """Median ms of single calls of ``fn`` for ``seconds`` (after one warm-up call), and the count."""
    fn()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(times)), len(times)


def trace(work: dict[str, Callable[[], object]], seconds: float, slice_s: float) -> list[dict]:
    rows: list[dict] = []
    start = time.perf_counter()
    names = itertools.cycle(work)
    bar = tqdm(total=round(seconds), unit="s", desc="machine level", file=sys.stderr)
    while time.perf_counter() - start < seconds:
        name = next(names)
        t = time.perf_counter() - start
        ms, n = _slice(work[name], slice_s)
        rows.append({"workload": name, "t": t, "ms": ms, "calls": n})
        bar.update(round(time.perf_counter() - start - bar.n))
    bar.close()
    return rows


def _apart(ts: np.ndarray, vals: np.ndarray) -> tuple[float, float, int]:
    """Median relative difference and share within 5% over slice pairs at least APART_S apart."""
    diffs = [abs(vals[i] - vals[j]) / min(vals[i], vals[j])
             for i in range(len(ts)) for j in range(i + 1, len(ts)) if ts[j] - ts[i] >= APART_S]
    if not diffs:
        return float("nan"), float("nan"), 0
    d = np.array(diffs)
    return float(np.median(d)), float(np.mean(d <= 0.05)), len(d)


def summarize(rows: list[dict]) -> tuple[list[list[str]], list[list[str]]]:
    probe = [(r["t"], r["ms"]) for r in rows if r["workload"] == "reference probe"]
    pt, pm = np.array([p[0] for p in probe]), np.array([p[1] for p in probe])
    summary, levels = [], []
    horizon = max(r["t"] for r in rows)
    buckets = np.arange(0.0, horizon + BUCKET_S, BUCKET_S)
    for name in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == name]
        ts, ms = np.array([r["t"] for r in mine]), np.array([r["ms"] for r in mine])
        raw = _apart(ts, ms)
        row = [name, str(len(ms)), f"{np.median(ms):.3f}", f"{np.percentile(ms, 10):.3f} - {np.percentile(ms, 90):.3f}",
               f"{ms.max() / ms.min():.2f}", str(raw[2]), f"{raw[0]:.1%}", f"{raw[1]:.0%}"]
        if len(pm) and name != "reference probe":
            near = pm[np.abs(pt[None, :] - ts[:, None]).argmin(axis=1)]
            norm = _apart(ts, ms / near)
            row += [f"{norm[0]:.1%}", f"{norm[1]:.0%}"]
        else:
            row += ["", ""]
        summary.append(row)
        levels.append([name] + [f"{np.median(ms[(ts >= lo) & (ts < lo + BUCKET_S)]):.3f}"
                                if ((ts >= lo) & (ts < lo + BUCKET_S)).any() else "" for lo in buckets[:-1]])
    head = ["time (s)"] + [f"{lo:.0f}-{lo + BUCKET_S:.0f}" for lo in buckets[:-1]]
    return summary, [head] + levels


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.machine_level", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=300.0, help="length of the trace (default 300)")
    p.add_argument("--slice", type=float, default=2.0, help="seconds per slice: a measurement window (default 2)")
    p.add_argument("--quick", action="store_true", help="write results/measurement/machine-level-quick.md")
    p.add_argument("--out", default=None, help="output file (default results/measurement/machine-level[-quick].md)")
    args = p.parse_args(argv)
    command = "python -m benchmarks.machine_level " + " ".join(sys.argv[1:] if argv is None else argv)
    cpu0 = cpu_snapshot()
    work = workloads()
    rows = trace(work, args.seconds, args.slice)
    cpu1 = cpu_snapshot()
    summary, levels = summarize(rows)
    steal = (f"{(cpu1['steal'] - cpu0['steal']) / max(1, cpu1['total'] - cpu0['total']):.2%}"
             if cpu0["steal"] is not None else "unknown")
    mhz = ", ".join(f"{x:.0f}" for x in sorted(set(cpu0["mhz"] + cpu1["mhz"]))) or "unknown"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# How steady is this machine?", "", f"Command: `{command.strip()}` at commit {source_commit()}", "",
             f"Machine: {machine_id()}, {physical_cores()} cores; {now}; steal time {steal} of CPU time; "
             f"CPU clock seen {mhz} MHz.", "",
             f"The same workloads, nothing recompiled, taken round robin in {args.slice:g} s slices (one slice: median "
             f"of single calls) for {args.seconds:.0f} s. `apart`: pairs of slices of one workload at least "
             f"{APART_S:.0f} s apart, as two separate measuring runs are; `/ probe`: each slice divided by the "
             "reference probe slice nearest in time.", "",
             *_table(["workload", "slices", "median ms", "p10 - p90 ms", "max/min", "pairs apart",
                      "median difference apart", "within 5% apart", "/ probe: median difference", "/ probe: within 5%"],
                     summary), "",
             f"Level over time: median of the slice medians in each {BUCKET_S:.0f} s bucket, ms.", "",
             *_table(levels[0], levels[1:]), ""]
    out = Path(args.out or ("results/measurement/machine-level-quick.md" if args.quick
                            else "results/measurement/machine-level.md"))
    write_atomic(out, lines)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
