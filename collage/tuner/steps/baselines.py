"""Step 4 of a tune: the single backends' whole-model baselines (every plan is judged against them), and the
switch costs between backends that the search prices."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from collage.tuner.records import Baselines, Measured
from collage.tuner.steps import budget
from collage.tuner.steps.measure import SLOW_BASELINE_FACTOR
from collage.tuner.checks import measure_interleaved

if TYPE_CHECKING:
    from collage.tuner.context import JobContext


def baselines(ctx: JobContext, supports: Mapping[str, Mapping[int, bool]], measured: Measured) -> Baselines:
    """The single backends' whole-model baselines. A backend whose whole-model cost is already known to be far
    behind (untuned TVM: 30-600x) is not re-run in the interleaved rounds; its measured cost from the DB stands
    as its baseline. Lower precision is no baseline (it is not fp32-faithful), nor does it make the fp32
    baselines "slow"."""
    n, low = len(ctx.graph), ctx.precision.low
    whole_ms = {b.name: ms for b in ctx.backends if (ms := measured.whole(n, b.name)) is not None}
    fastest = min((v for k, v in whole_ms.items() if k not in low), default=None)
    fp32_whole = {k: v for k, v in whole_ms.items() if k not in low and all(supports[k].values())}
    transition = switch_costs(ctx, fp32_whole)
    singles, from_db = {}, {}
    for b in ctx.backends:
        if not all(supports[b.name].values()) or b.name in low:
            continue
        if b.name == "tvm" and ctx.options.tvm_budget_s is not None and b.name not in whole_ms:
            continue  # the whole model on TVM would tune every workload: no baseline within the TVM budget
        failed = measured.raw.get((tuple(range(n)), b.name))
        if failed is not None and not failed.ok:  # it takes every node, yet failed on the whole model
            ctx.say("%s: no baseline: the whole model failed on it when measured (%s); its pieces stay "
                    "candidates", b.name, failed.error)
            continue
        if fastest is not None and whole_ms.get(b.name, 0.0) > SLOW_BASELINE_FACTOR * fastest:
            from_db[b.name] = whole_ms[b.name]
            continue
        singles[b.name] = b.compile(ctx.graph.model)
    from collage.tuner.clock import WARMUP_S, round_s

    rounds = ctx.clock.rounds(3, round_s([whole_ms.get(k, 0.0) for k in singles]), WARMUP_S * len(singles),
                              share=0.1)
    first = measure_interleaved({k: (lambda c=c: c.run(ctx.feeds)) for k, c in singles.items()}, rounds=rounds)
    whole = {k: c for k, c in measured.raw.items() if len(k[0]) == n and c.ok}
    return Baselines(singles, from_db, whole_ms, min(first.values(), default=float("inf")),
                     budget.compile_s(whole, measured.whole_s) if whole else 1.0, transition)


def switch_costs(ctx: JobContext, fp32_whole: Mapping[str, float]) -> Any:
    """The switch between runtimes priced on this model's own pieces, per direction (fp32 backends near the
    fastest, ``fp32_whole``: their whole-model ms); the other pairs by the small-piece fit, measured only for them.
    Under a budget, only what the measuring step measured where it fitted (or the DB held)."""
    from collage.measure.transitions import model_transition_model, transition_model

    if ctx.clock.budgeted:  # measured in the measuring step where they fitted (measure_switches)
        return transition_model(ctx.names, ctx.db, measure_missing=False, backend_options=ctx.backend_options,
                                graph_fingerprint=ctx.graph.fingerprint(range(len(ctx.graph))))
    if len(fp32_whole) > 1:
        return model_transition_model(ctx.graph, ctx.names, ctx.db, whole_ms=dict(fp32_whole),
                                      slow_factor=SLOW_BASELINE_FACTOR, backend_options=ctx.backend_options)
    return transition_model(ctx.names, ctx.db, backend_options=ctx.backend_options)
