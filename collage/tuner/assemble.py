"""report.json's content, assembled in one place from the records of a tune's steps
(:class:`collage.tuner.records.TuneRecords`), at its end. The keys (and what they hold) are collage.report.render's
schema; :func:`plan_summary` is the form of a searched plan in it."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.plan import Plan
    from collage.tuner.context import JobContext
    from collage.tuner.records import SearchedRun, TuneRecords, Verified


def assemble_report(ctx: JobContext, records: TuneRecords, boundary_overhead: Any = None,
                    cuda_graph: Any = None) -> dict[str, Any]:
    """report.json's content from every step's record (``boundary_overhead``: the final artifact's measured
    overhead per boundary, None where it has none; ``cuda_graph``: a device-resident artifact's CUDA-graph
    segments and what splits them, None for any other)."""
    measured, searched, final = records.measured, records.searched, records.final
    raw, plan = measured.raw, final.plan
    report = {
        "model": ctx.graph.name, "source": ctx.graph.source, "target": ctx.options.target,
        "backends": ctx.names, "baselines": final.baselines, "plan_ms": final.plan_ms,
        "predicted_ms": plan.predicted_ms, "numerics": records.checked.numerics, "notes": list(plan.notes),
        "candidates": records.candidates.counts, "partition_charges": searched.calibrated,
        "search_attempts": searched.attempts,
        "searched_plan": searched_summary(searched.plan, searched.searched_for, searched.single_ms,
                                          final.searched_run),
        "verification": verification(final),
        "cost_db_plan": None if searched.cost_db_plan is None else plan_summary(searched.cost_db_plan),
        "measurements": {"candidates": len(records.candidates.cands), "with_cost": len(measured.costs),
                         "failed_candidates": measured.failures,
                         "distinct_keys": getattr(raw, "distinct", None), "reused": getattr(raw, "reused", None),
                         "measured_now": getattr(raw, "measured", None),
                         "unmeasured": getattr(raw, "unmeasured", None),
                         "measure_s": getattr(raw, "elapsed_s", None)},
        "coverage": coverage(records),
        # each partition of the final plan timed alone in a worker: what the report shows where it has no
        # measurement of the partition inside the plan (collage.report.render.measured_ms)
        "alone_ms": [c.median_ms if (c := raw.get((p.nodes, p.backend))) is not None and c.ok else None
                     for p in plan.partitions],
        "search_s": searched.search_s,
        "tune_s": time.monotonic() - ctx.t_start,
        "load": ctx.graph.folding.as_dict(),
        # --budget: the whole tune's clock and each step's seconds (the export's own is not in it yet)
        "time": ctx.clock.report(),
    }
    if measured.tvm_run is not None:
        from collage.tuner.tvm_budget import tvm_tuning_report

        report["tvm_tuning"] = tvm_tuning_report(measured.tvm_run, ctx.graph, plan, raw,
                                                 [n for n in ctx.names if n != "tvm"])
    precision = ctx.precision.report(plan, records.checked.outcome)
    if precision is not None:
        report["precision"] = precision
    if boundary_overhead is not None:
        report["boundary_overhead_ms"] = boundary_overhead
    if cuda_graph is not None:
        report["cuda_graph"] = cuda_graph
    return report


def verification(final: Verified) -> dict[str, Any] | None:
    """report.json's ``verification``: the interleaved rounds behind ``plan_ms`` and ``baselines`` (each
    runner's block median per round, ms), and which runner the plan is; None where none ran."""
    if not final.rounds:
        return None
    return {"rounds": min(len(v) for v in final.rounds.values()), "plan": final.plan_key,
            "round_ms": {k: [float(f"{ms:.6g}") for ms in v] for k, v in final.rounds.items()}}


def coverage(records: TuneRecords) -> dict[str, Any]:
    """report.json's ``coverage``: the measuring step's, with the refinement's trials."""
    return {**records.measured.coverage, "refinement": records.refined.refinement}


def searched_summary(plan: Plan, searched_for: Plan, single_ms: float | None,
                     run: SearchedRun | None) -> dict[str, Any]:
    """report.json's ``searched_plan``: :func:`plan_summary` of the searched plan, with the verification's
    measurement of it (``measured_ms``), the best single backend in the same rounds
    (``best_single_measured_ms``) and each partition's call in the plan (``in_plan_ms``)."""
    summary = plan_summary(plan, searched_for, single_ms)
    if run is not None:
        summary.update(measured_ms=run.measured_ms, best_single_measured_ms=run.best_single_measured_ms)
        for row, ms in zip(summary["partitions"], run.part_ms or []):
            row["in_plan_ms"] = ms
    return summary


def plan_summary(plan: Plan, searched_for: Plan | None = None, best_single_ms: float | None = None) -> dict[str, Any]:
    """report.json's form of a searched plan: each partition's backend, node ids and cost, and the prediction.
    With ``searched_for`` (the same plan as the search priced it before the plan ran in its attempts; the
    plan itself is then priced as it ran there), that plan's costs (``searched_cost_ms``) and prediction
    (``searched_for_ms``) too. ``best_single_ms``: the best single backend priced alike (timed in the same
    rounds as the plan's prediction, or level x worker cost beside a plan priced from its parts), so the
    predicted gain is ``best_single_ms / predicted_ms``."""
    summary = {"partitions": [{"backend": p.backend, "nodes": list(p.nodes), "cost_ms": p.cost_ms}
                              for p in plan.partitions],
               "predicted_ms": plan.predicted_ms}
    if best_single_ms is not None:
        summary["best_single_ms"] = best_single_ms
    if searched_for is not None and len(searched_for.partitions) == len(plan.partitions):
        for row, p in zip(summary["partitions"], searched_for.partitions):
            row["searched_cost_ms"] = p.cost_ms
        summary["searched_for_ms"] = searched_for.predicted_ms
    return summary
