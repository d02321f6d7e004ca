"""Does the kernel's write-back of a freshly written artifact land inside a later measurement?

    python -m benchmarks.writeback                      # writes results/measurement/writeback.md
    python -m benchmarks.writeback --quick              # squeezenet, 10 s phases:
    results/measurement/writeback-quick.md

A tune writes each plan it times to disk (an artifact holds the partitions' weights: 233 MB for
bvlc_alexnet) and times it at once; the verification does the same with the kept plan seconds later.
Linux keeps written pages dirty for up to ``vm.dirty_expire_centisecs`` (3000 here: 30 s) before its
flusher writes them out, so a measurement ~30 s after an export may share the two cores with that
flush. Each phase writes as many bytes as the model's weights to a file beside the tune's work
folders (the system temp directory), then times the model's whole model on ONNX Runtime and OpenVINO
(collage's backends), in ``--slice`` second slices taken in turn for ``--seconds`` (the machine-level
benchmark's trace): ``dirty``
leaves the pages to the kernel, ``synced`` calls ``os.sync()`` after the write. The phases alternate,
twice each; reported per phase are the slice medians before and after the flush time, and their ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks._common import header, md_table, report_name, write_report
from benchmarks.machine_level import trace
from collage import zoo
from collage.backends import get_backend
from collage.graph.inputs import random_inputs
from collage.graph.stats import inspect_graph


def phase(fns: dict[str, Callable[[], object]], nbytes: int, synced: bool, seconds: float,
          slice_s: float) -> tuple[float, list[dict]]:
    """Write ``nbytes`` (no fsync) to a temp file, ``os.sync()`` it if ``synced``, then trace; the sync's
    seconds and the trace (``benchmarks.machine_level.trace``: a slice per workload, in turn)."""
    data = np.random.default_rng(0).bytes(nbytes)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "weights.bin").write_bytes(data)
        a = time.perf_counter()
        if synced:
            os.sync()
        sync_s = time.perf_counter() - a
        rows = trace(fns, seconds, slice_s)
    return sync_s, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.writeback", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="zoo:bvlc_alexnet")
    p.add_argument("--seconds", type=float, default=50.0, help="trace length per phase (default 50)")
    p.add_argument("--slice", type=float, default=1.0, help="seconds per slice (default 1)")
    p.add_argument("--repeats", type=int, default=2, help="dirty/synced pairs (default 2)")
    p.add_argument("--quick", action="store_true", help="a smoke run: squeezenet, 10 s phases, one pair")
    p.add_argument("-o", "--out", default=None)
    args = p.parse_args(argv)
    command = "python -m benchmarks.writeback " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.model, args.seconds, args.repeats = "zoo:squeezenet", 10.0, 1
    expire_s = int(Path("/proc/sys/vm/dirty_expire_centisecs").read_text()) / 100
    graph = zoo.load_graph(args.model)
    feeds = random_inputs(graph, seed=0)
    fns = {}
    for name in ("onnxruntime", "openvino"):
        c = get_backend(name).compile(graph.model)
        fns[name] = lambda c=c: c.run(feeds)
    for fn in fns.values():  # warm
        for _ in range(3):
            fn()
    nbytes = inspect_graph(graph).param_bytes
    early, late = (3.0, expire_s - 5.0), (expire_s - 2.0, args.seconds)
    if args.seconds < expire_s + 5.0:  # too short to reach the flush (a smoke run): the two halves
        early, late = (0.0, args.seconds / 2), (args.seconds / 2, args.seconds)
    rows, detail = [], []
    for rep in range(args.repeats):
        for synced in (False, True):
            sync_s, trace_rows = phase(fns, nbytes, synced, args.seconds, args.slice)
            what = "synced" if synced else "dirty"
            for k in fns:
                mine = [r for r in trace_rows if r["workload"] == k]
                e = statistics.median(r["ms"] for r in mine if early[0] <= r["t"] < early[1])
                in_late = [r["ms"] for r in mine if late[0] <= r["t"] < late[1]]
                lt = statistics.median(in_late)
                rows.append([rep + 1, what, k, f"{sync_s:.2f}" if synced else "-", f"{e:.3f}", f"{lt:.3f}",
                             f"{lt / e:.3f}", f"{max(in_late) / e:.3f}"])
            detail.append([rep + 1, what, *(" ".join(f"{r['ms']:.1f}" for r in trace_rows if r["workload"] == k)
                                            for k in fns)])
            print(rows[-2], rows[-1], flush=True)
    lines = header("Write-back of a freshly written artifact inside a later measurement", command.strip(),
                   f"{args.model}: {nbytes / 1e6:.0f} MB written per phase (its weights); "
                   f"vm.dirty_expire_centisecs {expire_s * 100:.0f}; slices of {args.slice:g} s; `early`: median "
                   f"slice in [{early[0]:g}, {early[1]:g}) s after the write, `late`: in [{late[0]:g}, {late[1]:g}) s "
                   "(the flush falls there when the pages are left dirty).")
    lines += md_table(["pair", "phase", "backend", "os.sync() s", "early ms", "late ms", "late / early",
                       "worst late slice / early"], rows)
    lines += [f"Each slice's median, ms, in order (one slice of {args.slice:g} s per backend in turn):", ""]
    lines += md_table(["pair", "phase", *fns], detail)
    write_report(args.out or Path("results/measurement") / report_name("writeback", command), lines, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
