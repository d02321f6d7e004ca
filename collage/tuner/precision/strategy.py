"""Precision as a strategy of the tuning job: the fixed points where the tune's steps ask it
(:class:`PrecisionStrategy`).

The job holds one strategy for the whole run and calls it at the same points whatever the precision:

- ``prescreen(cands)``: the candidates worth timing, in measuring order (after enumeration);
- ``low``: names of the lower-precision backends (no fp32 baselines, no "fastest whole model");
- ``search(charged, transition)``: the plan for measured costs (after measurement, per search attempt), with
  the :class:`collage.tuner.precision.budgeted.PrecisionOutcome` that search left for the report; the tune
  keeps the outcome of the plan it keeps and hands it to the later points;
- ``whole_model_within_budget()`` / ``use_whole_model(outcome, name, note)``: lower-precision whole models
  allowed on their own, and the outcome once one is chosen;
- ``whole_model_alternatives(plan)``: compiled competitors for the verification round;
- ``is_low(plan)``: the plan holds lower-precision partitions (no fp32 tolerance check, no refinement);
- ``check(plan, artifact, fp32_numerics, outcome)``: the final numerics (and the outcome with the final
  error); ``report(plan, outcome)``: report.json's "precision" section (None: no section);
- ``backend_options``: constructor options the strategy adds per backend name (the int8 variants' calibrated
  ``ranges``), which the job merges into the options it builds backends with.

:class:`Fp32Only` is the strategy without an accuracy budget: every point passes through (the DP's plan,
no alternatives, the fp32 numerics as they are). :class:`collage.tuner.precision.tuner.PrecisionTuner` is the
budgeted one. :func:`precision_strategy` picks.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collage.graph.ir import Graph
    from collage.measure.db import CostDB
    from collage.plan import Plan
    from collage.search.candidates import Candidate
    from collage.tuner.options import TuneOptions
    from collage.tuner.precision.budgeted import PrecisionOutcome

Transition = Callable[[str, str, int], float]


class PrecisionStrategy(Protocol):
    """The points where the tune asks its precision strategy (module docstring)."""

    @property
    def low(self) -> Collection[str]: ...

    @property
    def backend_options(self) -> Mapping[str, Mapping[str, Any]]: ...

    def prescreen(self, cands: Sequence[Candidate]) -> list[Candidate]: ...

    def search(self, charged: Mapping[Candidate, float],
               transition: Transition | None) -> tuple[Plan, PrecisionOutcome]: ...

    def whole_model_within_budget(self) -> list[Candidate]: ...

    def use_whole_model(self, outcome: PrecisionOutcome, backend: str, note: str) -> PrecisionOutcome: ...

    def whole_model_alternatives(self, plan: Plan) -> dict[str, Any]: ...

    def is_low(self, plan: Plan) -> bool: ...

    def check(self, plan: Plan, artifact: Any, fp32_numerics: dict[str, Any] | None,
              outcome: PrecisionOutcome) -> tuple[dict[str, Any] | None, PrecisionOutcome]: ...

    def report(self, plan: Plan, outcome: PrecisionOutcome) -> dict[str, Any] | None: ...


class Fp32Only:
    """The no-op precision strategy (no accuracy budget: fp32 backends only, plans fp32-faithful)."""

    low: frozenset[str] = frozenset()

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.backend_options: dict[str, dict[str, Any]] = {}

    def prescreen(self, cands: Sequence[Candidate]) -> list[Candidate]:
        return list(cands)

    def search(self, charged: Mapping[Candidate, float],
               transition: Transition | None) -> tuple[Plan, PrecisionOutcome]:
        from collage.search import solve as search  # module by module, the DP, or the ILP
        from collage.tuner.precision.budgeted import PrecisionOutcome

        return search(self.graph, charged, transition), PrecisionOutcome()

    def whole_model_within_budget(self) -> list[Candidate]:
        return []

    def use_whole_model(self, outcome: PrecisionOutcome, backend: str, note: str) -> PrecisionOutcome:
        from collage.tuner.precision.tuner import whole_model_outcome

        return whole_model_outcome(outcome, note)

    def whole_model_alternatives(self, plan: Plan) -> dict[str, Any]:
        return {}

    def is_low(self, plan: Plan) -> bool:
        return False

    def check(self, plan: Plan, artifact: Any, fp32_numerics: dict[str, Any] | None,
              outcome: PrecisionOutcome) -> tuple[dict[str, Any] | None, PrecisionOutcome]:
        return fp32_numerics, outcome

    def report(self, plan: Plan, outcome: PrecisionOutcome) -> dict[str, Any] | None:
        return None


def precision_strategy(graph: Graph, backends: Sequence[Any], options: TuneOptions, db: CostDB,
                       work: Path | None = None) -> PrecisionStrategy:
    """The budgeted PrecisionTuner under an accuracy budget, else :class:`Fp32Only` (which still refuses
    lower-precision backends named without a budget: ``PrecisionTuner.setup`` checks). ``work``: the tune's
    scratch folder (the budgeted search's stitched plans go there)."""
    from collage.tuner.precision.tuner import PrecisionSettings, PrecisionTuner

    settings = PrecisionSettings(options.accuracy, options.calibration, seed=options.seed, db=db,
                                 target=options.target, work=work, progress=options.progress,
                                 budget_s=options.budget_s, backend_options=options.all_backend_options())
    tuner = PrecisionTuner.setup(graph, backends, settings)
    return tuner if tuner is not None else Fp32Only(graph)
