"""Covers and plans: the usable costs of a cost table, the cost of a cover, and the Plan of one.

What the search (:mod:`collage.search.dp`), the brute-force reference (:mod:`collage.search.exhaustive`)
and the refinement (:mod:`collage.search.refine`) share: ``usable_costs`` reads a cost table
(``{Candidate: raw cost}``, each read by :meth:`collage.search.cost.Cost.of`) into ``{nodes: {backend: ms}}``,
the values only; ``cover_cost`` prices a cover (partition costs plus one
``transition(src, dst, nbytes)`` per distinct tensor a partition reads from a node on another
backend); ``plan_from_parts`` / ``to_plan`` make it a :class:`~collage.plan.Plan`; ``check_plan``
checks that a plan is an executable exact cover by convex partitions.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from collage.errors import CollageError
from collage.plan import Note, NoteKind, Partition, Plan
from collage.search.cost import Cost, CostTable

if TYPE_CHECKING:
    from collage.graph.ir import Graph

#: ``transition(src, dst, nbytes)``: ms to hand a tensor of ``nbytes`` from backend ``src`` to ``dst``.
Transition: TypeAlias = Callable[[str, str, int], float]
#: A partition as the searches build it: its sorted node ids and its backend.
Part: TypeAlias = tuple[tuple[int, ...], str]
#: The usable costs of a cost table (:func:`usable_costs`): ``{nodes: {backend: ms}}``, every ms a value.
UsableCosts: TypeAlias = Mapping[tuple[int, ...], Mapping[str, float]]


def usable_costs(graph: Graph, costs: CostTable) -> dict[tuple[int, ...], dict[str, float]]:
    """Usable costs grouped by node set: ``{nodes: {backend: ms}}``; failed and unknown costs are dropped
    (:class:`~collage.search.cost.Cost`)."""
    n = len(graph)
    table: dict[tuple[int, ...], dict[str, float]] = {}
    for cand, raw in costs.items():
        if type(raw) is float and 0.0 <= raw < math.inf:  # a value, read without a Cost (NaN fails both tests)
            ms = raw
        else:
            cost = Cost.of(raw)
            if not cost.is_value:
                continue
            ms = cost.ms
        if cand.nodes[0] < 0 or cand.nodes[-1] >= n:
            raise CollageError(f"candidate {cand} names a node outside {graph.name} (nodes 0..{n - 1}); "
                               "were the costs computed for another model?")
        table.setdefault(cand.nodes, {})[cand.backend] = ms
    return table


def cover_cost(graph: Graph, parts: Sequence[Part], table: UsableCosts,
               transition: Transition | None) -> tuple[float, float]:
    """(sum of partition costs, sum of transition costs) of a cover, in ms."""
    owner: dict[int, str] = {}
    for nodes, b in parts:
        for i in nodes:
            owner[i] = b
    compute = sum(table[nodes][b] for nodes, b in parts)
    moved = 0.0
    for nodes, b in parts:
        entering, _ = graph.boundary(nodes)
        for t in entering:
            p = graph.producer(t)
            if p is not None and owner[p] != b and transition is not None:
                moved += float(transition(owner[p], b, graph.tensor(t).nbytes))
    return compute, moved


def to_plan(graph: Graph, parts: Sequence[Part], table: UsableCosts, transition: Transition | None) -> Plan:
    """The Plan of ``parts`` in their order, every part with a usable cost in ``table``."""
    partitions = []
    for nodes, b in parts:
        others = [(ms, other) for other, ms in table[nodes].items() if other != b]
        runner_up = (min(others)[1], min(others)[0]) if others else None
        entering, leaving = graph.boundary(nodes)
        partitions.append(Partition(tuple(nodes), b, table[nodes][b], runner_up, tuple(entering), tuple(leaving),
                                    graph.fingerprint(nodes)))
    compute, moved = cover_cost(graph, parts, table, transition)
    plan = Plan(partitions, predicted_ms=compute + moved)
    if moved:
        plan.notes.append(transitions_note(moved, compute + moved))
    return plan


#: the words a transitions note (``transitions_note``, kind ``transitions``) begins with
TRANSITIONS_NOTE = "transitions between backends:"


def transitions_note(moved_ms: float, predicted_ms: float) -> Note:
    """The plan note that says how much of its prediction is transitions (kind ``transitions``)."""
    return Note(NoteKind.TRANSITIONS, f"{TRANSITIONS_NOTE} {moved_ms:.3f} ms of the predicted {predicted_ms:.3f} ms")


def plan_from_parts(graph: Graph, parts: Sequence[tuple[Sequence[int], str]], costs: CostTable,
                    transition: Transition | None = None) -> Plan:
    """A Plan (boundaries, fingerprints, runner-ups, predicted ms) for given ``(nodes, backend)`` parts.

    Every part needs a usable cost in ``costs``; the order is kept as given (check it with
    :func:`check_plan`).
    """
    table = usable_costs(graph, costs)
    for nodes, b in parts:
        if b not in table.get(tuple(nodes), {}):
            raise CollageError(f"no usable cost for nodes {list(nodes)} on {b}")
    return to_plan(graph, [(tuple(nodes), b) for nodes, b in parts], table, transition)


def check_plan(graph: Graph, plan: Plan) -> None:
    """Raise CollageError unless ``plan`` is an exact cover of ``graph`` by convex partitions whose
    inputs are produced by earlier partitions (or are graph inputs / weights)."""
    try:
        plan.check_cover(len(graph))
    except ValueError as e:
        raise CollageError(f"{graph.name}: plan is not an exact cover: {e}") from None
    done: set[str] = set(graph.inputs) | set(graph.initializers)
    for k, p in enumerate(plan.partitions):
        if not graph.is_convex(p.nodes):
            raise CollageError(f"{graph.name}: partition {k} ({p.backend}, nodes {list(p.nodes)}) is not convex")
        entering, leaving = graph.boundary(p.nodes)
        for t in entering:
            if t not in done:
                raise CollageError(f"{graph.name}: partition {k} ({p.backend}) reads {t!r} before any earlier "
                                   "partition produces it (not an executable order)")
        for i in p.nodes:
            done.update(o for o in graph.op(i).output if o)
