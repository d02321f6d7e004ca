"""What runs inside the measurement worker process: compile, warm up, time until the median is stable.

The parent (``collage.measure.measurer.Measurer``) starts ``python -m collage.measure.worker FD``
(``serve`` on the socket ``FD``) and sends
jobs over a pipe; the worker answers with ``("phase", name)`` messages while it works (so the parent
can say whether a crash happened in compile or run) and ends every job with ``("result", dict)`` or
``("error", text)``. A worker that aborts or hangs is the parent's problem: it kills and replaces it.

Backends are named by their registry name (``collage.backends.get_backend(name, **options)``) or,
for tests and experiments, by ``"package.module:Class"`` or ``"/path/to/file.py:Class"``; the class is
instantiated with ``**options``.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import onnx

from collage.backends.device_timing import device_timer

#: ops whose integer inputs index into another input, as (index input position, data input position)


def resolve_backend(spec: str, options: Mapping[str, Any] | None = None) -> Any:
    """A Backend instance from a registry name, ``module:Class`` or ``/path/file.py:Class``."""
    options = dict(options or {})
    if ":" in spec:
        where, _, cls_name = spec.rpartition(":")
        if where.endswith(".py"):
            mod_name = "_collage_ext_" + str(abs(hash(where)))
            loc = importlib.util.spec_from_file_location(mod_name, where)
            if loc is None or loc.loader is None:
                raise ImportError(f"cannot import backend file {where}")
            module = importlib.util.module_from_spec(loc)
            loc.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        return getattr(module, cls_name)(**options)
    from collage.backends import get_backend
    return get_backend(spec, **options)


# ---------------------------------------------------------------------- inputs
def _elem_dtype(vi: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))


def _shape(vi: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(max(1, d.dim_value) for d in vi.type.tensor_type.shape.dim)


def make_feeds(model: onnx.ModelProto, seed: int = 0,
               given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs of ``model`` (:func:`collage.graph.inputs.random_inputs`'s rule; indices in range).

    ``given`` supplies real values for some inputs (the parent passes the values integer tensors take
    in a reference run of the whole model: shapes, indices, masks); the others are drawn in order.
    """
    from collage.graph.inputs import input_specs
    from collage.seeded_inputs import seeded_inputs

    given = given or {}
    drawn = seeded_inputs([s for s in input_specs(model) if s.name not in given], seed)
    return {s.name: np.asarray(given[s.name] if s.name in given else drawn[s.name], order="C")
            for s in input_specs(model)}


# ---------------------------------------------------------------------- timing
def median_ci_halfwidth(sorted_ms: list[float]) -> float:
    """Relative half-width of the distribution-free 95% confidence interval of the median."""
    n = len(sorted_ms)
    if n < 5:
        return math.inf
    half = 0.98 * math.sqrt(n)  # 1.96 * sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    med = sorted_ms[n // 2]
    return (sorted_ms[hi] - sorted_ms[lo]) / (2 * med) if med > 0 else math.inf


@dataclass(frozen=True)
class TimingRule:
    """When ``time_calls`` stops: the median's 95% CI within ``rel_ci`` of it (at least ``min_samples``
    calls), or ``cap_s`` of timed calls, or ``max_samples``; after ``warmup_s`` (at least ``min_warmup``
    calls) of warm-up."""

    cap_s: float
    rel_ci: float = 0.02
    min_samples: int = 10
    warmup_s: float = 0.2
    min_warmup: int = 3
    max_samples: int = 100_000


def time_calls(call: Callable[[], Any], rule: TimingRule, *, on_estimate: Callable[[float], None] | None = None,
               out_samples: list[float] | None = None) -> dict[str, Any]:
    """Warm up, then time single calls until the median's CI is within ``rule.rel_ci`` or ``rule.cap_s`` passes.

    Slow calls scale the effort down: when one call takes a sizeable part of ``cap_s``, a single
    warm-up call is made and ``min_samples`` drops to what fits in ``cap_s`` (at least 1).
    ``on_estimate(seconds)`` is told how long the timed part will take at least, so that the parent
    can tell a slow candidate from a hung one. ``out_samples`` (a list) receives the single-call times.
    """
    cap_s, rel_ci, min_samples, min_warmup = rule.cap_s, rule.rel_ci, rule.min_samples, rule.min_warmup
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    if first > 0.1 * cap_s:
        min_warmup = 1
        min_samples = max(1, min(min_samples, int(cap_s / max(first, 1e-9))))
    if on_estimate is not None:
        on_estimate(first * (min_warmup + min_samples))
    t_end = time.perf_counter() + rule.warmup_s
    k = 1
    while k < min_warmup or (time.perf_counter() < t_end and k < 1000 and first < 0.1 * cap_s):
        call()
        k += 1
    samples: list[float] = [] if out_samples is None else out_samples
    start = time.perf_counter()
    while True:  # from min_samples on, after every call: stop once the median's CI is tight or the cap is hit
        t0 = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
        if len(samples) >= min_samples:
            if median_ci_halfwidth(sorted(samples)) <= rel_ci:
                break
            if time.perf_counter() - start >= cap_s or len(samples) >= rule.max_samples:
                break
    s = sorted(samples)
    arr = np.asarray(samples)
    n = len(s)
    return {"median_ms": s[n // 2], "p10_ms": s[int(0.1 * (n - 1))], "p90_ms": s[int(0.9 * (n - 1))],
            "samples": n, "cv": float(arr.std() / arr.mean()) if arr.mean() > 0 else 0.0,
            "ci": median_ci_halfwidth(s), "mean_ms": float(arr.mean())}


#: Most single-call times a worker sends back (evenly thinned beyond that); the parent pools rounds with them.
MAX_RETURNED_SAMPLES = 2000
_PROBE_A: np.ndarray | None = None


def reference_probe(reps: int = 7) -> float:
    """Median ms of a fixed small workload (a 128x128 float32 matmul, 8 times): the machine's speed now.

    Timed next to every measurement window, so that the parent can tell a window the machine was slow
    in (another tenant, a neighbour's burst) from a slow candidate.
    """
    global _PROBE_A
    if _PROBE_A is None:
        _PROBE_A = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    a = _PROBE_A
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(8):
            a @ a
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return float(sorted(times)[reps // 2])


class MeasureJob(NamedTuple):
    """A ``"measure"`` job: the message is ``("measure", *job)``, these fields in this order
    (``Measurer.measure_bytes`` sends it, ``serve`` reads it)."""

    model_bytes: bytes
    backend: str
    options: Mapping[str, Any]
    cap_s: float
    seed: int
    given: Mapping[str, np.ndarray] | None = None  # real values of some inputs (``make_feeds``)
    probe: bool = False
    warmup_s: float = 0.2


def measure_model(send: Callable[[tuple], None], job: MeasureJob) -> dict[str, Any]:
    """One job: build the backend, compile, make inputs, time (one window). Raises on failure.

    The result also holds the single-call times (``samples_ms``, thinned to ``MAX_RETURNED_SAMPLES``)
    and, with ``job.probe``, ``probe_ms``: the reference probe timed right before and after the window (mean).
    """
    send(("phase", "load"))
    b = resolve_backend(job.backend, job.options)
    model = onnx.load_from_string(job.model_bytes)
    feeds = make_feeds(model, job.seed, job.given)
    send(("phase", "compile"))
    t0 = time.perf_counter()
    compiled = b.compile(model)
    compile_s = time.perf_counter() - t0
    send(("phase", "run"))
    before = reference_probe() if job.probe else None
    samples: list[float] = []
    gpu = device_timer(b, compiled, feeds)  # a GPU candidate: CUDA events on device-resident inputs
    # F821: pyflakes reads the `del compiled` below as making the name undefined in the lambda, which is only
    # called before it (kept a lambda, not a partial: the timed call stays what it was)
    stats = time_calls(gpu or (lambda: compiled.run(feeds)),  # noqa: F821
                       TimingRule(cap_s=job.cap_s, warmup_s=job.warmup_s),
                       on_estimate=lambda s: send(("estimate", s)), out_samples=samples)
    if gpu is not None:
        stats.update(gpu.stats(len(samples), median_ci_halfwidth))
        samples[:] = gpu.event_ms[-len(samples):]
    if job.probe:
        stats["probe_ms"] = (before + reference_probe()) / 2
    stats["compile_s"] = compile_s
    step = max(1, math.ceil(len(samples) / MAX_RETURNED_SAMPLES))
    stats["samples_ms"] = samples[::step]
    del compiled
    return stats


def call_function(send: Callable[[tuple], None], target: str, kwargs: Mapping[str, Any]) -> Any:
    """A generic job: import ``module:function`` and call it with ``kwargs`` (transitions use it)."""
    module, _, fn = target.partition(":")
    send(("phase", target))
    return getattr(importlib.import_module(module), fn)(**kwargs)


def serve(conn: Any) -> None:
    """The worker's main loop (target of the spawned process)."""
    send = conn.send
    while True:
        try:
            job = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if job is None:
            return
        kind = job[0]
        try:
            if kind == "measure":
                result = measure_model(send, MeasureJob(*job[1:]))
            elif kind == "call":
                result = call_function(send, *job[1:])
            elif kind == "ping":
                result = "pong"
            else:
                raise ValueError(f"unknown job {kind!r}")
            send(("result", result))
        except BaseException as e:  # noqa: BLE001 - every failure is reported to the parent
            if isinstance(e, KeyboardInterrupt):
                return
            tb = traceback.format_exc(limit=-3)
            text = f"{type(e).__name__}: {str(e).strip() or '(no message)'}"
            send(("error", (text[:2000], tb[-4000:])))


def _watch_parent(period_s: float = 1.0) -> None:
    """Exit when the parent dies (kill -9 of a tuning job must not leave a worker spinning on)."""
    import os
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(period_s)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="collage-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m collage.measure.worker FD`` serves jobs on the socket ``FD``."""
    import sys
    from multiprocessing.connection import Connection

    args = sys.argv[1:] if argv is None else argv
    conn = Connection(int(args[0]))
    _watch_parent()
    try:
        serve(conn)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
