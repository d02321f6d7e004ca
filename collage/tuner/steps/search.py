"""Step 5 of a tune: the search with measured partition charges (level, cost per cut), corrected where the
stitched plan says so (:mod:`collage.tuner.stitching`). Each search attempt's precision outcome is kept
beside its plan, and the plan kept takes its own."""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from collage.tuner.records import Baselines, Measured, Searched
from collage.tuner.steps import budget

if TYPE_CHECKING:
    from collage.plan import Plan
    from collage.tuner.context import JobContext


def search(ctx: JobContext, measured: Measured, base: Baselines) -> Searched:
    """The searched plan (module docstring), with what the report says of it."""
    from collage.tuner import stitching
    from collage.tuner.stitching import Stitching, fill_boundaries, whole_if_one_backend

    graph, prec, opts = ctx.graph, ctx.precision, ctx.options
    priced = replay_priced(ctx, base, partition_charges(ctx, measured, base))
    charges, transition = priced.charges, priced.transition
    calibrated = {b: c.to_dict() for b, c in charges.items()}
    found: list[Plan] = []
    outcomes: dict[tuple, Any] = {}  # what each plan's search left for the report (precision rounds, notes)

    def do_search(charged: Mapping[Any, float]) -> Plan:
        plan, outcome = prec.search(charged, transition)
        plan, outcome = whole_if_one_backend(graph, plan, charged, prec, outcome)
        found.append(fill_boundaries(graph, plan))
        outcomes[plan.parts()] = outcome
        return found[-1]

    t0 = time.perf_counter()
    stitch = Stitching(ctx.feeds, ctx.work, opts.target, ctx.backend_options, opts.progress,
                       budget.rounds_for(ctx, base, share=0.2))
    checked = stitching.search_checked(graph, measured.costs, charges, do_search, stitch, base.best_single_ms,
                                         attempts=budget.attempts_for(ctx, base),
                                         singles={name: (lambda c=c: c.run(ctx.feeds))
                                                  for name, c in base.singles.items()})
    plan, single_ms = checked.plan, checked.single_ms
    if single_ms is None:
        # a plan priced from its parts (or no single backend timed beside it: none covers the model alone):
        # the single backends priced alike, level x their worker cost
        single_ms = min((ms for b in [*base.singles, *base.from_db]
                         if (ms := whole_prediction(ctx, charges, measured, b)) is not None), default=None)
    # what the cost DB's contents alone give: the first attempt, over the candidate costs with the stored
    # partition charges (nothing of this run's end-to-end timings), so two tunes on the same DB
    # contents derive the same plan. Under an accuracy budget the search also rests on errors of stitched
    # plans measured in the run, so there is none.
    from_db = None if prec.low else found[0]
    search_s = time.perf_counter() - t0
    ctx.say("search: %s (%d attempt(s), %.2f s)", plan.describe(), checked.attempts, search_s)
    return Searched(plan, checked.charged, charges, calibrated, checked.attempts, search_s,
                    checked.searched_for or plan, single_ms, from_db, outcomes[plan.parts()])


def partition_charges(ctx: JobContext, measured: Measured, base: Baselines) -> dict[str, Any]:
    """Each backend's measured ``PartitionCharge`` (collage.tuner.stitching), where they fit the budget;
    else each piece priced as timed alone."""
    from collage.tuner import stitching
    from collage.tuner.stitching import PartitionCharge, Stitching

    if not budget.charges_fit(ctx, base):
        ctx.say("time: partition charges not measured (%.0f s left of the budget): each piece priced as timed alone",
                ctx.clock.left() or 0.0)
        return {b: PartitionCharge() for b in ctx.names}
    opts, graph = ctx.options, ctx.graph
    stitch = Stitching(ctx.feeds, ctx.work, opts.target, ctx.backend_options, opts.progress,
                       budget.rounds_for(ctx, base, share=0.25, artifacts=2))
    return stitching.calibrate_partition_charges(graph, measured.costs, base.transition, ctx.names, stitch,
                                                   whole_costs={b: measured.whole(len(graph), b) for b in ctx.names},
                                                   db=ctx.db)


def replay_priced(ctx: JobContext, base: Baselines, charges: dict[str, Any]) -> Any:
    """The charges and transition model priced for a plan replayed from CUDA graphs on target cuda
    (collage.tuner.replay: capturable backends' in-graph figures); as they are on any other target. Figures missing
    from the cost DB are measured only in a tune without a time budget (a budgeted one prices with what is stored)."""
    from collage.measure.device_transitions import graph_figures
    from collage.tuner import replay

    refusals = {b: "not compiled in this tune" for b in ctx.names} | replay.capture_refusals(base.singles)
    by_name = {b.name: b for b in ctx.backends}
    return replay.priced_for_target(ctx.options.target, charges, base.transition, refusals,
                                    lambda names: graph_figures([by_name[n] for n in sorted(names)], ctx.db,
                                                                ctx.backend_options,
                                                                measure_missing=not ctx.clock.budgeted))


def whole_prediction(ctx: JobContext, charges: Mapping[str, Any], measured: Measured, name: str) -> float | None:
    """The predicted ms of ``name`` on the whole model: its measured cost at that backend's level."""
    from collage.tuner.stitching import PartitionCharge

    ms = measured.whole(len(ctx.graph), name)
    return None if ms is None else charges.get(name, PartitionCharge()).level * ms
