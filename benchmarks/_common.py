"""Helpers the benchmark tables share: report file names, the page header, Markdown tables, sample
statistics and interleaved timing (each round runs every contender once, in a fresh random order).

Imported by :mod:`benchmarks.backend_tables` and :mod:`benchmarks.chain_tables` (which used to import
each other's private helpers)."""
from __future__ import annotations

import datetime
import gc
import random
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from collage.util import machine_id, physical_cores, source_commit

SMOKE = ("**Smoke run (`--quick`): tiny models, few rounds; these numbers only prove the script works. "
         "Run without `--quick` on a quiet machine for the real table.**")


def report_name(stem: str, command: str) -> str:
    """``stem.md``; ``stem-quick.md`` for a smoke run, so it is never mistaken for the real table."""
    return f"{stem}-quick.md" if "--quick" in command else f"{stem}.md"


def header(title: str, command: str, notes: str = "") -> list[str]:
    import onnxruntime
    import openvino

    lines = [f"# {title}", "", f"Command: `{command}`", "",
             f"Machine: {machine_id()}; threads {physical_cores()}; onnxruntime {onnxruntime.__version__}; "
             f"openvino {openvino.get_version().split('-')[0]}; commit {source_commit()}; written "
             f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC.", ""]
    if "--quick" in command:
        lines += [SMOKE, ""]
    if notes:
        lines += [notes, ""]
    return lines


def md_table(head: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def write_atomic(path: str | Path, lines: list[str]) -> None:
    """Write markdown ``lines`` to ``path`` (folders made) through a temporary file: a run killed mid-write
    leaves the previous table, never half of one (long benchmarks rewrite their table after each model)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def write_report(path: str | Path, lines: list[str], *, echo: bool = True) -> None:
    """Write a benchmark's markdown ``lines`` to ``path`` (``write_atomic``) and print them (``echo``, to stdout)."""
    write_atomic(path, lines)
    if echo:
        print("\n".join(lines))


def stats(samples: list[float]) -> tuple[float, float, float]:
    a = np.asarray(samples)
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90))


def interleaved(fns: dict, rounds: int, desc: str, *, warmup: int = 3, calls: int = 1,
                unit_ns: float = 1e6) -> dict:
    """Time every function ``calls`` times per round, in a shuffled order each round (gc off), after
    ``warmup`` calls each: {key: [one time per call, in ns / unit_ns]}, in round order (sample r of
    two keys, with ``calls`` 1, comes from the same round)."""
    samples: dict = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    keys = list(fns)
    gc.disable()
    try:
        for _ in tqdm(range(rounds), desc=desc, file=sys.stderr):
            random.shuffle(keys)
            for k in keys:
                fn = fns[k]
                for _ in range(calls):
                    t = time.perf_counter_ns()
                    fn()
                    samples[k].append((time.perf_counter_ns() - t) / unit_ns)
    finally:
        gc.enable()
    return samples


def backend_as_tuned(name: str, ranges: str | None, int8: Collection[str]) -> Any:
    """``get_backend(name)``; an int8 variant (in ``int8``) with the calibrated ``ranges`` and the weight bits a tune
    on this CPU quantizes it with (``collage.backends.qdq.tuned_weight_bits``: 7 on AVX2 int8 kernels)."""
    from collage.backends import get_backend, qdq

    if name not in int8:
        return get_backend(name)
    return get_backend(name, ranges=ranges, weight_bits=qdq.tuned_weight_bits(get_backend(name)))
