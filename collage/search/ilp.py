"""The same search as :mod:`collage.search.dp`, solved exactly as an integer program with HiGHS.

The DP's states are (covered prefix, backends of the frontier); on graphs whose frontier is wide
(Reshape/Transpose/Slice chains, many parallel branches) their number explodes. This module states the
problem without states, as a 0-1 program over the candidates, and lets HiGHS (``highspy``) prove the
optimum. It answers the same question with the same prices: the plan's cost, re-priced by
:func:`collage.search.cover.cover_cost`, equals the DP's wherever both run (tests/search/test_ilp.py).

Variables and constraints (``n`` nodes, candidate ``c`` = node set ``S_c`` on backend ``b_c``):

* ``x_c`` binary: candidate ``c`` is a partition. **Cover**: every node ``v`` is in exactly one chosen
  candidate, ``sum_{c ∋ v} x_c == 1``. Node ``v``'s backend indicator ``y_{v,b} = sum_{c ∋ v, b_c = b} x_c``
  and "``u`` and ``v`` share a partition" ``s_uv = sum_{c ∋ u, v} x_c`` are then linear in ``x``.
* **Executable order** (the partitions' quotient graph is acyclic; convex candidates alone do not
  ensure it: ``A = {a1 -> a2}``, ``B = {b2 -> b1}`` with edges ``a1 -> b1`` and ``b2 -> a2`` are both
  convex and need each other). By default lazily (``order="lazy"``): solve without it; if the chosen
  partitions close a cycle ``P_1 -> ... -> P_k -> P_1`` through graph edges ``u_i -> v_i``, add the row
  ``sum_i s(v_i, u_{i+1}) - sum_i s(u_i, v_i) <= k - 1`` (it cuts off every cover that keeps each link pair
  in one partition and cuts each edge, i.e. closes that walk; an executable cover always meets it) and
  solve again. Cycles are rare (none in the property tests' random graphs nor on the zoo), so this
  usually costs nothing. After ``max_cuts`` rounds, or with ``order="full"``, the ordering formulation:
  a continuous position ``p_v`` in ``[0, n-1]`` per node; for every graph edge ``u -> v``:
  ``p_v - p_u >= 1 - s_uv`` and ``p_v - p_u <= (n-1)(1 - s_uv)``. Inside a partition the edges force
  equal positions (a candidate is weakly connected; for one that is not, e.g. a range candidate
  holding two input branches, its components' first nodes are tied with the same big-M pair on
  ``x_c``), across partitions a position grows by at least one, so no cycle can close; conversely a
  topological order of any executable cover gives feasible positions.
* **Transitions**, priced like the DP: a partition pays ``transition(src, dst, nbytes)`` once per distinct
  tensor it reads from a node on another backend. Nodes on different backends are in different
  partitions, so reader ``u`` of tensor ``t`` (producer ``p``) on backend ``b`` pays exactly when
  ``y_{u,b} = 1``, ``y_{p,b} = 0`` and no earlier reader of ``t`` shares ``u``'s partition (``e_{t,u}``, the
  sum of ``x_c`` over candidates holding ``u`` and an earlier reader, is 0). The ``y`` are continuous
  columns tied to the ``x`` by equality rows (the cover row is then ``sum_b y_{v,b} == 1``), which keeps
  the matrix small. Continuous ``z_{t,u,b',b} >= 0`` (cost ``transition(b', b, nbytes)``) with
  ``z >= y_{u,b} + y_{p,b'} - 1 - e_{t,u}`` per source ``b' != b`` and
  ``sum_b' z_{t,u,b',b} >= y_{u,b} - y_{p,b} - e_{t,u}`` (the aggregated form keeps the LP bound tight with
  three or more backends; with two it is the only row). With non-negative prices the minimum sets
  each ``z`` to the product.
* **Objective**: costs are the DP's integer nanoseconds (``quantize``), plus ``1 / (n + 1)`` ns per
  partition: among plans of equal cost the one with the fewest partitions wins, as in the DP. The
  objective is stated in microseconds (HiGHS wants costs near 1); the solve runs with a zero relative
  gap and an absolute gap below that tie-break unit, and HiGHS's presolve off (it probed every binary
  of these rows for seconds on BERT-base without a reduction).

``ilp_search`` returns a :class:`~collage.plan.Plan` in the canonical executable order (the ready
partition with the smallest first node first). If HiGHS stops at ``time_limit`` with a feasible but
unproven plan, the plan carries a note saying so (and the gap); ``IlpStats`` says what happened.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.errors import CollageError
from collage.plan import Plan
from collage.search.candidates import Candidate
from collage.search.cover import Transition, to_plan, usable_costs
from collage.search.dp_tables import quantize

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)


@dataclass
class IlpStats:
    """What the last :func:`ilp_search` did: model size, solver status, times (s), proven optimal or not."""

    columns: int = 0
    rows: int = 0
    nonzeros: int = 0
    candidates: int = 0
    status: str = ""
    optimal: bool = False
    gap: float = 0.0
    build_s: float = 0.0
    solve_s: float = 0.0
    nodes: int = 0  # branch-and-bound nodes
    cuts: int = 0   # cycle cuts added (lazy order)


def _highspy():
    try:
        import highspy
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise CollageError("the exact ILP search needs highspy: pip install highspy") from e
    return highspy


_banner_shown = False


def _new_highs(highspy: Any) -> Any:
    """A ``Highs`` instance; the first one of a process prints a licence banner on stdout (C level), which
    would land in the middle of a CLI's output: it goes to /dev/null."""
    global _banner_shown
    if _banner_shown:
        return highspy.Highs()
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        _banner_shown = True
    return h


def _components(nodes: Sequence[int], succ: list[set[int]]) -> list[list[int]]:
    """Weakly connected components of the subgraph induced by ``nodes`` (each sorted)."""
    inside = set(nodes)
    adj: dict[int, list[int]] = {v: [] for v in nodes}
    for u in nodes:
        for v in succ[u]:
            if v in inside:
                adj[u].append(v)
                adj[v].append(u)
    seen: set[int] = set()
    comps = []
    for v in nodes:
        if v in seen:
            continue
        stack, comp = [v], []
        seen.add(v)
        while stack:
            w = stack.pop()
            comp.append(w)
            for x in adj[w]:
                if x not in seen:
                    seen.add(x)
                    stack.append(x)
        comps.append(sorted(comp))
    return comps


def canonical_order(graph: Graph, parts: list[tuple[tuple[int, ...], str]]) -> list[int] | None:
    """Indices of ``parts`` in the canonical runnable order (the ready part with the smallest first node
    first), or None when the parts need each other (the quotient graph has a cycle)."""
    import heapq

    owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
    needs = [set() for _ in parts]
    feeds: list[set[int]] = [set() for _ in parts]
    for u, v in graph.dag.edges:
        a, b = owner[u], owner[v]
        if a != b and a not in needs[b]:
            needs[b].add(a)
            feeds[a].add(b)
    waiting = [len(s) for s in needs]
    ready = [(parts[k][0][0], k) for k in range(len(parts)) if not waiting[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for j in feeds[k]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, (parts[j][0][0], j))
    return order if len(order) == len(parts) else None


def ilp_search(graph: Graph, costs: Mapping[Candidate, Any], transition: Transition | None = None, *,
               time_limit: float = 60.0, start: Plan | Sequence[tuple[Sequence[int], str]] | None = None,
               stats: IlpStats | None = None, threads: int = 1, order: str = "lazy", max_cuts: int = 30) -> Plan:
    """The cheapest executable exact cover of ``graph`` by the candidates in ``costs``, solved as a 0-1
    program (module docstring). ``start``: a known plan (e.g. the DP's greedy one) handed to HiGHS as
    its first incumbent. Raises CollageError when no candidate covers a node or no executable cover
    exists; past ``time_limit`` seconds the best plan found is returned with a note (not proven optimal)."""
    t0 = time.perf_counter()
    stats = stats if stats is not None else IlpStats()
    n = len(graph)
    if n == 0:
        raise CollageError(f"{graph.name}: the graph has no nodes to place")
    table = usable_costs(graph, costs)
    cols: list[tuple[tuple[int, ...], str]] = [(nodes, b) for nodes in sorted(table) for b in sorted(table[nodes])]
    backends = sorted({b for _, b in cols})
    bidx = {b: k for k, b in enumerate(backends)}
    covered = set()
    for nodes, _ in cols:
        covered.update(nodes)
    if len(covered) != n:
        i = min(set(range(n)) - covered)
        raise CollageError(f"{graph.name}: no candidate with a usable cost covers {graph.node_label(i)}: no backend "
                           "supports it, or every measurement of it failed; enable a backend that runs "
                           f"{graph.op_type(i)} (onnxruntime runs every ONNX op)")
    succ: list[set[int]] = [set() for _ in range(n)]
    for u, v in graph.dag.edges:
        succ[u].add(v)

    ncand = len(cols)
    unit = 1e-3  # the objective in microseconds (the DP's integer ns, scaled: HiGHS wants costs near 1)
    tie = unit / (n + 1)
    lp = _Model()
    for nodes, b in cols:
        lp.col(quantize(table[nodes][b]) * unit + tie, 0.0, 1.0, integer=True)
    holding: list[list[int]] = [[] for _ in range(n)]
    holding_b: list[list[list[int]]] = [[[] for _ in backends] for _ in range(n)]
    for k, (nodes, b) in enumerate(cols):
        for v in nodes:
            holding[v].append(k)
            holding_b[v][bidx[b]].append(k)
    # y_{v,b}: node v's backend indicator, tied to the x; cover: sum_b y_{v,b} == 1
    ycol: dict[tuple[int, int], int] = {}
    for v in range(n):
        for b in range(len(backends)):
            if holding_b[v][b]:
                k = ycol[v, b] = lp.col(0.0, 0.0, 1.0)
                row = {c: 1.0 for c in holding_b[v][b]}
                row[k] = -1.0
                lp.row(row, 0.0, 0.0)
        lp.row({ycol[v, b]: 1.0 for b in range(len(backends)) if (v, b) in ycol}, 1.0, 1.0)
    n_trans = _transition_terms(graph, lp, cols, backends, holding, holding_b, ycol, transition, unit)
    col_sets = [frozenset(nodes) for nodes, _ in cols]
    highspy = _highspy()
    start_x = None
    if start is not None:
        parts = start.partitions if isinstance(start, Plan) else start
        chosen = {(tuple(sorted(p.nodes)), p.backend) if isinstance(start, Plan) else (tuple(sorted(p[0])), p[1])
                  for p in parts}
        val = np.array([1.0 if c in chosen else 0.0 for c in cols], np.float64)
        if val.sum() == len(chosen):  # every part of the start is a candidate here
            start_x = val
    stats.columns, stats.candidates, stats.cuts = lp.ncols, ncand, 0
    stats.build_s = time.perf_counter() - t0
    solve_s = 0.0
    full_order = order == "full"
    if full_order:
        _order_rows(lp, n, succ, cols, holding)
    deadline = time.perf_counter() + time_limit
    while True:
        h = lp.highs(highspy, max(1.0, deadline - time.perf_counter()), 0.5 * tie, threads)
        if start_x is not None:
            h.setSolution(ncand, np.arange(ncand, dtype=np.int32), start_x)
        t1 = time.perf_counter()
        h.run()
        solve_s += time.perf_counter() - t1
        model_status = h.getModelStatus()
        info = h.getInfo()
        stats.status = h.modelStatusToString(model_status)
        stats.nodes += int(getattr(info, "mip_node_count", 0))
        stats.gap = float(getattr(info, "mip_gap", 0.0))
        stats.optimal = model_status == highspy.HighsModelStatus.kOptimal
        if model_status == highspy.HighsModelStatus.kInfeasible:
            raise CollageError(f"{graph.name}: the candidates admit no executable exact cover (the ILP is infeasible); "
                               "add single-node candidates")
        if int(getattr(info, "primal_solution_status", 0)) != 2:  # 2: a feasible solution exists
            raise CollageError(f"{graph.name}: HiGHS found no plan within {time_limit:.0f} s ({stats.status})")
        x = np.asarray(h.getSolution().col_value[:ncand])
        parts = [cols[k] for k in np.flatnonzero(x > 0.5)]
        order_k = canonical_order(graph, parts)
        if order_k is not None:
            break
        if full_order:  # cannot happen with the ordering rows; a guard against tolerances
            raise CollageError(f"{graph.name}: the ILP's plan has no executable order ({stats.status})")
        # lazy: cut off the cycle between the chosen partitions, or after enough rounds state the order fully
        stats.cuts += 1
        if stats.cuts > max_cuts or time.perf_counter() >= deadline:
            _order_rows(lp, n, succ, cols, holding)
            full_order = True
        else:
            _cycle_cut(graph, lp, parts, col_sets, holding)
    stats.rows, stats.nonzeros, stats.solve_s = lp.nrows, lp.nnz, solve_s
    plan = to_plan(graph, [parts[k] for k in order_k], table, transition)
    log.debug("%s: ILP %d columns (%d candidates, %d transition terms), %d rows, %d cycle cuts: %s in %.2f s "
              "(+%.2f s to build)", graph.name, lp.ncols, ncand, n_trans, lp.nrows, stats.cuts, stats.status,
              stats.solve_s, stats.build_s)
    if not stats.optimal:
        plan.notes.append(f"exact ILP search stopped ({stats.status}, gap {stats.gap:.2%}): not proven optimal")
    return plan


class _Model:
    """Columns and rows (row-wise sparse) of the 0-1 program, handed to HiGHS in one call."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.integrality: list[int] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.start: list[int] = []
        self.index: list[int] = []
        self.value: list[float] = []

    @property
    def ncols(self) -> int:
        return len(self.cost)

    @property
    def nrows(self) -> int:
        return len(self.row_lo)

    @property
    def nnz(self) -> int:
        return len(self.index)

    def col(self, cost: float, lo: float, hi: float, integer: bool = False) -> int:
        self.cost.append(cost)
        self.lo.append(lo)
        self.hi.append(hi)
        self.integrality.append(1 if integer else 0)
        return len(self.cost) - 1

    def row(self, entries: Mapping[int, float], lo: float, hi: float) -> None:
        self.start.append(len(self.index))
        for k, a in entries.items():
            if a:
                self.index.append(k)
                self.value.append(a)
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    def highs(self, highspy: Any, time_limit: float, abs_gap: float, threads: int) -> Any:
        h = _new_highs(highspy)
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(time_limit))
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", abs_gap)
        h.setOptionValue("threads", int(threads))
        # HiGHS's presolve probes every binary of these set-partitioning rows: seconds on BERT-sized
        # models for no reduction (measured: 12 of 23 s); the root LP is integral or nearly so
        h.setOptionValue("presolve", "off")
        f64 = np.float64
        status = h.passModel(self.ncols, self.nrows, self.nnz, 2, 1, 0.0, np.asarray(self.cost, f64),
                             np.asarray(self.lo, f64), np.asarray(self.hi, f64), np.asarray(self.row_lo, f64),
                             np.asarray(self.row_hi, f64), np.asarray(self.start, np.int32),
                             np.asarray(self.index, np.int32), np.asarray(self.value, f64),
                             np.asarray(self.integrality, np.int32))
        if status != highspy.HighsStatus.kOk:
            raise CollageError(f"HiGHS refused the search model ({status})")
        return h


def _transition_terms(graph: Graph, lp: _Model, cols: list[tuple[tuple[int, ...], str]], backends: list[str],
                      holding: list[list[int]], holding_b: list[list[list[int]]], ycol: dict[tuple[int, int], int],
                      transition: Transition | None, unit: float) -> int:
    """The hand-over columns and rows (module docstring); returns how many hand-over columns."""
    if transition is None or len(backends) < 2:
        return 0
    inf = math.inf
    hand: dict[tuple[int, int, int], int] = {}

    def price(src: int, dst: int, nbytes: int) -> int:
        key = (src, dst, nbytes)
        if key not in hand:
            ms = float(transition(backends[src], backends[dst], nbytes))
            if not math.isfinite(ms) or ms < 0:
                raise CollageError(f"transition cost {backends[src]} -> {backends[dst]} for {nbytes} bytes is "
                                   f"{ms}; it must be a finite, non-negative number of ms")
            hand[key] = quantize(ms)
        return hand[key]

    col_sets = [set(nodes) for nodes, _ in cols]
    count = 0
    for p in range(len(graph)):
        for t in graph.op(p).output:
            if not t:
                continue
            readers = sorted({c for c in graph.consumers(t) if c != p})
            if not readers:
                continue
            nbytes = graph.tensor(t).nbytes
            for j, u in enumerate(readers):
                # partitions holding u and an earlier reader of t: that reader's term pays for t
                earlier = [k for k in holding[u] if any(r in col_sets[k] for r in readers[:j])] if j else []
                for b in range(len(backends)):
                    if (u, b) not in ycol:
                        continue
                    prices = {s: price(s, b, nbytes) for s in range(len(backends)) if s != b and (p, s) in ycol}
                    if not any(prices.values()):
                        continue
                    zs = {}
                    for s, q in prices.items():
                        if not q:
                            continue
                        z = zs[s] = lp.col(q * unit, 0.0, 1.0)
                        count += 1
                        if len(prices) > 1:  # z >= y_{u,b} + y_{p,s} - 1 - e
                            row = {z: 1.0, ycol[u, b]: -1.0, ycol[p, s]: -1.0}
                            row.update((k, 1.0) for k in earlier)
                            lp.row(row, -1.0, inf)
                    if len(zs) == len(prices):  # sum_s z_s >= y_{u,b} - y_{p,b} - e
                        row = {z: 1.0 for z in zs.values()}
                        row[ycol[u, b]] = -1.0
                        if (p, b) in ycol:
                            row[ycol[p, b]] = 1.0
                        row.update((k, 1.0) for k in earlier)
                        lp.row(row, 0.0, inf)
    return count


def _order_rows(lp: _Model, n: int, succ: list[set[int]], cols: list[tuple[tuple[int, ...], str]],
                holding: list[list[int]]) -> None:
    """The ordering formulation of an executable cover (module docstring): positions, two rows per edge."""
    inf = math.inf
    big = float(max(n - 1, 1))
    pos = [lp.col(0.0, 0.0, big) for _ in range(n)]
    for u in range(n):
        hu = set(holding[u])
        for v in succ[u]:
            shared = hu.intersection(holding[v])
            row = {pos[v]: 1.0, pos[u]: -1.0}
            row.update((k, 1.0) for k in shared)
            lp.row(row, 1.0, inf)                 # p_v - p_u + s_uv >= 1
            row = {pos[v]: 1.0, pos[u]: -1.0}
            row.update((k, big) for k in shared)
            lp.row(row, -inf, big)                # p_v - p_u + M s_uv <= M
    for k, (nodes, _) in enumerate(cols):
        if len(nodes) < 2:
            continue
        comps = _components(nodes, succ)
        for comp in comps[1:]:
            r0, r1 = comps[0][0], comp[0]
            lp.row({pos[r1]: 1.0, pos[r0]: -1.0, k: big}, -inf, 2 * big)   # |p_r1 - p_r0| <= M (1 - x_c)
            lp.row({pos[r0]: 1.0, pos[r1]: -1.0, k: big}, -inf, 2 * big)


def _cycle_cut(graph: Graph, lp: _Model, parts: list[tuple[tuple[int, ...], str]], col_sets: list[frozenset],
               holding: list[list[int]]) -> None:
    """A row that cuts off a cycle between the chosen partitions, and every other cover that closes it.

    For a cycle P_1 -> ... -> P_k -> P_1 through graph edges u_i -> v_i (u_i in P_i, v_i in P_{i+1}):
    ``sum_i s(v_i, u_{i+1}) - sum_i s(u_i, v_i) <= k - 1``. A cover with every link pair in one partition and
    every edge cut has a closed walk between partitions, so it is not executable; any other cover meets
    the row (each uncut edge adds one to the slack)."""
    import networkx as nx

    owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
    q = nx.DiGraph()
    for u, v in graph.dag.edges:
        a, b = owner[u], owner[v]
        if a != b and not q.has_edge(a, b):
            q.add_edge(a, b, witness=(u, v))
    cycle = nx.find_cycle(q)
    edges = [q.edges[a, b]["witness"] for a, b, *_ in cycle]
    k = len(edges)
    row: dict[int, float] = {}
    rhs = float(k - 1)
    for i, (u, v) in enumerate(edges):
        nxt = edges[(i + 1) % k][0]
        if v == nxt:
            rhs -= 1.0                             # s(v, v) == 1
        else:
            for c in set(holding[v]).intersection(holding[nxt]):
                row[c] = row.get(c, 0.0) + 1.0
        for c in set(holding[u]).intersection(holding[v]):
            row[c] = row.get(c, 0.0) - 1.0
    lp.row(row, -math.inf, rhs)
