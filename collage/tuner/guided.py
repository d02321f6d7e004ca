"""Guided measuring: under a budget, measure first what can change the plan; price the rest with the learned model.

On a large graph the measuring budget runs out long before the candidates do (results/budget/cost-model.md), and
measuring in enumeration order leaves the search to choose among whatever came
first. Instead, a branch-and-bound over measurements:

1. **Seed.** The whole model on each backend (the baselines need them), and, for a backend variant the cost
   DB holds fewer than ``SEED_ROWS`` training rows for (a fresh DB) and the shipped model does not cover,
   a seeded random sample of its candidates (at most ``SEED_SHARE`` of the budget): the learned model's first
   training set.
2. **Estimate.** The learned cost model (``collage.cost_models.learned``, trained on every measurement in
   the DB for the same backend variant, all models) prices every unmeasured candidate: 10/50/90% quantiles.
   A variant with fewer than ``SEED_ROWS`` rows in the DB is priced by the shipped model instead
   (``collage.cost_models.shipped``: trained on the project's measurements, scaled to this machine by the probe
   at the tune's start), its scale refined at each retrain by this tune's measurements of that variant.
3. **Search** the cheapest cover with measured costs where known and the *optimistic* estimate (the low
   quantile x the level's factor, ``OPTIMISM``) elsewhere, estimates marked as such.
4. **Measure** the plan's estimated partitions (their predictions recorded first: the model's error on this
   run's own measurements), retrain when the measured rows grew, and repeat from 2. Where the searches take
   more than ``SEARCH_SHARE`` of the time (a large graph), a round's batch is filled up with candidates in
   measuring order, so that the searches never eat the budget they guide.

When the optimistic plan is measured throughout, no unmeasured candidate can beat it unless it costs less
than its low estimate: that level has converged, and the next, more optimistic level (a lower factor) brings in
the near rivals. After the last level, what is left of the budget measures the rest in the tuner's measuring
order (``collage.tuner.steps.candidates.measuring_order``). The budget is a promise: measuring stops at it.

**Every exported partition is measured**: estimates only choose what to measure. The tuner's search
(``collage.tuner.stitching``) then runs on measured costs alone, so where the budget ended with estimated
partitions in the optimistic plan, the plan exported is the best all-measured one (the whole model on one
backend is always among them), and the never-worse end-to-end check judges it as before. The report says how
many candidates were measured and how many estimated, and how far the predictions were from the measurements
(``GuidedMeasuring.report``).
"""
from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collage.measure.db import Cost, CostKey, key_for, key_maker
from collage.cost_models.features import FEATURES_KIND, FeatureRows, features_by_fingerprint
from collage.cost_models.learned import Estimate, LearnedCosts, Variant, error_summary, training_rows, variant_of
from collage.cost_models.shipped import ShippedCosts, load_shipped
from collage.measure.schedule import CostTable
from collage.search.candidates import Candidate

if TYPE_CHECKING:
    from collage.measure.db import CostDB
    from collage.graph.ir import Graph
    from collage.plan import Plan

log = logging.getLogger(__name__)

#: factors on the low quantile, one convergence level each: the plan under each is measured before the next
OPTIMISM = (1.0, 0.7, 0.5)
#: a variant with fewer training rows in the DB is seeded with this many of its candidates, measured at random
SEED_ROWS = 40
#: the share of the budget the seed may take
SEED_SHARE = 0.25
#: retrain once the variants' measured rows grew by this share (or by RETRAIN_MIN rows)
RETRAIN_GROWTH, RETRAIN_MIN = 0.1, 5
#: rounds listed in the report (the last ones)
LAST_ROUNDS = 10
#: under a deadline, the share of the guided time its own work (fitting, searching) may take: past it, a round's
#: batch is filled up with candidates in measuring order until, measured, they bring the share back to it (a
#: 323-node detector's search took 3.2 s a round, 113 of its 196 s: benchmarks/tune_time.py)
SEARCH_SHARE = 0.25

#: measure(candidates, seconds or None) -> measure_candidates' table of them
Measure = Callable[[Sequence[Candidate], "float | None"], CostTable]
#: search(costs, transition) -> the cheapest cover
Search = Callable[[Mapping[Candidate, float]], "Plan"]


@dataclass
class Round:
    """One estimate -> search -> measure round."""

    level: int
    predicted_ms: float
    partitions: int
    estimated: int  # of the plan's partitions
    measured: int = 0  # of them measured in this round
    filled: int = 0  # candidates in measuring order measured beside them (SEARCH_SHARE)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "predicted_ms": self.predicted_ms, "partitions": self.partitions,
                "estimated": self.estimated, "measured": self.measured, "filled": self.filled}


@dataclass
class Prediction:
    """What the model said about a key before it was measured."""

    key: CostKey
    backend: str
    estimate: Estimate


@dataclass(frozen=True)
class GuidedSettings:
    """How a guided measuring runs: ``measure(batch, seconds_left)`` measures candidates, ``search(costs)`` finds
    the cheapest cover, ``deadline`` (time.monotonic; None: none) ends it, ``say`` prints progress lines,
    ``seed`` seeds the sample of a thin variant and the learned model, ``shipped`` (probed) prices a variant the
    DB has too few rows of."""

    measure: Measure
    search: Search
    deadline: float | None
    say: Callable[..., None] = lambda *a: None
    seed: int = 0
    shipped: ShippedCosts | None = None


@dataclass
class GuidedProgress:
    """What the loop has done so far: its counts, the learned model and its estimates, the plan it last found,
    the seconds spent fitting and searching, why it stopped, and the deadline in force (a seeding round has its
    own)."""

    deadline: float | None
    measured_now: int = 0
    failed: int = 0
    model: LearnedCosts | None = None
    trained_rows: int = -1
    estimates: dict[CostKey, Estimate] = field(default_factory=dict)
    fit_s: float = 0.0
    searches_s: float = 0.0
    measure_s: float = 0.0  # in measure calls
    measure_keys: int = 0  # keys those calls measured (failed ones too)
    last_plan: Plan | None = None
    stopped: str = ""
    from_shipped: set[str] = field(default_factory=set)  # backend names the shipped model priced last


class GuidedMeasuring:
    """The loop of the module docstring over one graph's candidates; ``run`` returns the measured table. Its
    fixed inputs are attributes; what changes as it runs is one :class:`GuidedProgress` (``self.now``), the
    measured costs (``known``), the keys given up on (``stuck``), the predictions and the rounds."""

    def __init__(self, graph: Graph, cands: Sequence[Candidate], backends: Sequence[Any], db: CostDB,
                 settings: GuidedSettings) -> None:
        self.graph, self.cands, self.db = graph, list(cands), db
        self.measure_fn, self.search_fn, self.say, self.seed = (settings.measure, settings.search, settings.say,
                                                                 settings.seed)
        by_name = {b.name: b for b in backends}
        fps = {c.nodes: "" for c in self.cands}
        for nodes in fps:
            fps[nodes] = graph.fingerprint(nodes)
        self.fps = fps
        make = {name: key_maker(b) for name, b in by_name.items()}
        self.key: dict[Candidate, CostKey] = {c: make[c.backend](fps[c.nodes]) for c in self.cands}
        self.variant: dict[str, Variant] = {b.name: variant_of(key_for(b, "")) for b in backends}
        self.distinct = set(self.key.values())
        # a failure that does not hold for this model (transient, another file's) is measured again
        self.known: dict[CostKey, Cost] = {k: c for k, c in db.get_many(self.distinct).items()
                                           if c.holds_for(graph.digest)}
        self.reused = len(self.known)
        self.stuck: set[CostKey] = set()  # asked for and not measured (claimed elsewhere, lost): not asked again
        self.predictions: list[Prediction] = []
        self.rounds: list[Round] = []
        self.now = GuidedProgress(settings.deadline)
        self.shipped = settings.shipped
        self.t0 = time.monotonic()
        self.features = self.store_features()
        # each variant's keys with features and their feature matrix, made once: every retrain prices them all
        # (inception_v2: 143,388 keys; rebuilding them a retrain took seconds) and keeps the unmeasured
        self.priced: dict[str, tuple[list[CostKey], FeatureRows]] = {}
        for name in self.variant:
            keys = sorted({k for c, k in self.key.items() if c.backend == name and k.fingerprint in self.features})
            self.priced[name] = (keys, FeatureRows([self.features[k.fingerprint] for k in keys]))

    # ------------------------------------------------------------------ state
    def left(self) -> float | None:
        deadline = self.now.deadline
        return None if deadline is None else deadline - time.monotonic()

    def over(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def is_measured(self, c: Candidate) -> bool:
        return self.key[c] in self.known

    def store_features(self) -> dict[str, Any]:
        """Features of every distinct fingerprint (those not yet in the DB stored: training data for every later
        tune)."""
        have = self.db.get_features(FEATURES_KIND, set(self.fps.values()))
        missing = [nodes for nodes, fp in self.fps.items() if fp not in have]
        new = features_by_fingerprint(self.graph, missing, self.fps) if missing else {}
        self.db.put_features(FEATURES_KIND, new)
        return {**have, **new}

    # ------------------------------------------------------------------ steps
    def run(self) -> CostTable:
        n = len(self.graph)
        # every whole model, whatever the budget (the baselines need them, as in enumeration order)
        self.take([c for c in self.cands if len(c.nodes) == n], "whole model", bounded=False)
        self.seed_thin_variants()
        level = 0
        while level < len(OPTIMISM) and not self.over():
            self.retrain()
            plan = self.search(OPTIMISM[level])
            if plan is None:
                break
            todo = [c for p in plan.partitions if not self.is_measured(c := Candidate(p.nodes, p.backend))]
            self.rounds.append(Round(level, float(plan.predicted_ms or 0.0), len(plan.partitions), len(todo)))
            if not todo:
                level += 1
                continue
            filler = self.filler(todo)
            self.take(todo + filler, f"round {len(self.rounds)}")
            self.rounds[-1].measured = sum(self.is_measured(c) for c in todo)
            self.rounds[-1].filled = sum(self.is_measured(c) for c in filler)
        rest = [c for c in self.cands if not self.is_measured(c) and self.key[c] not in self.stuck]
        if rest and not self.over():
            self.take(rest, "the rest, in measuring order")
        self.now.stopped = ("every candidate measured" if all(self.is_measured(c) for c in self.cands) else
                        "the budget ran out" if self.over() else "no candidate left to measure")
        if self.now.model is not None or self.now.trained_rows >= 0:
            self.retrain(final=True)  # estimates of what is left, for the report
        return self.table()

    def take(self, batch: Sequence[Candidate], why: str, bounded: bool = True) -> int:
        """Measure ``batch`` (the unmeasured of it) within the budget (``bounded``; else all of it, even past the
        deadline); predictions recorded first. Returns how many of its keys got a cost."""
        todo, seen = [], set()
        for c in batch:
            k = self.key[c]
            if k in self.known or k in self.stuck or k in seen:
                continue
            seen.add(k)
            todo.append(c)
        if not todo or (bounded and self.over()):
            return 0
        for c in todo:
            est = self.now.estimates.get(self.key[c])
            if est is not None:
                self.predictions.append(Prediction(self.key[c], c.backend, est))
        t0 = time.monotonic()
        table = self.measure_fn(todo, self.left() if bounded else None)
        self.now.measure_s += time.monotonic() - t0
        self.now.measure_keys += int(getattr(table, "measured", 0) or 0)
        got = 0
        for c in todo:
            cost = table.get((c.nodes, c.backend))
            if cost is not None and self.key[c] not in self.known:
                self.known[self.key[c]] = cost
                got += 1
        self.now.measured_now += int(getattr(table, "measured", 0) or 0)
        self.now.failed += int(getattr(table, "failed", 0) or 0)
        if not self.over():
            self.stuck.update(self.key[c] for c in todo if self.key[c] not in self.known)
        log.debug("%s: measured %d of %d", why, got, len(todo))
        return got

    def filler(self, todo: Sequence[Candidate]) -> list[Candidate]:
        """Under a deadline, once fitting and searching took more than ``SEARCH_SHARE`` of the guided time: the
        next unmeasured candidates in measuring order, as many as bring that share back to ``SEARCH_SHARE`` once
        measured (at this tune's seconds a key so far), less ``todo``. The whole excess, not this round's fit and
        search alone: paying only for each round left the share at 37-41% (tests/tuner/test_guided.py). Without
        a deadline every candidate is measured anyway: nothing is added."""
        now = self.now
        elapsed = time.monotonic() - self.t0
        if now.deadline is None or now.measure_keys == 0 or now.searches_s + now.fit_s <= SEARCH_SHARE * elapsed:
            return []
        per_key = max(now.measure_s / now.measure_keys, 1e-3)
        # the measuring that brings the guided time's own share back to SEARCH_SHARE by this round's end
        want = math.ceil(((now.searches_s + now.fit_s) / SEARCH_SHARE - elapsed) / per_key) - len(todo)
        chosen = {self.key[c] for c in todo}
        out: list[Candidate] = []
        for c in self.cands:
            if len(out) >= want:
                break
            k = self.key[c]
            if k not in self.known and k not in self.stuck and k not in chosen:
                chosen.add(k)
                out.append(c)
        return out

    def seed_thin_variants(self) -> None:
        """A variant with too few training rows in the DB: a seeded random sample of its candidates."""
        rows = {v: len(ms) for v, (_, ms) in training_rows(self.db, self.variant.values()).items()}
        budget = None if self.now.deadline is None else SEED_SHARE * max(0.0, self.left() or 0.0)
        thin = {name: v for name, v in self.variant.items() if rows.get(v, 0) < SEED_ROWS
                and not (self.shipped is not None and self.shipped.covers(v))}
        sample: list[Candidate] = []
        rng = random.Random(self.seed)
        for name, v in sorted(thin.items()):
            need = SEED_ROWS - rows.get(v, 0)
            mine = sorted({self.key[c]: c for c in self.cands if c.backend == name
                           and not self.is_measured(c)}.values(),
                          key=lambda c: (len(c.nodes), c.nodes))
            sample += rng.sample(mine, min(need, len(mine)))
        if not sample:
            return
        self.say("guided measuring: seeding the learned model with %d candidate(s) (%s had few rows in the cost DB)",
                 len(sample), ", ".join(thin))
        deadline, self.now.deadline = self.now.deadline, (None if budget is None else time.monotonic() + budget)
        try:
            self.take(sample, "seed")
        finally:
            self.now.deadline = deadline

    def retrain(self, final: bool = False) -> None:
        """Train the model again when the measured rows grew enough; estimate every unmeasured key."""
        now = self.now
        ok = sum(1 for c in self.known.values() if c.ok)
        grown = ok - max(0, now.trained_rows)
        if now.trained_rows >= 0 and grown < max(RETRAIN_MIN, RETRAIN_GROWTH * now.trained_rows) and not final:
            return
        if final and grown == 0 and now.trained_rows >= 0:
            return
        t0 = time.perf_counter()
        now.model = LearnedCosts.train(self.db, set(self.variant.values()), seed=self.seed)
        now.trained_rows = ok
        now.estimates = {}
        now.from_shipped = set()
        for name, v in self.variant.items():
            keys, feats = self.priced[name]
            if not any(k not in self.known for k in keys):
                continue
            est = self.estimate_variant(v, feats)
            if est is not None:
                now.estimates.update((k, e) for k, e in zip(keys, est) if k not in self.known)
        now.fit_s += time.perf_counter() - t0

    def estimate_variant(self, v: Variant, feats: Sequence[Any]) -> list[Estimate] | None:
        """The learned model's estimates of ``v`` where the DB holds ``SEED_ROWS`` rows of it (or the shipped model
        does not cover it), else the shipped model's, refined first by this tune's measurements of ``v``."""
        model, shipped = self.now.model, self.shipped
        learned = model.models.get(v) if model is not None else None
        if shipped is None or not shipped.covers(v) or (learned is not None and learned.rows >= SEED_ROWS):
            return model.estimate(v, feats) if model is not None else None
        mine = [(self.features[k.fingerprint], float(c.median_ms)) for k, c in self.known.items()
                if c.ok and c.median_ms and variant_of(k) == v and k.fingerprint in self.features]
        if mine:
            shipped.refine(v, [f for f, _ in mine], [m for _, m in mine])
        self.now.from_shipped.add(v.backend)
        return shipped.estimate(v, feats)

    def search(self, factor: float) -> Plan | None:
        """The cheapest cover with measured costs where known, ``factor`` x the low estimate elsewhere."""
        costs: dict[Candidate, float] = {}
        for c, k in self.key.items():
            cost = self.known.get(k)
            if cost is not None:
                if cost.ok and cost.median_ms is not None:
                    costs[c] = float(cost.median_ms)
            elif k not in self.stuck and (est := self.now.estimates.get(k)) is not None:
                costs[c] = factor * est.low_ms
        t0 = time.perf_counter()
        try:
            plan = self.search_fn(costs)
        except Exception as e:  # noqa: BLE001 - a guide, not the tune's search: measure the rest in order
            log.warning("guided measuring: search failed (%s); measuring in order", e)
            return None
        finally:
            self.now.searches_s += time.perf_counter() - t0
        self.now.last_plan = plan
        return plan

    # ------------------------------------------------------------------ results
    def table(self) -> CostTable:
        """``measure_candidates``' table over every candidate (the job's Measured.raw)."""
        t = CostTable(candidates=len(self.cands), distinct=len(self.distinct))
        t.reused, t.measured, t.failed = self.reused, self.now.measured_now, self.now.failed
        t.unmeasured = len(self.distinct) - len(self.known)
        t.elapsed_s = time.monotonic() - self.t0
        for c, k in self.key.items():
            if k in self.known:
                t[(c.nodes, c.backend)] = self.known[k]
        return t

    def report(self) -> dict[str, Any]:
        """report.json's ``"estimates"`` (collage.report.coverage.estimates_line says it in words)."""
        measured = {k: c for k, c in self.known.items() if c.ok}
        pairs = [(p, measured[p.key].median_ms) for p in self.predictions if p.key in measured]
        per_backend: dict[str, Any] = {}
        for name in sorted(self.variant):
            mine = [(p, m) for p, m in pairs if p.backend == name]
            per_backend[name] = error_summary([p.estimate.mid_ms for p, _ in mine], [m for _, m in mine],
                                              [p.estimate.low_ms for p, _ in mine],
                                              [p.estimate.high_ms for p, _ in mine])
        unmeasured = self.distinct - set(self.known)
        now = self.now
        last = now.last_plan
        return {
            "distinct": len(self.distinct), "measured": len(self.known), "estimated": sum(k in now.estimates
                                                                                         for k in unmeasured),
            "unpriced": sum(k not in now.estimates for k in unmeasured),
            "error": error_summary([p.estimate.mid_ms for p, _ in pairs], [m for _, m in pairs],
                                   [p.estimate.low_ms for p, _ in pairs], [p.estimate.high_ms for p, _ in pairs]),
            "error_by_backend": per_backend,
            "training_rows": now.model.rows() if now.model is not None else {},
            "rounds": len(self.rounds), "filled": sum(r.filled for r in self.rounds),
            "converged_levels": sorted({r.level for r in self.rounds if not r.estimated}),
            "last_rounds": [r.to_dict() for r in self.rounds[-LAST_ROUNDS:]], "stopped": now.stopped,
            "optimistic_plan": None if last is None else {
                "predicted_ms": last.predicted_ms,
                "partitions": [{"backend": p.backend, "nodes": len(p.nodes),
                                "estimated": not self.is_measured(Candidate(p.nodes, p.backend))}
                               for p in last.partitions]},
            "fit_s": now.fit_s, "search_s": now.searches_s,
            "shipped": None if self.shipped is None else {**self.shipped.report(),
                                                          "priced": sorted(now.from_shipped)},
        }


def warm_start(say: Callable[..., None] = lambda *a: None) -> ShippedCosts | None:
    """The shipped cost model, scaled to this machine by the probe (a fraction of a second); None when none
    ships or it cannot be read (the guided measuring then seeds from the DB as before)."""
    t0 = time.perf_counter()
    try:
        shipped = load_shipped()
    except (OSError, ValueError, KeyError) as e:
        log.warning("the shipped cost model could not be read (%s); guided measuring starts cold", e)
        return None
    if shipped is not None:
        say("guided measuring: starting from the shipped cost model (trained on an %s machine); a %.2f s probe "
            "puts this machine at %.2fx its speed",
            shipped.meta.get("machine_class"), time.perf_counter() - t0,
            1.0 / shipped.scale if shipped.scale else 1.0)
    return shipped
