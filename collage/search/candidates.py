"""Candidate enumeration: the convex, connected node sets each backend could run as one piece.

A *candidate* is a (node set, backend) pair. For each backend, :func:`enumerate_candidates` yields
every convex, connected set of nodes that the backend supports entirely and that fits the
:class:`Limits` (node count, longest path, number of heavy ops), plus -- always, whatever the
limits -- every single supported node and the whole graph when the backend takes all of it. A node
with a subgraph (If, Loop, Scan: ``Graph.is_control_flow``) is a candidate of its own here, never
grown into a larger set (the whole graph, and the tuner's coarse ranges, still hold it).

How the sets are grown (all on ``int`` bitsets, see ``Graph.mask``):

* A set ``S`` is convex iff no node outside it lies on a path between two of its nodes, i.e.
  ``D(S) & A(S) & ~S == 0`` where ``D(S)`` / ``A(S)`` are the unions of its members' descendant /
  ancestor masks. Both unions are kept with every set, so growth by one node is O(1) bitset work.
* Growing ``S`` by a neighbour ``u`` may break convexity; instead of dropping ``S | u`` we take its
  convex hull ``H = T | (D(T) & A(T))`` (``T = S | u``): the nodes on paths between members. ``H`` is
  convex (a path between hull nodes runs from a member to a member) and connected, and
  ``D(H) == D(T)``, ``A(H) == A(T)`` because hull nodes are descendants and ancestors of members.
* Completeness: every convex connected set ``C`` with ``|C| >= 2`` has a source or sink node whose
  removal leaves a convex connected set (take a leaf block of ``C``'s block-cut tree: it has a source
  and a sink other than its cut vertex, and removing an extreme node never creates a path that leaves
  and re-enters). So every such ``C`` is reached from a singleton by single-node growth through sets
  that are all convex, connected, supported and within the (monotone) limits; the hull step only
  reaches some of them sooner. Sets are deduplicated by mask.

The order of the result is deterministic: by backend name, then size, then sorted node ids.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collage.errors import CollageError

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: Ops that dominate a subgraph's latency; by default a candidate holds at most one of them, so that
#: the measured costs say which backend wins per heavy op rather than per arbitrary chain of them.
HEAVY_OPS = frozenset({
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "MatMulInteger", "QLinearMatMul",
    "Gemm", "Einsum", "Attention", "LSTM", "GRU", "RNN",
})


@dataclass(frozen=True)
class Candidate:
    """A node set (sorted graph node ids) on one backend."""

    nodes: tuple[int, ...]
    backend: str

    def __post_init__(self) -> None:
        nodes = tuple(sorted(set(int(i) for i in self.nodes)))
        if not nodes:
            raise CollageError(f"a candidate for backend {self.backend!r} needs at least one node")
        object.__setattr__(self, "nodes", nodes)

    @property
    def mask(self) -> int:
        m = 0
        for i in self.nodes:
            m |= 1 << i
        return m

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Candidate({self.backend}:{list(self.nodes)})"


@dataclass
class Limits:
    """Bounds on the candidates enumerated per backend (the whole graph and single nodes ignore them).

    ``max_nodes``: most nodes in a candidate (a value past the graph's node count counts as the node count: nothing is
    allocated by it). ``max_depth``: most nodes on the longest path inside a
    candidate (``None``: no bound). ``max_heavy``: most ops from ``heavy_ops`` in one candidate, except
    for backends in ``fuses_heavy`` (known to fuse across heavy ops). ``max_per_backend``: cap on the
    number of candidates per backend; single nodes are always kept, then the smallest sets
    (``None``: no cap). ``ranges``: the tuner adds the coarse range candidates of
    :mod:`collage.search.ranges` (segments, prefixes and suffixes between the graph's narrow cuts).
    """

    max_nodes: int = 12
    max_depth: int | None = None
    max_heavy: int = 1
    heavy_ops: frozenset[str] = field(default_factory=lambda: HEAVY_OPS)
    fuses_heavy: frozenset[str] = frozenset()
    max_per_backend: int | None = None
    ranges: bool = True


def _popcount(x: int) -> int:
    return x.bit_count()


def _bits(mask: int) -> Iterable[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _depth(mask: int, preds: list[int]) -> int:
    """Nodes on the longest path inside ``mask`` (ids are topological, so one ascending pass)."""
    longest: dict[int, int] = {}
    best = 0
    for i in _bits(mask):
        d = 1 + max((longest[j] for j in _bits(preds[i] & mask)), default=0)
        longest[i] = d
        best = max(best, d)
    return best


@dataclass(frozen=True)
class _Bitsets:
    """The graph as bitsets, per node: its neighbours either way, descendants, ancestors and predecessors; and
    the heavy nodes (``Limits.heavy_ops``)."""

    adj: list[int]
    desc: list[int]
    anc: list[int]
    preds: list[int]
    heavy: int


def _grow(allowed: int, max_heavy: int | None, limits: Limits, graph_bits: _Bitsets) -> list[int]:
    """Every convex connected set within ``allowed`` and the limits, as masks (singletons included)."""
    adj, desc, anc, preds, heavy = graph_bits.adj, graph_bits.desc, graph_bits.anc, graph_bits.preds, graph_bits.heavy
    max_nodes = max(1, min(limits.max_nodes, allowed.bit_count()))  # never more levels than nodes to fill them
    cap = limits.max_per_backend
    seen: set[int] = set()
    by_size: list[list[tuple[int, int, int, int]]] = [[] for _ in range(max_nodes + 1)]
    for i in _bits(allowed):
        m = 1 << i
        seen.add(m)
        by_size[1].append((m, desc[i], anc[i], adj[i]))
    found: list[int] = [m for m, *_ in by_size[1]]
    for size in range(1, max_nodes):
        level = by_size[size]
        by_size[size] = []  # free as we go
        for s, d, a, nb in level:
            ext = nb & ~s & allowed
            while ext:
                low = ext & -ext
                ext ^= low
                u = low.bit_length() - 1
                t = s | low
                d2 = d | desc[u]
                a2 = a | anc[u]
                h = t | (d2 & a2)
                if h in seen:
                    continue
                seen.add(h)
                if h & ~allowed:
                    continue
                k = _popcount(h)
                if k > max_nodes:
                    continue
                if max_heavy is not None and _popcount(h & heavy) > max_heavy:
                    continue
                nb2 = nb | adj[u]
                extra = h & ~t
                for j in _bits(extra):
                    nb2 |= adj[j]
                if limits.max_depth is not None and _depth(h, preds) > limits.max_depth:
                    continue
                by_size[k].append((h, d2, a2, nb2))
                found.append(h)
        if cap is not None and len(found) >= cap:
            break
    if cap is not None and len(found) > cap:
        singles = [m for m in found if m & (m - 1) == 0]
        multi = sorted((m for m in found if m & (m - 1)), key=lambda m: (_popcount(m), _ids_key(m)))
        found = singles + multi[:max(0, cap - len(singles))]
    return found


def _ids_key(mask: int) -> tuple[int, ...]:
    return tuple(_bits(mask))


def enumerate_candidates(graph: Graph, supports: Mapping[str, Mapping[int, bool]],
                         limits: Limits | None = None) -> list[Candidate]:
    """Candidates per backend (see the module docstring); sorted by backend, size, node ids.

    ``supports[backend][node_id]`` says whether the backend takes the node; a missing node id
    counts as unsupported.
    """
    limits = limits or Limits()
    n = len(graph)
    full = (1 << n) - 1
    preds = [0] * n
    adj = [0] * n
    for u, v in graph.dag.edges:
        preds[v] |= 1 << u
        adj[u] |= 1 << v
        adj[v] |= 1 << u
    desc = [graph.desc_mask(i) for i in range(n)]
    anc = [graph.anc_mask(i) for i in range(n)]
    heavy = 0
    atomic = 0  # control flow (If, Loop, Scan): a candidate of its own, never part of a larger one
    for i in range(n):
        if graph.op_type(i) in limits.heavy_ops:
            heavy |= 1 << i
        if graph.is_control_flow(i):
            atomic |= 1 << i
    graph_bits = _Bitsets(adj, desc, anc, preds, heavy)
    out: list[Candidate] = []
    memo: dict[tuple[int, bool], list[int]] = {}
    for backend in sorted(supports):
        table = supports[backend]
        allowed = 0
        for i, ok in table.items():
            if ok:
                if not 0 <= int(i) < n:
                    raise CollageError(f"supports[{backend!r}] names node {i}, but {graph.name} has nodes 0..{n - 1}")
                allowed |= 1 << int(i)
        exempt = backend in limits.fuses_heavy
        key = (allowed, exempt)
        if key not in memo:
            memo[key] = _grow(allowed & ~atomic, None if exempt else limits.max_heavy, limits, graph_bits) + [
                1 << i for i in _bits(allowed & atomic)]
        masks = list(memo[key])
        if allowed == full and full not in masks:
            masks.append(full)
        masks.sort(key=lambda m: (_popcount(m), _ids_key(m)))
        out.extend(Candidate(tuple(_bits(m)), backend) for m in masks)
        log.debug("%s: %d candidates on %s", graph.name, len(masks), backend)
    return out


def candidate_counts(cands: Iterable[Candidate]) -> dict[str, int]:
    """Number of candidates per backend (sorted by backend name)."""
    counts: dict[str, int] = {}
    for c in cands:
        counts[c.backend] = counts.get(c.backend, 0) + 1
    return dict(sorted(counts.items()))
