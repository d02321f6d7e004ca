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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collage.errors import CollageError
from collage.plan import Note, NoteKind, Partition, Plan
from collage.search.candidates import Candidate
from collage.search.cover import Transition, cover_cost, usable_costs

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

Parts = list[tuple[tuple[int, ...], str]]
MAX_MOVES = 3


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

    def __init__(self, graph: Graph, start: Parts, table: Mapping[tuple[int, ...], Mapping[str, float]],
                 can_run: Callable[[tuple[int, ...], str], bool] | None) -> None:
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
        out = set()
        for i in nodes:
            for j in list(self.graph.dag.successors(i)) + list(self.graph.dag.predecessors(i)):
                if owner[j] != owner[i]:
                    out.add(owner[j])
        return out

    def _moves(self, parts: Parts) -> list[tuple]:
        owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
        moves: list[tuple] = []
        for k, (nodes, b) in enumerate(parts):
            for other in sorted(self._neighbours(owner, nodes)):
                if other > k:
                    merged = tuple(sorted(nodes + parts[other][0]))
                    if self.graph.is_convex(merged):
                        for mb in self.backends:
                            if self.runnable(merged, mb):
                                moves.append(("merge", nodes[0], parts[other][0][0], mb))
            for mb in self.backends:
                if mb != b and self.runnable(nodes, mb):
                    moves.append(("switch", nodes[0], mb))
            if len(nodes) > 1:
                for u in nodes:
                    moves.append(("split", u))
                    for other in sorted(self._neighbours(owner, (u,))):
                        moves.append(("move", u, parts[other][0][0]))
        return moves

    def apply(self, parts: Parts, move: tuple) -> Parts | None:
        owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
        kind = move[0]
        new = list(parts)
        if kind == "switch":
            k = owner[move[1]]
            nodes, b = parts[k]
            if b == move[2] or not self.runnable(nodes, move[2]):
                return None
            new[k] = (nodes, move[2])
        elif kind == "merge":
            k1, k2 = owner[move[1]], owner[move[2]]
            if k1 == k2:
                return None
            merged = tuple(sorted(parts[k1][0] + parts[k2][0]))
            if not self.graph.is_convex(merged) or not self.runnable(merged, move[3]):
                return None
            new[k1] = (merged, move[3])
            del new[k2]
        elif kind == "split":
            u = move[1]
            k = owner[u]
            nodes, b = parts[k]
            rest = tuple(i for i in nodes if i != u)
            if not rest or not self.graph.is_convex(rest) or not self.runnable(rest, b) \
                    or not self.runnable((u,), b):
                return None
            new[k] = (rest, b)
            new.append(((u,), b))
        else:  # move
            u, k2 = move[1], owner[move[2]]
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


def _plan(graph: Graph, parts: Parts, table: Mapping[tuple[int, ...], Mapping[str, float]],
          transition: Transition | None) -> Plan:
    partitions = []
    for nodes, b in parts:
        opts = table.get(nodes, {})
        others = sorted((ms, o) for o, ms in opts.items() if o != b)
        entering, leaving = graph.boundary(nodes)
        partitions.append(Partition(nodes, b, opts.get(b), (others[0][1], others[0][0]) if others else None,
                                    tuple(entering), tuple(leaving), graph.fingerprint(nodes)))
    predicted = None
    if all(b in table.get(nodes, {}) for nodes, b in parts):
        compute, moved = cover_cost(graph, parts, table, transition)
        predicted = compute + moved
    return Plan(partitions, predicted_ms=predicted)


def _ranked_single_moves(graph: Graph, hood: _Neighbourhood, start: Parts,
                        table: Mapping[tuple[int, ...], Mapping[str, float]], transition: Transition | None) -> list[int]:
    """Indices of the moves that apply alone to the start plan, by predicted cost (unknown costs last)."""
    ranked = []
    seen: set[str] = set()
    for idx, move in enumerate(hood.moves):
        parts = hood.apply(start, move)
        if parts is None or executable_order(graph, parts) is None:
            continue
        key = _key(parts)
        if key in seen:
            continue
        seen.add(key)
        if all(b in table.get(nodes, {}) for nodes, b in parts):
            compute, moved = cover_cost(graph, parts, table, transition)
            ranked.append((compute + moved, idx))
        else:
            ranked.append((math.inf, idx))
    ranked.sort()
    return [idx for _, idx in ranked]


def refine(graph: Graph, plan: Plan, costs: Mapping[Candidate, Any], evaluate: Callable[[Plan], float], *,
           storage: str | None = None, study_name: str | None = None, n_trials: int = 20,
           timeout_s: float | None = None, seed: int = 0, transition: Transition | None = None,
           can_run: Callable[[tuple[int, ...], str], bool] | None = None) -> RefineResult:
    """Measure ``plan`` and plans near it with ``evaluate``; return the fastest measured (module docstring).

    ``evaluate(plan) -> ms`` stitches and measures a plan end to end (supplied by the caller); a
    ``CollageError`` from it fails that trial only. ``transition`` only fills in the predicted cost of
    the plans tried.
    """
    try:
        import optuna
    except ImportError as e:  # pragma: no cover - optuna is a declared dependency
        raise CollageError("refinement needs optuna: pip install 'collage[tune]'") from e
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
    name = study_name or "refine-" + hashlib.sha256(
        (graph.fingerprint(range(len(graph))) + "|" + start_key).encode()).hexdigest()[:16]
    sampler = optuna.samplers.TPESampler(seed=seed)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(storage=storage, study_name=name, direction="minimize", sampler=sampler,
                                    load_if_exists=True)
    except Exception as e:  # bad URL, unwritable file, ...
        optuna.logging.set_verbosity(verbosity)
        raise CollageError(f"cannot open the refinement study {name!r} at {storage!r}: {e}") from e
    # finished = measured or skipped; a trial cut short (FAIL: interrupted) is not finished and is re-run
    done_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    if study.user_attrs.get("start_key") not in (None, start_key):
        # the named study refined another start plan (costs changed since): its moves mean nothing here
        name = f"{name}-{hashlib.sha256(start_key.encode()).hexdigest()[:8]}"
        log.info("study %s refines another plan; using study %s", study.study_name, name)
        try:
            study = optuna.create_study(storage=storage, study_name=name, direction="minimize", sampler=sampler,
                                        load_if_exists=True)
        except Exception as e:
            optuna.logging.set_verbosity(verbosity)
            raise CollageError(f"cannot open the refinement study {name!r} at {storage!r}: {e}") from e
    finished = [t for t in study.get_trials(deepcopy=False) if t.state in done_states]
    study.set_user_attr("start_key", start_key)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    n_moves_max = min(MAX_MOVES, len(hood.moves))
    if not any(t.params.get("n_moves") == 0 for t in finished + waiting):
        study.enqueue_trial({"n_moves": 0})  # trial 0: the start plan itself
        if not finished:
            # then the single moves the costs rank best (the DP's runners-up), half the budget at most
            for idx in _ranked_single_moves(graph, hood, ordered, table, transition)[:max(0, n_trials // 2)]:
                study.enqueue_trial({"n_moves": 1, "move0": idx})
    evaluated = [0]
    measured: dict[str, float] = {}
    for t in finished:
        if t.state == optuna.trial.TrialState.COMPLETE and "key" in t.user_attrs:
            measured.setdefault(t.user_attrs["key"], t.value)

    def objective(trial: optuna.Trial) -> float:
        k = trial.suggest_int("n_moves", 0, n_moves_max)
        parts: Parts | None = list(ordered)
        for m in range(k):
            idx = trial.suggest_int(f"move{m}", 0, len(hood.moves) - 1)
            parts = hood.apply(parts, hood.moves[idx]) if parts is not None else None
            if parts is None:
                trial.set_user_attr("skipped", f"move {hood.moves[idx]} does not apply")
                raise optuna.TrialPruned()
        parts = executable_order(graph, parts)
        if parts is None:
            trial.set_user_attr("skipped", "no executable order")
            raise optuna.TrialPruned()
        key = _key(parts)
        trial.set_user_attr("key", key)
        trial.set_user_attr("parts", [[list(nodes), b] for nodes, b in parts])
        trial.set_user_attr("summary", _summary(parts))
        if key in measured:
            trial.set_user_attr("reused", True)
            return measured[key]
        candidate = _plan(graph, parts, table, transition)
        try:
            ms = float(evaluate(candidate))
        except CollageError as e:
            trial.set_user_attr("error", str(e))
            log.warning("refine trial %d failed: %s", trial.number, e)
            raise optuna.TrialPruned() from e
        evaluated[0] += 1
        if not math.isfinite(ms):
            trial.set_user_attr("error", f"evaluate returned {ms}")
            raise optuna.TrialPruned()
        measured[key] = ms
        return ms

    before = len(finished)
    remaining = max(0, n_trials - before)
    try:
        if remaining:
            study.optimize(objective, n_trials=remaining, timeout=timeout_s, catch=())
    finally:
        optuna.logging.set_verbosity(verbosity)
    trials = [t for t in study.get_trials(deepcopy=False) if t.state in done_states]
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    start_trials = [t for t in complete if t.user_attrs.get("key") == start_key]
    if not start_trials:
        raise CollageError(f"{graph.name}: the start plan could not be measured (see the log); nothing to refine")
    start_ms = float(start_trials[0].value)
    best = min(complete, key=lambda t: (t.value, t.number))
    if best.value < start_ms:
        parts = [(tuple(nodes), b) for nodes, b in best.user_attrs["parts"]]
        result_plan = _plan(graph, parts, table, transition)
        result_plan.notes.append(Note(NoteKind.REFINEMENT, f"refined: measured {best.value:.3f} ms against "
                                      f"{start_ms:.3f} ms for the DP plan (trial {best.number} of {len(trials)})"))
        best_ms = float(best.value)
    else:
        result_plan = plan  # the very object passed in: nothing measured beat it
        log.info("refinement kept the start plan: measured %.3f ms, no better plan in %d trials", start_ms,
                 len(trials))
        best_ms = start_ms
    history = [(t.number, t.value if t.state == optuna.trial.TrialState.COMPLETE else None,
                t.user_attrs.get("summary") or t.user_attrs.get("skipped") or t.user_attrs.get("error", ""))
               for t in trials]
    return RefineResult(result_plan, best_ms, start_ms, len(trials), len(trials) - before, evaluated[0], name,
                        history)
