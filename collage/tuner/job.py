"""The tuning job: graph -> candidates -> measured costs -> DP -> (refine) -> verify -> artifact.

``tune()`` composes the layers; it owns no algorithm of its own beyond the verification rule:
the stitched plan is measured end to end against every single backend running the whole model,
interleaved in the same run, and if the plan is not faster than the best single backend, the plan
becomes that backend ("never worse"). Numerics are checked against the ONNX Runtime fp32 reference;
a plan that exceeds the tolerance fails naming the partition that diverges. The search step with its
measured per-partition overhead (``calibrate_partition_overhead``, ``search_checked``) lives in
:mod:`collage.tuner.search_step`.
"""
from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collage.errors import CollageError, UnsupportedError
from collage.graph.ir import Graph
from collage.plan import Plan
from collage.tuner.verify import check_numerics, measure_interleaved, stale_costs

log = logging.getLogger(__name__)

DEFAULT_BACKENDS = ("onnxruntime", "openvino")
#: artifact outputs vs the ORT fp32 whole-model reference
DEFAULT_TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
#: single backends slower than this factor x the fastest (by their measured whole-model cost) are not
#: re-run in the interleaved verification
SLOW_BASELINE_FACTOR = 5.0


@dataclass
class TuneResult:
    out_dir: Path
    plan: Plan
    plan_ms: float
    baselines: dict[str, float]
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def best_single(self) -> tuple[str, float]:
        name = min(self.baselines, key=self.baselines.__getitem__)
        return name, self.baselines[name]


def parse_budget(text: str | None) -> float | None:
    """'90s', '10m', '1h', '300' -> seconds; None/'' -> None."""
    if not text:
        return None
    text = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1])
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise CollageError(f"bad budget {text!r}: use e.g. 90s, 10m or 1h") from None


def _say(progress: bool, msg: str, *args: object) -> None:
    log.info(msg, *args)
    if progress:
        print("collage: " + (msg % args if args else msg), file=sys.stderr, flush=True)


def load_model_graph(model: str | Path | Any, shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """A path, 'zoo:NAME' or ModelProto -> validated Graph."""
    if isinstance(model, (str, Path)):
        from collage import zoo
        model = zoo.resolve(str(model))
    graph = Graph.load(model, shapes=shapes)
    graph.validate()
    return graph


def resolve_backends(names: Sequence[str], target: str = "cpu") -> list:
    from collage.backends import get_backend

    backends = []
    for name in names:
        b = get_backend(name)
        reason = b.available()
        if reason:
            raise CollageError(f"backend {name!r} is not available: {reason}")
        if b.device != target:
            raise CollageError(f"backend {name!r} runs on {b.device!r}, not on target {target!r}")
        backends.append(b)
    return backends


def tune(model: str | Path | Any, out_dir: str | Path, **options: Any) -> TuneResult:
    """Tune ``model`` for ``target`` over ``backends`` and write the artifact to ``out_dir``.

    Keyword options (all optional): target, backends, budget_s, db, refine_trials, shapes, limits,
    archive, tolerance, seed, progress, accuracy, calibration (see ``_tune``). The exported attempts,
    refinement trials and verification copies go to a scratch folder (1-2 GB for a large model) that
    is removed when the tune ends, however it ends; the artifact in ``out_dir`` and the cost DB stay.
    """
    with tempfile.TemporaryDirectory(prefix="collage-tune-", ignore_cleanup_errors=True) as tmp:
        return _tune(model, out_dir, work=Path(tmp), **options)


def _tune(model: str | Path | Any, out_dir: str | Path, *, target: str = "cpu",
         backends: Sequence[str] = DEFAULT_BACKENDS, budget_s: float | None = None, db: Any = None,
         refine_trials: int = 0, shapes: Mapping[str, Sequence[int]] | None = None, limits: Any = None,
         archive: bool = False, tolerance: Mapping[str, float] | None = None, seed: int = 0,
         progress: bool = True, accuracy: Any = None, calibration: str | Path | None = None, work: Path) -> TuneResult:
    """``tune``, with its scratch folder ``work``."""
    from collage import zoo
    from collage.tuner.export import export
    from collage.cost_models.db import get_db
    from collage.cost_models.measure import measure_candidates
    from collage.cost_models.transitions import transition_model
    from collage.runtime.artifact import load as load_artifact
    from collage.search.candidates import Candidate, Limits, candidate_counts, enumerate_candidates
    from collage.search.ranges import range_candidates
    from collage.search.exact import search_exact as search  # the DP, or the ILP past its valve
    from collage.tuner.search_step import _fill_boundaries, calibrate_partition_overhead, search_checked, whole_if_one_backend

    t_start = time.monotonic()
    tolerance = dict(tolerance or DEFAULT_TOLERANCE)
    out_dir = Path(out_dir)
    graph = load_model_graph(model, shapes)
    _say(progress, "%s: %d nodes", graph.name, len(graph))
    bks = resolve_backends(list(backends), target)
    names = [b.name for b in bks]
    cost_db = get_db(db)
    # --- precision (collage.tuner.precision.tuner): lower-precision variants only under an accuracy budget
    from collage.tuner.precision.tuner import PrecisionTuner
    prec = PrecisionTuner.setup(graph, bks, accuracy, calibration, seed=seed, db=cost_db, target=target,
                                progress=progress, budget_s=budget_s)
    # --- end precision

    # 1. what each backend takes
    supports = {b.name: b.supports_all(graph) for b in bks}
    orphans = [i for i in range(len(graph)) if not any(supports[n][i] for n in names)]
    if orphans:
        labels = ", ".join(graph.node_label(i) for i in orphans[:5])
        raise UnsupportedError(f"no backend among {names} takes {labels}"
                               + (f" (and {len(orphans) - 5} more)" if len(orphans) > 5 else "")
                               + "; add a backend that does (onnxruntime runs every standard op)")
    # 2. candidates: whole graph and single nodes first, so a budget cut still leaves a cover
    limits = limits or Limits()
    cands = enumerate_candidates(graph, supports, limits)
    n = len(graph)
    known = {(c.nodes, c.backend) for c in cands}
    ranged = [c for c in range_candidates(graph, supports) if (c.nodes, c.backend) not in known] if limits.ranges else []
    cands += ranged
    coarse = {(c.nodes, c.backend) for c in ranged}

    def order(c: Candidate) -> tuple:
        """Measuring order, so that a budget cut still leaves covers: whole models; then the coarse ranges
        (few, and the pieces a mix that beats one backend end to end is made of): each cut's prefix and
        suffix together, the latest cut first (long prefixes: "all but the tail"), then the segments;
        then single nodes; then the rest, smallest first."""
        if len(c.nodes) == n:
            return (0, 0, 0, c.nodes, c.backend)
        if (c.nodes, c.backend) in coarse:
            cut = c.nodes[-1] + 1 if c.nodes[0] == 0 else c.nodes[0] if c.nodes[-1] == n - 1 else None
            return (1, 0, -cut, c.nodes, c.backend) if cut is not None else (1, 1, len(c.nodes), c.nodes, c.backend)
        return (2 if len(c.nodes) == 1 else 3, 0, len(c.nodes), c.nodes, c.backend)
    cands.sort(key=order)
    counts = candidate_counts(cands)
    _say(progress, "candidates: %s (%d of them coarse ranges)", ", ".join(f"{k} {v}" for k, v in counts.items()), len(ranged))
    if prec:  # lower-precision ranges over the accuracy budget at the model's outputs are not worth timing
        cands = prec.prescreen(cands)
    # 3. measured costs (cached in the DB)
    spent = time.monotonic() - t_start
    measured = measure_candidates(graph, [(c.nodes, c.backend) for c in cands], db=cost_db,
                                  budget_s=None if budget_s is None else max(1.0, budget_s - spent), progress=progress)
    costs: dict[Candidate, float] = {}
    failures = 0
    for c in cands:
        cost = measured.get((c.nodes, c.backend))
        if cost is None:
            continue
        if cost.ok:
            costs[c] = cost.median_ms
        else:
            failures += 1
    transition = transition_model(names, cost_db)
    feeds = zoo.random_inputs(graph, seed=seed)
    if prec:
        prec.work = work
    # 4. the single backends' whole-model baselines come first: every plan is judged against them.
    # A backend whose whole-model cost is already known to be far behind (untuned TVM: 30-600x) is
    # not re-run in the interleaved rounds; its measured cost from the DB stands as its baseline.
    whole = {b.name: measured.get((tuple(range(n)), b.name)) for b in bks}
    whole_ms = {k: c.median_ms for k, c in whole.items() if c is not None and c.ok}
    # (against fp32 backends only: a bf16 whole model 4x faster does not make the fp32 baselines "slow")
    fastest_whole = min((v for k, v in whole_ms.items() if not (prec and k in prec.low)), default=None)
    # the switch between runtimes priced on this model's own pieces, per direction (fp32 backends near the fastest)
    fp32_whole = {k: v for k, v in whole_ms.items() if not (prec and k in prec.low) and all(supports[k].values())}
    if len(fp32_whole) > 1:
        from collage.cost_models.transitions import model_transition_model
        transition = model_transition_model(graph, names, cost_db, whole_ms=fp32_whole, slow_factor=SLOW_BASELINE_FACTOR)
    singles, from_db = {}, {}
    for b in bks:
        if not all(supports[b.name].values()) or (prec and b.name in prec.low):
            continue  # (lower precision is no baseline: it is not fp32-faithful)
        if fastest_whole is not None and whole_ms.get(b.name, 0.0) > SLOW_BASELINE_FACTOR * fastest_whole:
            from_db[b.name] = whole_ms[b.name]
            continue
        singles[b.name] = b.compile(graph.model)
    first = measure_interleaved({k: (lambda c=c: c.run(feeds)) for k, c in singles.items()}, rounds=3)
    best_single_ms = min(first.values(), default=float("inf"))

    # 5. search with a measured per-partition overhead, and correct it where the stitched plan says so
    overhead = calibrate_partition_overhead(graph, costs, transition, names, feeds, work, target=target,
                                            progress=progress)

    def do_search(charged: Mapping[Candidate, float]) -> Plan:
        plan = prec.search(charged, transition) if prec else search(graph, charged, transition)
        return _fill_boundaries(graph, whole_if_one_backend(graph, plan, charged, prec))

    t0 = time.perf_counter()
    plan, charged, attempts = search_checked(graph, costs, overhead, do_search, feeds, work, best_single_ms,
                                             target=target, progress=progress)
    search_s = time.perf_counter() - t0
    _say(progress, "search: %s (%d attempt(s), %.2f s)", plan.describe(), attempts, search_s)

    # 6. verify: stitched plan vs each single backend, interleaved, same run
    plan_dir = export(graph, plan, work / "plan", target=target)
    artifact = load_artifact(plan_dir)
    runners = {"plan": lambda: artifact.run(feeds)}
    runners.update({name: (lambda c=c: c.run(feeds)) for name, c in singles.items()})
    # a lower-precision backend on the whole model, within the accuracy budget on its own, runs too: a
    # competitor for the plan (not an fp32 baseline), so a faster within-budget bf16 plan is never lost
    alts = prec.whole_model_alternatives(plan) if prec else {}
    runners.update({f"whole:{name}": (lambda c=c: c.run(feeds)) for name, c in alts.items()})
    _say(progress, "verifying: plan vs %s, interleaved", ", ".join([*singles, *alts]) or "nothing")
    timings = measure_interleaved(runners)
    plan_ms = timings.pop("plan")
    alt_ms = {name: timings.pop(f"whole:{name}") for name in alts}
    if alt_ms and min(alt_ms.values()) < plan_ms:
        name = min(alt_ms, key=alt_ms.__getitem__)
        note = (f"precision: {name} on the whole model (within the accuracy budget on its own) measured "
                f"{alt_ms[name]:.3f} ms, faster than the searched plan ({plan_ms:.3f} ms); the plan is {name} "
                "on the whole model")
        _say(progress, note)
        whole_cost = measured.get((tuple(range(n)), name))
        plan = _fill_boundaries(graph, Plan.single(name, n, whole_cost.median_ms if whole_cost and whole_cost.ok else None))
        plan.notes.extend(prec.use_whole_model(name, note))
        plan_dir = export(graph, plan, work / "plan-whole", target=target)
        artifact = load_artifact(plan_dir)
        plan_ms = alt_ms[name]
    baselines = {**timings, **from_db}
    stale = stale_costs(whole_ms, timings)  # against the verification's numbers: the most rounds, warmest
    if stale:
        log.warning("%s", stale)
        plan.notes.append(stale)
    if from_db:
        plan.notes.append("baselines of " + ", ".join(f"{k} ({v:.1f} ms)" for k, v in from_db.items())
                          + f" are their cost-DB whole-model medians: more than {SLOW_BASELINE_FACTOR}x behind, "
                          "not re-run interleaved")

    if refine_trials > 0 and prec and prec.is_low(plan):
        plan.notes.append("refinement skipped: it does not measure errors, and the plan holds lower-precision partitions")
    elif refine_trials > 0 and len(plan.partitions) > 1:
        from collage.search.refine import refine

        def evaluate(p: Plan) -> float:
            p = _fill_boundaries(graph, p)
            d = export(graph, p, Path(tempfile.mkdtemp(dir=work)) / "p", target=target)
            a = load_artifact(d)
            return measure_interleaved({"p": lambda: a.run(feeds)}, rounds=3)["p"]

        # the study lives in the cost DB's SQLite file, so an interrupted refinement resumes
        storage = f"sqlite:///{cost_db.path.resolve()}" if hasattr(cost_db, "path") else None
        res = refine(graph, plan, charged, evaluate, storage=storage,
                     study_name=f"refine-{graph.fingerprint(range(n))}-{'-'.join(names)}", n_trials=refine_trials)
        if res.plan is not plan and res.measured_ms < plan_ms:
            plan = _fill_boundaries(graph, res.plan)
            plan.notes.append(f"refined by {res.trials} measured trials: {plan_ms:.3f} -> {res.measured_ms:.3f} ms")
            plan_dir = export(graph, plan, work / "refined", target=target)
            artifact = load_artifact(plan_dir)
            timings = measure_interleaved({"plan": lambda: artifact.run(feeds),
                                           **{k: (lambda c=c: c.run(feeds)) for k, c in singles.items()}})
            plan_ms = timings.pop("plan")
            baselines = {**timings, **from_db}

    if len(plan.partitions) == 1 and plan.partitions[0].backend in timings:
        # the plan is one backend on the whole model: the same configuration as that baseline, so one
        # number stands for both (two samples of it would only show the noise as a "speedup")
        plan_ms = baselines[plan.partitions[0].backend]
    if baselines:
        best, best_ms = min(baselines.items(), key=lambda kv: kv[1])
        already_best = len(plan.partitions) == 1 and plan.partitions[0].backend == best
        if not already_best and plan_ms >= best_ms:
            note = (f"never worse: the mixed plan measured {plan_ms:.3f} ms end to end, not faster than "
                    f"{best} alone ({best_ms:.3f} ms); the plan is {best} on the whole model")
            _say(progress, note)
            whole = measured.get((tuple(range(n)), best))
            kept = [x for x in plan.notes if not x.startswith("refined by")]  # facts of the run, not of the mix
            plan = _fill_boundaries(graph, Plan.single(best, n, whole.median_ms if whole and whole.ok else None))
            plan.notes.extend(kept + [note])
            plan_ms = best_ms
            artifact = None
    numerics_artifact = artifact or load_artifact(export(graph, plan, work / "final", target=target))
    numerics = None if prec and prec.is_low(plan) else check_numerics(graph, plan, numerics_artifact, feeds, tolerance)
    if prec:  # end-to-end error vs the accuracy budget on the calibration inputs
        numerics = prec.check(plan, numerics_artifact, numerics)

    report = {
        "model": graph.name,
        "source": graph.source,
        "target": target,
        "backends": names,
        "baselines": baselines,
        "plan_ms": plan_ms,
        "predicted_ms": plan.predicted_ms,
        "numerics": numerics,
        "notes": list(plan.notes),
        "candidates": counts,
        "partition_overhead_ms": overhead,
        "search_attempts": attempts,
        "measurements": {"candidates": len(cands), "with_cost": len(costs), "failed_candidates": failures,
                         "distinct_keys": getattr(measured, "distinct", None),
                         "reused": getattr(measured, "reused", None),
                         "measured_now": getattr(measured, "measured", None),
                         "unmeasured": getattr(measured, "unmeasured", None),
                         "measure_s": getattr(measured, "elapsed_s", None)},
        "search_s": search_s,
        "tune_s": time.monotonic() - t_start,
    }
    if prec:
        report["precision"] = prec.report(plan)
    if hasattr(numerics_artifact, "boundary_overhead"):
        try:
            report["boundary_overhead_ms"] = numerics_artifact.boundary_overhead(feeds)
        except Exception as e:  # report-only figure; never fail a tune for it
            log.warning("could not measure boundary overhead: %s", e)
    # reuse exactly the partitions that were verified (no recompilation)
    compiled = {p.index: p.compiled for p in numerics_artifact.partitions}
    final = export(graph, plan, out_dir, target=target, report=report, archive=archive, compiled=compiled)
    _say(progress, "wrote %s: plan %.3f ms vs %s", final, plan_ms,
         ", ".join(f"{k} {v:.3f} ms" for k, v in baselines.items()))
    return TuneResult(Path(final), plan, plan_ms, baselines, report)
