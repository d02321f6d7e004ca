"""The tune's search step, checked by measurement: the per-partition overhead and the search that uses it.

Each candidate is timed alone, so a stitched chain of them costs more than the sum of its parts
(DESIGN.md, "Stitching"). ``calibrate_partition_overhead`` measures that excess per partition on each
backend before the search; ``search_checked`` searches with it charged, stitches and measures the plan,
and where the plan measures well over its prediction (or loses to the best single backend), charges the
measured excess to its backends and searches again, keeping the best measured plan. A plan can win and
still be mispredicted: a switch from OpenVINO to ONNX Runtime costs the next ONNX Runtime partition
milliseconds while OpenVINO's threads wind down (ResNet-50 under a bf16 budget: bf16 then an ONNX
Runtime tail predicted 10.6 ms, measured 27.9 ms; searched again, bf16 then an OpenVINO tail measured
19.1 ms: results/precision-bf16.md), which no candidate's own cost and no transition measurement shows.
``whole_if_one_backend`` turns a plan of one backend cut into pieces into that backend on the whole model.
``one_call_prediction`` predicts a plan of one backend on the whole model at that model's own cost (no chain,
no per-partition overhead). ``fill_boundaries`` gives a searched plan its boundary tensors and fingerprints.
Called by :func:`collage.tuner.job.tune` (which owns the verification and the never-worse rule, and imports
this module inside the call, as it does every pipeline step); progress lines go through ``collage.util.say``.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collage.cost_models.db import CostDB, canonical_json
from collage.errors import CollageError
from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.util import machine_id, say, sha256_bytes
from collage.tuner.verify import measure_interleaved


def calibrate_partition_overhead(graph: Graph, costs: Mapping[Any, float], transition: Callable[[str, str, int], float],
                                 backends: Sequence[str], feeds: Mapping[str, np.ndarray], work: Path, *,
                                 target: str = "cpu", progress: bool = True,
                                 backend_options: Mapping[str, Mapping[str, Any]] | None = None,
                                 db: CostDB | None = None) -> dict[str, float]:
    """Measured ms that one more partition costs on each backend, beyond the parts' own measured costs.

    Each candidate is timed alone, in a loop: its weights are hot and the runtime's threads awake. In a
    chain neither holds, and the sum of parts under-predicts the chain (DESIGN.md, "Stitching"). So for
    each backend the cheapest plan on that backend alone (usually many partitions) is stitched, run and
    measured end to end; (measured - predicted) / partitions is charged to every candidate of that
    backend, so the search stops splitting where splitting does not pay.

    With ``db``, each backend's figure is stored in its transition table (``(b, b)`` row, settings
    ``overhead_settings``: the model, that chain's partitions and prediction, the backend's version and
    options; this machine) and a later tune that finds the same chain takes it from there instead of
    compiling and running the chain again (a warm re-tune of ResNet-50 spent 9 of its 17 s here).
    """
    from collage.tuner.export import export
    from collage.runtime.artifact import load as load_artifact
    from collage.search.exact import search_exact as search

    overhead: dict[str, float] = {}
    for name in backends:
        # the cheapest chain of this backend's parts (the whole-model candidate left out)
        own = {c: v for c, v in costs.items() if c.backend == name and len(c.nodes) < len(graph)}
        try:
            chain = fill_boundaries(graph, search(graph, own, transition))
        except CollageError:
            continue  # the backend cannot cover the graph alone
        k = len(chain.partitions)
        if k < 2 or chain.predicted_ms is None:
            overhead[name] = 0.0
            continue
        settings = overhead_settings(graph, chain, name, (backend_options or {}).get(name, {}))
        stored = db.get_transition(name, name, settings, machine_id()) if db is not None else None
        if stored is not None:
            overhead[name] = stored.fixed_ms
            say(progress, "%s: %.3f ms per partition (a %d-partition chain measured before: the cost DB)",
                name, overhead[name], k)
            continue
        art = load_artifact(export(graph, chain, work / f"chain-{name}", target=target,
                                    backend_options={k: dict(v) for k, v in (backend_options or {}).items()}))
        measured_ms = measure_interleaved({"chain": lambda: art.run(feeds)}, rounds=3)["chain"]
        overhead[name] = max(0.0, (measured_ms - chain.predicted_ms) / k)
        if db is not None:
            db.put_transition(name, name, overhead[name], 0.0, settings, machine_id())
        say(progress, "%s: a %d-partition chain measured %.3f ms vs %.3f ms predicted: %.3f ms per partition",
             name, k, measured_ms, chain.predicted_ms, overhead[name])
    if overhead:
        fallback = statistics.median(overhead.values())
        for name in backends:
            overhead.setdefault(name, fallback)
    return overhead


def overhead_settings(graph: Graph, chain: Plan, name: str, options: Mapping[str, Any]) -> str:
    """The transition-table ``settings`` of a per-partition overhead measured on ``chain`` (one backend's
    cheapest chain of ``graph``): the model, the chain (partitions and prediction: other costs give another
    chain, measured anew), and the backend's version and options."""
    from collage.cost_models.worker import resolve_backend

    backend = resolve_backend(name, dict(options))
    parts = [[list(p.nodes), p.backend] for p in chain.partitions]
    return canonical_json({"partition_overhead": {
        "model": graph.fingerprint(range(len(graph))),
        "chain": sha256_bytes(canonical_json(parts).encode()), "predicted_ns": round((chain.predicted_ms or 0) * 1e6),
        "backend": {"name": name, "version": backend.version(), "options": backend.options}}})


#: A stitched plan measured more than this factor over its prediction is searched again with the excess charged.
MISPREDICTED = 1.25


def search_checked(graph: Graph, costs: Mapping[Any, float], overhead: dict[str, float],
                   do_search: Callable[[Mapping[Any, float]], Plan], feeds: Mapping[str, np.ndarray], work: Path,
                   best_single_ms: float, *, target: str = "cpu", attempts: int = 3,
                   progress: bool = True,
                   backend_options: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Plan, dict[Any, float], int]:
    """Search, stitch and measure the plan; where it measures more than ``MISPREDICTED`` over the search's
    prediction, or loses to the best single backend, charge the measured excess per partition to its
    backends and search again (module doc).

    Returns (plan, the charged costs it was found with, attempts used). The plan returned is the best
    measured mixed plan (the caller's never-worse rule then decides against the single backends).
    """
    from collage.tuner.export import export
    from collage.runtime.artifact import load as load_artifact

    best: tuple[float, Plan, dict[Any, float]] | None = None
    charged: dict[Any, float] = {}
    plan = None
    for attempt in range(1, attempts + 1):
        charged = {c: v + overhead.get(c.backend, 0.0) for c, v in costs.items()}
        plan = do_search(charged)
        k = len(plan.partitions)
        if k == 1:
            if best is None:
                return plan, charged, attempt
            break  # charged into one backend: the best measured mix stands (never-worse judges it)
        art = load_artifact(export(graph, plan, work / f"attempt-{attempt}", target=target,
                                    backend_options={k: dict(v) for k, v in (backend_options or {}).items()}))
        measured_ms = measure_interleaved({"p": lambda: art.run(feeds)}, rounds=3)["p"]
        if best is None or measured_ms < best[0]:
            best = (measured_ms, plan, charged)
        predicted = plan.predicted_ms or 0.0
        say(progress, "attempt %d: %d partitions, predicted %.3f ms, measured %.3f ms (best single %.3f ms)",
             attempt, k, predicted, measured_ms, best_single_ms)
        if measured_ms < best_single_ms and measured_ms <= MISPREDICTED * predicted:
            break
        excess = (measured_ms - predicted) / k
        if excess <= 0:
            break
        for b in plan.backends:
            overhead[b] = overhead.get(b, 0.0) + excess
    assert best is not None and plan is not None
    if best[1] is not plan:
        do_search(best[2])  # the same costs give the same plan: the search's state (precision rounds, notes) is its
    return best[1], best[2], attempt


def whole_if_one_backend(graph: Graph, plan: Plan, costs: Mapping[Any, float], prec: Any = None) -> Plan:
    """``plan`` as it is, unless all its partitions are one backend's: then that backend on the whole model.

    One runtime, one call instead of several: the search only cuts one backend's model where measurement
    noise made the pieces' costs sum below the whole model's (mobilenetv2 in bf16 came out as ``[0, 77)`` +
    ``[77, 100)``). Needs the whole-model candidate measured (in ``costs``) and, for a lower-precision
    backend, its own error within the accuracy budget (``prec.whole_model_within_budget``); the
    precision notes then say so (``prec.use_whole_model``).
    """
    from collage.search.candidates import Candidate

    names = {p.backend for p in plan.partitions}
    if len(plan.partitions) < 2 or len(names) != 1:
        return plan
    (name,) = names
    n = len(graph)
    whole = Candidate(tuple(range(n)), name)
    if whole not in costs:
        return plan
    low = prec is not None and name in prec.low
    if low and whole not in prec.whole_model_within_budget():
        return plan
    note = f"one backend in {len(plan.partitions)} partitions: {name} on the whole model instead (one call)"
    merged = Plan.single(name, n, costs[whole])
    merged.notes = [*plan.notes, note]
    if low:
        prec.use_whole_model(name, f"precision: {note}")
    return merged


def one_call_prediction(plan: Plan, n_nodes: int, whole_ms: Callable[[str], float | None]) -> Plan:
    """``plan`` with, when it is one backend on the whole model, that model's own measured cost as its
    prediction (``whole_ms(backend)``; None: unchanged).

    The search charges every partition the per-partition overhead (``calibrate_partition_overhead``): the
    excess a call pays in a stitched chain, after another call, over its cost timed alone in a loop. A plan
    of one partition is no chain: the artifact makes one call, as the timing loop did, so it pays none
    (squeezenet in bf16 was predicted 1.27 ms with openvino-bf16's overhead charged, measured 1.01 ms).
    """
    if len(plan.partitions) != 1 or len(plan.partitions[0].nodes) != n_nodes:
        return plan
    part = plan.partitions[0]
    ms = whole_ms(part.backend)
    if ms is None:
        return plan
    return Plan([dataclasses.replace(part, cost_ms=ms)], ms, list(plan.notes))


def fill_boundaries(graph: Graph, plan: Plan) -> Plan:
    parts = []
    for p in plan.partitions:
        ins, outs = graph.boundary(p.nodes)
        parts.append(Partition(p.nodes, p.backend, p.cost_ms, p.runner_up, tuple(ins), tuple(outs),
                               p.fingerprint or graph.fingerprint(p.nodes)))
    return Plan(parts, plan.predicted_ms, list(plan.notes))
