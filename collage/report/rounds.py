"""How steady the plan's measured lead is, round by round.

The tune times the plan beside every single backend in interleaved rounds (collage.tuner.checks): each round
runs every runner for a block of calls in turn; report.json's ``verification`` keeps each runner's block median
per round. ``plan_ms`` and ``baselines`` are medians paired round by round; this line says in how many rounds the
plan was ahead of the best other single backend, and by how much at least and at most, which the medians alone
do not: a lead held in every round, or a near tie that the machine's moves turn either way.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collage.report.model import Report, as_report


@dataclass(frozen=True)
class Lead:
    """The plan against the best other single backend, round by round: ``other`` that backend, ``wins`` the rounds
    the plan was faster in out of ``rounds``, ``low``/``high`` the least and greatest per-round ``other / plan``;
    ``plan`` the plan's runner (``"plan"``, or a backend's name where the plan is that backend alone)."""

    plan: str
    other: str
    wins: int
    rounds: int
    low: float
    high: float

    @property
    def near_tie(self) -> bool:
        """Ahead in a quarter to three quarters of several rounds: the machine's moves decide which is faster."""
        return self.rounds > 1 and self.rounds / 4 <= self.wins <= 3 * self.rounds / 4


def lead(report: Report | Mapping[str, Any] | None) -> Lead | None:
    """The plan's :class:`Lead` from report.json's ``verification`` rounds; None where the rounds are not recorded
    or no other single backend ran in them (a baseline taken from the cost DB did not)."""
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
    return Lead(v.plan, other, sum(q > 1 for q in pairs), len(pairs), min(pairs), max(pairs))


def rounds_line(report: Report | Mapping[str, Any] | None) -> str | None:
    """How steady the plan's lead was, round by round (:func:`lead`), in words; None where it is not recorded.
    A lead held in some rounds only is a near tie: the machine's speed moves by more than the two differ
    (results/measurement/machine-level-seconds.md)."""
    got = lead(report)
    if got is None:
        return None
    other, n, wins = got.other, got.rounds, got.wins
    who = "the plan" if got.plan == "plan" or got.plan.startswith("whole:") else f"{got.plan} (the plan)"
    if n == 1:
        return (f"one interleaved round only (the budget left no time for more): {other}, the best other single "
                f"backend, / plan {got.low:.2f}x in it; how steady a lead is shows over several rounds")
    line = (f"round by round: {who} was faster than {other}, the best other single backend, in {wins} of {n} "
            f"interleaved rounds; {other} / plan per round {got.low:.2f}-{got.high:.2f}x")
    if 0 < wins < n:
        line += (": " + ("a near tie, " if got.near_tie else "") + "not ahead in every round (the machine's speed "
                 "moved by more than the two differ; the medians are paired round by round)")
    return line
