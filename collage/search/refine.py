"""Refinement of the DP's plan by measured end-to-end latency (an Optuna study over its neighbourhood).

The DP optimises the sum of isolated candidate costs plus modelled transitions; the stitched model can
differ (cold weights in a chain, thread pools handing cores over). :func:`refine` measures the DP plan
(trial 0), then plans near it, and keeps the fastest *measured* one, so the result is never worse than
the measured DP plan.

Neighbourhood: a trial applies 0-3 moves drawn from a list fixed by the start plan, each named by
node ids so that it still means something after the others:

* ``merge a c b``: merge the partitions holding nodes ``a`` and ``c`` (adjacent), run on backend ``b``;
* ``move u c``: move boundary node ``u`` into the neighbouring partition holding node ``c``;
* ``switch a b``: run the partition holding node ``a`` on backend ``b``;
* ``split u``: take node ``u`` out of its partition into one of its own (same backend).

A move applies only if every resulting partition is convex and runnable on its backend (it has a
usable cost, or ``can_run(nodes, backend)`` says yes); the result must be an exact cover with an
executable order (partitions are reordered, smallest first node among the ready ones), or the trial is
pruned without measuring. A plan measured once in the study is not measured again. After the start
plan, a fresh study first measures the single moves the costs rank best (up to half of ``n_trials``:
the DP's runners-up), then lets Optuna's TPE sampler combine moves.

Resumable: with ``storage`` (a database URL such as ``sqlite:///costs.db``; the cost database file is
fine) a second call with the same ``study_name`` continues the study; ``n_trials`` is the study's
total, so finished trials are not run again (a study that refined another start plan is not reused:
the name gets a suffix). Stops at ``n_trials`` or after ``timeout_s``. When nothing beats the start
plan, ``RefineResult.plan`` is the very ``plan`` object passed in.
"""
from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias

from collage.errors import CollageError
from collage.plan import Note, NoteKind, Partition, Plan
from collage.search.cost import Cost, CostTable
from collage.search.cover import Part, Transition, UsableCosts, cover_cost, usable_costs

if TYPE_CHECKING:
    import optuna

    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

Parts: TypeAlias = list[Part]
#: ``can_run(nodes, backend)``: whether the backend runs the node set (a CollageError counts as no).
CanRun: TypeAlias = Callable[[tuple[int, ...], str], bool]
MAX_MOVES = 3


class Move(NamedTuple):
    """One move of the neighbourhood (module docstring), named by node ids: ``kind`` and ``node`` (merge and
    switch: a node of the partition; move and split: the node that moves), ``other`` (merge: a node of the
    other partition; move: a node of the partition it goes to) and ``backend`` (merge and switch)."""

    kind: Literal["merge", "switch", "split", "move"]
    node: int
    other: int = -1
    backend: str = ""

    def __str__(self) -> str:  # as the study's "skipped" notes have said it
        fields: dict[str, tuple[object, ...]] = {"merge": (self.other, self.backend), "switch": (self.backend,),
                                                 "split": (), "move": (self.other,)}
        return str((self.kind, self.node, *fields[self.kind]))


@dataclass
class RefineResult:
    """What :func:`refine` found. ``plan``: the best measured plan (the start plan unless a trial beat
    it); ``measured_ms``: its measured latency; ``start_ms``: the start plan's; ``trials``: finished
    trials in the study (all calls); ``new_trials``: those run by this call; ``evaluated``: plans
    measured by this call; ``history``: (trial number, measured ms or None, plan summary)."""

    plan: Plan
    measured_ms: float
    start_ms: float
    trials: int
    new_trials: int = 0
    evaluated: int = 0
    study_name: str = ""
    history: list[tuple[int, float | None, str]] = field(default_factory=list)

    @property
    def improved(self) -> bool:
        return self.measured_ms < self.start_ms


def _key(parts: Parts) -> str:
    return ";".join(f"{b}:{','.join(map(str, nodes))}" for nodes, b in sorted(parts))


def _summary(parts: Parts) -> str:
    return " ".join(f"{b}[{len(nodes)}]" for nodes, b in parts)


class _Neighbourhood:
    """The start plan's moves and how to apply them."""

    def __init__(self, graph: Graph, start: Parts, table: UsableCosts, can_run: CanRun | None) -> None:
        self.graph = graph
        self.table = table
        self.can_run = can_run
        self._runnable: dict[tuple[tuple[int, ...], str], bool] = {}
        self.backends = sorted({b for opts in table.values() for b in opts} | {b for _, b in start})
        self.moves = self._moves(start)

    def runnable(self, nodes: tuple[int, ...], backend: str) -> bool:
        key = (nodes, backend)
        if key not in self._runnable:
            ok = backend in self.table.get(nodes, {})
            if not ok and self.can_run is not None:
                try:
                    ok = bool(self.can_run(nodes, backend))
                except CollageError as e:
                    log.debug("can_run(%s, %s): %s", list(nodes), backend, e)
                    ok = False
            self._runnable[key] = ok
        return self._runnable[key]

    def _neighbours(self, owner: dict[int, int], nodes: tuple[int, ...]) -> set[int]:
        out: set[int] = set()
        for i in nodes:
            for j in list(self.graph.dag.successors(i)) + list(self.graph.dag.predecessors(i)):
                if owner[j] != owner[i]:
                    out.add(owner[j])
        return out

    def _moves(self, parts: Parts) -> list[Move]:
        owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
        moves: list[Move] = []
        for k, (nodes, b) in enumerate(parts):
            for other in sorted(self._neighbours(owner, nodes)):
                if other > k:
                    merged = tuple(sorted(nodes + parts[other][0]))
                    if self.graph.is_convex(merged):
                        for mb in self.backends:
                            if self.runnable(merged, mb):
                                moves.append(Move("merge", nodes[0], parts[other][0][0], mb))
            for mb in self.backends:
                if mb != b and self.runnable(nodes, mb):
                    moves.append(Move("switch", nodes[0], backend=mb))
            if len(nodes) > 1:
                for u in nodes:
                    moves.append(Move("split", u))
                    for other in sorted(self._neighbours(owner, (u,))):
                        moves.append(Move("move", u, parts[other][0][0]))
        return moves

    def apply(self, parts: Parts, move: Move) -> Parts | None:
        """``parts`` after ``move``, or None where it does not apply (module docstring)."""
        owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
        kind = move.kind
        new = list(parts)
        if kind == "switch":
            k = owner[move.node]
            nodes, b = parts[k]
            if b == move.backend or not self.runnable(nodes, move.backend):
                return None
            new[k] = (nodes, move.backend)
        elif kind == "merge":
            k1, k2 = owner[move.node], owner[move.other]
            if k1 == k2:
                return None
            merged = tuple(sorted(parts[k1][0] + parts[k2][0]))
            if not self.graph.is_convex(merged) or not self.runnable(merged, move.backend):
                return None
            new[k1] = (merged, move.backend)
            del new[k2]
        elif kind == "split":
            u = move.node
            k = owner[u]
            nodes, b = parts[k]
            rest = tuple(i for i in nodes if i != u)
            if not rest or not self.graph.is_convex(rest) or not self.runnable(rest, b) \
                    or not self.runnable((u,), b):
                return None
            new[k] = (rest, b)
            new.append(((u,), b))
        else:  # move
            u, k2 = move.node, owner[move.other]
            k1 = owner[u]
            if k1 == k2 or len(parts[k1][0]) == 1:
                return None
            src = tuple(i for i in parts[k1][0] if i != u)
            dst = tuple(sorted(parts[k2][0] + (u,)))
            if not (self.graph.is_convex(src) and self.graph.is_convex(dst)):
                return None
            if not (self.runnable(src, parts[k1][1]) and self.runnable(dst, parts[k2][1])):
                return None
            new[k1] = (src, parts[k1][1])
            new[k2] = (dst, parts[k2][1])
        return new


def executable_order(graph: Graph, parts: Parts) -> Parts | None:
    """``parts`` in a runnable order (smallest first node among the ready ones), or None if none exists."""
    owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
    needs: list[set[int]] = [set() for _ in parts]
    for u, v in graph.dag.edges:
        if owner[u] != owner[v]:
            needs[owner[v]].add(owner[u])
    order: Parts = []
    done: set[int] = set()
    remaining = set(range(len(parts)))
    while remaining:
        ready = [k for k in remaining if needs[k] <= done]
        if not ready:
            return None
        k = min(ready, key=lambda k: parts[k][0][0])
        order.append(parts[k])
        done.add(k)
        remaining.discard(k)
    return order


def _predicted(graph: Graph, parts: Parts, table: UsableCosts, transition: Transition | None) -> Cost:
    """What the search's prices say ``parts`` cost; unknown where a part has no usable cost."""
    if not all(b in table.get(nodes, {}) for nodes, b in parts):
        return Cost.unknown("a partition has no usable cost")
    compute, moved = cover_cost(graph, parts, table, transition)
    return Cost.of(compute + moved)


def _plan(graph: Graph, parts: Parts, table: UsableCosts, transition: Transition | None) -> Plan:
    partitions = []
    for nodes, b in parts:
        opts = table.get(nodes, {})
        others = sorted((ms, o) for o, ms in opts.items() if o != b)
        entering, leaving = graph.boundary(nodes)
        partitions.append(Partition(nodes, b, opts.get(b), (others[0][1], others[0][0]) if others else None,
                                    tuple(entering), tuple(leaving), graph.fingerprint(nodes)))
    predicted = _predicted(graph, parts, table, transition)
    return Plan(partitions, predicted_ms=predicted.ms if predicted.is_value else None)


def _ranked_single_moves(graph: Graph, hood: _Neighbourhood, start: Parts, table: UsableCosts,
                         transition: Transition | None) -> list[int]:
    """Indices of the moves that apply alone to the start plan, by predicted cost (unknown costs last)."""
    ranked: list[tuple[tuple[int, float], int]] = []
    seen: set[str] = set()
    for idx, move in enumerate(hood.moves):
        parts = hood.apply(start, move)
        if parts is None or executable_order(graph, parts) is None:
            continue
        key = _key(parts)
        if key in seen:
            continue
        seen.add(key)
        ranked.append((_predicted(graph, parts, table, transition).rank(), idx))
    ranked.sort()
    return [idx for _, idx in ranked]


@dataclass(frozen=True)
class RefineOptions:
    """The refinement's Optuna study: where it lives (``storage``, a database URL; None: in memory), its name
    (``study_name``; None: derived from the graph and the start plan), its total ``n_trials``, a wall-clock
    ``timeout_s`` for this call, and the sampler's ``seed``."""

    storage: str | None = None
    study_name: str | None = None
    n_trials: int = 20
    timeout_s: float | None = None
    seed: int = 0


def refine(graph: Graph, plan: Plan, costs: CostTable, evaluate: Callable[[Plan], float], *,
           options: RefineOptions | None = None, transition: Transition | None = None,
           can_run: CanRun | None = None) -> RefineResult:
    """Measure ``plan`` and plans near it with ``evaluate``; return the fastest measured (module docstring).

    ``evaluate(plan) -> ms`` stitches and measures a plan end to end (supplied by the caller); a
    ``CollageError`` from it fails that trial only. ``transition`` only fills in the predicted cost of
    the plans tried.
    """
    try:
        import optuna
    except ImportError as e:  # pragma: no cover - optuna is a declared dependency
        raise CollageError("refinement needs optuna: pip install 'collage[tune]'") from e
    options = options if options is not None else RefineOptions()
    table = usable_costs(graph, costs)
    start: Parts = [(tuple(p.nodes), p.backend) for p in plan.partitions]
    ordered = executable_order(graph, start)
    try:
        plan.check_cover(len(graph))
    except ValueError as e:
        raise CollageError(f"{graph.name}: the plan to refine is not an exact cover: {e}") from None
    if ordered is None:
        raise CollageError(f"{graph.name}: the plan to refine has no executable order")
    hood = _Neighbourhood(graph, start, table, can_run)
    start_key = _key(start)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = _open_study(graph, start_key, options)
        finished = _finished(study)
        _enqueue_start(study, finished, lambda: _ranked_single_moves(graph, hood, ordered, table, transition)
                       [:max(0, options.n_trials // 2)])
        objective = _Objective(graph, hood, ordered, table, transition, evaluate, finished)
        remaining = max(0, options.n_trials - len(finished))
        if remaining:
            study.optimize(objective, n_trials=remaining, timeout=options.timeout_s, catch=())
    finally:
        optuna.logging.set_verbosity(verbosity)
    return _result(graph, plan, study, start_key, objective, len(finished))


def _open_study(graph: Graph, start_key: str, options: RefineOptions) -> optuna.Study:
    """The named study (created, or loaded to resume); one that refined another start plan (the costs changed
    since) is left alone and a study of a suffixed name used instead."""
    import optuna

    name = options.study_name or "refine-" + hashlib.sha256(
        (graph.fingerprint(range(len(graph))) + "|" + start_key).encode()).hexdigest()[:16]
    sampler = optuna.samplers.TPESampler(seed=options.seed)
    study = _create_study(name, options.storage, sampler)
    if study.user_attrs.get("start_key") not in (None, start_key):
        # the named study refined another start plan (costs changed since): its moves mean nothing here
        name = f"{name}-{hashlib.sha256(start_key.encode()).hexdigest()[:8]}"
        log.info("study %s refines another plan; using study %s", study.study_name, name)
        study = _create_study(name, options.storage, sampler)
    study.set_user_attr("start_key", start_key)
    return study


def _create_study(name: str, storage: str | None, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    import optuna

    try:
        return optuna.create_study(storage=storage, study_name=name, direction="minimize", sampler=sampler,
                                   load_if_exists=True)
    except Exception as e:  # bad URL, unwritable file, ...
        raise CollageError(f"cannot open the refinement study {name!r} at {storage!r}: {e}") from e


def _finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's finished trials: measured or skipped (a trial cut short, FAIL: interrupted, is run again)."""
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [t for t in study.get_trials(deepcopy=False) if t.state in done]


def _enqueue_start(study: optuna.Study, finished: list[optuna.trial.FrozenTrial],
                   ranked: Callable[[], list[int]]) -> None:
    """Trial 0, the start plan itself, unless the study has it; in a fresh study then the single moves
    ``ranked()`` (the costs' best first: the DP's runners-up)."""
    import optuna

    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    if any(t.params.get("n_moves") == 0 for t in finished + waiting):
        return
    study.enqueue_trial({"n_moves": 0})
    if not finished:
        for idx in ranked():
            study.enqueue_trial({"n_moves": 1, "move0": idx})


class _Objective:
    """One trial: up to ``MAX_MOVES`` moves applied to the start plan, the result put in an executable order and
    measured with ``evaluate`` (a plan measured before in the study is not measured again)."""

    def __init__(self, graph: Graph, hood: _Neighbourhood, ordered: Parts, table: UsableCosts,
                 transition: Transition | None, evaluate: Callable[[Plan], float],
                 finished: list[optuna.trial.FrozenTrial]) -> None:
        import optuna

        self.graph, self.hood, self.ordered, self.table = graph, hood, ordered, table
        self.transition, self.evaluate = transition, evaluate
        self.n_moves_max = min(MAX_MOVES, len(hood.moves))
        self.evaluated = 0
        self.measured: dict[str, float] = {}
        for t in finished:
            if t.state == optuna.trial.TrialState.COMPLETE and "key" in t.user_attrs and t.value is not None:
                self.measured.setdefault(t.user_attrs["key"], t.value)

    def __call__(self, trial: optuna.Trial) -> float:
        import optuna

        hood = self.hood
        parts: Parts | None = list(self.ordered)
        for m in range(trial.suggest_int("n_moves", 0, self.n_moves_max)):
            idx = trial.suggest_int(f"move{m}", 0, len(hood.moves) - 1)
            parts = hood.apply(parts, hood.moves[idx]) if parts is not None else None
            if parts is None:
                trial.set_user_attr("skipped", f"move {hood.moves[idx]} does not apply")
                raise optuna.TrialPruned()
        assert parts is not None  # every move applied
        parts = executable_order(self.graph, parts)
        if parts is None:
            trial.set_user_attr("skipped", "no executable order")
            raise optuna.TrialPruned()
        key = _key(parts)
        trial.set_user_attr("key", key)
        trial.set_user_attr("parts", [[list(nodes), b] for nodes, b in parts])
        trial.set_user_attr("summary", _summary(parts))
        if key in self.measured:
            trial.set_user_attr("reused", True)
            return self.measured[key]
        return self.measure(trial, key, _plan(self.graph, parts, self.table, self.transition))

    def measure(self, trial: optuna.Trial, key: str, candidate: Plan) -> float:
        import optuna

        try:
            ms = float(self.evaluate(candidate))
        except CollageError as e:
            trial.set_user_attr("error", str(e))
            log.warning("refine trial %d failed: %s", trial.number, e)
            raise optuna.TrialPruned() from e
        self.evaluated += 1
        if not math.isfinite(ms):
            trial.set_user_attr("error", f"evaluate returned {ms}")
            raise optuna.TrialPruned()
        self.measured[key] = ms
        return ms


def _result(graph: Graph, plan: Plan, study: optuna.Study, start_key: str, objective: _Objective,
            before: int) -> RefineResult:
    """The fastest measured plan of the study (``plan`` itself unless a trial beat it)."""
    import optuna

    trials = _finished(study)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    start_trials = [t for t in complete if t.user_attrs.get("key") == start_key]
    if not start_trials:
        raise CollageError(f"{graph.name}: the start plan could not be measured (see the log); nothing to refine")
    start_ms = _value(start_trials[0])
    best = min(complete, key=lambda t: (_value(t), t.number))
    if _value(best) < start_ms:
        parts = [(tuple(nodes), b) for nodes, b in best.user_attrs["parts"]]
        result_plan = _plan(graph, parts, objective.table, objective.transition)
        result_plan.notes.append(Note(NoteKind.REFINEMENT, f"refined: measured {_value(best):.3f} ms against "
                                      f"{start_ms:.3f} ms for the DP plan (trial {best.number} of {len(trials)})"))
        best_ms = _value(best)
    else:
        result_plan = plan  # the very object passed in: nothing measured beat it
        log.info("refinement kept the start plan: measured %.3f ms, no better plan in %d trials", start_ms,
                 len(trials))
        best_ms = start_ms
    history = [(t.number, t.value if t.state == optuna.trial.TrialState.COMPLETE else None,
                t.user_attrs.get("summary") or t.user_attrs.get("skipped") or t.user_attrs.get("error", ""))
               for t in trials]
    return RefineResult(result_plan, best_ms, start_ms, len(trials), len(trials) - before, objective.evaluated,
                        study.study_name, history)


def _value(trial: optuna.trial.FrozenTrial) -> float:
    """A complete trial's measured ms."""
    assert trial.value is not None  # complete trials of a single-objective study have one
    return float(trial.value)
