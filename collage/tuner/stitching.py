"""The tune's search step, checked by measurement: what a partition costs in a stitched plan, and the search
that charges it.

Each candidate is timed alone, so a stitched chain of them costs more than the sum of its parts
(docs/DESIGN.md, "Stitching"). ``calibrate_partition_charges`` measures, per backend, a ``PartitionCharge``
before the search: a level (the whole model called from an artifact against its worker timing) and a cost
per cut (a chain of that backend's pieces against the levelled sum of its parts). ``search_checked``
searches with it charged, stitches and measures the plan (each partition's call timed inside it, the single
backends timed beside it), and where the plan measures well over or under its prediction (or loses to the
best single backend), prices its partitions as they ran there, charges the difference per cut to its
backends (what the candidates never run in a plan learn from it) and searches again, keeping the best
measured plan, priced as it ran (its prediction is then a measurement of the plan itself). A plan can win
and still be mispredicted: a switch between runtimes can cost the next partition more than any candidate's
own cost or transition measurement shows (results/precision/precision-bf16.md). ``whole_if_one_backend`` turns a plan
of one backend cut into pieces into that backend on the whole model. ``fill_boundaries`` gives a searched
plan its boundary tensors and fingerprints. How a plan is stitched and timed (inputs, scratch folder,
rounds) is one :class:`Stitching`. Called by the tune's search step (:mod:`collage.tuner.steps.search`);
progress lines go through ``collage.util.say``.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from collage.measure.db import CostDB, canonical_json
from collage.errors import CollageError
from collage.graph.ir import Graph
from collage.plan import Note, NoteKind, Partition, Plan, kind_of
from collage.util import machine_id, say, sha256_bytes
from collage.tuner.checks import VERIFY_ROUNDS, measure_interleaved

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PartitionCharge:
    """What a partition on one backend costs in a stitched plan, from its cost timed alone in a worker.

    ``level`` x that cost: the same call made from the artifact, in-process, after other calls, runs at
    another level than in the worker's loop (3.5-19% over it on one-partition chains:
    results/chains/chain-excess.md), for every plan, one partition or many. Plus ``cut_ms`` for every partition but
    the plan's first (the one holding node 0): a call after another pays cold weights, a runtime waking and
    the tensors handed over; that grows with the pieces, not with a partition's size (results/chains/chain.md).
    """

    level: float = 1.0
    cut_ms: float = 0.0

    def charge(self, nodes: Sequence[int], cost_ms: float) -> float:
        return self.level * cost_ms + (0.0 if 0 in nodes else self.cut_ms)

    def to_dict(self) -> dict[str, float]:
        return {"level": round(self.level, 4), "cut_ms": round(self.cut_ms, 4)}


def charge_costs(costs: Mapping[Any, float], charges: Mapping[str, PartitionCharge]) -> dict[Any, float]:
    """Each candidate's cost as a partition of a stitched plan (``PartitionCharge.charge``)."""
    none = PartitionCharge()
    return {c: charges.get(c.backend, none).charge(c.nodes, v) for c, v in costs.items()}


#: A backend whose whole model costs more than this factor over the fastest backend's gets no level
#: measurement (untuned TVM: 30-600x; compiling and running it would take the tune's time for nothing).
LEVEL_SLOW_FACTOR = 20.0


@dataclasses.dataclass(frozen=True)
class Stitching:
    """How the search step stitches and times plans: the inputs they run on, the scratch folder their artifacts
    go to, the target, the backends' constructor options, progress lines, and the interleaved rounds of each
    timing (fewer where the tune's budget leaves no time for more)."""

    feeds: Mapping[str, np.ndarray]
    work: Path
    target: str = "cpu"
    backend_options: Mapping[str, Mapping[str, Any]] | None = None
    progress: bool = True
    rounds: int = VERIFY_ROUNDS

    def runner(self, graph: Graph, plan: Plan, name: str) -> Callable[[], Any]:
        """A call of ``plan`` exported to ``work / name`` and loaded as an artifact."""
        return artifact_runner(graph, plan, self.work / name, self.feeds, self.target, self.backend_options)


@dataclasses.dataclass(frozen=True)
class _Figures:
    """One backend's figures for its ``PartitionCharge``: what to measure (the whole model's worker cost, the
    cheapest chain of its own pieces) and their transition-table keys."""

    name: str
    whole_ms: float | None
    chain: Plan | None
    keys: dict[str, str | None]


def calibrate_partition_charges(graph: Graph, costs: Mapping[Any, float], transition: Callable[[str, str, int], float],
                                backends: Sequence[str], stitch: Stitching, *,
                                whole_costs: Mapping[str, float | None] | None = None,
                                db: CostDB | None = None) -> dict[str, PartitionCharge]:
    """Each backend's ``PartitionCharge``, measured on this model.

    Each candidate is timed alone, in a loop: its weights are hot and the runtime's threads awake. In a
    chain neither holds, and the sum of parts under-predicts the chain (docs/DESIGN.md, "Stitching"). So for
    each backend two artifacts are timed interleaved, in this process: the whole model as one partition
    (``whole``) and the cheapest plan on that backend alone (``chain``: K partitions, the whole-model
    candidate left out). ``level = whole / the whole model's worker cost`` (``whole_costs``; None where
    unmeasured) and ``cut_ms = (chain - whole) / (K - 1)`` (a chain timed faster than the whole model: no
    cut, and the lower of that level and chain / its parts): both from timings taken side by side,
    so the drift between worker measurements minutes apart stays out of the cut. Without a whole-model cost,
    level 1 and ``cut_ms = (chain - its parts) / (K - 1)``; without a chain, the other backends' median cut; a
    backend far slower than the fastest (``LEVEL_SLOW_FACTOR``) gets no whole-model run.

    With ``db``, both figures are stored in its transition table (``(b, b)`` rows, settings
    ``charge_settings``: the model, the backend's version and options, and for the cut that chain's
    partitions and prediction; this machine) and a later tune takes them from there instead of compiling
    and running the artifacts again. ``stitch.rounds``: the interleaved rounds.
    """
    whole_costs = {b: ms for b, ms in (whole_costs or {}).items() if ms is not None and ms > 0}
    fastest = min(whole_costs.values(), default=None)
    levels: dict[str, float] = {}
    cuts: dict[str, float] = {}
    for name in backends:
        fig = _figures(graph, costs, transition, name, stitch, whole_costs.get(name), fastest)
        if not _stored_figures(fig, db, levels, cuts, stitch.progress):
            _time_figures(graph, fig, stitch, levels, cuts)
            if db is not None:
                for what, figure in (("level", levels.get(name)), ("cut", cuts.get(name))):
                    if figure is not None and fig.keys[what]:
                        db.put_transition(name, name, figure, 0.0, fig.keys[what], machine_id())
    level_fb = statistics.median(levels.values()) if levels else 1.0
    cut_fb = statistics.median(cuts.values()) if cuts else 0.0
    return {name: PartitionCharge(levels.get(name, 1.0 if name in cuts else level_fb), cuts.get(name, cut_fb))
            for name in backends}


def _figures(graph: Graph, costs: Mapping[Any, float], transition: Callable[[str, str, int], float], name: str,
             stitch: Stitching, whole_ms: float | None, fastest: float | None) -> _Figures:
    """What to measure for ``name``'s charge: its whole model (unless far slower than the fastest) and the
    cheapest chain of its own pieces (the whole-model candidate left out; None where it cannot cover the graph
    alone or takes one piece)."""
    from collage.search import solve as search

    n = len(graph)
    options = (stitch.backend_options or {}).get(name, {})
    own = {c: v for c, v in costs.items() if c.backend == name and len(c.nodes) < n}
    try:
        chain: Plan | None = fill_boundaries(graph, search(graph, own, transition))
    except CollageError:
        chain = None  # the backend cannot cover the graph alone
    if chain is not None and (len(chain.partitions) < 2 or chain.predicted_ms is None):
        chain = None
    if whole_ms is not None and fastest is not None and whole_ms > LEVEL_SLOW_FACTOR * fastest:
        whole_ms = None
    keys = {"level": None if whole_ms is None else charge_settings(graph, None, name, options, "level", whole_ms),
            "cut": None if chain is None else charge_settings(graph, chain, name, options, "cut")}
    return _Figures(name, whole_ms, chain, keys)


def _stored_figures(fig: _Figures, db: CostDB | None, levels: dict[str, float], cuts: dict[str, float],
                    progress: bool) -> bool:
    """Whether the cost DB holds every figure ``fig`` needs (then put into ``levels`` and ``cuts``)."""
    name, keys = fig.name, fig.keys
    stored = {what: db.get_transition(name, name, key, machine_id()) if db is not None and key else None
              for what, key in keys.items()}
    if not all(stored[what] is not None for what, key in keys.items() if key):
        return False
    if keys["level"]:
        levels[name] = stored["level"].fixed_ms
    if keys["cut"]:
        cuts[name] = stored["cut"].fixed_ms
    if keys["level"] or keys["cut"]:
        say(progress, "%s: level %s, %s ms per cut (measured before: the cost DB)", name,
            _fmt(levels.get(name)), _fmt(cuts.get(name)), logger=log, detail=True)
    return True


def _time_figures(graph: Graph, fig: _Figures, stitch: Stitching, levels: dict[str, float],
                  cuts: dict[str, float]) -> None:
    """``fig``'s whole model and chain exported, loaded and timed interleaved: its level and cut into
    ``levels`` and ``cuts``."""
    name, whole_ms, chain = fig.name, fig.whole_ms, fig.chain
    runners = {}
    if whole_ms is not None:
        runners["whole"] = stitch.runner(graph, fill_boundaries(graph, Plan.single(name, len(graph), whole_ms)),
                                         f"whole-{name}")
    if chain is not None:
        runners["chain"] = stitch.runner(graph, chain, f"chain-{name}")
    timed = measure_interleaved(runners, rounds=stitch.rounds)
    if whole_ms is not None:
        levels[name] = timed["whole"] / whole_ms
    if chain is not None:
        k, parts = len(chain.partitions), chain.predicted_ms or 0.0
        if whole_ms is None:
            cuts[name] = max(0.0, (timed["chain"] - parts) / (k - 1))
        elif timed["chain"] <= timed["whole"]:
            # the chain does the whole model's work and more: faster than the whole model is noise, or a
            # whole-model timing gone wrong; no cut to see, and the lower of the two levels
            cuts[name] = 0.0
            if parts > 0:
                levels[name] = min(levels[name], timed["chain"] / parts)
        else:
            cuts[name] = (timed["chain"] - timed["whole"]) / (k - 1)
    say(stitch.progress, "%s: whole model %s ms vs %s ms alone (level %s); %s", name, _fmt(timed.get("whole")),
        _fmt(whole_ms), _fmt(levels.get(name)),
        "no chain of its own" if chain is None else
        f"a {len(chain.partitions)}-partition chain {timed['chain']:.3f} ms: {cuts[name]:.3f} ms per cut",
        logger=log, detail=True)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def plan_artifact(graph: Graph, plan: Plan, path: Path, target: str,
                  backend_options: Mapping[str, Mapping[str, Any]] | None) -> Any:
    """``plan`` exported to ``path`` and loaded as an artifact (what a deployment runs)."""
    from collage.runtime.artifact import load as load_artifact
    from collage.tuner.export import export

    return load_artifact(export(graph, plan, path, target=target,
                                backend_options={k: dict(v) for k, v in (backend_options or {}).items()}))


def artifact_runner(graph: Graph, plan: Plan, path: Path, feeds: Mapping[str, np.ndarray], target: str,
                     backend_options: Mapping[str, Mapping[str, Any]] | None) -> Callable[[], Any]:
    """A call of ``plan`` exported and loaded as an artifact."""
    art = plan_artifact(graph, plan, path, target, backend_options)
    return lambda: art.run(feeds)


def charge_settings(graph: Graph, chain: Plan | None, name: str, options: Mapping[str, Any], what: str,
                    whole_ms: float | None = None) -> str:
    """The transition-table ``settings`` of a ``PartitionCharge`` figure (``what``: ``cut`` or ``level``):
    the model, the backend's version and options; for a cut the chain it was measured on (one backend's
    cheapest chain of ``graph``; partitions and prediction: other costs give another chain, measured anew);
    for a level the whole model's worker cost it is relative to (measured again: a new level)."""
    from collage.measure.worker import resolve_backend

    backend = resolve_backend(name, dict(options))
    on = {"model": graph.fingerprint(range(len(graph))),
          "backend": {"name": name, "version": backend.version(), "options": backend.options}}
    if chain is not None:
        parts = [[list(p.nodes), p.backend] for p in chain.partitions]
        on.update(chain=sha256_bytes(canonical_json(parts).encode()),
                  predicted_ns=round((chain.predicted_ms or 0) * 1e6))
    if whole_ms is not None:
        on["whole_ns"] = round(whole_ms * 1e6)
    return canonical_json({f"partition_{what}": on})


#: A stitched plan measured more than this factor over its prediction, or under it by as much, is searched again
#: with its cuts charged the difference (the acceptance band of ``search_checked``): #16 asks for 15%, and the
#: same artifact drifts about 10% over minutes (results/precision/precision.md, results/measurement/noise.md).
MISPREDICTED = 1.10


@dataclasses.dataclass
class _Run:
    """A plan measured in an attempt: end to end, the best single backend in the same rounds, its partitions
    priced as they ran (``in_plan_costs``), and the plan as the search priced it then."""

    ms: float
    single_ms: float
    as_ran: list[float]
    searched_for: Plan
    singles: dict[str, float]  # each single backend's whole model in the same rounds

    @property
    def won(self) -> bool:
        """Faster than the best single backend in its rounds."""
        return self.ms < self.single_ms

    @property
    def standing(self) -> float:
        """Its time over the best single backend's in its rounds (the machine's level moves between attempts;
        the ratio taken side by side does not move with it); its time where no single backend was timed."""
        return self.ms / self.single_ms if math.isfinite(self.single_ms) and self.single_ms > 0 else self.ms


class Checked(NamedTuple):
    """What ``search_checked`` found: the plan (priced as it ran where it was measured), the charged costs it was
    found with (its own partitions as they ran), the attempts used, the plan as the search priced it before it
    ran (``searched_for``), and the best single backend timed in the same rounds as the plan (``single_ms``:
    the plan's prediction is a time of this machine at that moment, and this is the same moment's yardstick).
    The last two are None where the plan was not measured (a plan of one partition), except that where the
    search went to one backend after its mixes lost to the single backends beside them, ``single_ms`` is the
    best of those beside the closest mix; ``single_ms`` is None also where no single backend covers the model
    alone."""

    plan: Plan
    charged: dict[Any, float]
    attempts: int
    searched_for: Plan | None
    single_ms: float | None


@dataclasses.dataclass
class _Attempts:
    """``search_checked``'s record while it runs: each measured plan by its partitions, each candidate as it
    ran in the last measured plan that held it, and the best measured plan (with its charged costs)."""

    key: dict[tuple[tuple[int, ...], str], Any]
    seen: dict[tuple, _Run] = dataclasses.field(default_factory=dict)
    in_plan: dict[Any, float] = dataclasses.field(default_factory=dict)
    best: tuple[Plan, dict[Any, float], tuple] | None = None


def _keep_if_best(state: _Attempts, plan: Plan, charged: dict[Any, float]) -> None:
    """``plan`` becomes ``state.best`` where it stands better against the single backends (or is that plan)."""
    shape, best = plan.parts(), state.best
    if best is None or state.seen[shape].standing < state.seen[best[2]].standing or shape == best[2]:
        state.best = (plan, charged, shape)  # the same plan again: its in-plan prediction


def search_checked(graph: Graph, costs: Mapping[Any, float], charges: dict[str, PartitionCharge],
                   do_search: Callable[[Mapping[Any, float]], Plan], stitch: Stitching, best_single_ms: float, *,
                   attempts: int = 3, singles: Mapping[str, Callable[[], object]] | None = None) -> Checked:
    """Search, stitch and measure the plan; where it loses to the best single backend, or measures outside
    ``MISPREDICTED`` of the search's prediction either way, price it as it ran and search again (module doc).

    Each measured plan's partitions are priced from then on as they ran inside it (``in_plan_costs``), and
    the difference between the plan's measurement and its prediction is charged per cut to its backends
    (``charges``, updated in place; a cut is never charged below 0): that is what the candidates never run in
    a plan learn from it. A plan the search comes back to (same partitions, same backends) is not measured
    again, and the attempts end there: priced as it ran, it is the search's choice.

    ``singles`` (each single backend's whole model, a call each) are timed in the same interleaved rounds as
    each plan, as the verification times them: the plan runs after the other runtimes as it will there,
    and it is judged against the best of them in those rounds (rather than the baselines' ``best_single_ms``,
    timed minutes before). Their whole models are then priced as they ran there too, so the next search weighs
    the mix against them at the same moment's level: where no mix ran faster than the singles beside it and the
    search then goes to one backend, that plan is returned, with a note.

    Otherwise the plan returned is the best measured mixed plan, by its time over the best single backend's
    in its own rounds (the caller's never-worse rule then decides against the single backends; a mix that
    lost is kept where the search, priced as it ran, comes back to it or the attempts run out), priced as it
    ran in the attempt that measured it; ``searched_for`` is that plan as the search priced it in that attempt,
    and the returned plan's notes say both; ``single_ms`` is the best single backend in that attempt's rounds
    (what the plan's predicted gain is against). ``do_search`` may be called more than once: the caller keeps
    what each call found beside the plan it returned. ``stitch.rounds``: each attempt's interleaved rounds.
    """
    state = _Attempts({(tuple(c.nodes), c.backend): c for c in costs})
    charged: dict[Any, float] = {}
    attempt = 0
    for attempt in range(1, attempts + 1):
        charged = charge_costs(costs, charges)
        charged.update(state.in_plan)
        plan = do_search(charged)
        if len(plan.partitions) == 1:
            if state.best is None:
                return Checked(plan, charged, attempt, None, None)
            if not any(r.won for r in state.seen.values()):
                return _one_backend_after_losing_mixes(plan, charged, attempt, state)
            break  # one backend, though a mix won in its rounds: the best mix stands (never-worse judges it)
        again = plan.parts() in state.seen
        if not again:
            _measure_attempt(graph, plan, attempt, stitch, singles, best_single_ms, state)
        _keep_if_best(state, plan, charged)
        if _attempts_end(plan, attempt, again, charges, state.seen[plan.parts()], stitch.progress, bool(singles)):
            break
    return _kept(state, attempt)


def _one_backend_after_losing_mixes(plan: Plan, charged: dict[Any, float], attempt: int,
                                    state: _Attempts) -> Checked:
    """No mix ran faster than the single backends timed beside it, and those priced as they ran there, the search
    goes to one backend: that is its choice, not a mix it measured losing."""
    assert state.best is not None
    closest = state.seen[state.best[2]]
    plan.notes.append(Note(NoteKind.SEARCH, f"no mix the search measured ran faster than the best single backend "
                           f"beside it (the closest, {len(state.best[2])} partitions: {closest.ms:.3f} ms beside "
                           f"{closest.single_ms:.3f} ms): the searched plan is one backend"))
    return Checked(plan, charged, attempt, None, closest.single_ms)


def _measure_attempt(graph: Graph, plan: Plan, attempt: int, stitch: Stitching,
                     singles: Mapping[str, Callable[[], object]] | None, best_single_ms: float,
                     state: _Attempts) -> None:
    """``plan`` exported, loaded and timed (each partition's call too) beside the single backends: its run into
    ``state.seen``, its partitions and the single backends' whole models as they ran into ``state.in_plan``."""
    from collage.runtime.artifact import PartitionTimes

    shape = plan.parts()
    clock = PartitionTimes(plan_artifact(graph, plan, stitch.work / f"attempt-{attempt}", stitch.target,
                                         stitch.backend_options), stitch.feeds)
    timed = measure_interleaved({"p": clock, **{f"single:{b}": fn for b, fn in (singles or {}).items()}},
                                rounds=stitch.rounds, warmed=clock.clear)
    plan_ms = timed.pop("p")
    run = _Run(plan_ms, min(timed.values(), default=best_single_ms), in_plan_costs(plan, clock.medians(), plan_ms),
               plan, {name.removeprefix("single:"): ms for name, ms in timed.items()})
    state.seen[shape] = run
    key, everything = state.key, tuple(range(len(graph)))
    state.in_plan.update({key[s]: ms for s, ms in zip(shape, run.as_ran) if s in key})
    # the single backends' whole models too, as they ran beside it: the next search weighs the mix against them
    # at the same moment's level
    state.in_plan.update({key[w]: ms for b, ms in run.singles.items() if (w := (everything, b)) in key})


def _attempts_end(plan: Plan, attempt: int, again: bool, charges: dict[str, PartitionCharge], run: _Run,
                  progress: bool, beside: bool) -> bool:
    """Whether the attempts end at ``plan`` (it won within ``MISPREDICTED`` of its prediction, it was found
    again, or there is nothing to charge); else its excess is charged per cut to its backends (``charges``)."""
    k, measured_ms = len(plan.partitions), run.ms
    predicted = plan.predicted_ms or 0.0
    say(progress, "attempt %d: %d partitions, predicted %.3f ms, measured %.3f ms%s (best single %.3f ms%s)",
        attempt, k, predicted, measured_ms, " before" if again else "", run.single_ms,
        " in the same rounds" if beside else "")
    if measured_ms < run.single_ms and predicted / MISPREDICTED <= measured_ms <= MISPREDICTED * predicted:
        return True
    if again:
        return True  # priced as it ran and still the search's choice: another attempt finds it again
    excess = (measured_ms - predicted) / (k - 1)
    if excess == 0 or (excess < 0 and all(charges.get(b, PartitionCharge()).cut_ms <= 0 for b in plan.backends)):
        return True  # nothing to charge: the prediction's parts, not its cuts, are off
    for b in plan.backends:
        was = charges.get(b, PartitionCharge())
        charges[b] = dataclasses.replace(was, cut_ms=max(0.0, was.cut_ms + excess))
    return False


def _kept(state: _Attempts, attempt: int) -> Checked:
    """The best measured plan, priced as it ran in the attempt that measured it."""
    assert state.best is not None
    kept, kept_charged, shape = state.best
    run, key = state.seen[shape], state.key
    if all(s in key for s in shape):
        kept_charged = {**kept_charged, **dict(zip((key[s] for s in shape), run.as_ran))}
        kept = priced_as(kept, run.as_ran)
        kept.notes.append(Note(NoteKind.SEARCH, f"the searched plan, priced as it ran: its partitions timed inside it "
                               f"in the search, {run.ms:.3f} ms end to end; searched for "
                               f"{run.searched_for.predicted_ms or 0.0:.3f} ms"))
    single_ms = run.single_ms if math.isfinite(run.single_ms) else None  # inf: no single backend to time beside it
    return Checked(kept, kept_charged, attempt, run.searched_for, single_ms)


def transitions_ms(plan: Plan) -> float:
    """The part of a plan's prediction that is its priced transitions (the rest is its partitions' costs)."""
    return (plan.predicted_ms or 0.0) - sum(p.cost_ms or 0.0 for p in plan.partitions)


def in_plan_costs(plan: Plan, part_ms: Sequence[float], measured_ms: float) -> list[float]:
    """Each partition of ``plan`` priced as it ran in it: its median call (``part_ms``) scaled so that the calls
    and the plan's priced transitions add up to its measurement (``measured_ms``: the calls, the artifact's
    own handling of the tensors between them, and any switch a call pays on entry). Priced so, the plan's
    prediction is its measurement (a measurement below its priced transitions alone prices every call at 0)."""
    calls = sum(part_ms)
    scale = max(0.0, measured_ms - transitions_ms(plan)) / calls if calls > 0 else 0.0
    return [ms * scale for ms in part_ms]


def priced_as(plan: Plan, part_costs: Sequence[float]) -> Plan:
    """``plan`` with its partitions' costs replaced by ``part_costs``: the same transitions, a new prediction."""
    from collage.search.cover import transitions_note

    moved = transitions_ms(plan)
    parts = [dataclasses.replace(p, cost_ms=ms) for p, ms in zip(plan.partitions, part_costs)]
    predicted = moved + sum(part_costs)
    notes = [transitions_note(moved, predicted) if kind_of(n) == NoteKind.TRANSITIONS else n for n in plan.notes]
    return Plan(parts, predicted, notes)


def whole_if_one_backend(graph: Graph, plan: Plan, costs: Mapping[Any, float], prec: Any = None,
                         outcome: Any = None) -> tuple[Plan, Any]:
    """``plan`` as it is, unless all its partitions are one backend's: then one backend on the whole model; with
    the precision ``outcome`` of the search that found it, as it holds for the plan returned.

    One runtime, one call instead of several: the search only cuts one backend's model where measurement noise
    made the pieces' costs sum below the whole model's. Needs that backend's whole-model candidate measured (in
    ``costs``) and, for a lower-precision backend, its own error within the accuracy budget
    (``prec.whole_model_within_budget``); the precision outcome then says so (``prec.use_whole_model``). An fp32
    plan merges into another fp32 backend's whole model where that is priced more than ``MISPREDICTED`` under its
    own: the pieces summed below every whole model, the merged price need not, but a difference inside the
    search's own band is noise. Lower-precision pieces merge into their own whole model only.
    """
    from collage.search.candidates import Candidate

    names = {p.backend for p in plan.partitions}
    if len(plan.partitions) < 2 or len(names) != 1:
        return plan, outcome
    (name,) = names
    n = len(graph)
    whole = Candidate(tuple(range(n)), name)
    if whole not in costs:
        return plan, outcome
    low = prec.low if prec is not None else frozenset()
    if name in low and whole not in prec.whole_model_within_budget():
        return plan, outcome
    others = [] if name in low else [c for c in costs
                                     if c.nodes == whole.nodes and c.backend != name and c.backend not in low]
    best = min([whole, *others], key=lambda c: costs[c] * (1.0 if c == whole else MISPREDICTED))
    note = f"one backend in {len(plan.partitions)} partitions: {best.backend} on the whole model instead (one call)"
    if best != whole:
        note += f", priced {costs[best]:.3f} ms against {name}'s whole model at {costs[whole]:.3f} ms"
    merged = Plan.single(best.backend, n, costs[best])
    merged.notes = [*plan.notes, Note(NoteKind.SEARCH, note)]
    if best.backend in low:
        outcome = prec.use_whole_model(outcome, best.backend, f"precision: {note}")
    return merged, outcome


def fill_boundaries(graph: Graph, plan: Plan) -> Plan:
    """``plan`` with each partition's boundary tensors and fingerprint."""
    parts = []
    for p in plan.partitions:
        ins, outs = graph.boundary(p.nodes)
        parts.append(Partition(p.nodes, p.backend, p.cost_ms, p.runner_up, tuple(ins), tuple(outs),
                               p.fingerprint or graph.fingerprint(p.nodes)))
    return Plan(parts, plan.predicted_ms, list(plan.notes))
