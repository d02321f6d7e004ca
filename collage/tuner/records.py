"""What each step of a tune returns (:mod:`collage.tuner.steps`): plain records, made once and never changed
(a later step that changes what an earlier one found returns a new record). report.json is assembled from them
at the end, in one place (:func:`collage.tuner.assemble.assemble_report`).

The steps, in order, and their records: candidates -> :class:`Candidates`; measuring -> :class:`Measured`;
baselines -> :class:`Baselines`; search -> :class:`Searched`; verification, then never-worse -> :class:`Verified`;
refinement -> :class:`Refined`; numerics -> :class:`FinalCheck`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.plan import Plan
    from collage.search.candidates import Candidate
    from collage.tuner.precision.budgeted import PrecisionOutcome


def _no_outcome() -> PrecisionOutcome:
    from collage.tuner.precision.budgeted import PrecisionOutcome

    return PrecisionOutcome()


@dataclass(frozen=True)
class Candidates:
    """What each backend takes (node -> bool), the candidates in measuring order, and their counts per backend."""

    supports: dict[str, dict[int, bool]]
    cands: list[Candidate]
    counts: dict[str, int]


@dataclass(frozen=True)
class Measured:
    """What the measuring step found: the DB's answer, the candidates with a cost, the count of failures; the
    coverage (report.json ``coverage``, its ``refinement`` still the default), what a TVM tuning budget did (its
    run, or None), and the seconds the whole models took (0: not measured first)."""

    raw: Any
    costs: dict[Any, float]
    failures: int
    coverage: dict[str, Any] = field(default_factory=dict)
    tvm_run: Any = None
    whole_s: float = 0.0

    def whole(self, n: int, backend: str) -> float | None:
        """The whole model's measured median on ``backend``, or None."""
        cost = self.raw.get((tuple(range(n)), backend))
        return cost.median_ms if cost is not None and cost.ok else None


@dataclass(frozen=True)
class Baselines:
    """Single backends on the whole model: compiled (re-run in every interleaved round) or from the DB; and the
    switch costs between backends the search prices (``transition``)."""

    singles: dict[str, Any]
    from_db: dict[str, float]
    whole_ms: dict[str, float]
    best_single_ms: float
    #: seconds one artifact of the model takes to compile (the whole models' measured compile time; the tune's
    #: budget plans its later steps with it)
    compile_s: float = 1.0
    transition: Any = None


@dataclass(frozen=True)
class Searched:
    """The search's plan (priced as it ran where its attempts measured it), the charged costs it was found with,
    the partition charges (as measured: ``calibrated``; as the attempts left them: ``charges``), the attempts,
    the seconds, the plan as the search priced it before it ran (``searched_for``; the plan itself where it did
    not run), the best single backend priced alike (``single_ms``), the plan the cost DB's contents alone give
    (``cost_db_plan``; None under an accuracy budget) and the precision outcome of the plan's own search."""

    plan: Plan
    charged: dict[Any, float]
    charges: dict[str, Any]
    calibrated: dict[str, dict[str, float]]
    attempts: int
    search_s: float
    searched_for: Plan
    single_ms: float | None
    cost_db_plan: Plan | None
    outcome: PrecisionOutcome = field(default_factory=_no_outcome)


@dataclass(frozen=True)
class SearchedRun:
    """The searched plan as the verification measured it: end to end, the best single backend in the same
    rounds, and each partition's median call inside the plan (None: one partition)."""

    measured_ms: float
    best_single_measured_ms: float | None
    part_ms: list[float] | None = None


@dataclass(frozen=True)
class Verified:
    """A plan measured end to end beside the baselines: its artifact (None when not exported) and numbers; the
    precision outcome that holds for it, and the verification's measurement of the searched plan."""

    plan: Plan
    plan_ms: float
    artifact: Any
    timings: dict[str, float]
    baselines: dict[str, float]
    #: a plan of several partitions: each partition's median call inside the plan's timed runs (ms, in order;
    #: the calls of every round pooled)
    part_ms: list[float] | None = None
    outcome: PrecisionOutcome = field(default_factory=_no_outcome)
    searched_run: SearchedRun | None = None
    #: the interleaved rounds behind ``plan_ms`` and ``timings``: each runner's block median (ms) per round, keyed
    #: ``"plan"``, a backend's name (its whole model) or ``"whole:<variant>"`` (report.json ``verification``)
    rounds: Mapping[str, Sequence[float]] = field(default_factory=dict)
    #: the key of ``rounds`` the plan's time is (``"plan"``; a backend where the plan is that backend alone;
    #: ``"whole:<variant>"`` where a lower-precision whole model became the plan; None: not in these rounds)
    plan_key: str | None = None


@dataclass(frozen=True)
class Refined:
    """The plan after the refinement (the verified one where none ran or none was faster), and report.json's
    ``coverage.refinement``."""

    verified: Verified
    refinement: dict[str, Any]


@dataclass(frozen=True)
class FinalCheck:
    """The final plan's loaded artifact and its numerics (report.json ``numerics``), and the precision outcome
    with the final end-to-end error."""

    artifact: Any
    numerics: dict[str, Any] | None
    outcome: PrecisionOutcome = field(default_factory=_no_outcome)


@dataclass(frozen=True)
class TuneRecords:
    """Every step's record of one tune: what report.json is assembled from."""

    candidates: Candidates
    measured: Measured
    searched: Searched
    refined: Refined
    final: Verified
    checked: FinalCheck
