"""Transition costs: what handing a tensor from one backend to the next really costs.

A transition is not just bytes: the two runtimes' thread pools hand the cores over (ONNX Runtime's
spinning threads, OpenVINO's pinned ones), and a piece's weights are colder in a chain than in a timing
loop (docs/DESIGN.md, "Stitching"). So it is measured as **real alternation**, never modelled from bytes:

* Small real pieces (``y = Relu(x + b)`` on a ``[1, n]`` float tensor, two compiled per backend and
  used in turn) make chains of ``K`` calls back to back on the backends' fast call paths, each output
  feeding the next piece: all-A, all-B and alternating A, B, A, B, ...; the three chains are timed
  interleaved (round robin) to cancel drift.
* per transition = (alternating - (all-A + all-B) / 2) / (K - 1), at a few tensor sizes, fitted as
  ``fixed_ms + per_byte_ms * nbytes`` (least squares) and stored in the cost DB.
* An alternating chain holds as many A->B as B->A hand-overs, so it measures their mean: the fit is
  stored for both ordered pairs (A, B) and (B, A).

The measurement runs in a measurement worker process under the machine lock (``Measurer.call``).
``settings`` (part of the DB key) is canonical JSON of both backends' versions and options, so the
hand-over settings (ONNX Runtime ``spin``, OpenVINO ``pinning``) are measured and stored apart.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collage.measure.db import CostDB, canonical_json
from collage.measure.connect import get_db
from collage.errors import MeasurementError
from collage.util import machine_id

log = logging.getLogger(__name__)

#: Tensor sizes (bytes, float32) the fit is taken at.
SIZES = (4 << 10, 256 << 10, 4 << 20)
QUICK_SIZES = (4 << 10, 1 << 20)
#: Pieces per chain (even: the alternating chain has as many pieces on A as on B).
PIECES = 8

#: Backend options that make a runtime hand the cores over quickly, and those that do not (the
#: runtimes' own defaults); benchmarks measure both.
FAST_HANDOVER: dict[str, dict[str, Any]] = {"onnxruntime": {"spin": False}, "openvino": {"pinning": False}}
SLOW_HANDOVER: dict[str, dict[str, Any]] = {"onnxruntime": {"spin": True}, "openvino": {"pinning": True}}


def piece_model(n: int, seed: int = 0):
    """``y = Relu(x + b)`` on ``[1, n]`` float32: a small real subgraph every backend takes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    b = np.random.default_rng(seed).standard_normal((1, n)).astype(np.float32) * 0.1
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], f"piece{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], initializer=[numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, onnx.IR_VERSION)
    return model


def time_chains(chains: Mapping[str, Sequence[tuple[Any, Mapping[str, str], Sequence[str]]]],
                feeds: Mapping[str, np.ndarray], *, cap_s: float, min_rounds: int = 15,
                max_rounds: int = 5000, rel_ci: float = 0.02, steps: bool = False) -> dict[str, dict[str, Any]]:
    """Time named chains interleaved; each chain is ``[(compiled, {piece input: env name}, outputs)]``.

    Every piece reads its inputs from an environment that starts as ``feeds`` and holds every output
    so far (outputs keep their names). Returns per chain ``median_ms``, ``p10_ms``, ``p90_ms``, ``rounds``;
    with ``steps`` also ``step_ms``: each piece's median ms inside the chain (its call, timed alone).
    """
    from collage.measure.worker import median_ci_halfwidth

    per_step: dict[int, list[list[float]]] = {}

    def run_chain(chain) -> None:
        env = dict(feeds)
        times = per_step.setdefault(id(chain), [[] for _ in chain]) if steps else None
        clock = time.perf_counter_ns
        for k, (compiled, inputs, outputs) in enumerate(chain):
            args = {key: env[v] for key, v in inputs.items()}
            t0 = clock()
            out = compiled.run(args)
            if times is not None:
                times[k].append((clock() - t0) / 1e6)
            for name in outputs:
                env[name] = out[name]

    for chain in chains.values():  # warm-up
        for _ in range(3):
            run_chain(chain)
    per_step.clear()
    samples: dict[str, list[float]] = {name: [] for name in chains}
    names = list(chains)
    start = time.perf_counter()
    rounds = 0
    while rounds < max_rounds:
        order = names[rounds % len(names):] + names[:rounds % len(names)]  # rotate who goes first
        for name in order:
            t0 = time.perf_counter_ns()
            run_chain(chains[name])
            samples[name].append((time.perf_counter_ns() - t0) / 1e6)
        rounds += 1
        if rounds >= min_rounds and (rounds % 5 == 0):
            if time.perf_counter() - start >= cap_s:
                break
            if all(median_ci_halfwidth(sorted(s)) <= rel_ci for s in samples.values()):
                break
    out = {}
    for name, s in samples.items():
        s = sorted(s)
        n = len(s)
        out[name] = {"median_ms": s[n // 2], "p10_ms": s[int(0.1 * (n - 1))], "p90_ms": s[int(0.9 * (n - 1))],
                     "rounds": n}
        if steps:
            out[name]["step_ms"] = [float(np.median(t)) for t in per_step[id(chains[name])]]
    return out


def alternation_timings(a: str, b: str, options_a: Mapping[str, Any], options_b: Mapping[str, Any],
                        sizes: Sequence[int] = SIZES, pieces: int = PIECES, cap_s: float = 1.0) -> list[dict[str, Any]]:
    """(Runs in the worker.) For each size: all-A, all-B and alternating chain medians, and per transition ms."""
    from collage.measure.worker import resolve_backend

    ba, bb = resolve_backend(a, options_a), resolve_backend(b, options_b)
    rows = []
    for nbytes in sizes:
        n = max(1, nbytes // 4)
        # two compiled pieces per backend, used in turn: compiles stay cheap (TVM), and no piece ever
        # reads its own output buffer (backends whose outputs are reused buffers)
        models = [piece_model(n, seed=k) for k in range(2)]
        on_a = [ba.compile(m) for m in models]
        on_b = [bb.compile(m) for m in models]
        # the pieces bound as defaults (the lambdas run in this iteration only); `picks` is deleted with them below
        picks = {"AA": lambda k, on_a=on_a: on_a[k % 2], "BB": lambda k, on_b=on_b: on_b[k % 2],
                 "AB": lambda k, on_a=on_a, on_b=on_b: (on_a if k % 2 == 0 else on_b)[(k // 2) % 2]}
        # piece k reads what piece k-1 wrote (published as y{k-1})
        chains = {name: [(_Renamed(pick(k), f"y{k}"), {"x": "x" if k == 0 else f"y{k - 1}"}, [f"y{k}"])
                         for k in range(pieces)] for name, pick in picks.items()}
        feeds = {"x": np.random.default_rng(0).standard_normal((1, n)).astype(np.float32)}
        t = time_chains(chains, feeds, cap_s=cap_s)
        per = (t["AB"]["median_ms"] - (t["AA"]["median_ms"] + t["BB"]["median_ms"]) / 2) / (pieces - 1)
        rows.append({"nbytes": n * 4, "all_a_ms": t["AA"]["median_ms"], "all_b_ms": t["BB"]["median_ms"],
                     "alternating_ms": t["AB"]["median_ms"], "per_transition_ms": per,
                     "rounds": t["AB"]["rounds"]})
        del on_a, on_b, picks, chains
    return rows


class _Renamed:
    """A compiled piece whose single output ``y`` is published under another name."""

    def __init__(self, compiled: Any, name: str) -> None:
        self.compiled, self.name = compiled, name

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {self.name: self.compiled.run(feeds)["y"]}


def chain_timings(pieces: Sequence[bytes], chains: Mapping[str, Sequence[tuple[int, str]]],
                  feeds: Mapping[str, np.ndarray], backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                  cap_s: float = 5.0, steps: bool = False) -> dict[str, dict[str, Any]]:
    """(Runs in the worker.) Time stitched chains of real partitions, interleaved.

    ``pieces``: serialized partition models whose tensor names are the original graph's.
    ``chains``: name -> ``[(piece index, backend), ...]`` in execution order. ``feeds``: the graph's
    inputs. Each (piece, backend) is compiled once and shared between chains.
    """
    import onnx

    from collage.measure.worker import resolve_backend

    opts = {k: dict(v) for k, v in (backend_options or {}).items()}
    backends: dict[str, Any] = {}
    compiled: dict[tuple[int, str], Any] = {}
    built = {}
    for name, steps in chains.items():
        seq = []
        for idx, bname in steps:
            if (idx, bname) not in compiled:
                if bname not in backends:
                    backends[bname] = resolve_backend(bname, opts.get(bname, {}))
                compiled[(idx, bname)] = backends[bname].compile(onnx.load_from_string(pieces[idx]))
            c = compiled[(idx, bname)]
            seq.append((c, {t: t for t in c.input_names}, list(c.output_names)))
        built[name] = seq
    return time_chains(built, feeds, cap_s=cap_s, steps=steps)


def fit_linear(rows: Sequence[Mapping[str, float]]) -> tuple[float, float]:
    """Least-squares ``fixed_ms + per_byte_ms * nbytes`` over rows with ``nbytes``, ``per_transition_ms``."""
    x = np.array([r["nbytes"] for r in rows], dtype=np.float64)
    y = np.array([r["per_transition_ms"] for r in rows], dtype=np.float64)
    if len(rows) == 1 or np.ptp(x) == 0:
        return float(y.mean()), 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def pair_settings(a: Any, b: Any) -> str:
    """The DB ``settings`` of a backend pair: both versions and options, in a fixed order, and whether a
    backend's spinning pool is parked while the other runs (``collage.backends.handover``: switches measured
    before parking existed cost more, results/transitions/transitions.md, and are not reused for a parked pool)."""
    return canonical_json({x.name: {"version": x.version(), "options": x.options,
                                    **({"parked": True} if getattr(x, "park", False)
                                       and getattr(x, "shared_pool", False)
                                       else {})}
                           for x in sorted((a, b), key=lambda x: x.name)})


def measure_transition(a: str, b: str, db: None | str | CostDB = None, *,
                       backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                       sizes: Sequence[int] = SIZES, pieces: int = PIECES, cap_s: float = 1.0,
                       timeout_s: float = 600.0) -> tuple[float, float, list[dict[str, Any]]]:
    """Measure the pair (in a worker), store the fit for (a, b) and (b, a); return (fixed, per_byte, rows)."""
    from collage.measure.measurer import Measurer
    from collage.measure.worker import resolve_backend

    store = get_db(db)
    opts = {k: dict(v) for k, v in (backend_options or {}).items()}
    oa, ob = opts.get(a, {}), opts.get(b, {})
    with Measurer() as m:
        rows = m.call("collage.measure.transitions:alternation_timings",
                      {"a": a, "b": b, "options_a": oa, "options_b": ob, "sizes": tuple(sizes), "pieces": pieces,
                       "cap_s": cap_s}, timeout_s=timeout_s)
    fixed, per_byte = fit_linear(rows)
    settings = pair_settings(resolve_backend(a, oa), resolve_backend(b, ob))
    for src, dst in ((a, b), (b, a)):
        store.put_transition(src, dst, fixed, per_byte, settings, machine_id())
    log.info("transition %s <-> %s: %.4f ms + %.3g ms/byte", a, b, fixed, per_byte)
    return fixed, per_byte, rows


def transition_model(backends: list[str], db: None | str | CostDB = None, measure_missing: bool = True, *,
                     backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                     sizes: Sequence[int] = SIZES, cap_s: float = 1.0,
                     graph_fingerprint: str | None = None, quiet: bool = False) -> Callable[[str, str, int], float]:
    """``f(src, dst, nbytes) -> ms``: 0 for the same backend, else the stored fit (clamped at 0).

    With ``graph_fingerprint`` (``graph.fingerprint(range(len(graph)))``), a pair's switch cost
    measured on that model's own pieces (``measure_model_transitions``) is used where stored, before the
    small-piece fit. Pairs missing from the DB are measured now (small pieces) when ``measure_missing``
    (about 5-15 s a pair on CPU), else they cost 0 and a warning says the prediction ignores them (``quiet``: not
    here, where a later call for the same tune says it).
    """
    from collage.measure.worker import resolve_backend

    store = get_db(db)
    opts = {k: dict(v) for k, v in (backend_options or {}).items()}
    inst = {name: resolve_backend(name, opts.get(name, {})) for name in backends}
    table: dict[tuple[str, str], tuple[float, float]] = {}
    unpriced: list[str] = []
    for a, b in itertools.combinations(sorted(backends), 2):
        settings = pair_settings(inst[a], inst[b])
        for src, dst in ((a, b), (b, a)):
            t = None
            if graph_fingerprint is not None:
                t = store.get_transition(src, dst, model_settings(settings, graph_fingerprint), machine_id())
            if t is None:
                t = store.get_transition(src, dst, settings, machine_id())
            if t is None and measure_missing:
                measure_transition(a, b, store, backend_options=opts, sizes=sizes, cap_s=cap_s)
                t = store.get_transition(src, dst, settings, machine_id())
            if t is None:
                unpriced.append(f"{src} -> {dst}")
                table[(src, dst)] = (0.0, 0.0)
            else:
                table[(src, dst)] = (t.fixed_ms, t.per_byte_ms)
    if unpriced and not quiet:  # one line, not one a pair (a first tune of four backends printed twelve)
        log.warning("no switch cost measured on this machine yet for %s: counted as 0 ms (a tune with more time "
                    "measures them once and keeps them in the cost DB)", ", ".join(unpriced))

    def cost(src: str, dst: str, nbytes: int) -> float:
        if src == dst:
            return 0.0
        fixed, per_byte = table.get((src, dst), (0.0, 0.0))
        return max(0.0, fixed + per_byte * nbytes)

    return cost


# ---------------------------------------------------------------------- at the model's own scale
#: Pieces a model is cut into (contiguous ranges of its topological node order) to measure hand-overs.
MODEL_PIECES = 6


@dataclass
class ModelTransitions:
    """Hand-over costs measured on a model's own pieces (``measure_model_transitions``).

    ``overhead_ms[b]``: what one more partition on ``b`` costs in a chain beyond its measured cost
    alone (cold weights, the runtime's threads waking); ``switch_by_direction[(src, dst)]``: what a
    hand-over from ``src`` to ``dst`` costs on top of that (the runtimes' thread pools handing the cores
    over), per hand-over as the search counts them (``handovers``: each distinct tensor a partition
    reads from another backend); ``switch_ms`` their mean. ``chains``: the measured chains behind the
    fit (name -> measured ms, parts ms, pieces, hand-overs as ``switches``).
    """

    a: str
    b: str
    overhead_ms: dict[str, float]
    switch_ms: float
    settings: str
    chains: dict[str, dict[str, float]] = field(default_factory=dict)
    switch_by_direction: dict[tuple[str, str], float] = field(default_factory=dict)


def model_settings(pair: str, graph_fingerprint: str) -> str:
    """The DB ``settings`` of a model-scale fit: the pair's settings plus the model it was measured on."""
    return canonical_json({"pair": pair, "model": graph_fingerprint})


def contiguous_pieces(graph: Any, n: int = MODEL_PIECES) -> list[tuple[int, ...]]:
    """``n`` contiguous ranges of node ids (convex: ids are topological) of about equal size; never an empty
    one (fewer ranges where the graph has fewer than ``n`` nodes)."""
    n = min(max(2, n), len(graph))
    cuts = [round(k * len(graph) / n) for k in range(n + 1)]
    return [tuple(range(cuts[k], cuts[k + 1])) for k in range(n)]


def _reads_across(graph: Any, pieces: Sequence[Sequence[int]], assign: Sequence[str]) -> list[int]:
    """Per piece: the distinct tensors it reads from a node of a piece on another backend."""
    owner = {i: k for k, p in enumerate(pieces) for i in p}
    out = []
    for k, p in enumerate(pieces):
        count = 0
        for t in graph.boundary(p)[0]:
            src = graph.producer(t)
            if src is not None and src in owner and assign[owner[src]] != assign[k]:
                count += 1
        out.append(count)
    return out


def handovers(graph: Any, pieces: Sequence[Sequence[int]], assign: Sequence[str]) -> int:
    """Hand-overs the search charges for pieces run in order on ``assign``: per piece, each distinct
    tensor it reads from a node on another backend (``collage.search.dp``'s transition rule)."""
    return sum(_reads_across(graph, pieces, assign))


#: How long the chains of one model-scale fit may take in their worker (``measure_model_transitions``).
CHAIN_TIMEOUT_S = 1800.0


def measure_model_transitions(graph: Any, a: str, b: str, db: None | str | CostDB = None, *,
                              pieces: Sequence[Sequence[int]] | None = None,
                              backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                              cap_s: float = 3.0, reuse: bool = True) -> ModelTransitions:
    """Measure per-partition overhead and backend switch cost, per direction, on ``graph``'s own pieces; store them.

    ``pieces`` (default ``contiguous_pieces(graph)``) must run in the given order, each reading only
    graph inputs and earlier pieces' outputs, and run on both backends. Each piece is measured alone
    (``measure_candidates``, reusing the DB); then the chains all-a, all-b, alternating a-first and
    b-first are timed end to end, interleaved, in a worker (``CHAIN_TIMEOUT_S`` at most), with each
    piece's call timed inside the chain. With parts(chain) the sum of the pieces' own costs and k pieces:

    * ``overhead[x] = (chain all-x - parts(all-x)) / k``
    * switch ``src -> dst``: over the alternating chains' pieces on ``dst`` that follow a piece on ``src``,
      (that piece's time in the alternating chain - its time in the all-``dst`` chain), summed, over the
      hand-overs the search charges those pieces (``handovers``). The real work on both sides is the
      model's: the switch's cost lands in the call after it (the previous runtime's threads still
      spinning or waiting, the next one's waking), and the all-``dst`` chain already holds the
      per-partition overhead.

    Stored in the DB's transition table: ``(x, x)`` rows hold ``overhead[x]``, ``(a, b)`` and ``(b, a)``
    rows their direction's switch (per byte 0), all under ``model_settings(pair settings, graph
    fingerprint)``. With ``reuse``, a fit already stored for this model, pair and machine is returned
    without measuring (``chains`` then empty).
    """
    from collage.measure.worker import resolve_backend

    store = get_db(db)
    opts = {k: dict(v) for k, v in (backend_options or {}).items()}
    pair = pair_settings(resolve_backend(a, opts.get(a, {})), resolve_backend(b, opts.get(b, {})))
    settings = model_settings(pair, graph.fingerprint(range(len(graph))))
    stored = _stored_fit(store, a, b, settings) if reuse else None
    if stored is not None:
        return stored
    pieces = [tuple(p) for p in (pieces or contiguous_pieces(graph))]
    k = len(pieces)
    if k < 2:
        raise ValueError("measure_model_transitions needs at least two pieces")
    costs = _piece_costs(graph, pieces, (a, b), store, opts)
    assigns = {f"all {a}": [a] * k, f"all {b}": [b] * k,
               f"alternating, {a} first": [(a, b)[i % 2] for i in range(k)],
               f"alternating, {b} first": [(b, a)[i % 2] for i in range(k)]}
    measured = _time_model_chains(graph, pieces, assigns, opts, cap_s)
    chains = {}
    for name, assign in assigns.items():
        parts = sum(costs[(p, x)].median_ms for p, x in zip(pieces, assign))
        chains[name] = {"measured_ms": measured[name]["median_ms"], "parts_ms": parts, "pieces": k,
                        "switches": handovers(graph, pieces, assign)}
    overhead = {x: max(0.0, (chains[f"all {x}"]["measured_ms"] - chains[f"all {x}"]["parts_ms"]) / k) for x in (a, b)}
    by_dir = _switch_by_direction(graph, pieces, assigns, measured, (a, b))
    switch = float(np.mean(list(by_dir.values())))
    for x in (a, b):
        store.put_transition(x, x, overhead[x], 0.0, settings, machine_id())
    for (src, dst), ms in by_dir.items():
        store.put_transition(src, dst, ms, 0.0, settings, machine_id())
    log.info("%s: per partition %s; per switch %s", graph.name,
             ", ".join(f"{x} {v:.3f} ms" for x, v in overhead.items()),
             ", ".join(f"{s} -> {d} {v:.3f} ms" for (s, d), v in by_dir.items()))
    return ModelTransitions(a, b, overhead, switch, settings, chains, by_dir)


def _stored_fit(store: CostDB, a: str, b: str, settings: str) -> ModelTransitions | None:
    """The fit stored for the pair under ``settings`` on this machine, when all four rows are there."""
    rows = {(s, d): store.get_transition(s, d, settings, machine_id()) for s, d in ((a, a), (b, b), (a, b), (b, a))}
    if not all(rows.values()):
        return None
    by_dir = {(a, b): rows[(a, b)].fixed_ms, (b, a): rows[(b, a)].fixed_ms}
    return ModelTransitions(a, b, {a: rows[(a, a)].fixed_ms, b: rows[(b, b)].fixed_ms},
                            float(np.mean(list(by_dir.values()))), settings, switch_by_direction=by_dir)


def _piece_costs(graph: Any, pieces: Sequence[tuple[int, ...]], pair: tuple[str, str], store: CostDB,
                 opts: Mapping[str, Mapping[str, Any]]) -> Mapping[tuple[tuple[int, ...], str], Any]:
    """Each piece's own cost on both backends (``measure_candidates``); MeasurementError naming one without."""
    from collage.measure.schedule import measure_candidates

    items = [(p, x) for p in pieces for x in pair]
    costs = measure_candidates(graph, items, db=store, backend_options=opts, progress=False)
    bad = [(p, x) for p, x in items if (p, x) not in costs or not costs[(p, x)].ok]
    if bad:
        p, x = bad[0]
        why = costs[(p, x)].error if (p, x) in costs else "not measured"
        raise MeasurementError(f"{graph.name}: piece of nodes {p[0]}..{p[-1]} on {x} has no cost ({why}); "
                               "pass pieces both backends can run")
    return costs


def _time_model_chains(graph: Any, pieces: Sequence[tuple[int, ...]], assigns: Mapping[str, Sequence[str]],
                       opts: Mapping[str, Mapping[str, Any]], cap_s: float) -> dict[str, dict[str, Any]]:
    """The chains ``assigns`` (name -> backend per piece) timed end to end with their steps, in a worker."""
    from collage.graph.inputs import random_inputs
    from collage.measure.measurer import Measurer

    blobs = [graph.extract(p).SerializeToString() for p in pieces]
    with Measurer() as m:
        return m.call("collage.measure.transitions:chain_timings",
                      {"pieces": blobs, "chains": {n: list(enumerate(s)) for n, s in assigns.items()},
                       "feeds": random_inputs(graph), "backend_options": opts, "cap_s": cap_s, "steps": True},
                      timeout_s=CHAIN_TIMEOUT_S)


def _switch_by_direction(graph: Any, pieces: Sequence[tuple[int, ...]], assigns: Mapping[str, Sequence[str]],
                         measured: Mapping[str, Mapping[str, Any]],
                         pair: tuple[str, str]) -> dict[tuple[str, str], float]:
    """Per direction: the alternating chains' extra step time after a switch, per hand-over the search charges."""
    a, b = pair
    extra: dict[tuple[str, str], list[float]] = {(a, b): [0.0, 0], (b, a): [0.0, 0]}
    for first in (a, b):
        name = f"alternating, {first} first"
        assign = assigns[name]
        reads = _reads_across(graph, pieces, assign)
        for j in range(1, len(pieces)):
            src, dst = assign[j - 1], assign[j]
            if src == dst or not reads[j]:
                continue
            extra[(src, dst)][0] += measured[name]["step_ms"][j] - measured[f"all {dst}"]["step_ms"][j]
            extra[(src, dst)][1] += reads[j]
    return {d: max(0.0, e / n) if n else 0.0 for d, (e, n) in extra.items()}


def model_transition_model(graph: Any, backends: Sequence[str], db: None | str | CostDB = None, *,
                           whole_ms: Mapping[str, float] | None = None, slow_factor: float = 3.0,
                           backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                           pieces: int = MODEL_PIECES, cap_s: float = 2.0) -> Callable[[str, str, int], float]:
    """The tuner's transition model: switch costs measured on ``graph``'s own pieces, per direction
    (``measure_model_transitions``, stored in the DB and reused), for every pair of ``backends`` that can
    both run the whole model within ``slow_factor`` of the fastest one (``whole_ms``: untuned TVM, 30-600x
    behind, is never worth a chain of its pieces); the small-piece fit (``transition_model``) for the rest.

    Cheap: ``pieces`` contiguous pieces per model (5 switches per chain, both directions), not every
    boundary; a pair whose pieces one backend cannot run keeps the small-piece fit, with a warning."""
    from collage.errors import CollageError

    names = list(backends)
    fast = [b for b in names if whole_ms is None or b in whole_ms]
    if whole_ms:
        best = min(whole_ms[b] for b in fast) if fast else None
        fast = [b for b in fast if best is not None and whole_ms[b] <= slow_factor * best]
    cut = contiguous_pieces(graph, pieces)
    if len(cut) < 2:
        fast = []  # a one-node model has no switch inside it to price
    for a, b in itertools.combinations(sorted(fast), 2):
        try:
            fit = measure_model_transitions(graph, a, b, db, pieces=cut, backend_options=backend_options, cap_s=cap_s)
        except (CollageError, ValueError) as e:
            log.warning("%s: no model-scale switch cost for %s <-> %s (%s); using the small-piece fit", graph.name, a,
                        b, e)
            continue
        log.info("%s: switch %s", graph.name,
                 ", ".join(f"{s} -> {d} {ms:.3f} ms" for (s, d), ms in fit.switch_by_direction.items()))
    return transition_model(names, db, backend_options=backend_options,
                            graph_fingerprint=graph.fingerprint(range(len(graph))))
