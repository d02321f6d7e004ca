"""Hand-overs between GPU partitions, measured with real work on both sides, eagerly and inside one CUDA graph.

A plan whose partitions can all be captured is replayed as one CUDA graph (collage.runtime.graphs): its
partitions' launches, and the per-partition overhead the tuner charges for an eager chain, disappear. So what a
hand-over costs in a replayed plan is measured where it happens: the small real pieces of
:mod:`collage.measure.transitions` (``y = Relu(x + b)``, two compiled per backend, used in turn), compiled
device-resident (``device_io``: torch tensors in and out, no host copy), chained back to back, each output feeding
the next piece. Four chains per size: one piece on A alone (``A1``), all-A and all-B of ``K`` pieces, and A, B,
A, B, ... (``AB``). Each chain is timed in each *mode*:

* ``eager``: the chain called piece after piece, the device synchronized at its end;
* ``graph``: the chain captured once in one ``torch.cuda.CUDAGraph`` (warmed up on a side stream first) and each
  sample one replay: only where both backends' partitions say they can be captured (``modes_to_measure``).

Per mode and size (``figures``): the cut of a partition after another on the same backend,
``max(0, (all-A - K x A1) / (K - 1))``, and the switch, ``(AB - (all-A + all-B) / 2) / (K - 1)`` (the CPU rule),
fitted over sizes as ``fixed_ms + per_byte_ms * nbytes`` and stored in the cost DB's transition table: ``(A, A)``
rows hold A's cut, ``(A, B)`` and ``(B, A)`` the switch, under ``replay_settings(pair settings, mode)``.
:func:`stored_figures` reads them back for the tuner (collage.tuner.replay), which prices a plan that will be
replayed with the ``graph`` figures. The timing runs in a measurement worker only where torch sees a CUDA device;
the decisions (what to measure, the formulas, the DB keys) are plain functions tested on the CPU, where the CPU
device stands in for the eager mode.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collage.measure.db import CostDB, canonical_json
from collage.measure.connect import get_db
from collage.measure.transitions import PIECES, QUICK_SIZES, fit_linear, pair_settings, piece_model
from collage.util import machine_id

log = logging.getLogger(__name__)

#: How a chain runs: piece after piece (``eager``) or replayed from one CUDA graph (``graph``).
MODES = ("eager", "graph")
#: Timed samples per chain and mode (medians taken; chains are interleaved round robin).
ROUNDS = 50


def modes_to_measure(refusal_a: str | None, refusal_b: str | None) -> tuple[str, ...]:
    """The modes a pair is measured in: always eager; in a graph too when neither backend refuses capture
    (``refusal_x``: None, or why x's partitions cannot be captured)."""
    return MODES if refusal_a is None and refusal_b is None else ("eager",)


def replay_settings(pair: str, mode: str) -> str:
    """The DB ``settings`` of a device hand-over figure: the pair's settings (``pair_settings``) and the mode."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return canonical_json({"pair": pair, "replay": mode})


def figures(chain_ms: Mapping[str, float], pieces: int) -> tuple[float, float, float]:
    """(A's cut, B's cut, the switch) in ms from one size's chain medians (``A1``, ``B1``, ``AA``, ``BB``, ``AB``)."""
    k = pieces - 1
    cut_a = max(0.0, (chain_ms["AA"] - pieces * chain_ms["A1"]) / k)
    cut_b = max(0.0, (chain_ms["BB"] - pieces * chain_ms["B1"]) / k)
    switch = (chain_ms["AB"] - (chain_ms["AA"] + chain_ms["BB"]) / 2) / k
    return cut_a, cut_b, switch


@dataclass(frozen=True)
class DeviceFigures:
    """Stored hand-over figures of one mode: ``cut[b]`` (ms a partition after another on b adds) and
    ``switch[(src, dst)]`` (fixed ms, ms per byte)."""

    mode: str
    cut: dict[str, float] = field(default_factory=dict)
    switch: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)


def store_fits(store: CostDB, a: Any, b: Any, mode: str, rows: Sequence[Mapping[str, float]]) -> None:
    """Fit one mode's rows (``nbytes``, ``cut_a_ms``, ``cut_b_ms``, ``switch_ms``) and store them (module docstring)."""
    def fit(key: str) -> tuple[float, float]:
        return fit_linear([{"nbytes": r["nbytes"], "per_transition_ms": r[key]} for r in rows])

    for x, key in ((a, "cut_a_ms"), (b, "cut_b_ms")):
        fixed, per_byte = fit(key)
        store.put_transition(x.name, x.name, max(0.0, fixed), per_byte,
                             replay_settings(pair_settings(x, x), mode), machine_id())
    fixed, per_byte = fit("switch_ms")
    for src, dst in ((a.name, b.name), (b.name, a.name)):
        store.put_transition(src, dst, fixed, per_byte, replay_settings(pair_settings(a, b), mode), machine_id())


def stored_figures(backends: Sequence[Any], db: None | str | CostDB, mode: str) -> DeviceFigures:
    """The figures of ``mode`` stored on this machine for ``backends`` (instances); what is missing is absent."""
    store = get_db(db)
    out = DeviceFigures(mode)
    for x in backends:
        t = store.get_transition(x.name, x.name, replay_settings(pair_settings(x, x), mode), machine_id())
        if t is not None:
            out.cut[x.name] = t.fixed_ms
        for y in backends:
            if y.name == x.name:
                continue
            t = store.get_transition(x.name, y.name, replay_settings(pair_settings(x, y), mode), machine_id())
            if t is not None:
                out.switch[(x.name, y.name)] = (t.fixed_ms, t.per_byte_ms)
    return out


# ---------------------------------------------------------------------- in the worker, on the device
def _torch() -> Any:
    import torch  # noqa: PLC0415 - only where a device is timed

    return torch


def _chain(pieces: Sequence[Any]) -> Callable[[Any], Any]:
    """A call running ``pieces`` (compiled, device-resident, input ``x``, output ``y``) back to back."""
    def run(x: Any) -> Any:
        for p in pieces:
            x = p.run({"x": x})["y"]
        return x

    return run


def _captured(run: Callable[[Any], Any], x: Any) -> Callable[[], Any]:
    """``run(x)`` captured once in a CUDA graph (warmed up on a side stream); the returned call replays it."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(x)
    replay: Callable[[], Any] = graph.replay
    return replay


def time_calls(calls: Mapping[str, Callable[[], Any]], sync: Callable[[], None],
               rounds: int = ROUNDS) -> dict[str, float]:
    """Median ms of each call, interleaved round robin, ``sync`` (the device's) after each call inside its time."""
    for call in calls.values():  # warm-up
        call()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter_ns()
            calls[name]()
            sync()
            samples[name].append((time.perf_counter_ns() - t0) / 1e6)
    return {name: sorted(s)[len(s) // 2] for name, s in samples.items()}


@dataclass(frozen=True)
class DeviceRun:
    """What the worker times: the pair (names and constructor options), tensor sizes, pieces per chain, modes."""

    a: str
    b: str
    options_a: dict[str, Any]
    options_b: dict[str, Any]
    sizes: tuple[int, ...] = QUICK_SIZES
    pieces: int = PIECES
    modes: tuple[str, ...] = MODES
    rounds: int = ROUNDS


def device_chain_timings(run: DeviceRun) -> dict[str, list[dict[str, float]]]:
    """(Runs in the worker.) Per mode, per size: the five chains' medians and the figures (module docstring)."""
    from collage.measure.worker import resolve_backend

    torch = _torch()
    ba = resolve_backend(run.a, {**run.options_a, "device_io": True})
    bb = resolve_backend(run.b, {**run.options_b, "device_io": True})
    device = torch.device(ba.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out: dict[str, list[dict[str, float]]] = {m: [] for m in run.modes}
    for nbytes in run.sizes:
        n = max(1, nbytes // 4)
        models = [piece_model(n, seed=k) for k in range(2)]
        on_a, on_b = [ba.compile(m) for m in models], [bb.compile(m) for m in models]
        k = run.pieces
        chains = {"A1": _chain(on_a[:1]), "B1": _chain(on_b[:1]),
                  "AA": _chain([on_a[i % 2] for i in range(k)]), "BB": _chain([on_b[i % 2] for i in range(k)]),
                  "AB": _chain([(on_a if i % 2 == 0 else on_b)[(i // 2) % 2] for i in range(k)])}
        x = torch.randn(1, n, device=device)
        for mode in run.modes:
            calls = ({name: (lambda c=c, x=x: c(x)) for name, c in chains.items()} if mode == "eager"
                     else {name: _captured(c, x) for name, c in chains.items()})
            ms = time_calls(calls, sync, run.rounds)
            cut_a, cut_b, switch = figures(ms, k)
            out[mode].append({"nbytes": n * 4, **{f"{c}_ms": v for c, v in ms.items()}, "cut_a_ms": cut_a,
                              "cut_b_ms": cut_b, "switch_ms": switch})
    return out


def measure_device_transition(run: DeviceRun, db: None | str | CostDB = None,
                              timeout_s: float = 600.0) -> dict[str, list[dict[str, float]]]:
    """Time the pair in a measurement worker (``device_chain_timings``) and store each mode's fits; the rows."""
    from collage.measure.measurer import Measurer
    from collage.measure.worker import resolve_backend

    store = get_db(db)
    with Measurer() as m:
        rows: dict[str, list[dict[str, float]]] = m.call("collage.measure.device_transitions:device_chain_timings",
                                                         {"run": run}, timeout_s=timeout_s)
    a, b = resolve_backend(run.a, run.options_a), resolve_backend(run.b, run.options_b)
    for mode, mode_rows in rows.items():
        store_fits(store, a, b, mode, mode_rows)
        log.info("device hand-over %s <-> %s (%s): %s", run.a, run.b, mode,
                 ", ".join(f"{r['nbytes']} B switch {r['switch_ms']:.4f} ms" for r in mode_rows))
    return rows


def graph_figures(backends: Sequence[Any], db: None | str | CostDB = None,
                  backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                  measure_missing: bool = True) -> DeviceFigures:
    """The ``graph`` figures of ``backends`` (instances, all capturable): stored ones, and with ``measure_missing``
    where torch sees a CUDA device, the missing pairs (each backend with itself for its cut) measured now, stored."""
    have = stored_figures(backends, db, "graph")
    if not measure_missing or not _cuda_available():
        return have
    opts = {k: dict(v) for k, v in (backend_options or {}).items()}
    names = [x.name for x in backends]
    for i, a in enumerate(names):
        for b in names[i:]:
            if (a in have.cut and b in have.cut) and (a == b or (a, b) in have.switch):
                continue
            measure_device_transition(DeviceRun(a, b, opts.get(a, {}), opts.get(b, {})), db)
            have = stored_figures(backends, db, "graph")
    return have


def _cuda_available() -> bool:
    try:
        torch = _torch()
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
