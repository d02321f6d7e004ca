"""How steady the plan's measured lead is, round by round.

The tune times the plan beside every single backend in interleaved rounds (collage.tuner.checks): each round
runs every runner for a block of calls in turn; report.json's ``verification`` keeps each runner's block median
per round. ``plan_ms`` and ``baselines`` are medians paired round by round; this line says in how many rounds the
plan was ahead of the best other single backend, and by how much at least and at most, which the medians alone
do not: a lead held in every round, or a near tie that the machine's moves turn either way.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collage.report.model import Report, as_report


def rounds_line(report: Report | Mapping[str, Any] | None) -> str | None:
    """How steady the plan's lead was, round by round: against the best other single backend timed in the same
    interleaved rounds (report.json ``verification``), the rounds the plan was faster in and the range of the
    per-round ratio; None where the rounds are not recorded. A lead held in some rounds only is a near tie: the
    machine's speed moves by more than the two differ (results/measurement/machine-level-seconds.md)."""
    report = as_report(report)
    v = report.verification
    if v is None or not v.plan or v.plan not in v.round_ms:
        return None
    base = {k: ms for k, ms in report.baseline_ms().items() if ms is not None and k != v.plan and k in v.round_ms}
    if not base:
        return None
    other = min(base, key=base.__getitem__)
    pairs = [(o / p) for p, o in zip(v.round_ms[v.plan], v.round_ms[other]) if p > 0]
    if not pairs:
        return None
    n, wins = len(pairs), sum(q > 1 for q in pairs)
    who = "the plan" if v.plan == "plan" or v.plan.startswith("whole:") else f"{v.plan} (the plan)"
    if n == 1:
        return (f"one interleaved round only (the budget left no time for more): {other}, the best other single "
                f"backend, / plan {pairs[0]:.2f}x in it; how steady a lead is shows over several rounds")
    line = (f"round by round: {who} was faster than {other}, the best other single backend, in {wins} of {n} "
            f"interleaved rounds; {other} / plan per round {min(pairs):.2f}-{max(pairs):.2f}x")
    if 0 < wins < n:
        line += (": " + ("a near tie, " if n / 4 <= wins <= 3 * n / 4 else "") + "not ahead in every round (the "
                 "machine's speed moved by more than the two differ; the medians are paired round by round)")
    return line
