"""report.json as records: :class:`Report` and the records it holds, what ``collage report`` reads.

The tuner writes report.json (``collage.tuner.job.TuneJob.report``, ``collage.tuner.export``); its contract is
the JSON Schema ``report.schema.json`` beside this module (:func:`schema`), checked against real tunes by the
tests, and these records are its reader: :meth:`Report.from_dict` reads today's report.json and older ones
(without ``version``, with keys missing: the report shows what is there), leniently (a value of another type
reads as unknown, :mod:`.records`); :meth:`Report.to_dict` gives the same JSON back, ``version`` first.

Every figure in ms is a median of timed calls. A plan as the search saw it (``searched_plan``, ``cost_db_plan``)
is a :class:`PlanSummary`; the final plan's partitions are in ``manifest.json``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from collage.errors import ArtifactError
from collage.report.records import Record

#: report.json's format: 1 is the first with a ``version`` (older files have the same form and read as 1)
REPORT_VERSION = 1
SCHEMA_FILE = "report.schema.json"


def schema() -> dict[str, Any]:
    """report.json's JSON Schema (``report.schema.json``, shipped with the package)."""
    return json.loads(resources.files("collage.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------- what was measured
@dataclass(frozen=True)
class BaselineFailure(Record):
    """A baseline that gave no plain number: ``{"error": "..."}``, or a timing object (``ms``/``median_ms``)."""

    error: str | None = None
    ms: float | None = None
    median_ms: float | None = None

    @property
    def value_ms(self) -> float | None:
        return self.ms if self.ms is not None else self.median_ms


@dataclass(frozen=True)
class OutputError(Record):
    """One output's error under an accuracy budget (``numerics.per_output``; elsewhere a plain number)."""

    max_abs_err: float | None = None
    rel: float | str | None = None
    cos: float | str | None = None
    finite: bool | None = None


@dataclass(frozen=True)
class Numerics(Record):
    """The final artifact's outputs against the ONNX Runtime fp32 reference. ``tolerance``: a number, ``{"atol",
    "rtol"}`` or ``{"accuracy": budget text}``; ``ok``: the verdict (else ``max_abs_err <= tolerance``). Under an
    accuracy budget, the end-to-end error on the calibration inputs too (``rel``, ``cos``, ``finite``, ``budget``,
    ``within_budget``)."""

    max_abs_err: float | None = None
    tolerance: float | Mapping[str, Any] | None = None
    per_output: Mapping[str, float | OutputError | None] = field(default_factory=dict)
    ok: bool | None = None
    rel: float | str | None = None
    cos: float | str | None = None
    finite: bool | None = None
    budget: str | None = None
    within_budget: bool | None = None


@dataclass(frozen=True)
class PartitionCharge(Record):
    """What a partition on one backend is charged in a stitched plan: ``level`` x its cost timed alone in a
    worker, plus ``cut_ms`` after the plan's first partition (``collage.tuner.stitching.PartitionCharge``)."""

    level: float | None = None
    cut_ms: float | None = None


@dataclass(frozen=True)
class PlannedPartition(Record):
    """A partition of a plan as the search priced it: ``cost_ms`` its price; ``searched_cost_ms`` what the search
    priced it at before it ran in one of its attempts (the plan is then priced as it ran there); ``in_plan_ms``
    its call inside the verification runs (a plan of several partitions)."""

    backend: str | None = None
    nodes: tuple[int, ...] = ()
    cost_ms: float | None = None
    searched_cost_ms: float | None = None
    in_plan_ms: float | None = None


@dataclass(frozen=True)
class PlanSummary(Record):
    """A plan the search produced, as it priced it.

    ``searched_plan``: the plan the search handed to the end-to-end checks, priced with the partition charges
    measured in this run (``partition_charges``), or, for a mix the search's attempts ran, as it ran there: then
    ``searched_for_ms`` and each partition's ``searched_cost_ms`` are what the search priced it at before it ran.
    ``best_single_ms``: the best single backend priced alike (timed beside the plan in that attempt, or beside
    the closest mix where the search went to one backend after its mixes lost, or level x its worker cost);
    ``measured_ms`` and ``best_single_measured_ms``: both in the verification (the predicted and measured gains
    are the ratios). The final plan differs where never-worse, refinement or a whole-model alternative replaced
    it (the notes say which).

    ``cost_db_plan``: the search over the cost DB's contents alone (candidate and transition costs, the partition
    charges the DB stores; none of this run's end-to-end timings charged): the search's first attempt, which tunes
    on the same DB contents derive alike; null under an accuracy budget (that search also rests on errors of
    stitched plans measured in the run).
    """

    partitions: tuple[PlannedPartition, ...] = ()
    predicted_ms: float | None = None
    best_single_ms: float | None = None
    searched_for_ms: float | None = None
    measured_ms: float | None = None
    best_single_measured_ms: float | None = None


@dataclass(frozen=True)
class Verification(Record):
    """The interleaved rounds behind ``plan_ms`` and ``baselines``: each runner's block median per round
    (``round_ms``: ``plan``, a backend's name, ``whole:<variant>``) and which of them the final plan is."""

    rounds: int | None = None
    plan: str | None = None
    round_ms: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Measurements(Record):
    """The candidates' measuring in counts (older reports' only coverage figures)."""

    candidates: int | None = None
    with_cost: int | None = None
    failed_candidates: int | None = None
    distinct_keys: int | None = None
    reused: int | None = None
    measured_now: int | None = None
    unmeasured: int | None = None
    measure_s: float | None = None


@dataclass(frozen=True)
class Refinement(Record):
    """Refinement trials asked for, run, and why none ran."""

    requested: int | None = None
    ran: int | None = None
    why_none: str | None = None


@dataclass(frozen=True)
class EstimateError(Record):
    """Predictions of the learned cost model against their later measurements: absolute percentage errors."""

    n: int | None = None
    median_ape: float | None = None
    p90_ape: float | None = None
    in_range: float | None = None


@dataclass(frozen=True)
class Estimates(Record):
    """Guided measuring under a budget (``collage.tuner.guided``): what the learned cost model priced."""

    distinct: int | None = None
    measured: int | None = None
    estimated: int | None = None
    unpriced: int | None = None
    error: EstimateError | None = None
    error_by_backend: Mapping[str, EstimateError] = field(default_factory=dict)
    training_rows: Mapping[str, Any] = field(default_factory=dict)
    rounds: int | None = None
    filled: int | None = None  # measured in measuring order beside the rounds' plans (guided.SEARCH_SHARE)
    converged_levels: tuple[int, ...] = ()
    last_rounds: tuple[Any, ...] = ()
    stopped: str | None = None
    optimistic_plan: Mapping[str, Any] | None = None
    fit_s: float | None = None
    search_s: float | None = None
    shipped: Mapping[str, Any] | None = None  # the shipped cost model: probe, scale, what it priced


@dataclass(frozen=True)
class Coverage(Record):
    """How much of the search space the tune saw (:mod:`collage.report.coverage` says it in words)."""

    distinct: int | None = None
    with_cost: int | None = None
    reused: int | None = None
    measured_now: int | None = None
    failed: int | None = None
    unmeasured: int | None = None
    budget_s: float | None = None
    budget_cut: bool | None = None
    unmeasured_nodes: tuple[int, ...] | None = None
    refinement: Refinement | None = None
    estimates: Estimates | None = None


@dataclass(frozen=True)
class Folding(Record):
    """Load-time folding (``collage.graph.load.Folding``): node ids number the folded model; the numerics
    reference runs the model as read."""

    folded_by: str | None = None
    nodes_before: int | None = None
    nodes_after: int | None = None
    fold_s: float | None = None
    applied: bool | None = None
    error: str | None = None
    nodes: int | None = None
    inlined: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Others(Record):
    """Other processes' load while a tune ran, in CPUs (``collage.measure.contention``): mean per step, and the
    busiest window of ``window_s`` and the step it ended in."""

    cpus: int | None = None
    by_phase: Mapping[str, float] = field(default_factory=dict)
    peak_cpus: float | None = None
    peak_phase: str | None = None
    window_s: float | None = None


@dataclass(frozen=True)
class Timing(Record):
    """The tune's clock: its budget, each step's seconds, the whole tune's, other processes' load meanwhile."""

    budget_s: float | None = None
    phases: Mapping[str, float] = field(default_factory=dict)
    total_s: float | None = None
    others: Others | None = None


@dataclass(frozen=True)
class BoundaryOverhead(Record):
    """What stitching costs (``collage.runtime.artifact.BoundaryOverhead``): the stitched run against the
    partitions' own."""

    stitched_ms: float | None = None
    parts_ms: tuple[float, ...] = ()
    sum_parts_ms: float | None = None
    boundaries: int | None = None
    total_ms: float | None = None
    mean_per_boundary_ms: float | None = None
    per_boundary_ms: tuple[float, ...] = ()
    in_chain_ms: tuple[float, ...] = ()
    repeat: int | None = None


# ---------------------------------------------------------------------- precision (under --accuracy)
@dataclass(frozen=True)
class Calibration(Record):
    """The inputs the accuracy budget is judged on."""

    source: str | None = None
    samples: int | None = None
    hash: str | None = None
    random: bool | None = None


@dataclass(frozen=True)
class PrecisionPartition(Record):
    """A partition's precision and its measured error on its own (``rel``, ``cos``; ``budget_share``: its
    part of the budget)."""

    index: int | None = None
    backend: str | None = None
    precision: str | None = None
    rel: float | str | None = None
    cos: float | str | None = None
    finite: bool | None = None
    budget_share: float | None = None


@dataclass(frozen=True)
class ErrorFigures(Record):
    """An error measured end to end (``rel``, ``cos``: a number, or "inf"/"-inf"), and whether it is within the
    budget."""

    rel: float | str | None = None
    cos: float | str | None = None
    finite: bool | None = None
    within_budget: bool | None = None


@dataclass(frozen=True)
class PrecisionRound(Record):
    """One round of the budgeted search: its penalty (``lambda``), the plan's lower-precision partitions, its
    price, and its measured error."""

    lam: float | None = field(default=None, metadata={"key": "lambda"})
    excluded: int | None = None
    low_partitions: int | None = None
    predicted_ms: float | None = None
    ok: bool | None = None
    error: ErrorFigures | None = None


@dataclass(frozen=True)
class Precision(Record):
    """The accuracy budget's search (``collage.tuner.precision.tuner.PrecisionTuner.report``)."""

    budget: Mapping[str, Any] = field(default_factory=dict)
    budget_text: str | None = None
    calibration: Calibration | None = None
    low_precision_backends: tuple[str, ...] = ()
    int8: Mapping[str, Any] | None = None
    partitions: tuple[PrecisionPartition, ...] = ()
    end_to_end: ErrorFigures | None = None
    rounds: tuple[PrecisionRound, ...] = ()
    fallback_fp32: bool | None = None
    errors_measured: int | None = None
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------------- the report
@dataclass(frozen=True)
class Report(Record):
    """report.json. ``baselines``: the whole model on each single backend (null, or ``{"error": ...}``, where it
    failed); ``plan_ms``: the stitched artifact measured end to end in the same run; ``predicted_ms``: the
    search's objective; ``alone_ms``: each partition of the final plan timed alone in a worker (null: not
    measured); ``candidates``: counts by kind; ``tvm_tuning``: TVM's tuning under the budget (free-form);
    ``model_sha256``: the model's checksum, which ``collage report`` checks against the manifest's."""

    version: int = REPORT_VERSION
    model: str | None = None
    source: str | None = None
    target: str | None = None
    backends: tuple[str, ...] = ()
    baselines: Mapping[str, float | BaselineFailure | None] = field(default_factory=dict)
    plan_ms: float | None = None
    predicted_ms: float | None = None
    numerics: Numerics | None = None
    notes: tuple[str, ...] = ()
    candidates: Mapping[str, Any] = field(default_factory=dict)
    partition_charges: Mapping[str, PartitionCharge] = field(default_factory=dict)
    search_attempts: int | None = None
    searched_plan: PlanSummary | None = None
    verification: Verification | None = None
    cost_db_plan: PlanSummary | None = None
    measurements: Measurements | None = None
    coverage: Coverage | None = None
    alone_ms: tuple[float | None, ...] = ()
    search_s: float | None = None
    tune_s: float | None = None
    load: Folding | None = None
    time: Timing | None = None
    tvm_tuning: Mapping[str, Any] | None = None
    precision: Precision | None = None
    boundary_overhead_ms: float | BoundaryOverhead | None = None
    model_sha256: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Report:
        """report.json's object; ArtifactError where its ``version`` is not one this collage reads."""
        version = d.get("version", REPORT_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= REPORT_VERSION:
            raise ArtifactError(f"report.json: version {version!r} is not one this collage reads (1 to "
                                f"{REPORT_VERSION}): a newer collage wrote it; upgrade collage or re-run "
                                "`collage tune`")
        return super().from_dict(d)

    def to_dict(self) -> dict[str, Any]:
        """report.json's object: ``version`` first, then the keys as read (module docstring)."""
        return {"version": self.version, **{k: v for k, v in super().to_dict().items() if k != "version"}}

    def baseline_ms(self) -> dict[str, float | None]:
        """Each baseline's ms (None where it failed), in the report's order."""
        return {k: v.value_ms if isinstance(v, BaselineFailure) else v for k, v in self.baselines.items()}


def as_report(report: Report | Mapping[str, Any] | None) -> Report:
    """``report`` as a :class:`Report`: a report.json object (or None: an empty report) is read."""
    if isinstance(report, Report):
        return report
    return Report.from_dict(report or {})
