"""Torch anchors: what plain torch does with a model on this device, measured in the same run as collage's plans.

    python benchmarks/torch_anchors.py --models resnet50,bert-base,mobilenetv2 --device cuda --out DIR/anchors
    python benchmarks/torch_anchors.py --models tiny-resnet --device cpu --repeat 5 --out /tmp/anchors   # smoke

Each zoo model becomes one torch program (collage's ONNX-to-torch interpreter, :class:`collage.backends.torch.backend.
Program`, with its constants folded: on the H200 it ran as fast as hand-written torch, resnet50 eager 3.27 vs 3.60 ms),
inputs on the device, batch 1, and is timed as:

* ``eager_fp32`` (TF32 off), ``eager_tf32`` (CUDA), ``eager_bf16`` (bf16 autocast);
* ``graph_fp32`` / ``graph_bf16``: the same captured once in a CUDA graph and replayed (CUDA);
* ``compile_fp32``: ``torch.compile`` (default mode, TorchInductor; one graph, as the ``torch-inductor`` backend
  compiles a partition), with its compile time (``compile_s``).

Times are medians of ``--repeat`` calls after ``--warmup``: CUDA events on a GPU, host wall time on a CPU. An anchor
that cannot run here (a CUDA-only one on a CPU) is left out; one that fails is a row with its error. Writes
``OUT.csv`` (one row per model and anchor) and ``OUT.md`` (models x anchors, ms).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CUDA_ONLY = {"eager_tf32", "graph_fp32", "graph_bf16"}
ANCHORS = ("eager_fp32", "eager_tf32", "eager_bf16", "graph_fp32", "graph_bf16", "compile_fp32")


@dataclass(frozen=True)
class Settings:
    device: str
    repeat: int
    warmup: int
    compile: bool


@dataclass
class Row:
    model: str
    anchor: str
    ms: float | None = None
    compile_s: float | None = None
    error: str | None = None


def median_ms(fn: Callable[[], object], s: Settings) -> float:
    """Median ms of ``fn``: CUDA events on a GPU (collage.backends.cuda_timing), host wall time on a CPU."""
    from collage.backends.cuda_timing import event_times_ms

    if s.device.startswith("cuda"):
        return float(np.median([x.event_ms for x in event_times_ms(fn, s.repeat, s.warmup)]))
    for _ in range(s.warmup):
        fn()
    times = []
    for _ in range(s.repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(times))


def math_mode(torch: Any, tf32: bool) -> None:
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32


def captured(torch: Any, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` captured in a CUDA graph (after warm-up on a side stream); returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    replay: Callable[[], object] = graph.replay
    return replay


def model_program(name: str, device: str) -> tuple[Any, dict[str, Any]]:
    """The zoo model's torch program on ``device`` and its seeded inputs there."""
    import torch

    from collage import zoo
    from collage.backends.torch.backend import Program

    graph = zoo.load_graph(f"zoo:{name}")
    feeds = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in zoo.random_inputs(graph).items()}
    return Program(graph.model, device), feeds


def anchor_call(anchor: str, program: Any, feeds: dict[str, Any]) -> tuple[Callable[[], object], float | None]:
    """The call one anchor times, and its compile time (torch.compile's first call) where it has one."""
    import torch

    math_mode(torch, anchor == "eager_tf32")
    bf16 = anchor.endswith("bf16")

    def run() -> object:
        with torch.inference_mode(), torch.autocast(program.device.type, dtype=torch.bfloat16, enabled=bf16,
                                                    cache_enabled=False):
            return program(dict(feeds))
    if anchor.startswith("graph"):
        return captured(torch, run), None
    if anchor.startswith("compile"):
        return compiled_call(program, feeds)
    return run, None


def compiled_call(program: Any, feeds: dict[str, Any]) -> tuple[Callable[[], object], float]:
    """The program through torch.compile (collage's torch-inductor runner: one graph, static shapes, the pattern
    passes off where they fail), and its compile time (the first call)."""
    import torch

    from collage.backends.torch.variants import InductorRunner

    runner = InductorRunner(program, program)
    t0 = time.perf_counter()
    with torch.inference_mode():
        runner(dict(feeds))
    if program.device.type == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0

    def compiled() -> object:
        with torch.inference_mode():
            return runner(dict(feeds))
    return compiled, compile_s


def measure_model(name: str, s: Settings) -> list[Row]:
    rows: list[Row] = []
    try:
        program, feeds = model_program(name, s.device)
    except Exception as e:  # noqa: BLE001 - a model that does not build is a row
        return [Row(name, "build", error=f"{type(e).__name__}: {e}"[:300])]
    for anchor in ANCHORS:
        if (anchor in CUDA_ONLY and not s.device.startswith("cuda")) or (anchor.startswith("compile")
                                                                         and not s.compile):
            continue
        try:
            fn, compile_s = anchor_call(anchor, program, feeds)
            rows.append(Row(name, anchor, round(median_ms(fn, s), 4),
                            None if compile_s is None else round(compile_s, 1)))
        except Exception as e:  # noqa: BLE001 - an anchor that fails is a row with its error
            rows.append(Row(name, anchor, error=f"{type(e).__name__}: {e}"[:300]))
        print(f"{name:12s} {anchor:13s} {rows[-1].ms} ms" + (f" (compile {rows[-1].compile_s} s)"
              if rows[-1].compile_s else "") + (f" ERROR {rows[-1].error}" if rows[-1].error else ""), flush=True)
    return rows


def write(rows: list[Row], out: Path, s: Settings) -> None:
    """``out``.csv (one row per model and anchor) and ``out``.md (models x anchors)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "anchor", "ms", "compile_s", "error", "device"])
        for r in rows:
            w.writerow([r.model, r.anchor, r.ms, r.compile_s, r.error or "", s.device])
    anchors = [a for a in ANCHORS if any(r.anchor == a for r in rows)]
    lines = [f"Torch anchors on {s.device} (batch 1, median of {s.repeat} calls, ms; benchmarks/torch_anchors.py)", "",
             "| model | " + " | ".join(anchors) + " |", "|---|" + "---:|" * len(anchors)]
    for model in dict.fromkeys(r.model for r in rows):
        cells = []
        for a in anchors:
            got = next((r for r in rows if r.model == model and r.anchor == a), None)
            cell = "" if got is None else "error" if got.error else f"{got.ms:.3f}"
            cells.append(cell + (f" (compile {got.compile_s} s)" if got is not None and got.compile_s else ""))
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,bert-base,mobilenetv2", help="comma-separated zoo names")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (its compile takes 10-25 s)")
    p.add_argument("--out", required=True, help="output stem: writes OUT.csv and OUT.md")
    args = p.parse_args(argv)
    s = Settings(args.device, args.repeat, args.warmup, not args.no_compile)
    rows = [r for m in args.models.split(",") if m.strip() for r in measure_model(m.strip(), s)]
    write(rows, Path(args.out), s)
    failed = [r for r in rows if r.error]
    print(f"anchors: {len(rows) - len(failed)} measured, {len(failed)} failed -> {args.out}.md/.csv", file=sys.stderr)
    return 1 if rows and len(failed) == len(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
