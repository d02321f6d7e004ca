"""What fits what is left of the tune's clock at each step (``--budget``; without one, everything fits): the
seconds left for measuring candidates once the steps after measuring are reserved for, and the rounds,
attempts and trials of the later steps."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.tuner.context import JobContext
    from collage.tuner.records import Baselines

#: the share of the estimated time of the steps after measuring that is kept for them (collage.tuner.clock)
RESERVE_SHARE = 0.6


def budget_left(ctx: JobContext, whole: Mapping[Any, Any] | None = None, whole_s: float = 0.0) -> float | None:
    """Seconds left for measuring candidates (None: no budget): what is left of the whole tune's clock
    (``--budget``: loading, the whole models, the switch costs and a TVM tuning budget's time are spent from
    it) less the reserve for the steps after measuring (:func:`reserve_s`; ``whole``: the whole models'
    measured costs, measured in ``whole_s`` seconds)."""
    left = ctx.clock.left()
    if left is None:
        return None
    # a candidate started before the cut runs to its end (a resnet50 range: seconds): one compile less; under
    # a second is none (the local executor measures a first candidate before it looks at the clock)
    avail = left - reserve_s(ctx, whole, left, whole_s) - (compile_s(whole, whole_s) if whole else 0.0)
    return avail if avail >= 1.0 else 0.0


def whole_costs_ms(ctx: JobContext, whole: Mapping[Any, Any] | None) -> list[float]:
    """The fp32 backends' measured whole-model ms in ``whole`` (a measure_candidates result)."""
    low = ctx.precision.low
    return [c.median_ms for (nodes, b), c in (whole or {}).items() if c.ok and b not in low]


def reserve_s(ctx: JobContext, whole: Mapping[Any, Any] | None, left: float, whole_s: float = 0.0) -> float:
    """Seconds kept for the steps after measuring (collage.tuner.clock.after_measuring_s): with full rounds
    and attempts where that is at most half of ``left``, else with one attempt and 3 rounds (those steps
    then cut their rounds to what is left). A compile is the whole models' measured time each, or an
    estimate from the model's size."""
    from collage.tuner.clock import VERIFY_LEAST, after_measuring_s

    whole_ms = whole_costs_ms(ctx, whole)
    backends = len(ctx.names)
    if whole_ms and whole_s > 0:
        one = compile_s(whole or {}, whole_s)
    else:
        gflops, weight_mb = ctx.model_size()
        one, whole_ms = 1.0 + 0.1 * weight_mb, [1e3 * gflops / 5.0] * backends
    full = after_measuring_s(one, whole_ms, backends=backends)
    if full > left / 2:
        full = after_measuring_s(one, whole_ms, backends=backends, attempts=1, rounds=VERIFY_LEAST)
    # the estimate came out about twice what those steps took in short-budget tunes (each step then cuts its
    # rounds to what is left): results/budget/tune-time-history.md
    return RESERVE_SHARE * full


def compile_s(whole: Mapping[Any, Any], whole_s: float) -> float:
    """Seconds to compile one artifact of the model: the whole models' mean measured compile, plus 0.2 s
    of export (else the whole models' measuring time ``whole_s`` each, its worker's start-up included)."""
    times = [c.compile_s for c in whole.values() if c.ok and c.compile_s]
    return sum(times) / len(times) + 0.2 if times else whole_s / max(1, len(whole))


def rounds_for(ctx: JobContext, base: Baselines, share: float, artifacts: int = 1, least: int = 1) -> int:
    """Interleaved rounds (at most VERIFY_ROUNDS, at least ``least``) of a plan beside the baselines that fit
    ``share`` of what is left of the budget after compiling ``artifacts`` per backend (a compile: the whole
    models' measured time each)."""
    from collage.tuner.clock import WARMUP_S, round_s
    from collage.tuner.checks import VERIFY_ROUNDS

    singles = list(base.whole_ms.values())
    per = round_s(singles) + round_s([max(singles, default=0.0)])
    fixed = artifacts * len(ctx.names) * base.compile_s + WARMUP_S * (1 + len(singles))
    return ctx.clock.rounds(VERIFY_ROUNDS, per, fixed, share, least)


def charges_fit(ctx: JobContext, base: Baselines) -> bool:
    """Whether the partition charges' two artifacts a backend, warmed up and timed, fit what is left of the
    budget once the verification, numerics and export are kept for (always without a budget)."""
    left = ctx.clock.left()
    if left is None:
        return True
    from collage.tuner.clock import WARMUP_S, round_s

    timed = 2 * round_s([max(base.whole_ms.values(), default=0.0)])
    need = len(ctx.names) * (2 * base.compile_s + 2 * WARMUP_S + timed)
    return need <= left - (3 * base.compile_s + 2.0)


def attempts_for(ctx: JobContext, base: Baselines) -> int:
    """The search's plan attempts (at most 3) whose artifact and rounds fit half of what is left."""
    left = ctx.clock.left()
    if left is None:
        return 3
    from collage.tuner.clock import round_s

    singles = list(base.whole_ms.values())
    one = base.compile_s + 3 * (round_s(singles) + round_s(singles[:1]))
    return max(1, min(3, int((left - (3 * base.compile_s + 2.0)) / max(one, 1e-3))))


def trials_for(ctx: JobContext, base: Baselines, trials: int) -> int:
    """Refinement trials (at most ``trials``) that fit half of what is left of the budget, each an artifact
    and 3 rounds, with the re-verification of a faster plan kept (``trials`` without a budget)."""
    left = ctx.clock.left()
    if left is None:
        return trials
    from collage.tuner.clock import round_s

    one = base.compile_s + 3 * round_s([max(base.whole_ms.values(), default=0.0)])
    return max(0, min(trials, int((left / 2 - base.compile_s) / max(one, 1e-3))))
