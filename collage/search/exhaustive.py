"""Brute-force reference for the search (tests only; graphs up to ~14 nodes, few candidates).

It shares no logic with :mod:`collage.search.dp` beyond the cost table: it enumerates every exact
cover by candidate node sets (each cover once, choosing at every step a set containing the smallest
uncovered node), every backend for every set, keeps the covers whose partitions can run in some order
(the quotient graph is acyclic), prices each complete assignment from scratch (partition costs plus,
per partition and distinct tensor it reads from another backend, the transition cost) and returns the
cheapest, fewest partitions on equal cost. A branch stops once its partial price (a lower bound, all
costs being non-negative) exceeds the best complete one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from collage.errors import CollageError
from collage.plan import Plan
from collage.search.cost import CostTable
from collage.search.cover import Part, Transition, to_plan, usable_costs
from collage.search.dp_tables import quantize

if TYPE_CHECKING:
    from collage.graph.ir import Graph

#: Refuse graphs larger than this: the enumeration is exponential.
MAX_NODES = 16


def _executable_order(graph: Graph, parts: list[Part]) -> list[int] | None:
    """Indices of ``parts`` in a runnable order (smallest first node among the ready ones), or None."""
    owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
    needs: list[set[int]] = [set() for _ in parts]
    for u, v in graph.dag.edges:
        if owner[u] != owner[v]:
            needs[owner[v]].add(owner[u])
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(parts):
        ready = [k for k in range(len(parts)) if k not in done and needs[k] <= done]
        if not ready:
            return None
        k = min(ready, key=lambda k: parts[k][0][0])
        order.append(k)
        done.add(k)
    return order


def exhaustive_search(graph: Graph, costs: CostTable, transition: Transition | None = None) -> Plan:
    """The optimal executable exact cover by brute force (see the module docstring)."""
    n = len(graph)
    if n > MAX_NODES:
        raise CollageError(f"exhaustive_search is a test reference for graphs up to {MAX_NODES} nodes; "
                           f"{graph.name} has {n}")
    table = usable_costs(graph, costs)
    by_min: dict[int, list[tuple[int, ...]]] = {}
    for nodes in sorted(table):
        by_min.setdefault(nodes[0], []).append(nodes)
    # distinct tensors each node set reads from outside: (producer, nbytes)
    reads: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for nodes in table:
        entering, _ = graph.boundary(nodes)
        reads[nodes] = [(p, graph.tensor(t).nbytes) for t in entering if (p := graph.producer(t)) is not None]

    def move(src: str, dst: str, nbytes: int) -> int:
        return quantize(float(transition(src, dst, nbytes))) if transition is not None else 0

    best: list[tuple[tuple[int, int], list[Part]]] = []  # the cheapest complete cover so far: ((cost, parts), parts)
    owner: dict[int, str] = {}
    chosen: list[Part] = []

    def priced_so_far() -> int:
        total = sum(quantize(table[nodes][b]) for nodes, b in chosen)
        for nodes, b in chosen:
            for p, nbytes in reads[nodes]:
                if p in owner and owner[p] != b:
                    total += move(owner[p], b, nbytes)
        return total

    def recurse(covered: int) -> None:
        partial = (priced_so_far(), len(chosen))
        if best and partial > best[0][0]:
            return
        if covered == (1 << n) - 1:
            if _executable_order(graph, chosen) is not None:
                best[:] = [(partial, list(chosen))]
            return
        v = (~covered & (covered + 1)).bit_length() - 1
        for nodes in by_min.get(v, []):
            mask = graph.mask(nodes)
            if mask & covered:
                continue
            for b in sorted(table[nodes]):
                chosen.append((nodes, b))
                for i in nodes:
                    owner[i] = b
                recurse(covered | mask)
                for i in nodes:
                    del owner[i]
                chosen.pop()

    recurse(0)
    if not best:
        raise CollageError(f"{graph.name}: no executable exact cover exists for these candidates")
    parts = best[0][1]
    order = _executable_order(graph, parts)
    assert order is not None  # kept only with an executable order
    return to_plan(graph, [parts[k] for k in order], table, transition)
