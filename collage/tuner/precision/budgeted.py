"""The budgeted search of :class:`collage.tuner.precision.tuner.PrecisionTuner` (its ``search``, from
:class:`BudgetedSearch`).

1. Each lower-precision candidate faster than every fp32 candidate on the same nodes gets a measured
   error (cached in the cost DB keyed by the calibration inputs): a range candidate (whole model,
   prefix, suffix, segment between narrow cuts) its error at the model's outputs with the rest in fp32
   (``collage.tuner.precision.output_errors``); any other its own (its outputs vs the ONNX Runtime fp32 reference, fed
   the reference tensors: an intermediate tensor's error underrates the output's). The others cannot pay off and are
   dropped, as are those whose error breaks the budget or is NaN/inf.
2. A Lagrangian loop over the exact DP: each kept candidate costs ``latency + lambda * score``, where
   ``score`` is the share of the budget its own error uses (1 = at the limit). Round 0 has
   ``lambda = 0`` (the fastest plan of admissible pieces).
3. Errors compound across partitions, so each round's plan is stitched and its end-to-end error
   MEASURED on the calibration inputs. Within budget: done. Else lower precision is excluded where the
   plan's worst lower-precision partition is (every candidate overlapping its nodes) and lambda is
   raised, and the search runs again (a lambda that prices out every lower-precision piece is retried
   once at 0, with the exclusions kept).
4. When no round meets the budget, a lower-precision backend on the whole model is the plan if its own
   error (which is its end-to-end error; always measured) is within budget and it is predicted faster
   than fp32; else the plan is the fp32 one (a note says so). Exclusions never drop such a whole-model
   candidate, and ``tune`` times it against the searched plan in its verification
   (:meth:`PrecisionTuner.whole_model_alternatives`): a stale whole-model cost cannot hide it.

Errors are measured most-time-saved first, for at most half of tune's measuring budget (30 s at least).
Each round is recorded as a :class:`Round` (report.json "precision" -> "rounds"); the search returns its plan
with a :class:`PrecisionOutcome` (the rounds, the fp32 fallback, the end-to-end error, the notes): the tuner
keeps nothing of one search for the next, so the tune keeps the outcome of the plan it keeps.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from collage.measure.accuracy import ErrorMeasure, measure_errors
from collage.errors import CollageError
from collage.plan import Note, NoteKind, Plan, kind_of

MAX_ROUNDS = 12
#: A worst partition larger than this is a coarse range (collage.search.ranges): tightening drops it and
#: the candidates containing it, not every candidate that overlaps it (which would drop its sub-ranges too).
COARSE_NODES = 12


@dataclass
class Round:
    lam: float
    excluded: int
    low_partitions: int
    predicted_ms: float | None
    error: ErrorMeasure | None
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {"lambda": self.lam, "excluded": self.excluded, "low_partitions": self.low_partitions,
                "predicted_ms": self.predicted_ms, "ok": self.ok,
                "error": None if self.error is None else {k: v for k, v in self.error.to_dict().items()
                                                          if k != "per_tensor"}}


@dataclass(frozen=True)
class PrecisionOutcome:
    """What one search left for the report (report.json "precision": rounds, fallback_fp32, end_to_end, notes):
    returned with its plan, and replaced (never changed) by the later steps' hooks."""

    rounds: tuple[Round, ...] = ()
    fallback: bool = False
    final_error: ErrorMeasure | None = None
    notes: tuple[str, ...] = ()

    def with_notes(self, *notes: str) -> PrecisionOutcome:
        return replace(self, notes=(*self.notes, *notes))


@dataclass
class _Progress:
    """One search's record while it runs: its rounds and notes so far, and what it excluded."""

    notes: list[str]
    rounds: list[Round] = field(default_factory=list)
    excluded: set[Any] = field(default_factory=set)

    def done(self, fallback: bool = False, final_error: ErrorMeasure | None = None) -> PrecisionOutcome:
        return PrecisionOutcome(tuple(self.rounds), fallback, final_error, tuple(self.notes))


@dataclass(frozen=True)
class _Pool:
    """The costs one search works on: fp32 and lower-precision candidates, the fp32 plan, and the
    lower-precision candidates worth an error with their budget scores."""

    costs: Mapping[Any, float]
    fp32: dict[Any, float]
    low: dict[Any, float]
    fp32_plan: Plan
    worth: list[Any]
    scores: dict[Any, float]
    admissible: set[Any]


class BudgetedSearch:
    """``PrecisionTuner.search`` (module docstring). A mixin of :class:`collage.tuner.precision.tuner.PrecisionTuner`:
    it uses the tuner's fields (graph, budget, calib, backends, low, db, errors, notes, ...) and its
    ``end_to_end``, ``output_errors``, ``whole_model_within_budget`` and ``_say``."""

    def search(self, costs: Mapping[Any, float], transition: Callable[[str, str, int], float] | None,
               *, max_rounds: int = MAX_ROUNDS) -> tuple[Plan, PrecisionOutcome]:
        """The fastest plan whose measured end-to-end error is within budget (module docstring), and what
        the search left for the report. Each call starts afresh; the measured errors stay cached."""
        from collage.search import plan_from_parts
        from collage.search import solve as search

        graph = self.graph
        progress = _Progress([n for n in self.notes if kind_of(n) != NoteKind.PRECISION])
        fp32 = {c: v for c, v in costs.items() if c.backend not in self.low}
        low = {c: v for c, v in costs.items() if c.backend in self.low}
        try:
            fp32_plan = plan_from_parts(graph, search(graph, fp32, transition).parts(), fp32, transition)
        except CollageError as e:
            raise CollageError(f"the fp32 backends ({sorted({c.backend for c in fp32})}) cannot cover "
                               f"{graph.name} alone ({e}); add onnxruntime to --backends") from e
        if not low:
            return fp32_plan, progress.done()
        pool = self._pool(costs, fp32, low, fp32_plan, progress)
        found = self._rounds(pool, transition, progress, max_rounds)
        if found is None:
            found = self._whole_model(pool, transition, progress)
        if found is not None:
            return found
        return self._fall_back(pool, progress)

    def _pool(self, costs: Mapping[Any, float], fp32: dict[Any, float], low: dict[Any, float], fp32_plan: Plan,
              progress: _Progress) -> _Pool:
        """Step 1 of the module docstring: the lower-precision candidates worth an error, their errors measured
        (most time saved first) and scored against the budget."""
        best32: dict[tuple[int, ...], float] = {}
        for c, v in fp32.items():
            best32[c.nodes] = min(best32.get(c.nodes, math.inf), v)
        # worth an error: faster than fp32 on the same nodes, and always the whole model (one compile; tune
        # times it against the plan in its verification, so a stale whole-model cost cannot hide it)
        n = len(self.graph)
        worth = [c for c, v in low.items() if v < best32.get(c.nodes, math.inf) or len(c.nodes) == n]
        worth.sort(key=lambda c: (len(c.nodes) != n, low[c] - best32.get(c.nodes, math.inf)))  # most saved first
        self._say("precision: measuring the error of %d of %d lower-precision candidates (the others are "
                  "not faster than fp32 on the same nodes) on %d calibration sample(s)",
                  len(worth), len(low), len(self.calib.samples))
        self._measure_worth(worth)
        scores = {c: self.budget.score(self.errors[c]) for c in worth if c in self.errors}
        if len(scores) < len(worth):
            progress.notes.append(Note(NoteKind.PRECISION, f"precision: {len(worth) - len(scores)} of {len(worth)} "
                                       "lower-precision candidates have no measured error (error budget spent, or "
                                       "they failed) and were not used"))
        admissible = {c for c, s in scores.items() if s <= 1.0}
        broken = sum(1 for s in scores.values() if not math.isfinite(s))
        self._say("precision: %d candidates within budget on their own, %d over it (%d with NaN/inf outputs)",
                  len(admissible), len(scores) - len(admissible), broken)
        return _Pool(costs, fp32, low, fp32_plan, worth, scores, admissible)

    def _measure_worth(self, worth: list[Any]) -> None:
        """The errors of ``worth``: range candidates at the model's outputs (collage.tuner.precision.output_errors),
        the others their own; one error budget for both kinds."""
        ranged = [c for c in worth if self.output_errors().span(c) is not None]
        t0, left = time.monotonic(), self.error_budget_s
        self.errors.update(self.output_errors().measure(ranged, budget_s=left, progress=self.progress))
        self.output_errors().close()
        if left is not None:  # one error budget for both kinds
            left = max(1.0, left - (time.monotonic() - t0))
        self.errors.update(measure_errors(self.graph, [c for c in worth if c not in ranged], self.backends,
                                          self.calib, self.db, progress=self.progress, budget_s=left))

    def _rounds(self, pool: _Pool, transition: Callable[[str, str, int], float] | None, progress: _Progress,
                max_rounds: int) -> tuple[Plan, PrecisionOutcome] | None:
        """Steps 2-3 of the module docstring: the Lagrangian rounds, each plan measured end to end; the first
        within budget, or None."""
        from collage.search import plan_from_parts
        from collage.search.candidates import Candidate
        from collage.search import solve as search

        graph, scores, low = self.graph, pool.scores, pool.low
        lam, retried = 0.0, False
        for k in range(max_rounds):
            allowed = pool.admissible - progress.excluded
            if not allowed:
                break
            charged = dict(pool.fp32)
            charged.update({c: low[c] + lam * scores[c] for c in allowed})
            plan = plan_from_parts(graph, search(graph, charged, transition).parts(), pool.costs, transition)
            lows = [Candidate(p.nodes, p.backend) for p in plan.partitions if p.backend in self.low]
            if not lows:
                progress.rounds.append(Round(lam, len(progress.excluded), 0, plan.predicted_ms, None, True))
                if lam > 0 and not retried:  # lambda priced every lower-precision piece out: try without it
                    lam, retried = 0.0, True
                    continue
                break
            err = self.end_to_end(plan, str(k))
            ok = self.budget.allows(err)
            progress.rounds.append(Round(lam, len(progress.excluded), len(lows), plan.predicted_ms, err, ok))
            self._say("precision round %d (lambda %.3g): %d lower-precision partition(s), predicted %.3f ms, "
                      "end to end %s: %s", k, lam, len(lows), plan.predicted_ms or math.nan, err.describe(),
                      "within budget" if ok else "over budget")
            if ok:
                return self._accept(plan, err, f"{len(lows)} lower-precision partition(s)", progress)
            progress.excluded |= self._tighten(lows, allowed, scores, low)
            total = sum(scores[c] for c in lows)
            gain = (pool.fp32_plan.predicted_ms or 0.0) - (plan.predicted_ms or 0.0)
            lam = max(lam * 2.0, 0.25 * gain / total if total > 0 else 0.0)
        return None

    def _tighten(self, lows: list[Any], allowed: set[Any], scores: Mapping[Any, float],
                 low: Mapping[Any, float]) -> set[Any]:
        """What a round over budget excludes: lower precision where its worst partition is. A whole-model
        candidate stays (its own error IS its end-to-end error, within budget) unless it is that worst partition
        itself. A range's error was measured at the model's outputs (exact when it is the only lower-precision
        partition): the pieces judged by their own error are suspected first, and excluding one of them does not
        exclude the ranges overlapping it."""
        n = len(self.graph)
        exact = self.output_errors().span
        worst_c = max(lows, key=lambda c: (exact(c) is None, scores[c], -low[c]))
        worst = set(worst_c.nodes)
        if len(worst) > COARSE_NODES:  # a coarse range: its shorter sub-ranges may be within budget; keep them
            return {c for c in allowed if worst <= set(c.nodes) and (c == worst_c or len(c.nodes) < n)}
        return {c for c in allowed if worst.intersection(c.nodes) and (c == worst_c or len(c.nodes) < n)
                and (c == worst_c or exact(worst_c) is not None or exact(c) is None)}

    def _whole_model(self, pool: _Pool, transition: Callable[[str, str, int], float] | None,
                     progress: _Progress) -> tuple[Plan, PrecisionOutcome] | None:
        """Step 4's first half: the rounds' mixed plans broke the budget, but a lower-precision backend on the
        whole model is within it on its own (that error is end to end) and predicted faster than fp32."""
        from collage.search import plan_from_parts

        whole = [c for c in self.whole_model_within_budget() if c in pool.low]
        if not whole or min(pool.low[c] for c in whole) >= (pool.fp32_plan.predicted_ms or math.inf):
            return None
        best = min(whole, key=pool.low.__getitem__)
        plan = plan_from_parts(self.graph, [(best.nodes, best.backend)], pool.costs, transition)
        err = self.end_to_end(plan, "whole")
        ok = self.budget.allows(err)
        progress.rounds.append(Round(0.0, len(progress.excluded), 1, plan.predicted_ms, err, ok))
        return self._accept(plan, err, f"{best.backend} on the whole model is", progress) if ok else None

    def _fall_back(self, pool: _Pool, progress: _Progress) -> tuple[Plan, PrecisionOutcome]:
        """Step 4's second half: the fp32 plan, with a note saying why."""
        n, scores = len(self.graph), pool.scores
        tried = sum(1 for r in progress.rounds if r.low_partitions)
        fallback = False
        if tried:
            fallback = True
            note = (f"precision: no plan with lower-precision partitions met the accuracy budget "
                    f"({self.budget.describe()}) end to end in {tried} measured round(s); the plan is fp32")
        elif not any(len(c.nodes) < n for c in pool.worth) and not pool.admissible:
            note = ("precision: no lower-precision candidate is faster than fp32 on the same nodes (by the measured "
                    "costs); the plan is fp32")
            whole_errs = [f"{c.backend} {self.errors[c].describe()}" for c in pool.worth if c in self.errors]
            if whole_errs:
                note += f" (on the whole model, over the budget: {', '.join(whole_errs)})"
        elif scores and not pool.admissible:
            fallback = True
            broken = sum(1 for s in scores.values() if not math.isfinite(s))
            note = (f"precision: every measured lower-precision candidate ({len(scores)}, {broken} with NaN/inf "
                    f"outputs) breaks the accuracy budget ({self.budget.describe()}) on its own; the plan is fp32")
        else:
            note = (f"precision: {len(pool.admissible)} lower-precision candidate(s) are within the accuracy budget "
                    "on their own, but none makes the plan faster; the plan is fp32")
        self._say(note)
        progress.notes.append(Note(NoteKind.PRECISION, note))
        pool.fp32_plan.notes.extend(progress.notes)
        return pool.fp32_plan, progress.done(fallback=fallback)

    def _accept(self, plan: Plan, err: ErrorMeasure, what: str,
                progress: _Progress) -> tuple[Plan, PrecisionOutcome]:
        """``plan`` is the answer: its measured end-to-end error ``err`` is within budget; say so in its notes."""
        progress.notes.append(Note(NoteKind.PRECISION, f"precision: {what} within the accuracy budget "
                                   f"({self.budget.describe()}): measured end to end {err.describe()}"))
        plan.notes.extend(progress.notes)
        return plan, progress.done(final_error=err)
