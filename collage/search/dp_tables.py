"""Tables the search (:mod:`collage.search.dp`) precomputes once per call: one :class:`Group` per node
set with usable costs, its hand-over costs per producer, and the terms of the chain heuristic.

The chain heuristic (admissible and consistent, so A*-style pruning by ``g + h`` stays exact):

* Per node ``i`` and backend ``b``, a *share* ``s_b(i)``: every candidate's cost on ``b`` is split
  over its nodes in proportion to weights (their single-node costs on ``b``), ``s_b(i)`` is the
  smallest share ``i`` gets, and rounds of dual ascent then raise the shares while every candidate
  still costs at least its nodes' sum (:func:`_shares`). A partition on ``b`` costs at least the sum of
  its nodes' ``s_b``.
* *Chains*: each node keeps at most one incoming and one outgoing graph edge (dearest hand-overs first),
  so the kept edges form disjoint paths. A kept edge ``u -> c`` with ``u`` and ``c`` on different
  backends is a tensor that ``c``'s partition reads from another backend: a hand-over every plan pays,
  and no two kept edges name the same (partition, tensor) because ``u`` keeps one outgoing edge.
* ``h(state)`` is, summed over the chains' uncovered parts, the cheapest assignment of backends to
  their nodes (shares plus kept-edge hand-overs), where the chain's last covered node has the backend
  its frontier digit says. Chains are paths, so that is a small DP done once per node: ``W[c][b]``
  (the cheapest rest of ``c``'s chain from ``c`` on, its kept parent being on ``b``) and ``W0[c]``
  (``c`` heads its chain). A step changes ``h`` only through its own nodes and their kept children,
  so each group carries those terms; ``h`` never drops by more than the step's cost (consistency).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from collage.errors import CollageError

if TYPE_CHECKING:
    from collage.graph.ir import Graph

#: Costs are compared in integer units of 1e-6 ms (nanoseconds): sums are exact, so "equal cost"
#: is well defined for the partition-count tie-break.
SCALE = 1_000_000


def quantize(ms: float) -> int:
    return int(round(ms * SCALE))


class HandOver:
    """``(src, dst, nbytes) -> int``: the quantized cost of handing ``nbytes`` from backend index ``src`` to ``dst``
    (``transition`` on the backends' names, in ms; 0 without one), cached. A cost that is not a finite,
    non-negative number of ms is a CollageError. The DP, the ILP and the module-by-module search price
    hand-overs with it, so their integer costs agree."""

    def __init__(self, backends: Sequence[str], transition: Callable[[str, str, int], float] | None) -> None:
        self.backends, self.transition = list(backends), transition
        self.cache: dict[tuple[int, int, int], int] = {}

    def __call__(self, src: int, dst: int, nbytes: int) -> int:
        key = (src, dst, nbytes)
        hit = self.cache.get(key)
        if hit is None:
            backends = self.backends
            ms = float(self.transition(backends[src], backends[dst], nbytes)) if self.transition else 0.0
            if not math.isfinite(ms) or ms < 0:
                raise CollageError(f"transition cost {backends[src]} -> {backends[dst]} for {nbytes} bytes is {ms}; "
                                   "it must be a finite, non-negative number of ms")
            hit = self.cache[key] = quantize(ms)
        return hit


#: Per producer backend, per reader backend: a quantized hand-over (:func:`hand_over_rows`).
Rows = tuple[tuple[int, ...], ...]
#: What a step reads from one producer outside: (the producer's frontier shift, its hand-over rows, the
#: heuristic terms the read settles, by the producer's backend).
Read = tuple[int, Rows, tuple[int, ...]]


@dataclass
class Group:
    """One node set with its usable costs, precomputed for the search (see :func:`prepare`)."""

    nodes: tuple[int, ...]
    mask: int
    ext_pred: int                            # predecessors outside the set
    outs: tuple[int, ...]                    # member nodes with a consumer outside the set
    options: tuple[tuple[int, int], ...]     # (backend index, quantized cost)
    reads: dict[int, tuple[int, ...]]        # producer outside -> nbytes of each distinct tensor read from it
    # filled by prepare (the last three for the frontier encoding of collage.search.dp.CoverSearch):
    hconst: int = 0                   # heuristic terms of members that head a chain
    hadd: tuple[int, ...] = ()        # per backend: heuristic terms of the chain successors this step uncovers
    least: int = 0                    # a lower bound on the growth of g + h over the step, whatever the backends
    at: tuple[Read, ...] = ()         # per tensor read: (frontier shift of its producer, hand-over rows, h terms)
    outs_mask: int = 0                # ``outs`` as a mask
    fresh: tuple[int, ...] = ()       # per backend: the frontier digits of ``outs`` on it


def build_groups(graph: Graph, table: Mapping[tuple[int, ...], Mapping[str, float]], bidx: Mapping[str, int],
                 preds: list[int], succ: list[int]) -> list[Group]:
    """One :class:`Group` per node set of ``table`` (``{nodes: {backend: ms}}``), sorted by nodes."""
    n = len(graph)
    node_reads = [graph.reads(i) for i in range(n)]
    producer = {t: graph.producer(t) for ts in node_reads for t in ts}
    size_of = {t: graph.tensor(t).nbytes for t, p in producer.items() if p is not None}
    # per node, (producer, tensor) of each tensor it reads from another node
    inputs = [tuple((p, t) for t in ts if (p := producer[t]) is not None) for ts in node_reads]
    groups: list[Group] = []
    for nodes, opts in sorted(table.items()):
        mask = ext_pred = 0
        for i in nodes:
            mask |= 1 << i
            ext_pred |= preds[i]
        ext_pred &= ~mask
        names: dict[int, list[str]] = {}  # producer outside -> the distinct tensors read from it
        if ext_pred:
            for i in nodes:
                for p, t in inputs[i]:
                    if not (mask >> p) & 1:
                        ts = names.get(p)
                        if ts is None:
                            names[p] = [t]
                        elif t not in ts:
                            ts.append(t)
        reads = {p: tuple([size_of[t] for t in ts]) for p, ts in names.items()}
        outside = ~mask
        outs = tuple([i for i in nodes if succ[i] & outside])
        options = tuple([(bidx[b], quantize(ms)) for b, ms in sorted(opts.items())])
        groups.append(Group(nodes, mask, ext_pred, outs, options, reads))
    return groups


def hand_over_rows(sizes: tuple[int, ...], nb: int, hand_over: Callable[[int, int, int], int]) -> Rows:
    """Per producer backend ``a``, per reader backend ``b``: what reading tensors of ``sizes`` bytes from ``a``
    costs on ``b`` (0 on the same backend)."""
    return tuple(tuple(sum(hand_over(a, b, s) for s in sizes) if a != b else 0 for b in range(nb)) for a in range(nb))


def drop_dominated_options(groups: list[Group], nb: int, hand_over: Callable[[int, int, int], int],
                           out_tensors: list[list[tuple[int, int]]]) -> int:
    """Drop each group's backend options that another of its options beats whatever the rest of the plan;
    returns how many were dropped.

    Option ``b`` of a group is dominated by ``b2`` when ``q(b2) + into + out_of < q(b)``: ``into``, the most
    that reading the group's inputs on ``b2`` can cost over reading them on ``b`` (per producer, the largest
    difference of their hand-over rows over the producer's backends), and ``out_of``, the most its outputs
    can cost later partitions more (per output tensor, its readers outside the group x its dearest
    hand-over: a later partition reading it pays ``T(b2, d)`` instead of ``T(b, d)``, at most that more).
    Every plan with the group on ``b`` then has one with it on ``b2``, the same partitions, strictly cheaper,
    so no optimal plan is lost, nor the partition-count tie-break. ``out_tensors`` per node: (readers mask,
    dearest hand-over) of each output tensor read (``CoverSearch._out_tensors``)."""
    dropped = 0
    rise: dict[tuple[tuple[int, ...], int, int], int] = {}  # (sizes read from one producer, b, b2) -> into's term
    for g in groups:
        if len(g.options) < 2:
            continue
        out_of = 0
        for u in g.outs:
            for readers, worst in out_tensors[u]:
                out_of += (readers & ~g.mask).bit_count() * worst
        keep = []
        for b, q in g.options:
            for b2, q2 in g.options:
                if b2 == b or q2 + out_of >= q:
                    continue
                into = 0
                for sizes in g.reads.values():
                    term = rise.get((sizes, b, b2))
                    if term is None:
                        rows = hand_over_rows(sizes, nb, hand_over)
                        term = rise[(sizes, b, b2)] = max(row[b2] - row[b] for row in rows)
                    into += term
                if q2 + into + out_of < q:
                    break
            else:
                keep.append((b, q))
                continue
            dropped += 1
        g.options = tuple(keep)
    return dropped


_INF = 1 << 62


#: Rounds of dual ascent on the shares (:func:`_shares`); each raises the start's heuristic (Inception-v2,
#: synthetic costs: see results/search/search-time.md) and costs one pass over the candidates' nodes in numpy.
ASCENT_ROUNDS = 12


def _shares(n: int, groups: list[Group], nb: int) -> list[list[int]]:
    """Per node and backend the share ``s_b(i)`` (module docstring), as large as this finds while every
    candidate on ``b`` still costs at least the sum of its nodes' shares (dual feasibility of the cover's
    LP relaxation, per backend: so the heuristic stays admissible and consistent).

    Start: each candidate's cost split over its nodes in proportion to their single-node costs, and a
    node's share the smallest it gets. Then ``ASCENT_ROUNDS`` rounds of dual ascent: a candidate whose cost
    exceeds its nodes' shares by ``slack`` lets each of its ``k`` nodes rise by ``slack // k``, and a node
    rises by the least any of its candidates lets it (so no candidate's sum passes its cost). Where a few
    fused candidates make a node's proportional share small, this moves the bound toward the LP's."""
    rows_b: list[int] = []
    rows_q: list[int] = []
    sizes: list[int] = []
    flat: list[int] = []
    for g in groups:
        for b, price in g.options:
            rows_b.append(b)
            rows_q.append(price)
            sizes.append(len(g.nodes))
            flat.extend(g.nodes)
    if not rows_q:
        return [[_INF] * nb for _ in range(n)]
    row_b = np.array(rows_b, np.int64)
    q = np.array(rows_q, np.int64)
    k = np.array(sizes, np.int64)
    row = np.repeat(np.arange(q.size), k)
    key = np.array(flat, np.int64) * nb + row_b[row]       # (node, backend) of each entry
    single = np.full(n * nb, -1, np.int64)
    ones = k == 1
    single[key[np.repeat(ones, k)]] = q[ones]
    per_node = single.reshape(n, nb)
    fallback = np.where(per_node >= 0, per_node, np.iinfo(np.int64).max).min(axis=1)
    fallback[fallback == np.iinfo(np.int64).max] = 0
    w = np.where(single >= 0, single, np.repeat(fallback, nb))[key]
    total = np.bincount(row, weights=w, minlength=q.size).astype(np.int64)
    part = np.where(total[row] > 0, (q[row] * w) // np.maximum(total[row], 1), q[row] // k[row])
    share = np.full(n * nb, _INF, np.int64)
    np.minimum.at(share, key, part)
    for _ in range(ASCENT_ROUNDS):
        used = np.bincount(row, weights=share[key], minlength=q.size)
        rise = (q - np.rint(used).astype(np.int64)) // k   # >= 0 while the shares are feasible
        step = np.full(n * nb, _INF, np.int64)
        np.minimum.at(step, key, rise[row])
        if not (step[step < _INF] > 0).any():
            break
        share = np.where(step < _INF, share + np.maximum(step, 0), share)
    return share.reshape(n, nb).tolist()


def _chains(graph: Graph, groups: list[Group], nb: int, hand_over: Callable[[int, int, int], int]
            ) -> tuple[list[int | None], list[list[int]], list[int]]:
    """The chain heuristic (module docstring): per node ``c``, its kept parent (or None), ``W[c][b]``
    (the cheapest completion of ``c``'s chain when the parent runs on ``b``) and ``W0[c]`` (any start)."""
    n = len(graph)
    share = _shares(n, groups, nb)
    # chains: each node keeps at most one in-edge and one out-edge, the dearest hand-overs first
    edges = []
    for u, c, data in graph.dag.edges(data=True):
        cost = [[0] * nb for _ in range(nb)]
        for t in data["tensors"]:
            nbytes = graph.tensor(t).nbytes
            for a in range(nb):
                for b in range(nb):
                    if a != b:
                        cost[a][b] += hand_over(a, b, nbytes)
        low = min((cost[a][b] for a in range(nb) for b in range(nb) if a != b), default=0)
        if low > 0:
            edges.append((-low, u, c, cost))
    edges.sort(key=lambda e: e[:3])
    parent: list[int | None] = [None] * n
    child: list[tuple[int, list[list[int]]] | None] = [None] * n
    for _, u, c, cost in edges:
        if child[u] is None and parent[c] is None:
            child[u] = (c, cost)
            parent[c] = u
    V: list[list[int]] = [[]] * n
    W: list[list[int]] = [[0] * nb for _ in range(n)]
    W0 = [0] * n
    for c in reversed(range(n)):  # ids are topological: a chain's child comes later
        V[c] = list(share[c])
        kept = child[c]
        if kept is not None:
            d = kept[0]
            for b in range(nb):
                if V[c][b] < _INF:
                    V[c][b] += W[d][b]
        W0[c] = min(V[c])
        up = parent[c]
        if up is not None:
            into = child[up]
            assert into is not None  # c is its parent's kept child
            cost = into[1]
            W[c] = [min(V[c][b2] + cost[b][b2] for b2 in range(nb)) for b in range(nb)]
    return parent, W, W0


def prepare(graph: Graph, groups: list[Group], nb: int, bits: int, hand_over: Callable[[int, int, int], int]) -> int:
    """Fill each group's hand-over tables, heuristic terms and frontier digits; returns the start's h."""
    parent, W, W0 = _chains(graph, groups, nb, hand_over)
    n = len(graph)
    kids: list[list[int]] = [[] for _ in range(n)]
    for c, p in enumerate(parent):
        if p is not None:
            kids[p].append(c)
    pad = (0,) * ((1 << bits) - nb)  # digit values past the last backend
    zero = (0,) * nb
    rows_cache: dict[tuple[int, ...], Rows] = {}
    head = [W0[c] if parent[c] is None else 0 for c in range(n)]  # the chain heads' terms
    kid_terms = [tuple(W[c]) + pad for c in range(n)]           # h terms of c, by its kept parent's backend
    kid_max = [max(t) for t in kid_terms]
    no_terms = zero + pad
    for g in groups:
        mask = g.mask
        at, read_max = [], 0
        for p, sizes in sorted(g.reads.items()):
            rows = rows_cache.get(sizes)
            if rows is None:
                rows = rows_cache[sizes] = hand_over_rows(sizes, nb, hand_over) + (zero,) * ((1 << bits) - nb)
            hw, top = no_terms, 0
            for c in kids[p]:
                if (mask >> c) & 1:
                    hw, top = kid_terms[c], kid_max[c]
            at.append((p * bits, rows, hw))
            read_max += top
        g.at = tuple(at)
        g.hconst = hconst = sum([head[c] for c in g.nodes])
        hadd = [0] * nb
        outs_mask = low = 0
        for u in g.outs:
            outs_mask |= 1 << u
            low |= 1 << (u * bits)
            for c in kids[u]:
                if not (mask >> c) & 1:
                    for b, w in enumerate(W[c]):
                        hadd[b] += w
        g.hadd = tuple(hadd)
        g.least = min([q + hadd[b] for b, q in g.options]) - hconst - read_max
        g.outs_mask = outs_mask
        g.fresh = tuple([b * low for b in range(nb)])
    return sum(head)
