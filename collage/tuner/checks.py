"""Verification: how the tuner times things and checks numbers.

* ``median_ms`` / ``measure_interleaved``: wall-clock medians, several configurations timed in
  interleaved rounds so that drift on a shared machine hits them alike, paired round by round.
* ``check_numerics``: an artifact's outputs against the ONNX Runtime fp32 whole-model reference (the model as
  read, before load-time folding); on failure it names the first partition that diverges on its own.
* ``stale_costs``: whether the cost DB's whole-model costs still agree with a fresh measurement.
"""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from collage.errors import NumericsError
from collage.graph.ir import Graph
from collage.plan import Plan


def median_ms(fn: Callable[[], object], *, min_runs: int = 5, min_time_s: float = 0.2) -> float:
    """Median wall time of fn() in ms over at least min_runs calls and min_time_s seconds."""
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < min_runs or time.perf_counter() - start < min_time_s:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
        if len(samples) >= 10_000:
            break
    return statistics.median(samples)


#: Interleaved rounds of the verification; the timings a prediction is made from (the partition charges'
#: calibration, the search's plan attempts) take as many, so they are as steady as what they are judged by.
VERIFY_ROUNDS = 7


def interleaved_rounds(runners: Mapping[str, Callable[[], object]], *, rounds: int = VERIFY_ROUNDS,
                       min_time_s: float = 0.15, warmup_s: float = 0.3,
                       warmed: Callable[[], object] | None = None,
                       shuffle: random.Random | None = None) -> dict[str, list[float]]:
    """Each runner's median ms in each of ``rounds`` interleaved rounds: a round runs every runner in turn for a
    block of at least ``min_time_s`` (at least 3 calls; the block's median drops the first call after another
    runner, which pays to bring its weights and threads back: shufflenet's ~2.5 ms call took ~0.4 ms more, ~0.1 ms
    more again after another runtime, results/budget/timing-method.md). In the order given, or a fresh
    ``shuffle`` order each round.

    Each runner is first warmed up for ``warmup_s`` (at least 3 calls): OpenVINO's first calls after a
    compile ran ~1.5x slow here, enough to skew a short measurement. ``warmed`` is called once after the
    warm-up, before the rounds (a runner that records its calls can drop the warm-up ones there).
    """
    for fn in runners.values():
        median_ms(fn, min_runs=3, min_time_s=warmup_s)
    if warmed is not None:
        warmed()
    per: dict[str, list[float]] = {k: [] for k in runners}
    order = list(runners)
    for _ in range(rounds):
        if shuffle is not None:
            shuffle.shuffle(order)
        for k in order:
            per[k].append(median_ms(runners[k], min_runs=3, min_time_s=min_time_s))
    return per


def paired_medians(per: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each runner's median ms from its rounds (:func:`interleaved_rounds`), paired round by round: a round's
    times are divided by that round's level (their geometric mean), the runner's median of those is scaled by
    the median level. The machine's speed moves within seconds here (up to ~2x between 0.5 s slices of one
    workload: results/measurement/machine-level-seconds.md), so two runners' plain medians can come from
    rounds at different levels and rank them wrongly; for two runners over an odd number of rounds, the ratio of
    their paired medians is the median of their per-round ratios. One runner: its plain median."""
    if not per:
        return {}
    n = min(len(v) for v in per.values())
    x = np.array([list(v)[:n] for v in per.values()], dtype=np.float64)
    level = np.exp(np.log(x).mean(axis=0))
    scale = float(np.median(level))
    return {k: float(np.median(row / level)) * scale for k, row in zip(per, x)}


def measure_interleaved(runners: Mapping[str, Callable[[], object]], *, rounds: int = VERIFY_ROUNDS,
                        min_time_s: float = 0.15, warmup_s: float = 0.3,
                        warmed: Callable[[], object] | None = None) -> dict[str, float]:
    """Median ms of each runner, measured in interleaved rounds so that drift hits all alike, and paired round
    by round (:func:`interleaved_rounds`, :func:`paired_medians`)."""
    return paired_medians(interleaved_rounds(runners, rounds=rounds, min_time_s=min_time_s, warmup_s=warmup_s,
                                             warmed=warmed))


def _reference_outputs(graph: Graph, feeds: Mapping[str, np.ndarray],
                       extra: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """ONNX Runtime fp32 run of the whole model: the ORIGINAL model (as read, input sizes fixed, nothing folded:
    ``graph.original_model``), so that a load-time folding bug fails the check; with ``extra`` intermediate tensors
    exposed, the model as tuned (those tensors are the folded model's; used to find the partition that diverges)."""
    from collage.backends import reference_backend

    model = graph.with_outputs(list(extra)) if extra else graph.original_model
    compiled = reference_backend().compile(model)
    return {k: np.array(v, copy=True) for k, v in compiled.run(dict(feeds)).items()}


def check_numerics(graph: Graph, plan: Plan, artifact, feeds: Mapping[str, np.ndarray],
                   tolerance: Mapping[str, float],
                   backend_options: Mapping[str, Mapping[str, Any]] | None = None, *,
                   culprit: bool = True) -> dict[str, Any]:
    """Artifact outputs vs the ORT reference; on failure name the first partition that diverges (its backend
    built with ``backend_options[name]``; ``culprit`` False: not looked for, which compiles every partition)."""
    ref = _reference_outputs(graph, feeds)
    got = artifact.run(dict(feeds))
    per_output = {}
    worst = 0.0
    bad = []
    for name, r in ref.items():
        g = np.asarray(got[name])
        err = float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64)))) if r.size else 0.0
        per_output[name] = err
        worst = max(worst, err)
        finite = np.all(np.isfinite(g)) if g.dtype.kind == "f" else True
        if not finite or not np.allclose(g, r, atol=tolerance["atol"], rtol=tolerance["rtol"]):
            bad.append(name)
    result = {"max_abs_err": worst, "tolerance": dict(tolerance), "per_output": per_output, "ok": not bad}
    if bad:
        where = _diverging_partition(graph, plan, feeds, tolerance, backend_options or {}) if culprit else None
        what = (f"plan output(s) {bad} differ from the ONNX Runtime reference (max abs err {worst:.3g}, "
                f"tolerance atol={tolerance['atol']} rtol={tolerance['rtol']})" + (f"; {where}" if where else ""))
        raise NumericsError(f"{what}; nothing is written, the measurements are kept: tune again with a looser "
                            "--atol/--rtol where that error is acceptable for this model, or with --backends leaving "
                            "that backend out", what)
    return result


def _diverging_partition(graph: Graph, plan: Plan, feeds, tolerance, backend_options=None) -> str:
    from collage.backends import get_backend

    needed = sorted({t for p in plan.partitions for t in graph.boundary(p.nodes)[0] + graph.boundary(p.nodes)[1]}
                    - set(graph.inputs))
    ref = _reference_outputs(graph, feeds, needed)
    ref.update(feeds)
    for k, p in enumerate(plan.partitions):
        ins, outs = graph.boundary(p.nodes)
        options = dict((backend_options or {}).get(p.backend, {}))
        out = get_backend(p.backend, **options).compile(graph.extract(p.nodes)).run({t: ref[t] for t in ins})
        for t in outs:
            if not np.allclose(out[t], ref[t], atol=tolerance["atol"], rtol=tolerance["rtol"]):
                err = float(np.max(np.abs(out[t].astype(np.float64) - ref[t])))
                return (f"partition {k} on {p.backend} (nodes {graph.node_label(p.nodes[0])} .. "
                        f"{graph.node_label(p.nodes[-1])}) diverges first: tensor {t!r} max abs err {err:.3g}")
    return "no single partition diverges on its own (the error accumulates across partitions)"


#: a cost-DB whole-model cost this far (either way) from the same configuration measured now is stale
STALE_RATIO = 1.5


def stale_costs(db_ms: Mapping[str, float], now_ms: Mapping[str, float],
                created: Mapping[str, float] | None = None) -> str | None:
    """A warning when the cost DB's whole-model costs, stored by an EARLIER run, disagree with this run's fresh
    measurement (the caller passes only those: a cost this run measured differs from the verification's
    in-process timing by the machine's level, which the partition charges measure, not by staleness).
    ``created``: when each was measured (the DB's timestamp, seconds since the epoch), said in the warning.

    Costs are cached for good: ones taken while the machine was busy (another job, a build) stay in the
    DB and mislead every later search on it. The whole model on each backend is measured anew in every
    tune, so it is the check.
    """
    off = {k: (db_ms[k], now_ms[k]) for k in now_ms if k in db_ms and now_ms[k] > 0
           and not (1 / STALE_RATIO <= db_ms[k] / now_ms[k] <= STALE_RATIO)}
    if not off:
        return None
    when = {k: time.strftime(" (measured %Y-%m-%d %H:%M UTC)", time.gmtime(t))
            for k, t in (created or {}).items() if t}
    what = ", ".join(f"{k} {a:.3f} ms in the DB{when.get(k, '')} vs {b:.3f} ms now" for k, (a, b) in off.items())
    return (f"the cost DB's whole-model costs from an earlier run disagree with this run by more than {STALE_RATIO}x "
            f"({what}): that run probably measured while the machine was busy; the plan may be off. Re-tune with a "
            "fresh --db on a quiet machine")
