"""Steps 6 and 8 of a tune: the searched plan measured end to end against every single backend running the
whole model, interleaved in the same run (a lower-precision whole model within the accuracy budget runs too, a
competitor for the plan), and the never-worse rule: a plan not faster than the best single backend becomes that
backend."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from collage.plan import Note, NoteKind, Plan, kind_of
from collage.tuner.context import JOB_LOGGER
from collage.tuner.records import Baselines, Measured, Searched, SearchedRun, Verified
from collage.tuner.clock import VERIFY_LEAST
from collage.tuner.steps import budget
from collage.tuner.steps.measure import SLOW_BASELINE_FACTOR
from collage.tuner.steps.search import whole_prediction
from collage.tuner.checks import interleaved_rounds, paired_medians, stale_costs

if TYPE_CHECKING:
    from collage.tuner.context import JobContext

log = logging.getLogger(JOB_LOGGER)


def verify(ctx: JobContext, searched: Searched, measured: Measured, base: Baselines) -> Verified:
    """The stitched plan vs each single backend, interleaved, same run; a faster lower-precision whole model
    within the accuracy budget on its own becomes the plan. The record keeps the searched plan's measurement
    (``searched_run``: the plan, the best single backend beside it, each partition's call in those runs), which
    report.json's ``searched_plan`` shows whichever plan the later steps keep."""
    from collage.runtime.artifact import PartitionTimes

    plan = searched.plan
    artifact = ctx.load(ctx.export(plan, ctx.work / "plan"))
    # a plan of one backend on the whole model is that baseline: timed once, under the baseline's name
    same = plan.partitions[0].backend if len(plan.partitions) == 1 else None
    same = same if same in base.singles else None
    clock = PartitionTimes(artifact, ctx.feeds)  # a plan run that keeps its partitions' call times
    runners: dict[str, Any] = {} if same else {"plan": clock}
    runners.update({name: (lambda c=c: c.run(ctx.feeds)) for name, c in base.singles.items()})
    alts = ctx.precision.whole_model_alternatives(plan)
    runners.update({f"whole:{name}": (lambda c=c: c.run(ctx.feeds)) for name, c in alts.items()})
    # the last timed step (numerics and export are short), and the one that decides the plan: at least the
    # rounds the reserve planned for it, even where the steps before it took that time
    rounds = budget.rounds_for(ctx, base, share=0.8, artifacts=0, least=VERIFY_LEAST)
    others = [n for n in [*base.singles, *alts] if n != same]
    ctx.say("verifying: %s%s, %d round(s)%s", f"the plan ({same} alone)" if same else "plan",
            f" vs {', '.join(others)}, interleaved" if others else ": no other backend runs the whole model", rounds,
            f", {ctx.clock.left():.0f} s left of the budget" if ctx.clock.budgeted else "")
    per = interleaved_rounds(runners, rounds=rounds, warmed=clock.clear)  # the warm-up calls are not kept
    timings = paired_medians(per)
    plan_ms = timings[same] if same else timings.pop("plan")
    alt_ms = {name: timings.pop(f"whole:{name}") for name in alts}
    part_ms = clock.medians() if clock.runs and len(plan.partitions) > 1 else None
    baselines = {**timings, **base.from_db}
    run = SearchedRun(plan_ms, min(baselines.values(), default=None), part_ms)
    verified = Verified(plan, plan_ms, artifact, timings, baselines, part_ms, searched.outcome, run, per,
                        same or "plan")
    if alt_ms and min(alt_ms.values()) < plan_ms:
        verified = take_whole_model_alternative(ctx, verified, alt_ms, searched, measured)
    note_baselines(ctx, verified, base, measured)
    return verified


def take_whole_model_alternative(ctx: JobContext, verified: Verified, alt_ms: Mapping[str, float],
                                 searched: Searched, measured: Measured) -> Verified:
    """A lower-precision whole model measured faster than the searched plan becomes the plan."""
    from collage.tuner.stitching import fill_boundaries

    name = min(alt_ms, key=alt_ms.__getitem__)
    note = (f"precision: {name} on the whole model (within the accuracy budget on its own) measured "
            f"{alt_ms[name]:.3f} ms, faster than the searched plan ({verified.plan_ms:.3f} ms); the plan is "
            f"{name} on the whole model")
    ctx.say(note)
    prediction = whole_prediction(ctx, searched.charges, measured, name)
    plan = fill_boundaries(ctx.graph, Plan.single(name, len(ctx.graph), prediction))
    outcome = ctx.precision.use_whole_model(verified.outcome, name, note)
    plan.notes.extend(outcome.notes)
    artifact = ctx.load(ctx.export(plan, ctx.work / "plan-whole"))
    return Verified(plan, alt_ms[name], artifact, verified.timings, verified.baselines, None, outcome,
                    verified.searched_run, verified.rounds, f"whole:{name}")


def note_baselines(ctx: JobContext, verified: Verified, base: Baselines, measured: Measured) -> None:
    """Notes on the baselines, added to the verified plan's: a stale cost DB, baselines taken from the DB."""
    # against the verification's numbers (warmest); only costs an earlier run stored: this run's own
    # worker timings differ from the verification's by the machine's level, not by staleness
    n = len(ctx.graph)
    earlier = {b: c.created for b in base.whole_ms
               if (c := measured.raw.get((tuple(range(n)), b))) is not None and c.created < ctx.t_wall}
    stale = stale_costs({b: ms for b, ms in base.whole_ms.items() if b in earlier}, verified.timings, earlier)
    if stale:
        log.warning("%s", stale)
        verified.plan.notes.append(Note(NoteKind.BASELINES, stale))
    if base.from_db:
        verified.plan.notes.append(Note(
            NoteKind.BASELINES, "baselines of " + ", ".join(f"{k} ({v:.1f} ms)" for k, v in base.from_db.items())
            + f" are their cost-DB whole-model medians: more than {SLOW_BASELINE_FACTOR}x behind, not re-run "
            "interleaved"))


def never_worse(ctx: JobContext, verified: Verified, searched: Searched, measured: Measured) -> Verified:
    """If the plan is not faster than the best single backend, the plan is that backend."""
    from collage.tuner.stitching import fill_boundaries

    plan, plan_ms, baselines, key = verified.plan, verified.plan_ms, verified.baselines, verified.plan_key
    if len(plan.partitions) == 1 and plan.partitions[0].backend in verified.timings:
        # the plan is one backend on the whole model: the same configuration as that baseline, so one
        # number stands for both (two samples of it would only show the noise as a "speedup")
        key = plan.partitions[0].backend
        plan_ms = baselines[key]
    if not baselines:
        return dataclasses.replace(verified, plan_ms=plan_ms, plan_key=key)
    best, best_ms = min(baselines.items(), key=lambda kv: kv[1])
    already_best = len(plan.partitions) == 1 and plan.partitions[0].backend == best
    if already_best or plan_ms < best_ms:
        return dataclasses.replace(verified, plan_ms=plan_ms, plan_key=key)
    what = ("the mixed plan" if len({p.backend for p in plan.partitions}) > 1
            else f"the searched plan ({plan.partitions[0].backend} in {len(plan.partitions)} partition(s))")
    note = (f"never worse: {what} measured {plan_ms:.3f} ms end to end, not faster than "
            f"{best} alone ({best_ms:.3f} ms); the plan is {best} on the whole model"
            # priced as the search priced it before it ran (part_ms: the searched plan was verified)
            + furthest_over_price(searched.searched_for, verified.part_ms))
    ctx.say(note)
    kept = [x for x in plan.notes if kind_of(x) != NoteKind.REFINED]  # facts of the run, not of the mix
    prediction = whole_prediction(ctx, searched.charges, measured, best)
    single = fill_boundaries(ctx.graph, Plan.single(best, len(ctx.graph), prediction))
    single.notes.extend(kept + [Note(NoteKind.NEVER_WORSE, note)])
    return dataclasses.replace(verified, plan=single, plan_ms=best_ms, artifact=None, part_ms=None,
                               plan_key=best if best in verified.timings else None)


def furthest_over_price(plan: Plan, part_ms: Sequence[float] | None) -> str:
    """A note's tail naming the partition whose time inside the plan's runs exceeded its price the most ("" when
    there are no such times, or every partition ran within its price)."""
    if not part_ms or len(part_ms) != len(plan.partitions) or len(plan.partitions) < 2:
        return ""
    over = [(ms - p.cost_ms, k) for k, (p, ms) in enumerate(zip(plan.partitions, part_ms)) if p.cost_ms is not None]
    if not over or max(over)[0] <= 0:
        return ""
    excess, k = max(over)
    p = plan.partitions[k]
    return (f" (in those runs partition {k} on {p.backend}, {len(p.nodes)} node(s), took {part_ms[k]:.3f} ms, "
            f"{excess:.3f} ms over its price of {p.cost_ms:.3f} ms: the most over of the {len(part_ms)})")

