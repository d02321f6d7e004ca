"""Step 7 of a tune (optional): measured Optuna trials around the plan (collage.search.refine); a faster plan is
measured against the baselines again."""
from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.plan import Note, NoteKind
from collage.report.coverage import refinement
from collage.tuner.records import Baselines, Refined, Searched, Verified
from collage.tuner.steps import budget
from collage.tuner.checks import interleaved_rounds, measure_interleaved, paired_medians

if TYPE_CHECKING:
    from collage.plan import Plan
    from collage.tuner.context import JobContext


def refine(ctx: JobContext, verified: Verified, searched: Searched, base: Baselines) -> Refined:
    """The refined plan (``verified`` where no trial ran or none was faster), and report.json's
    ``coverage.refinement`` saying how many trials ran, or why none did."""
    trials, plan = ctx.options.refine_trials, verified.plan
    if trials > 0 and ctx.precision.is_low(plan):
        plan.notes.append(Note(NoteKind.REFINEMENT, "refinement skipped: it does not measure errors, and the "
                               "plan holds lower-precision partitions"))
        return Refined(verified, refinement(trials, 0, plan.notes[-1]))
    if trials > 0 and len(plan.partitions) < 2:
        plan.notes.append(Note(NoteKind.REFINEMENT, "refinement skipped: the plan is one backend on the whole "
                               "model; refinement moves nodes between the partitions of a mixed plan"))
        return Refined(verified, refinement(trials, 0, plan.notes[-1]))
    if trials <= 0:
        return Refined(verified, refinement(trials))
    fit = budget.trials_for(ctx, base, trials)
    if fit < trials:
        plan.notes.append(Note(NoteKind.REFINEMENT, f"refinement cut by the budget: {fit} of {trials} trial(s) "
                               "fitted what was left"))
        ctx.say("%s", plan.notes[-1])
        if fit == 0:
            return Refined(verified, refinement(trials, 0, plan.notes[-1]))
    return run_trials(ctx, verified, searched.charged, base, min(fit, trials))


def run_trials(ctx: JobContext, verified: Verified, charged: Mapping[Any, float], base: Baselines,
               trials: int) -> Refined:
    """``trials`` refinement trials (those that fit the budget); a plan faster than ``verified``'s is verified
    again."""
    from collage.search.refine import RefineOptions
    from collage.search.refine import refine as refine_plan
    from collage.tuner.stitching import fill_boundaries

    graph, plan = ctx.graph, verified.plan
    n = len(graph)
    # the study lives in the cost DB (SQLite or PostgreSQL), so an interrupted refinement resumes
    storage = ctx.db.study_storage()
    study = f"refine-{graph.fingerprint(range(n))}-{'-'.join(ctx.names)}"
    res = refine_plan(graph, plan, charged, lambda p: evaluate(ctx, p),
                      options=RefineOptions(storage, study_name=study, n_trials=trials))
    done = refinement(trials, res.new_trials, f"the study in the cost DB already holds {res.trials} finished trial(s)")
    if res.plan is plan or res.measured_ms >= verified.plan_ms:
        return Refined(verified, done)
    plan = fill_boundaries(graph, res.plan)
    plan.notes.append(Note(NoteKind.REFINED, f"refined by {res.trials} measured trials: {verified.plan_ms:.3f} -> "
                           f"{res.measured_ms:.3f} ms"))
    artifact = ctx.load(ctx.export(plan, ctx.work / "refined"))
    per = interleaved_rounds({"plan": lambda: artifact.run(ctx.feeds),
                              **{k: (lambda c=c: c.run(ctx.feeds)) for k, c in base.singles.items()}})
    timings = paired_medians(per)
    plan_ms = timings.pop("plan")
    return Refined(dataclasses.replace(verified, plan=plan, plan_ms=plan_ms, artifact=artifact, timings=timings,
                                       baselines={**timings, **base.from_db}, part_ms=None, rounds=per,
                                       plan_key="plan"), done)


def evaluate(ctx: JobContext, plan: Plan) -> float:
    """A refinement trial: ``plan`` exported, loaded and measured (3 rounds)."""
    from collage.tuner.stitching import fill_boundaries

    a = ctx.load(ctx.export(fill_boundaries(ctx.graph, plan), Path(tempfile.mkdtemp(dir=ctx.work)) / "p"))
    return measure_interleaved({"p": lambda: a.run(ctx.feeds)}, rounds=3)["p"]
