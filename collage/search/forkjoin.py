"""The cover solved module by module, where the graph is a series of fork-join modules of plain chains.

Inception's shape (and ResNet's, MobileNet's, a plain chain's): nodes after which nothing computed earlier
is read any more (a module's Concat, a residual block's Add), and between two of them parallel chains of
nodes. The DP over covered sets (:mod:`collage.search.dp`) has to visit every combination of the chains'
progress before a module's join (a candidate taking the ends of several branches with the Concat blocks
each of them): ~110,000 states on Inception-v2 with three backends. Here the same optimum is found with
the chains solved apart.

Structure (:func:`structure`; None where the graph has another shape, and the DP answers):

* *Separators* ``s_1 < ... < s_L``: nodes ``x`` after which no node before ``x`` is read any more, with
  every node before ``x`` upstream of it and every node after it downstream (node ids are a topological
  order). Module ``k`` is the nodes strictly between ``s_k``
  and ``s_{k+1}`` (``s_0`` before the graph, ``s_{L+1}`` after it).
* Each module's nodes form *chains* ``n_0 -> ... -> n_{l-1}``: ``n_0`` reads only the opening separator
  (nothing in module 0), each later node only its chain predecessor, each node but the last is read only
  by the next, the last only by the closing separator (by nothing in module L). The closing separator
  reads only chain ends and the opening separator (a chain of length 0).
* Every node set with a usable cost is a *piece* (a contiguous stretch of one chain, no separator) or a
  *hub* (a run of consecutive separators ``s_j..s_m``, every node between them, a suffix of each chain of
  module ``j - 1`` and a prefix of each chain of module ``m``). Convex, connected candidates always are.

Why this is exact. Each plan has exactly one partition holding each separator, a hub; a hub holding
``s_j..s_m`` holds all of modules ``j..m-1``. Given the hubs on both sides of module ``k``, each of its
chains is the hubs' prefix and suffix around a middle tiled by pieces, and the plan's cost (partitions,
plus one hand-over per distinct tensor a partition reads from a node on another backend) splits into:
the hubs' own costs; per chain, its middle's pieces and the hand-overs into the middle, inside it and
out of it into the next hub (each depends only on this chain and the two hubs' node sets and backends);
and the tensors of the opening separator the next hub reads directly (chains it holds entirely, where
the first hub holds no head of it). So, per module, each chain's cheapest middle for every (prefix,
backend before, suffix, backend after) is a small DP along the chain, and the hubs are chosen by a DP in
separator order: a hub's value is its cost plus the cheapest, over the hubs ending at the previous
separator (grouped by their prefixes and backend), of that hub's value plus the module's chains and
direct reads between the two. Every plan this builds is executable (pieces read their chain predecessor
or the hub before, a hub reads the module before it), and every plan is one it considers.

Costs are the DP's integers (:func:`collage.search.dp_tables.quantize` per candidate and per hand-over),
carried as ``cost << 16 | partitions`` in int64 so that sums keep the DP's tie-break (fewest partitions
among the equally cheap) exactly; every term is capped at 2^60 ("no cover"), so a plan dearer than 2^44 ns
(~4.9 hours) is left to the DP. The plan found is priced again from scratch as the DP prices it before it
is returned; a difference would be a bug here, and the DP answers instead.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from collage.plan import Plan
from collage.search.cost import CostTable
from collage.search.cover import Transition, to_plan, usable_costs
from collage.search.dp_tables import HandOver, quantize

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: Bits of a key below the cost: the partition count (a plan has at most one partition per node).
PART_BITS = 16
_ONE = 1                     # one partition, as a key
_INF = 1 << 60               # no cover; sums are clipped to it
#: Chains per module beyond which the direct-read masks (int64 bit sets, sign bit left alone) would not hold them.
MAX_CHAINS = 62

#: ``ForkJoinStats.why_not`` when the modules admit no plan (the DP then says which node is stuck).
NO_PLAN = "no plan found module by module (no cover, or one dearer than the keys hold)"

Tensors: TypeAlias = tuple[tuple[str, int], ...]  # (name, nbytes) of each distinct tensor read across one edge
Options: TypeAlias = tuple[tuple[int, int], ...]  # (backend index, quantized cost) of one node set
Signature: TypeAlias = tuple[tuple[int, ...], int]  # a hub's heads (or tails) per chain, and its backend index
#: per end position, per backend: (key, start of the last piece, backend before it) of the cheapest tiling
Tiling: TypeAlias = list[list[tuple[int, int, int]]]
Tilings: TypeAlias = dict[tuple[int, int], "Tiling | None"]  # by (heads, backend before)


@dataclass
class Chain:
    """One chain of a module: its nodes in order and, per position ``t`` in ``0..len(nodes)``, the tensors
    read across the edge into ``t`` (``t == 0``: from the opening separator; ``t == len``: by the closing
    one; empty at the graph's ends). A chain of no nodes is the closing separator reading the opening one."""

    nodes: tuple[int, ...]
    edges: tuple[Tensors, ...]


@dataclass
class ForkJoin:
    """The graph as separators and modules of chains (module docstring)."""

    separators: tuple[int, ...]            # s_1..s_L (node ids)
    modules: tuple[tuple[Chain, ...], ...]  # modules 0..L
    where: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # node -> (module, chain, position)


@dataclass
class ForkJoinStats:
    """What the last :func:`forkjoin_search` did: modules and chains, hubs and pieces (node sets), seconds."""

    applicable: bool = False  # the graph and its candidates have the shape
    solved: bool = False      # ... and the plan came from here
    why_not: str = ""
    modules: int = 0
    chains: int = 0
    hubs: int = 0
    pieces: int = 0
    seconds: float = 0.0


def structure(graph: Graph) -> ForkJoin | str:
    """The graph's separators and chains, or a sentence saying why it has no such shape."""
    n = len(graph)
    preds: list[set[int]] = [set() for _ in range(n)]
    succs: list[set[int]] = [set() for _ in range(n)]
    for u, v in graph.dag.edges:
        preds[v].add(u)
        succs[u].add(v)
    seps, reach = [], -1  # reach: the last reader of any node before x
    full = (1 << n) - 1
    for x in range(n):
        # nothing before x read after it, everything before it upstream of it, everything after it downstream
        if (reach <= x and graph.anc_mask(x) == (1 << x) - 1 and graph.desc_mask(x) == full & ~((2 << x) - 1)
                and (succs[x] or x == n - 1)):
            seps.append(x)
        if succs[x]:
            reach = max(reach, max(succs[x]))
    if not seps:
        return "no separator: no node that every node before leads to and every node after comes from"
    bounds = [-1, *seps, n]
    modules: list[tuple[Chain, ...]] = []
    where: dict[int, tuple[int, int, int]] = {}
    for k in range(len(seps) + 1):
        opener = bounds[k] if k > 0 else None
        closer = bounds[k + 1] if k < len(seps) else None
        inside = range(bounds[k] + 1, bounds[k + 1])
        starts = [v for v in inside if preds[v] == ({opener} if opener is not None else set())]
        chains: list[Chain] = []
        seen = 0
        for v in starts:
            nodes = [v]
            while True:
                s = succs[nodes[-1]]
                if s == ({closer} if closer is not None else set()):
                    break
                w = next(iter(s)) if len(s) == 1 else None
                if w is None or w not in inside or preds[w] != {nodes[-1]}:
                    return f"module {k} is not parallel chains: {graph.node_label(nodes[-1])} does not lead a chain"
                nodes.append(w)
            seen += len(nodes)
            chains.append(Chain(tuple(nodes), ()))
        if seen != len(inside):
            return f"module {k} is not parallel chains (nodes {bounds[k] + 1}..{bounds[k + 1] - 1})"
        if closer is not None:
            ends = {c.nodes[-1] for c in chains}
            extra = preds[closer] - ends - ({opener} if opener is not None else set())
            if extra:
                return f"{graph.node_label(closer)} reads a node outside the chains before it"
            if opener is not None and opener in preds[closer]:
                chains.append(Chain((), ()))
        if len(chains) > MAX_CHAINS:
            return f"module {k} has {len(chains)} chains (at most {MAX_CHAINS})"
        for i, c in enumerate(chains):
            line = [opener, *c.nodes, closer]
            chains[i] = Chain(c.nodes, tuple(_edge(graph, line[t], line[t + 1]) for t in range(len(c.nodes) + 1)))
            for t, v in enumerate(c.nodes):
                where[v] = (k, i, t)
        modules.append(tuple(chains))
    return ForkJoin(tuple(seps), tuple(modules), where)


def _edge(graph: Graph, src: int | None, dst: int | None) -> Tensors:
    if src is None or dst is None:
        return ()
    names = dict.fromkeys(graph.dag.edges[src, dst]["tensors"])
    return tuple((t, graph.tensor(t).nbytes) for t in names)


@dataclass
class _Hub:
    nodes: tuple[int, ...]
    first: int                      # index (1..L) of its first separator
    last: int                       # ... and of its last
    tails: tuple[int, ...]          # per chain of module first - 1: how many of its last nodes it holds
    heads: tuple[int, ...]          # per chain of module last: how many of its first nodes it holds
    options: Options


#: The cheapest way to a module's start with a signature: (key, the hub and backend index before; None at the
#: graph's start).
Reached: TypeAlias = tuple[int, "tuple[_Hub, int] | None"]


@dataclass
class _Joined:
    """One module solved between its hubs (``_Solve.solve``): the chains' tables and tilings, the signatures on
    both sides, and per in-signature the out-signature of its cheapest key."""

    tables: list[tuple[np.ndarray, Tilings]]
    sigs_out: list[tuple[Signature, Reached]]
    sigs_in: list[Signature]
    arg: np.ndarray


def forkjoin_search(graph: Graph, costs: CostTable, transition: Transition | None = None,
                    *, stats: ForkJoinStats | None = None) -> Plan | None:
    """The cheapest executable exact cover, solved module by module (module docstring); None where the graph
    or its candidates do not have that shape, where no cover exists (the DP then says which node is stuck) or
    the cheapest costs more than the keys hold (2^44 ns, ~4.9 hours), or where its plan does not cost what
    it priced (a bug; logged): ``stats.why_not`` says which, and the caller asks the DP."""
    stats = stats if stats is not None else ForkJoinStats()
    for f in fields(stats):  # this call's, whatever an earlier one left
        setattr(stats, f.name, f.default)
    t0 = time.perf_counter()
    try:
        plan = _Solve(graph, costs, transition, stats).run()
        stats.solved = plan is not None
        return plan
    finally:
        stats.seconds = time.perf_counter() - t0


class _NotApplicable(Exception):
    pass


class _Solve:
    def __init__(self, graph: Graph, costs: CostTable, transition: Transition | None,
                 stats: ForkJoinStats) -> None:
        self.graph, self.transition, self.stats = graph, transition, stats
        self.costs = costs

    # ------------------------------------------------------------------ set-up
    def run(self) -> Plan | None:
        graph, stats = self.graph, self.stats
        if len(graph) >= 1 << PART_BITS:
            stats.why_not = f"{len(graph)} nodes (at most {(1 << PART_BITS) - 1})"
            return None
        fj = structure(graph)
        if isinstance(fj, str):
            stats.why_not = fj
            return None
        self.fj = fj
        self.table = usable_costs(graph, self.costs)
        self.backends = sorted({b for opts in self.table.values() for b in opts})
        self.nb = len(self.backends)
        self.hand_over = HandOver(self.backends, self.transition)
        try:
            self.classify()
        except _NotApplicable as e:
            stats.why_not = str(e)
            return None
        stats.applicable = True
        stats.modules, stats.chains = len(fj.modules), sum(len(m) for m in fj.modules)
        stats.hubs, stats.pieces = len(self.hubs), sum(len(p) for p in self.pieces.values())
        return self.solve()

    def classify(self) -> None:
        """Each node set a piece of one chain or a hub (module docstring), or _NotApplicable."""
        fj, graph = self.fj, self.graph
        sep_index = {s: j + 1 for j, s in enumerate(fj.separators)}
        bounds = [-1, *fj.separators, len(graph)]
        bidx = {b: k for k, b in enumerate(self.backends)}
        self.pieces: dict[tuple[int, int], dict[tuple[int, int], Options]] = {}
        self.hubs: list[_Hub] = []
        where = fj.where
        place = [where.get(v) for v in range(len(graph))]  # (module, chain, position); None for a separator
        for nodes, opts in self.table.items():
            options = tuple((bidx[b], quantize(ms)) for b, ms in sorted(opts.items()))
            first = place[nodes[0]]
            if first is not None and len(nodes) == 1:
                self.pieces.setdefault(first[:2], {})[(first[2], first[2] + 1)] = options
                continue
            seps = [sep_index[v] for v in nodes if place[v] is None]
            if not seps:
                assert first is not None  # no separator among the nodes: the first is on a chain
                k, i, t = first
                if place[nodes[-1]] != (k, i, t + len(nodes) - 1) or any(where[v][:2] != (k, i) for v in nodes):
                    raise _NotApplicable(f"candidate {list(nodes)} is not a stretch of one chain")
                self.pieces.setdefault((k, i), {})[(t, t + len(nodes))] = options
                continue
            self.hubs.append(self.hub(nodes, seps, bounds, options))

    def hub(self, nodes: tuple[int, ...], seps: list[int], bounds: list[int], options: Options) -> _Hub:
        """A node set holding separators as a hub, or _NotApplicable."""
        fj = self.fj
        j, m = seps[0], seps[-1]
        lo, hi = bounds[j], bounds[m]
        if len(seps) != m - j + 1 or sum(1 for v in nodes if lo <= v <= hi) != hi - lo + 1:
            raise _NotApplicable(f"candidate {list(nodes)} skips a node between its separators")
        before, after = fj.modules[j - 1], fj.modules[m]
        tails = [0] * len(before)
        heads = [0] * len(after)
        for v in nodes:
            if lo <= v <= hi:
                continue
            k, i, t = fj.where[v]
            if v < lo and k == j - 1:
                # a suffix: positions from the chain's length less the count on (checked below)
                tails[i] += 1
            elif v > hi and k == m:
                heads[i] = max(heads[i], t + 1)
            else:
                raise _NotApplicable(f"candidate {list(nodes)} reaches past the modules next to its separators")
        for v in nodes:
            if v < lo:
                _, i, t = fj.where[v]
                if t < len(before[i].nodes) - tails[i]:
                    raise _NotApplicable(f"candidate {list(nodes)} holds a chain's middle, not its end")
        if sum(heads) != sum(1 for v in nodes if v > hi):
            raise _NotApplicable(f"candidate {list(nodes)} holds a chain's middle, not its start")
        return _Hub(nodes, j, m, tuple(tails), tuple(heads), options)

    def ho(self, a: int, b: int, tensors: Tensors) -> int:
        """Quantized hand-over of ``tensors`` from backend index ``a`` to ``b`` (the DP's, per tensor), as a key (no
        partition); nothing across the graph's ends (index ``nb``) or on one backend."""
        nb = self.nb
        if a == b or a == nb or b == nb:
            return 0
        return min(sum(self.hand_over(a, b, nbytes) for _, nbytes in tensors) << PART_BITS, _INF)

    # ------------------------------------------------------------------ chains
    def middles(self, chain: Chain, by_end: Mapping[int, list[tuple[int, Options]]], h: int, a: int) -> Tiling:
        """``chain`` (its pieces' options by end position) tiled from position ``h`` on, the node before on backend
        ``a``: per end position ``e`` and backend, (key, start of its last piece, backend before it) of the
        cheapest tiling."""
        size, nb = len(chain.nodes), self.nb
        f: Tiling = [[(_INF, -1, -1)] * nb for _ in range(size + 1)]
        for e in range(h + 1, size + 1):
            row = f[e]
            for lo, opts in by_end.get(e, ()):
                if lo < h:
                    continue
                edge = chain.edges[lo]
                for b, q in opts:
                    own = (q << PART_BITS) + _ONE
                    if lo == h:
                        key = self.ho(a, b, edge) + own
                        if key < row[b][0]:
                            row[b] = (key, lo, a)
                    else:
                        for g, (before, _, _) in enumerate(f[lo]):
                            if before < _INF:
                                key = before + self.ho(g, b, edge) + own
                                if key < row[b][0]:
                                    row[b] = (key, lo, g)
        return f

    def chain_table(self, k: int, i: int, heads: set[int], befores: set[int], tails: set[int], afters: set[int]
                    ) -> tuple[np.ndarray, Tilings]:
        """``C[h, a, t, b]``: the cheapest middle of chain ``i`` of module ``k`` between a hub holding its first
        ``h`` nodes on backend ``a`` and one holding its last ``t`` on ``b``, with the hand-overs into, inside and
        out of it (``_INF`` where the two overlap). A hub reading the chain's opening separator directly
        (``h == 0``, ``t == len``) pays that in the module's direct reads, not here."""
        chain = self.fj.modules[k][i]
        size, nb = len(chain.nodes), self.nb
        by_end: dict[int, list[tuple[int, Options]]] = {}
        for (lo, r), opts in self.pieces.get((k, i), {}).items():
            by_end.setdefault(r, []).append((lo, opts))
        table = np.full((size + 1, nb + 1, size + 1, nb + 1), _INF, np.int64)
        tilings: Tilings = {}
        for h in heads:
            for a in befores:
                f = tilings[(h, a)] = self.middles(chain, by_end, h, a) if h < size else None
                for t in tails:
                    e = size - t
                    if e < h:
                        continue
                    for b in afters:
                        if e == h:
                            table[h, a, t, b] = self.ho(a, b, chain.edges[h]) if h > 0 else 0
                        else:
                            assert f is not None  # h < e <= size: tiled
                            table[h, a, t, b] = self.leave(f[e], b, chain.edges[e])[0]
        return table, tilings

    def leave(self, ends: list[tuple[int, int, int]], b: int, edge: Tensors) -> tuple[int, int]:
        """The cheapest of a tiling's last pieces ``ends`` (per backend) with the hand-over of ``edge`` to ``b``
        after it: (key, its backend)."""
        return min((min(key + self.ho(g, b, edge), _INF), g) for g, (key, _, _) in enumerate(ends))

    def tiling(self, chain: Chain, tilings: Tilings, hub_before: Signature, hub_after: Signature, i: int
               ) -> list[tuple[tuple[int, ...], int]]:
        """The pieces (nodes, backend index) of chain ``i``'s middle between the hubs of the two signatures, as
        ``chain_table`` priced it."""
        (heads, a), (tails, b) = hub_before, hub_after
        h, e = heads[i], len(chain.nodes) - tails[i]
        if e == h:
            return []
        f = tilings[(h, a)]
        assert f is not None  # h < e <= size: tiled
        g = self.leave(f[e], b, chain.edges[e])[1]
        out = []
        while e > h:
            _, lo, before = f[e][g]
            out.append((chain.nodes[lo:e], g))
            e, g = lo, before
        out.reverse()
        return out

    # ------------------------------------------------------------------ the hubs, in separator order
    def solve(self) -> Plan | None:
        fj, nb = self.fj, self.nb
        L = len(fj.separators)
        ends_at: list[list[tuple[_Hub, int, int]]] = [[] for _ in range(L + 1)]  # by first separator - 1
        for hub in self.hubs:
            for b, q in hub.options:
                ends_at[hub.first - 1].append((hub, b, q))
        # out-signatures at the start of each module: (heads, backend) -> (key, (hub, b) or None)
        outs: list[dict[Signature, Reached]] = [{} for _ in range(L + 1)]
        outs[0][((0,) * len(fj.modules[0]), nb)] = (0, None)
        self.choice: list[_Joined | None] = [None] * (L + 1)
        for k in range(L + 1):
            chains = fj.modules[k]
            sigs_out = list(outs[k].items())
            if not sigs_out:
                if k == L:
                    self.stats.why_not = NO_PLAN
                    return None
                continue  # no hub ends at this separator: every plan's hub holds it and the next one
            sigs_in: list[Signature]
            if k < L:
                sigs_in = sorted({(hub.tails, b) for hub, b, _ in ends_at[k]})
            else:
                sigs_in = [((0,) * len(chains), nb)]
            if not sigs_in:
                continue  # no hub starts at the next separator: every plan's hub holds it and the one before
            tables = []
            for i, _chain in enumerate(chains):
                tables.append(self.chain_table(k, i, {s[0][i] for s, _ in sigs_out}, {s[1] for s, _ in sigs_out},
                                               {s[0][i] for s in sigs_in}, {s[1] for s in sigs_in}))
            best, arg = self.join(k, sigs_out, sigs_in, [t for t, _ in tables])
            self.choice[k] = _Joined(tables, sigs_out, sigs_in, arg)
            slot = {s: r for r, s in enumerate(sigs_in)}
            if k == L:
                if best[0] >= _INF:
                    self.stats.why_not = NO_PLAN
                    return None
                self.total = int(best[0])
                break
            keys: list[int] = best.tolist()
            for hub, b, q in ends_at[k]:
                key = keys[slot[(hub.tails, b)]]
                if key >= _INF:
                    continue
                key += (q << PART_BITS) + _ONE
                if key >= _INF:
                    continue
                sig = (hub.heads, b)
                into = outs[hub.last]
                old = into.get(sig)
                if old is None or key < old[0]:
                    into[sig] = (key, (hub, b))
        return self.plan()

    def join(self, k: int, sigs_out: list[tuple[Signature, Reached]], sigs_in: list[Signature],
             tables: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per in-signature (the next hub's tails and backend), the cheapest key over the out-signatures (the
        previous hub's heads and backend) of the module between them, and which out-signature gives it."""
        chains = self.fj.modules[k]
        nb = self.nb
        tails = [np.array([s[0][i] for s in sigs_in], np.int64) for i in range(len(chains))]
        after = np.array([s[1] for s in sigs_in], np.int64)
        whole = np.zeros(len(sigs_in), np.int64)  # chains the next hub holds entirely, as a bit set
        for i, c in enumerate(chains):
            whole |= (tails[i] == len(c.nodes)).astype(np.int64) << i
        # the opening separator's tensors, and which chains read each (a hub holding such a chain whole reads it)
        readers: dict[tuple[str, int], int] = {}
        for i, c in enumerate(chains):
            for tensor in c.edges[0] if k > 0 else ():
                readers[tensor] = readers.get(tensor, 0) | (1 << i)
        direct = [(mask, np.array([[self.ho(a, b, (tensor,)) for b in range(nb + 1)] for a in range(nb + 1)], np.int64))
                  for tensor, mask in readers.items()]
        best = np.full(len(sigs_in), _INF, np.int64)
        arg = np.full(len(sigs_in), -1, np.int64)
        for s, ((heads, a), (key, _)) in enumerate(sigs_out):
            acc = np.full(len(sigs_in), key, np.int64)
            for i, table in enumerate(tables):
                acc = np.minimum(acc + table[heads[i], a][tails[i], after], _INF)
            zero = sum(1 << i for i, h in enumerate(heads) if h == 0)
            for mask, rows in direct:
                if mask & zero:
                    acc = np.minimum(acc + np.where(whole & (mask & zero) != 0, rows[a][after], 0), _INF)
            better = acc < best
            best = np.where(better, acc, best)
            arg = np.where(better, s, arg)
        return best, arg

    # ------------------------------------------------------------------ the answer
    def plan(self) -> Plan | None:
        """Walk back from the graph's end: each module's pieces between the hubs chosen around it."""
        fj = self.fj
        L = len(fj.separators)
        parts: list[tuple[tuple[int, ...], int]] = []
        k, r = L, 0
        while True:
            ch = self.choice[k]
            assert ch is not None  # a hub ends at this module's opening separator: solve() joined it
            before, (_, prev) = ch.sigs_out[int(ch.arg[r])]
            after = ch.sigs_in[r]
            module = []
            for i, (_, tilings) in enumerate(ch.tables):
                module += self.tiling(fj.modules[k][i], tilings, before, after, i)
            parts[:0] = module
            if prev is None:
                break
            hub, hb = prev
            parts.insert(0, (hub.nodes, hb))
            k = hub.first - 1
            joined = self.choice[k]
            assert joined is not None
            r = joined.sigs_in.index((hub.tails, hb))
        # the plan priced again from scratch as the DP prices it: a disagreement is a bug here, and the DP answers
        graph = self.graph
        owner = {v: b for nodes, b in parts for v in nodes}
        cost = 0
        for nodes, b in parts:
            cost += quantize(self.table[nodes][self.backends[b]])
            for t in graph.boundary(nodes)[0]:
                p = graph.producer(t)
                if p is not None:
                    cost += self.ho(owner[p], b, ((t, graph.tensor(t).nbytes),)) >> PART_BITS
        if ((cost << PART_BITS) + len(parts) != self.total or sorted(owner) != list(range(len(graph)))
                or sum(len(nodes) for nodes, _ in parts) != len(graph)):
            self.stats.why_not = "its plan did not cost what it priced (a bug: reported in the log)"
            log.warning("%s: the module-by-module search priced its plan at %d, the plan costs %d (%d partitions); "
                        "the DP answers instead", graph.name, self.total, (cost << PART_BITS) + len(parts), len(parts))
            return None
        return to_plan(graph, [(nodes, self.backends[b]) for nodes, b in parts], self.table, self.transition)
