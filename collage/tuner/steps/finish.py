"""Steps 9-10 of a tune: the final plan's numerics (outputs vs the ONNX Runtime fp32 reference for an fp32 plan,
then the precision strategy's check against the accuracy budget), and the artifact written, reusing exactly the
partitions that were checked (no recompilation; a plan that failed its numerics check and gave way to a single
backend is that backend's whole model, compiled and checked here)."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.errors import CollageError, NumericsError
from collage.plan import Note, NoteKind, Plan, kind_of
from collage.tuner.context import JOB_LOGGER
from collage.tuner.records import FinalCheck, Verified
from collage.tuner.result import TuneResult
from collage.tuner.checks import check_numerics

if TYPE_CHECKING:
    from collage.tuner.context import JobContext
    from collage.tuner.records import Measured, Searched
    from collage.tuner.outdir import OutputLocation

log = logging.getLogger(JOB_LOGGER)


def numerics(ctx: JobContext, verified: Verified, searched: Searched,
             measured: Measured) -> tuple[Verified, FinalCheck]:
    """The final plan loaded (exported again where the verification did not keep its artifact) and checked. An
    fp32 plan whose outputs differ from the reference gives way to the fastest single backend whose whole model's
    outputs match (a warning, and the plan's note, say what diverged); only where none does is the tune refused.
    Those whole models are compiled here, past the budget where it is spent: a tune that would otherwise fail."""
    plan = verified.plan
    artifact = verified.artifact or ctx.load(ctx.export(plan, ctx.work / "final"))
    fp32 = None
    if not ctx.precision.is_low(plan):
        try:
            fp32 = _check(ctx, plan, artifact)
        except NumericsError as e:
            verified, artifact, fp32 = _matching_single_backend(ctx, verified, e, searched, measured)
    checked, outcome = ctx.precision.check(verified.plan, artifact, fp32, verified.outcome)
    return verified, FinalCheck(artifact, checked, outcome)


def _check(ctx: JobContext, plan: Plan, artifact: Any, culprit: bool = True) -> dict[str, Any]:
    return check_numerics(ctx.graph, plan, artifact, ctx.feeds, dict(ctx.options.tolerance), ctx.backend_options,
                          culprit=culprit)


def _matching_single_backend(ctx: JobContext, verified: Verified, failed: NumericsError, searched: Searched,
                             measured: Measured) -> tuple[Verified, Any, Any]:
    """The fastest baseline whose whole model's outputs match the reference, as the plan (``failed`` raised again,
    naming the backends tried, where none does)."""
    from collage.tuner.steps.search import whole_prediction
    from collage.tuner.stitching import fill_boundaries

    plan = verified.plan
    alone = plan.partitions[0].backend if len(plan.partitions) == 1 else None
    tried: list[str] = []
    for name, ms in sorted(verified.baselines.items(), key=lambda kv: kv[1]):
        if name == alone:
            continue
        tried.append(name)
        single = fill_boundaries(ctx.graph, Plan.single(name, len(ctx.graph),
                                                        whole_prediction(ctx, searched.charges, measured, name)))
        try:
            artifact = ctx.load(ctx.export(single, ctx.work / f"numerics-{name}"))
            fp32 = _check(ctx, single, artifact, culprit=False)
        except CollageError as e:  # its outputs differ too, or it could not be built: the next one
            log.info("numerics: %s on the whole model does not match either: %s", name, e)
            continue
        note = (f"numerics: {failed.what}; the plan is {name} on the whole model ({ms:.3f} ms), the fastest single "
                "backend whose outputs match")
        log.warning("%s", note)
        kept = [x for x in plan.notes if kind_of(x) not in (NoteKind.REFINED, NoteKind.NEVER_WORSE)]
        single.notes.extend(kept + [Note(NoteKind.NUMERICS, note)])
        return (dataclasses.replace(verified, plan=single, plan_ms=ms, artifact=artifact, part_ms=None,
                                    plan_key=name if name in verified.timings else None), artifact, fp32)
    if not tried:
        raise failed
    raise NumericsError(f"{failed.what}; nor do the whole models of {', '.join(tried)}; nothing is written, the "
                        "measurements are kept: tune again with a looser --atol/--rtol where that error is acceptable "
                        "for this model", failed.what) from failed


def boundary_overhead(ctx: JobContext, artifact: Any, plan_ms: float) -> Any:
    """The final artifact's measured overhead per boundary (report.json ``boundary_overhead_ms``; None where the
    artifact has no such measurement, one partition (no boundary), the budget has no time left for it, or it
    failed: a report-only figure never fails a tune). A round runs the plan about three times (stitched, its
    partitions alone, its pairs); under a budget the rounds are cut to what is left (a one-partition whisper plan's
    23 rounds took 8.6 s past a 60 s budget before)."""
    if not hasattr(artifact, "boundary_overhead") or len(getattr(artifact, "partitions", ())) < 2:
        return None
    # three runs of the plan a round; not clock.round_s, whose ROUND_S floor is a timed window's least length:
    # Artifact.boundary_overhead runs a count of repeats, however short the plan
    per_round_s = 3 * plan_ms / 1e3
    warmup, least = 2, 3
    left = ctx.clock.left()
    if left is not None and left < (warmup + least) * per_round_s:
        ctx.say("boundary overhead: not measured (%.1f s left of the budget)", left)
        return None
    repeat = max(least, ctx.clock.rounds(20, per_round_s, fixed_s=warmup * per_round_s))
    try:
        return artifact.boundary_overhead(ctx.feeds, repeat=repeat, warmup=warmup)
    except Exception as e:  # report-only figure; never fail a tune for it
        log.warning("could not measure boundary overhead: %s", e)
        return None


def cuda_graph(artifact: Any) -> Any:
    """A device-resident (GPU) artifact's CUDA-graph segments and what splits them (report.json ``cuda_graph``);
    None for any other artifact."""
    return artifact.graph_report() if hasattr(artifact, "graph_report") else None


def write(ctx: JobContext, out: OutputLocation, verified: Verified, artifact: Any,
          report: dict[str, Any]) -> TuneResult:
    """The artifact at ``out`` (checked before the tune began), reusing the verified partitions."""
    from collage.tuner.export import export

    compiled = {p.index: p.compiled for p in artifact.partitions}
    ctx.say("exporting the artifact to %s (%d partition(s))%s", out.out, len(verified.plan.partitions),
            f", {ctx.clock.left():.0f} s left of the budget" if ctx.clock.budgeted else "")
    final = export(ctx.graph, verified.plan, out, target=ctx.options.target, report=report,
                   archive=ctx.options.archive, compiled=compiled, backend_options=ctx.backend_options)
    ctx.say("wrote %s: plan %.3f ms vs %s", final, verified.plan_ms,
            ", ".join(f"{k} {v:.3f} ms" for k, v in verified.baselines.items()))
    return TuneResult(Path(final), verified.plan, verified.plan_ms, verified.baselines, report)
