"""Precision as a strategy of the tuning job: the fixed points where :mod:`collage.tuner.job` asks it.

The job holds one strategy for the whole run and calls it at the same points whatever the precision:

- ``prescreen(cands)``: the candidates worth timing, in measuring order (after enumeration);
- ``low``: names of the lower-precision backends (no fp32 baselines, no "fastest whole model");
- ``search(charged, transition)``: the plan for measured costs (after measurement, per search attempt);
  ``search_state()`` / ``restore_search(state)``: what a search left for the report, taken after each
  attempt and put back for the plan the job keeps;
- ``whole_model_within_budget()`` / ``use_whole_model(name, note)``: lower-precision whole models allowed
  on their own, and the notes once one is chosen;
- ``whole_model_alternatives(plan)``: compiled competitors for the verification round;
- ``is_low(plan)``: the plan holds lower-precision partitions (no fp32 tolerance check, no refinement);
- ``check(plan, artifact, fp32_numerics)``: the final numerics; ``report(plan)``: report.json's "precision"
  section (None: no section);
- ``backend_options``: constructor options the strategy adds per backend name (the int8 variants' calibrated
  ``ranges``), which the job merges into the options it builds backends with.

:class:`Fp32Only` is the strategy without an accuracy budget: every point passes through (the DP's plan,
no alternatives, the fp32 numerics as they are). :class:`collage.tuner.precision.tuner.PrecisionTuner` is the
budgeted one. :func:`precision_strategy` picks.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.measure.db import CostDB
    from collage.graph.ir import Graph
    from collage.plan import Plan
    from collage.search.candidates import Candidate
    from collage.tuner.options import TuneOptions
    from collage.tuner.precision.tuner import PrecisionTuner


class Fp32Only:
    """The no-op precision strategy (no accuracy budget: fp32 backends only, plans fp32-faithful)."""

    low: frozenset[str] = frozenset()

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.work: Path | None = None
        self.backend_options: dict[str, dict[str, Any]] = {}

    def prescreen(self, cands: Sequence[Candidate]) -> list[Candidate]:
        return list(cands)

    def search(self, charged: Mapping[Candidate, float], transition: Callable[[str, str, int], float]) -> Plan:
        from collage.search import solve as search  # module by module, the DP, or the ILP

        return search(self.graph, charged, transition)

    def search_state(self) -> None:
        return None

    def restore_search(self, state: None) -> None:
        pass

    def whole_model_within_budget(self) -> list[Candidate]:
        return []

    def use_whole_model(self, backend: str, note: str) -> list[str]:
        return [note]

    def whole_model_alternatives(self, plan: Plan) -> dict[str, Any]:
        return {}

    def is_low(self, plan: Plan) -> bool:
        return False

    def check(self, plan: Plan, artifact: Any, fp32_numerics: dict[str, Any] | None = None) -> dict[str, Any] | None:
        return fp32_numerics

    def report(self, plan: Plan) -> dict[str, Any] | None:
        return None


def precision_strategy(graph: Graph, backends: Sequence[Any], options: TuneOptions,
                       db: CostDB) -> PrecisionTuner | Fp32Only:
    """The budgeted PrecisionTuner under an accuracy budget, else :class:`Fp32Only` (which still refuses
    lower-precision backends named without a budget: ``PrecisionTuner.setup`` checks)."""
    from collage.tuner.precision.tuner import PrecisionTuner

    tuner = PrecisionTuner.setup(graph, backends, options.accuracy, options.calibration, seed=options.seed,
                                 db=db, target=options.target, progress=options.progress,
                                 budget_s=options.budget_s, backend_options=options.all_backend_options())
    return tuner if tuner is not None else Fp32Only(graph)
