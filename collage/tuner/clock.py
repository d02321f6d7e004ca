"""The tune's clock: ``--budget`` as the wall-clock limit of the whole tune.

One :class:`Deadline` is made when the tune starts (before the model is loaded). Every step reads what is left
of it; the candidates' measuring gets what is left once the steps after it are reserved for
(:func:`after_measuring_s`: compiling the baselines, the partition charges, the search's attempts, the
verification, numerics and export, estimated from the whole models' measured compile and run times), and the
steps after measuring cut their interleaved rounds and attempts to what is left (:meth:`Deadline.rounds`).
Each step's share is said on the terminal as it ends ("baselines 12 s of 60 s"). Without a budget nothing is
cut and no share is said.

:func:`baselines_s` is the refusal up front: a budget shorter than loading and an estimate (from the model's
FLOPs and weights and the number of backends) of every backend's whole model measured is refused, naming that
least. :func:`least_budget_s` estimates the least a whole tune ends within; a budget under it is warned about.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.measure.contention import ContentionSampler

log = logging.getLogger(__name__)

#: an interleaved round's least time per runner (collage.tuner.checks.measure_interleaved's ``min_time_s``)
ROUND_S = 0.15
#: warm-up per runner before the rounds (``warmup_s``)
WARMUP_S = 0.3
#: what a tune may end over its budget (the budget is met within 10%): the steps aim at the budget less this
SLACK = 0.05
#: the final verification's least interleaved rounds under a budget (reserved for, and taken even where the steps
#: before it ate the reserve): one round compares one block of each runner, and this machine's speed moves up to
#: ~2x between blocks seconds apart (results/measurement/machine-level-seconds.md), so never-worse could keep or
#: drop a plan on one move of it; three, paired round by round, outvote one such move. They cost seconds at most
#: (inception_v2's 4 runners: ~1.2 s more than one), inside the 10% a tune may end over its budget
VERIFY_LEAST = 3


#: where the command line's tune started (``counting_from``): the next Deadline made starts there
_started: list[float] = []


def process_start() -> float:
    """This process's start on the time.monotonic() clock (Linux: /proc/self/stat against /proc/uptime, both
    since boot; elsewhere, or unreadable: now)."""
    from collage.util import CLK_TCK, proc_stat

    now = time.monotonic()
    try:
        fields = proc_stat()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return now
    return now - min(max(age, 0.0), 60.0)  # sanity: an interpreter that starts in over a minute is not measured


@contextmanager
def counting_from(start: float) -> Iterator[None]:
    """The first tune inside starts its budget's clock at ``start`` (``collage tune``: the process's start, so
    that importing the runtimes counts against --budget too)."""
    _started[:] = [start]
    try:
        yield
    finally:
        _started.clear()


def clock_start() -> float:
    """A new Deadline's start: a ``counting_from`` start not yet taken, else now."""
    return _started.pop() if _started else time.monotonic()


@dataclass
class Deadline:
    """The whole tune's clock: ``total_s`` (None: no budget), started at ``start`` (time.monotonic)."""

    total_s: float | None
    start: float = field(default_factory=clock_start)
    #: seconds each step took, in the order they ended
    phases: dict[str, float] = field(default_factory=dict)
    #: other processes' load on the machine, sampled while the steps ran (collage.measure.contention), or None
    others: ContentionSampler | None = None

    @property
    def budgeted(self) -> bool:
        return self.total_s is not None

    def spent(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float | None:
        """Seconds left of the budget, aiming ``SLACK`` under it (None: no budget; never below 0)."""
        if self.total_s is None:
            return None
        return max(0.0, self.total_s * (1 - SLACK) - self.spent())

    @contextmanager
    def phase(self, name: str, say: Callable[..., None]) -> Iterator[None]:
        """Time one step; under a budget say its share when it ends: ``time: baselines 12 s of 60 s (40 s left)``."""
        t0 = time.monotonic()
        if self.others is not None:
            self.others.mark(name)
        try:
            yield
        finally:
            took = time.monotonic() - t0
            self.phases[name] = self.phases.get(name, 0.0) + took
            if self.total_s is not None:
                say("time: %s %.1f s of %.0f s (%.0f s spent, %.0f s left)", name, took, self.total_s,
                    self.spent(), max(0.0, self.total_s - self.spent()))

    def rounds(self, full: int, per_round_s: float, fixed_s: float = 0.0, share: float = 1.0, least: int = 1) -> int:
        """Interleaved rounds of a step that fit ``share`` of what is left, after ``fixed_s`` (compiling,
        warm-up): ``full`` without a budget, at least ``least``."""
        left = self.left()
        if left is None:
            return full
        fit = (left * share - fixed_s) / max(per_round_s, 1e-3)
        return max(least, min(full, math.floor(fit)))

    def report(self) -> dict[str, Any]:
        """report.json's ``time``: the budget, each step's seconds, the whole tune's, and other processes' load
        while they ran (``others``: collage.measure.contention.ContentionSampler.report)."""
        return {"budget_s": self.total_s, "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "total_s": round(self.spent(), 3),
                "others": None if self.others is None else self.others.report()}


def round_s(whole_ms: list[float]) -> float:
    """One interleaved round of runners whose one call takes ``whole_ms`` each (at least 3 calls and
    ``ROUND_S`` a runner)."""
    return sum(max(ROUND_S, 3 * ms / 1e3) for ms in whole_ms)


def after_measuring_s(compile_s: float, whole_ms: list[float], *, backends: int, attempts: int = 3,
                      rounds: int = 7) -> float:
    """Seconds the steps after the candidates' measuring take with ``rounds`` rounds, estimated from one whole
    model's compile (and measuring) time ``compile_s`` and each fp32 backend's whole-model ms: the baselines
    (a compile each, 3 rounds), the partition charges (two artifacts a backend, ``rounds`` rounds each), the
    search's attempts and the verification (an artifact each, the plan beside the baselines for ``rounds``
    rounds), the numerics' reference and the artifact's export."""
    plan_ms = max(whole_ms, default=0.0)
    singles = round_s(whole_ms)
    baselines = len(whole_ms) * (compile_s + WARMUP_S) + 3 * singles
    charges = backends * (2 * compile_s + 2 * WARMUP_S + rounds * 2 * round_s([plan_ms]))
    one_plan = compile_s + WARMUP_S * (1 + len(whole_ms)) + rounds * (singles + round_s([plan_ms]))
    return baselines + charges + (attempts + 1) * one_plan + 2 * compile_s


def baselines_s(gflops: float, weight_mb: float, backends: int) -> float:
    """A conservative estimate of every backend's whole model compiled and measured (the baselines alone): a
    compile 0.3 s + 0.05 s a MB of weights, a worker's start 0.5 s, 20 calls at 50 GFLOP/s, all x 1.5."""
    return 1.5 * backends * (0.3 + 0.05 * weight_mb + 0.5 + 20 * gflops / 50.0)


def least_budget_s(gflops: float, weight_mb: float, backends: int, spent_s: float) -> float:
    """An estimate of the least budget a tune ends within: what loading already took (``spent_s``), each
    backend's whole model compiled and measured, then the least the steps after measuring do (the baselines
    compiled, one plan compiled and verified in ``VERIFY_LEAST`` rounds, the numerics' reference, the export;
    the partition charges and further attempts are skipped when they do not fit), with 20% to spare. A compile:
    1 s + 0.1 s a MB of weights; a call: ``gflops`` at 50 GFLOP/s."""
    compile_s = 1.0 + 0.1 * weight_mb
    call_s = gflops / 50.0
    measured = backends * (compile_s + 1.0 + 20 * call_s)
    after = ((backends + 3) * compile_s + VERIFY_LEAST * round_s([1e3 * call_s] * (backends + 1))
             + WARMUP_S * (backends + 1))
    return 1.2 * (spent_s + measured + after)
