"""Step 3 of a tune: the candidates' measured costs (cached in the cost DB), within what is left of the budget
once the later steps are reserved for (:mod:`collage.tuner.steps.budget`), every backend's whole model first
(:func:`measure_whole_first`). Under a budget with ``measure_order="guided"`` (``"auto"``, the default), what
can change the plan first (:func:`measure_guided`). With a TVM tuning budget, the vendor candidates first
(those on the nodes of a TVM candidate small enough to tune before the rest, within half the budget), then TVM
tuning where it can change the plan (:func:`tune_tvm`), then the tuned TVM candidates; the other TVM candidates
are not measured (untuned, they cannot win)."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from collage.errors import CollageError
from collage.report.coverage import estimates_line, measured_line, measurement_coverage
from collage.tuner.records import Candidates, Measured
from collage.tuner.steps import budget

if TYPE_CHECKING:
    from collage.graph.ir import Graph
    from collage.search.candidates import Candidate
    from collage.tuner.context import JobContext

#: single backends slower than this factor x the fastest (by their measured whole-model cost) are not
#: re-run in the interleaved verification
SLOW_BASELINE_FACTOR = 5.0

Measure = Callable[[Sequence[tuple[tuple[int, ...], str]], "float | None"], Any]


def measure(ctx: JobContext, found: Candidates) -> Measured:
    """The measured costs of ``found``'s candidates (module docstring)."""
    cands, budget_s = found.cands, ctx.options.budget_s
    tvm_run = guided = None
    whole_s = 0.0
    if ctx.options.order() == "guided" and ctx.options.tvm_budget_s is None and not ctx.precision.low:
        raw, guided = measure_guided(ctx, cands)
    else:
        measure_fn = measurer(ctx)
        if ctx.options.tvm_budget_s is not None:
            cands, tvm_run = measure_with_tvm_budget(ctx, measure_fn, cands)
        raw, whole_s = measure_whole_first(ctx, measure_fn, cands)
    coverage = measurement_coverage(raw, [(c.nodes, c.backend) for c in cands], budget_s)
    if guided is not None:
        coverage["estimates"] = guided.report()
    ctx.say("%s", measured_line(coverage))
    if guided is not None:
        ctx.say("%s", estimates_line(coverage["estimates"]))
    if budget_s is not None and coverage["distinct"] and not coverage["with_cost"]:
        raise CollageError(f"the {budget_s:.0f} s budget ran out before any candidate was measured (loading and "
                           f"setting up took {time.monotonic() - ctx.t_start:.0f} s of it); give a longer --budget")
    costs: dict[Any, float] = {}
    failures = 0
    for c in cands:
        cost = raw.get((c.nodes, c.backend))
        if cost is None:
            continue
        if cost.ok:
            costs[c] = cost.median_ms
        else:
            failures += 1
    failed = failed_everywhere(ctx.graph, cands, raw)
    if failed:
        raise CollageError(failed)
    return Measured(raw, costs, failures, coverage, tvm_run, whole_s)


def measurer(ctx: JobContext) -> Measure:
    """``measure(items, within_s)``: ``measure_candidates`` on this tune's graph, DB, executor and options."""
    from collage.measure.schedule import measure_candidates

    def measure(items: Sequence[tuple[tuple[int, ...], str]], within_s: float | None) -> Any:
        # the whole model on each backend alone (measure_whole_first) counts backends, not candidates
        whole = bool(items) and all(len(nodes) == len(ctx.graph) for nodes, _ in items)
        label = {"what": "the whole model on each backend", "unit": "backend(s)"} if whole else {}
        return measure_candidates(ctx.graph, items, db=ctx.db, budget_s=within_s, progress=ctx.options.progress,
                                  executor=ctx.options.cluster, backend_options=ctx.backend_options, **label)

    return measure


def failed_everywhere(graph: Graph, cands: Sequence[Candidate], raw: Mapping[Any, Any]) -> str | None:
    """The message for a node that every candidate measured on it failed on (no plan can cover it), naming the
    node and one of the failures; None when each node has a cost or an unmeasured candidate."""
    covered, tried = 0, 0
    for c in cands:
        cost = raw.get((c.nodes, c.backend))
        mask = graph.mask(c.nodes)
        covered |= mask if cost is None or cost.ok else 0
        tried |= mask if cost is not None and not cost.ok else 0
    lost = tried & ~covered
    if not lost:
        return None
    i = (lost & -lost).bit_length() - 1
    # the smallest failed candidate on the node says most about why (the whole model's names every node)
    c = min((c for c in cands if i in c.nodes and (cost := raw.get((c.nodes, c.backend))) is not None
             and not cost.ok), key=lambda c: len(c.nodes))
    return (f"{graph.name}: every measurement of {graph.node_label(i)} failed, so no plan can run it; on {c.backend} "
            f"({nodes_text(c.nodes)}): {raw[(c.nodes, c.backend)].error}")


def nodes_text(nodes: Sequence[int]) -> str:
    """``node #4``, ``nodes #3-#9`` (consecutive) or ``12 nodes, #3 to #40``: a candidate's nodes in a message."""
    if len(nodes) == 1:
        return f"node #{nodes[0]}"
    lo, hi = min(nodes), max(nodes)
    return f"nodes #{lo}-#{hi}" if hi - lo + 1 == len(nodes) else f"{len(nodes)} nodes, #{lo} to #{hi}"


def measure_whole_first(ctx: JobContext, measure: Measure, cands: Sequence[Candidate]) -> tuple[Any, float]:
    """Every backend's whole model first, unbudgeted but inside the tune's clock (the baselines, the partition
    charges' levels and a whole-model plan's prediction need its worker cost: a budget that setting up or the
    precision prescreen used up would otherwise leave a plan with nothing to predict it from), then the switch
    costs where they fit (:func:`measure_switches`), then all candidates within what is left for them
    (:func:`collage.tuner.steps.budget.budget_left`). TVM's whole model is left to the budget (untuned it
    cannot win; under a TVM tuning budget it would tune every workload). Returns the measured table and the
    seconds the whole models took (0: not measured first, without a budget)."""
    whole = [(c.nodes, c.backend) for c in whole_models(ctx, cands)]
    first, whole_s = (measure_whole(ctx, measure, whole) if whole and ctx.options.budget_s is not None
                      else (None, 0.0))
    raw = measure([(c.nodes, c.backend) for c in cands], budget.budget_left(ctx, first, whole_s))
    return count_first(raw, first), whole_s


def whole_models(ctx: JobContext, cands: Sequence[Candidate]) -> list[Candidate]:
    """The candidates that are a whole model, TVM's left out (untuned it cannot win: it is left to the budget)."""
    return [c for c in cands if len(c.nodes) == len(ctx.graph) and c.backend != "tvm"]


def measure_whole(ctx: JobContext, measure: Callable[[Any, float | None], Any], whole: Any) -> tuple[Any, float]:
    """The whole models measured unbudgeted, then the switch costs where they fit (:func:`measure_switches`):
    their table and the seconds they took."""
    t0 = time.monotonic()
    first = measure(whole, None)
    whole_s = time.monotonic() - t0
    ctx.say("time: whole models %.1f s of %.0f s", whole_s, ctx.clock.total_s)
    measure_switches(ctx, first, whole_s)
    return first, whole_s


def count_first(raw: Any, first: Any) -> Any:
    """``raw`` (a measuring of every candidate after ``first``, the whole models') with the whole models counted
    as measured now, not reused: the second call found them in the DB."""
    if first is not None and getattr(first, "measured", 0):
        raw.measured += first.measured
        raw.reused -= first.measured
    return raw


def measure_switches(ctx: JobContext, whole: Mapping[Any, Any], whole_s: float) -> None:
    """Under --budget, right after the whole models: the switch costs on the model's own pieces
    (collage.measure.transitions.model_transition_model, stored in the DB for the baselines step), where
    their estimated time fits half of what is left for the candidates; else the baselines step prices the
    switches from what the DB holds."""
    from collage.measure.transitions import MODEL_PIECES, model_transition_model

    fp32 = {b: c.median_ms for (nodes, b), c in whole.items() if c.ok and b not in ctx.precision.low}
    if len(fp32) < 2:
        return
    estimate = 4 * budget.compile_s(whole, whole_s) + 4 * 2.0 * len(fp32) + MODEL_PIECES * 0.5
    left = budget.budget_left(ctx, whole, whole_s) or 0.0
    if estimate > left / 2:
        ctx.say("time: switch costs not measured (about %.0f s; %.0f s left for measuring): the cost DB's are used "
                "where it has them", estimate, left)
        return
    t0 = time.monotonic()
    model_transition_model(ctx.graph, ctx.names, ctx.db, whole_ms=fp32, slow_factor=SLOW_BASELINE_FACTOR,
                           backend_options=ctx.backend_options)
    ctx.say("time: switch costs %.1f s of %.0f s", time.monotonic() - t0, ctx.clock.total_s)


def measure_guided(ctx: JobContext, cands: Sequence[Candidate]) -> tuple[Any, Any]:
    """Under a budget: measure what can change the plan first, the learned cost model pricing the rest while it
    guides (collage.tuner.guided); every cost the later search uses is measured. Returns the measured table and
    the guide (its report is coverage's ``estimates``)."""
    from collage.measure.executor import get_executor
    from collage.measure.schedule import measure_candidates
    from collage.measure.transitions import transition_model
    from collage.search import solve
    from collage.tuner.clock import baselines_s
    from collage.tuner.guided import GuidedMeasuring, GuidedSettings, warm_start

    left = budget.budget_left(ctx)
    pairs = len(ctx.names) * (len(ctx.names) - 1) // 2
    # a missing pair's small-piece fit takes seconds: measured where about 15 s a pair fits half of what is
    # left for measuring, else those switches cost 0 (the baselines step's warning says so, once)
    transition = transition_model(ctx.names, ctx.db, measure_missing=left is None or 15.0 * pairs <= left / 2,
                                  backend_options=ctx.backend_options, quiet=True)
    runner = get_executor(ctx.options.cluster)  # one set of workers for every round

    def measure(batch: Sequence[Candidate], left: float | None) -> Any:
        # the whole models (the first batch) get the progress counter enumeration order gives them
        whole = bool(batch) and all(len(c.nodes) == len(ctx.graph) for c in batch)
        label = {"what": "the whole model on each backend", "unit": "backend(s)"} if whole else {}
        return measure_candidates(ctx.graph, [(c.nodes, c.backend) for c in batch], db=ctx.db,
                                  budget_s=left, progress=ctx.options.progress and whole, executor=runner,
                                  backend_options=ctx.backend_options, **label)

    # every fp32 backend's whole model first, as in enumeration order, so that the reserve for the later steps
    # and the switch costs are judged from their measured costs (an estimate from the model's size kept 13 of a
    # tiny model's 20 s budget unused); guided's own first batch then finds them in the DB
    whole = whole_models(ctx, cands)
    try:
        first, whole_s = measure_whole(ctx, measure, whole) if whole else (None, 0.0)
        # at least what the whole models take (estimated): the baselines need them, even past the budget
        deadline = time.monotonic() + max(budget.budget_left(ctx, first, whole_s) or 0.0, 0.0 if first is not None
                                          else baselines_s(*ctx.model_size(), len(ctx.names)))
        ctx.say("guided measuring: %d candidates, %.0f s left of the budget", len(cands), deadline - time.monotonic())
        if first is not None and deadline - time.monotonic() < 1.0:
            # the budget is spent: the whole models are what there is, every other key cut (as in enumeration order)
            return count_first(measure(list(cands), 0.0), first), None
        shipped = warm_start(ctx.say)
        guided = GuidedMeasuring(ctx.graph, cands, ctx.backends, ctx.db,
                                 GuidedSettings(measure=measure, deadline=deadline, say=ctx.say, seed=ctx.options.seed,
                                                search=lambda costs: solve(ctx.graph, costs, transition),
                                                shipped=shipped))
        return guided.run(), guided
    finally:
        if runner is not ctx.options.cluster:
            runner.close()


def measure_with_tvm_budget(ctx: JobContext, measure: Measure,
                            cands: Sequence[Candidate]) -> tuple[list[Candidate], Any]:
    """Under a TVM tuning budget: the vendor candidates the ranking needs first (within half the budget), then
    every vendor candidate, then TVM tuning (:func:`tune_tvm`). Returns the candidates left to measure (the
    vendor ones and the tuned TVM ones) and the tuning run."""
    from collage.tuner.tvm_budget import vendor_first

    small = vendor_first(cands)  # what the ranking needs: first, within half the budget
    if small:
        left = budget.budget_left(ctx)
        measure(small, None if left is None else left / 2)
    first = measure([(c.nodes, c.backend) for c in cands if c.backend != "tvm"], budget.budget_left(ctx))
    tuned, run = tune_tvm(ctx, [c for c in cands if c.backend == "tvm"], first)
    return [c for c in cands if c.backend != "tvm" or c in tuned], run


def tune_tvm(ctx: JobContext, tvm_cands: Sequence[Candidate], vendor_raw: Any) -> tuple[set[Candidate], Any]:
    """The TVM tuning budget (collage.tuner.tvm_budget): rank the TVM candidates by their vendor cost over a
    roofline estimate, tune them in that order into the shared tuning database; the candidates to measure, and
    the tuning run."""
    from collage.measure.db import key_for
    from collage.tuner.tvm_budget import machine_peak, rank, tune_within_budget

    graph = ctx.graph
    tvm = next(b for b in ctx.backends if b.name == "tvm")
    vendor_costs = {k: c.median_ms for k, c in vendor_raw.items() if c.ok}
    ranked = rank(graph, tvm_cands, vendor_costs, machine_peak())
    ctx.say("tvm tuning: %d candidate(s) ranked, budget %.0f s, %d trials per workload, database %s",
            len(ranked), ctx.options.tvm_budget_s, tvm.trials, tvm.tuning_db)

    def already_costed(c: Candidate) -> bool:
        return any(cost.ok for cost in ctx.db.get_many([key_for(tvm, graph.fingerprint(c.nodes))]).values())

    run = tune_within_budget(graph, tvm, ranked, float(ctx.options.tvm_budget_s or 0.0),
                             already_costed=already_costed, say=ctx.say)
    ctx.say("tvm tuning: %s; %d new workload(s), %d new trials, %.1f s", run.stopped, run.new_workloads,
            run.new_trials, run.spent_s)
    # identical blocks share a fingerprint (and their tuning): every TVM candidate of a tuned fingerprint
    fps = {graph.fingerprint(c.nodes) for c in run.selected}
    return {c for c in tvm_cands if graph.fingerprint(c.nodes) in fps}, run
