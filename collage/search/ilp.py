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
  convex and need each other). By default lazily (``IlpOptions.order="lazy"``): solve without it; if the chosen
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

**Size.** Up to ``DIRECT_MAX`` candidates the program holds them all. Beyond, column generation: the LP
relaxation starts from the single-node candidates (and the start plan), HiGHS warm-starts as the
candidates with negative reduced cost are added, until none is left (the LP optimum over all of them,
a lower bound ``L``); the MIP then runs over those, and every candidate whose reduced cost is at most
(plan found - ``L``) is added and the MIP solved again, so no candidate left out could be in a plan as
cheap (reduced-cost fixing: exact).

``ilp_search`` returns a :class:`~collage.plan.Plan` in the canonical executable order (the ready
partition with the smallest first node first). If HiGHS stops at ``time_limit`` with a feasible but
unproven plan, the plan carries a note saying so (and the gap); if it stops before it has a plan of its
own, the incumbent it was handed is the answer (the start plan, or the plan of an earlier solve over
fewer candidates), again with a note; ``IlpStats`` says what happened.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np

from collage.errors import CollageError
from collage.plan import Note, NoteKind, Plan
from collage.search.cost import CostTable
from collage.search.cover import Part, Transition, UsableCosts, to_plan, usable_costs
from collage.search.dp_tables import HandOver, quantize

if TYPE_CHECKING:
    from highspy import Highs, HighsCallbackEvent

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
    lp_rounds: int = 0  # LP solves of the column generation
    priced: int = 0     # columns added after the first MIP because their reduced cost could still win
    lp_s: float = 0.0   # time in the column generation (LP relaxation)
    mips: int = 0       # MIP solves
    lp_fractional: int = -1  # x strictly between 0 and 1 at the LP optimum
    lower: float = 0.0  # LP bound (objective units)
    upper: float | None = 0.0  # the plan's objective; None where the answer is the incumbent HiGHS was handed
    #: where the time limit came before HiGHS had a plan of its own: "start" (the start plan is the answer)
    #: or "earlier" (an earlier solve's plan over the candidates priced then); "" otherwise
    kept: str = ""


def _require_highspy() -> None:
    """CollageError saying what to install where highspy is missing (each user imports it where it runs)."""
    try:
        import highspy  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise CollageError("the exact ILP search needs highspy: pip install highspy") from e


_banner_shown = False


def _new_highs() -> Highs:
    """A ``Highs`` instance; the first one of a process prints a licence banner on stdout (C level), which
    would land in the middle of a CLI's output: it goes to /dev/null."""
    import highspy

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


def canonical_order(graph: Graph, parts: list[Part]) -> list[int] | None:
    """Indices of ``parts`` in the canonical runnable order (the ready part with the smallest first node
    first), or None when the parts need each other (the quotient graph has a cycle)."""
    import heapq

    owner = {i: k for k, (nodes, _) in enumerate(parts) for i in nodes}
    needs: list[set[int]] = [set() for _ in parts]
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


@dataclass(frozen=True)
class IlpOptions:
    """How :func:`ilp_search` states and solves the program: HiGHS's ``threads``; the executable order ``"lazy"``
    (cycle cuts as cycles appear, the ordering rows after ``max_cuts`` rounds) or ``"full"`` (the ordering rows
    from the start): module docstring."""

    threads: int = 1
    order: Literal["lazy", "full"] = "lazy"
    max_cuts: int = 30


#: The sorted columns holding node ``v`` (:meth:`_Program.holding`).
Holding: TypeAlias = Callable[[int], np.ndarray]
#: A start plan as :func:`ilp_search` takes it: a Plan, or its parts ``(nodes, backend)``.
StartPlan: TypeAlias = "Plan | Sequence[tuple[Sequence[int], str]]"


def ilp_search(graph: Graph, costs: CostTable, transition: Transition | None = None, *, time_limit: float = 60.0,
               start: StartPlan | None = None, stats: IlpStats | None = None,
               options: IlpOptions | None = None) -> Plan:
    """The cheapest executable exact cover of ``graph`` by the candidates in ``costs``, solved as a 0-1
    program (module docstring). ``start``: a known plan (e.g. the DP's greedy one) handed to HiGHS as
    its first incumbent. Raises CollageError when no candidate covers a node or no executable cover
    exists; past ``time_limit`` seconds the best plan found is returned with a note (not proven optimal):
    the incumbent (``start``, or an earlier solve's plan) where HiGHS had none of its own yet; without
    one, CollageError."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + time_limit
    stats = stats if stats is not None else IlpStats()
    options = options if options is not None else IlpOptions()
    if len(graph) == 0:
        raise CollageError(f"{graph.name}: the graph has no nodes to place")
    program = _Program.build(graph, usable_costs(graph, costs), transition)
    if options.order == "full":
        program.order_rows()
    stats.candidates = program.ncand
    start_x = program.start_vector(start)
    stats.build_s = time.perf_counter() - t0
    solver = _Solver(program, options, deadline, stats)
    parts = solver.solve(start_x)
    m = program.m
    stats.columns, stats.rows, stats.nonzeros = m.ncols, m.nrows, m.nnz
    plan = to_plan(graph, parts, program.table, transition)
    log.debug("%s: ILP %d candidates (%d kept after pricing), %d hand-over terms, %d rows, %d cycle cuts: %s in "
              "%.2f s (+%.2f s to build)", graph.name, program.ncand, solver.kept, program.n_trans, m.nrows,
              stats.cuts, stats.status, stats.solve_s, stats.build_s)
    if not stats.optimal:
        gap = f", gap {stats.gap:.2%}" if math.isfinite(stats.gap) else ""
        plan.notes.append(Note(NoteKind.SEARCH, f"exact ILP search stopped ({stats.status}{gap}): not proven optimal"))
    return plan


class _Program:
    """The 0-1 program of one cover problem: its candidates as columns ``cols`` (the x), the matrix with the
    backend indicators, cover rows and hand-over terms, and which columns hold each node."""

    def __init__(self, graph: Graph, table: UsableCosts, cols: list[Part]) -> None:
        n = len(graph)
        self.graph, self.table, self.cols = graph, table, cols
        self.ncand = len(cols)
        self.sizes = np.fromiter((len(nodes) for nodes, _ in cols), np.int64, self.ncand)
        self.inc_node = np.fromiter((v for nodes, _ in cols for v in nodes), np.int64, int(self.sizes.sum()))
        self.inc_col = np.repeat(np.arange(self.ncand, dtype=np.int64), self.sizes)
        missing = np.setdiff1d(np.arange(n), self.inc_node)
        if missing.size:
            i = int(missing[0])
            raise CollageError(f"{graph.name}: no candidate with a usable cost covers {graph.node_label(i)}: no "
                               "backend supports it, or every measurement of it failed; enable a backend that runs "
                               f"{graph.op_type(i)} (onnxruntime runs every ONNX op)")
        # holding(v): sorted columns holding node v (CSR rows of the node x candidate incidence)
        order_idx = np.lexsort((self.inc_col, self.inc_node))
        self._h_cols = self.inc_col[order_idx]
        self._h_ptr = np.searchsorted(self.inc_node[order_idx], np.arange(n + 1))
        self.unit = 1e-3  # the objective in microseconds (the DP's integer ns, scaled: HiGHS wants costs near 1)
        self.tie = self.unit / (n + 1)
        self.m = _Matrix(self.ncand)
        self.succ: list[set[int]] = [set() for _ in range(n)]
        for u, v in graph.dag.edges:
            self.succ[u].add(v)
        self.n_trans = 0

    @classmethod
    def build(cls, graph: Graph, table: UsableCosts, transition: Transition | None) -> _Program:
        """The program of ``table``'s candidates (module docstring: x, y, the cover rows, the hand-over terms)."""
        cols = [(nodes, b) for nodes in sorted(table) for b in sorted(table[nodes])]
        p = cls(graph, table, cols)
        n, m = len(graph), p.m
        backends = sorted({b for _, b in cols})
        nb = len(backends)
        bidx = {b: k for k, b in enumerate(backends)}
        cand_b = np.fromiter((bidx[b] for _, b in cols), np.int64, p.ncand)
        m.cost[:p.ncand] = [quantize(table[nodes][b]) * p.unit + p.tie for nodes, b in cols]
        # y_{v,b}: node v's backend indicator, tied to the x (rows v*nb + b); cover: sum_b y_{v,b} == 1
        y0 = m.add_cols(n * nb, 0.0, 0.0, 1.0)
        present = np.zeros(n * nb, bool)
        present[p.inc_node * nb + cand_b[p.inc_col]] = True
        m.hi[y0:y0 + n * nb][~present] = 0.0
        r0 = m.add_rows(n * nb, 0.0, 0.0)
        m.add_entries(r0 + p.inc_node * nb + cand_b[p.inc_col], p.inc_col, np.ones(p.inc_col.size))
        m.add_entries(r0 + np.arange(n * nb), y0 + np.arange(n * nb), -np.ones(n * nb))
        r1 = m.add_rows(n, 1.0, 1.0)
        m.add_entries(r1 + np.repeat(np.arange(n), nb), y0 + np.arange(n * nb), np.ones(n * nb))
        p.n_trans = _transition_terms(graph, m, backends, p.holding, y0, transition, p.unit)
        return p

    def holding(self, v: int) -> np.ndarray:
        cols: np.ndarray = self._h_cols[self._h_ptr[v]:self._h_ptr[v + 1]]
        return cols

    def start_vector(self, start: StartPlan | None) -> np.ndarray:
        """``start`` as values of the x, all 0 where it is none or no exact cover by the priced candidates."""
        start_x = np.zeros(self.ncand)
        if start is None:
            return start_x
        where = {c: k for k, c in enumerate(self.cols)}
        if isinstance(start, Plan):
            keys = [(tuple(sorted(p.nodes)), p.backend) for p in start.partitions]
        else:
            keys = [(tuple(sorted(nodes)), b) for nodes, b in start]
        if all(k in where for k in keys):
            start_x[[where[k] for k in keys]] = 1.0
        if not np.array_equal(np.bincount(self.inc_node, weights=start_x[self.inc_col], minlength=len(self.graph)),
                              np.ones(len(self.graph))):
            log.debug("%s: the start plan is not an exact cover by the priced candidates; solving without it",
                      self.graph.name)
            start_x[:] = 0.0
        return start_x

    def order_rows(self) -> None:
        _order_rows(self.m, len(self.graph), self.succ, self.cols, self.holding)

    def cycle_cut(self, parts: list[Part]) -> None:
        _cycle_cut(self.graph, self.m, parts, self.holding)


class _Solver:
    """HiGHS on a :class:`_Program`: the column generation where it is large, then the MIP, solved again while
    columns priced out could still win or the chosen partitions close a cycle (module docstring)."""

    def __init__(self, program: _Program, options: IlpOptions, deadline: float, stats: IlpStats) -> None:
        self.program, self.options, self.deadline, self.stats = program, options, deadline, stats
        _require_highspy()
        self.full_order = options.order == "full"
        self.kept = 0  # columns in the last MIP

    def solve(self, start_x: np.ndarray) -> list[Part]:
        """The chosen parts in the canonical executable order."""
        p, stats = self.program, self.stats
        # column generation over the x: start from the single nodes (+ the start plan), add what prices out
        keep = np.zeros(p.ncand, bool)
        keep[p.sizes == 1] = True
        keep |= start_x > 0
        t1 = time.perf_counter()
        lower: float | None
        if p.ncand <= DIRECT_MAX:
            keep[:] = True  # every column at once: fastest while the matrix is small (BERT-base: 4.5 s against 9)
            lower = None
        else:
            lower = _price_columns(p.m, keep, self.options.threads, self.deadline, stats)
        stats.lp_s = time.perf_counter() - t1
        parts = self.until_executable(keep, lower, start_x)
        stats.solve_s = time.perf_counter() - t1
        if not keep.all() and lower is None:  # the pricing ran out of time: optimal over the columns it reached only
            stats.optimal = False
            stats.status = f"{stats.status}; column generation stopped at the time limit"
        self.kept = int(keep.sum())
        return parts

    def until_executable(self, keep: np.ndarray, lower: float | None, start_x: np.ndarray) -> list[Part]:
        """The MIP over the kept columns, solved again with the columns that could still win (``lower``: the LP
        bound of the column generation) and with a cut for each cycle its plan closes."""
        p, stats, options = self.program, self.stats, self.options
        original_start = start_x.copy()
        while True:
            incumbent = start_x if start_x.any() else None
            x, value = _solve_mip(p.m, keep, 0.5 * p.tie, options.threads, self.deadline, incumbent, stats)
            stats.lower, stats.upper = lower or 0.0, value
            if lower is not None and value is not None:  # columns whose reduced cost could still beat the plan
                more = ~keep & (p.m.reduced <= (value - lower) + 1e-7 * max(1.0, abs(value)))
                if more.any() and stats.status == "Optimal":
                    if canonical_order(p.graph, [p.cols[k] for k in np.flatnonzero(x > 0.5)]) is not None:
                        start_x = np.where(x > 0.5, 1.0, 0.0)  # the incumbent, should the next solve be cut short
                    keep |= more
                    stats.priced += int(more.sum())
                    continue
            parts = [p.cols[k] for k in np.flatnonzero(x > 0.5)]
            order_k = canonical_order(p.graph, parts)
            if order_k is not None:
                if value is None:
                    stats.kept = "start" if np.array_equal(x, original_start) else "earlier"
                return [parts[k] for k in order_k]
            if self.full_order:  # cannot happen with the ordering rows; a guard against tolerances
                raise CollageError(f"{p.graph.name}: the ILP's plan has no executable order ({stats.status})")
            # lazy: cut off the cycle between the chosen partitions, or after enough rounds state the order fully
            stats.cuts += 1
            if stats.cuts > options.max_cuts or time.monotonic() >= self.deadline:
                p.order_rows()
                self.full_order = True
            else:
                p.cycle_cut(parts)


class _Matrix:
    """The 0-1 program: columns (the x first, then y, z, positions) and rows, as sparse triplets."""

    def __init__(self, ncand: int) -> None:
        self.ncand = ncand
        self._cost, self._lo = [np.zeros(ncand)], [np.zeros(ncand)]
        self._hi, self._int = [np.ones(ncand)], [np.ones(ncand, bool)]
        self._ncols = ncand
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.row_lo: list[float | None] = []
        self.row_hi: list[float | None] = []
        self.reduced = np.zeros(ncand)  # reduced costs of the x at the last priced LP
        self._csc: Any = None  # scipy.sparse.csc_matrix (scipy ships no type information)

    @staticmethod
    def _flat(parts: list[np.ndarray]) -> np.ndarray:
        """The blocks of ``parts`` as one array (kept as one, so that writes to it stay)."""
        if len(parts) > 1:
            parts[:] = [np.concatenate(parts)]
        return parts[0]

    @property
    def cost(self) -> np.ndarray:
        return self._flat(self._cost)

    @property
    def lo(self) -> np.ndarray:
        return self._flat(self._lo)

    @property
    def hi(self) -> np.ndarray:
        return self._flat(self._hi)

    @property
    def integer(self) -> np.ndarray:
        return self._flat(self._int)

    @property
    def ncols(self) -> int:
        return self._ncols

    @property
    def nrows(self) -> int:
        return len(self.row_lo)

    @property
    def nnz(self) -> int:
        return int(sum(a.size for a in self.v))

    def add_cols(self, k: int, cost: float, lo: float, hi: float) -> int:
        first = self._ncols
        self._cost.append(np.full(k, cost))
        self._lo.append(np.full(k, lo))
        self._hi.append(np.full(k, hi))
        self._int.append(np.zeros(k, bool))
        self._ncols += k
        return first

    def add_rows(self, k: int, lo: float | None, hi: float | None) -> int:
        first = self.nrows
        self.row_lo.extend([lo] * k)
        self.row_hi.extend([hi] * k)
        return first

    def add_entries(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        self.r.append(np.asarray(rows, np.int64))
        self.c.append(np.asarray(cols, np.int64))
        self.v.append(np.asarray(vals, np.float64))
        self._csc = None

    def row(self, entries: Mapping[int, float], lo: float | None, hi: float | None) -> None:
        items = [(k, a) for k, a in entries.items() if a]
        self.add_entries(np.full(len(items), self.nrows, np.int64),
                         np.fromiter((k for k, _ in items), np.int64, len(items)),
                         np.fromiter((a for _, a in items), np.float64, len(items)))
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    def csc(self) -> Any:
        """The matrix as a scipy.sparse.csc_matrix (untyped: scipy ships no type information)."""
        from scipy import sparse

        if self._csc is None:
            self._csc = sparse.csc_matrix((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                                          shape=(self.nrows, self.ncols))
            self._csc.sum_duplicates()
        return self._csc

    def highs(self, keep: np.ndarray, integral: bool, deadline: float, abs_gap: float,
              threads: int) -> tuple[Highs, np.ndarray]:
        """HiGHS loaded with the x in ``keep`` and every other column; returns it and the kept columns' ids.
        It stops at ``deadline`` (``time.monotonic()``), see :func:`_stop_at`."""
        cols = np.concatenate([np.flatnonzero(keep), np.arange(self.ncand, self.ncols)])
        a = self.csc()[:, cols]
        import highspy

        h = _new_highs()
        h.setOptionValue("output_flag", False)
        _stop_at(h, deadline)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", abs_gap)
        h.setOptionValue("threads", int(threads))
        # HiGHS's presolve probes every binary of these set-partitioning rows: seconds on BERT-sized
        # models for no reduction (measured: 12 of 23 s); the root LP is integral or nearly so
        h.setOptionValue("presolve", "off")
        inf = highspy.kHighsInf
        lo = np.array([-inf if x is None else x for x in self.row_lo], np.float64)
        hi = np.array([inf if x is None else x for x in self.row_hi], np.float64)
        integrality = self.integer[cols].astype(np.int32) if integral else np.zeros(cols.size, np.int32)
        status = h.passModel(cols.size, self.nrows, a.nnz, 1, 1, 0.0, self.cost[cols], self.lo[cols], self.hi[cols],
                             np.where(np.isinf(lo), -inf, lo), np.where(np.isinf(hi), inf, hi),
                             a.indptr[:-1].astype(np.int32), a.indices.astype(np.int32), a.data, integrality)
        if status != highspy.HighsStatus.kOk:
            raise CollageError(f"HiGHS refused the search model ({status})")
        return h, cols


def _stop_at(h: Highs, deadline: float) -> None:
    """Make ``h`` stop at ``deadline``: its ``time_limit`` option, and an interrupt from HiGHS's simplex,
    interior-point and MIP callbacks once the deadline has passed. The option alone did not hold:
    Inception-v2's MIP over 268,038 columns ran 529 s against a 60 s limit (results/search/search-time.md)."""
    h.setOptionValue("time_limit", max(0.5, deadline - time.monotonic()))

    def check(e: HighsCallbackEvent) -> None:
        if time.monotonic() >= deadline:
            e.interrupt()

    for event in (h.cbSimplexInterrupt, h.cbIpmInterrupt, h.cbMipInterrupt):
        event.subscribe(check)


#: Up to this many candidates the 0-1 program holds them all; beyond, column generation (``_price_columns``)
#: keeps the LP small and reduced costs decide which candidates the MIP needs (Inception-v2 with three
#: backends has 268,038 candidates: 3.4M nonzeros, whose root LP alone ran past 100 s).
DIRECT_MAX = 50_000
#: Columns added per pricing round at most (the most negative reduced costs first).
PRICE_BATCH = 4000


def _price_columns(m: _Matrix, keep: np.ndarray, threads: int, deadline: float,
                   stats: IlpStats) -> float | None:
    """Column generation on the LP relaxation: add the x with negative reduced cost to ``keep`` (and to the
    same HiGHS instance, which warm-starts from its last basis) until none is left; returns the LP optimum
    over all columns (a lower bound) and leaves every x's reduced cost in ``m.reduced``, or None when out
    of time (then ``keep`` stays as far as it got: the MIP over it gives a plan, not a proven one)."""
    import highspy

    h, _ = m.highs(keep, False, deadline, 0.0, threads)
    a = m.csc()[:, :m.ncand]
    at = a.T.tocsr()
    cost = m.cost[:m.ncand]
    while time.monotonic() < deadline:
        h.setOptionValue("time_limit", max(0.5, deadline - time.monotonic()))
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break  # infeasible relaxation or out of time: let the MIP over every column say what it is
        stats.lp_rounds += 1
        dual = np.asarray(h.getSolution().row_dual)
        m.reduced = cost - at @ dual
        neg = np.flatnonzero(~keep & (m.reduced < -1e-9))
        if not neg.size:
            xs = np.asarray(h.getSolution().col_value)[:int(keep.sum())]
            stats.lp_fractional = int(((xs > 1e-6) & (xs < 1 - 1e-6)).sum())
            return float(h.getInfo().objective_function_value)
        new = np.sort(neg[np.argsort(m.reduced[neg])[:PRICE_BATCH]])
        keep[new] = True
        block = a[:, new]
        h.addCols(new.size, cost[new], m.lo[new], m.hi[new], block.nnz, block.indptr[:-1].astype(np.int32),
                  block.indices.astype(np.int32), block.data)
    return None


def _solve_mip(m: _Matrix, keep: np.ndarray, abs_gap: float, threads: int, deadline: float,
               start: np.ndarray | None, stats: IlpStats) -> tuple[np.ndarray, float | None]:
    """Solve the 0-1 program over the kept x; returns every x's value and the objective (None where the
    deadline came before HiGHS had a plan and ``start`` is returned as it was)."""
    import highspy

    h, cols = m.highs(keep, True, deadline, abs_gap, threads)
    nk = int(keep.sum())
    if start is not None and start[~keep].sum() == 0:
        h.setSolution(nk, np.arange(nk, dtype=np.int32), start[keep])
    h.run()
    stats.mips += 1
    model_status = h.getModelStatus()
    info = h.getInfo()
    stats.status = h.modelStatusToString(model_status)
    stats.nodes += int(getattr(info, "mip_node_count", 0))
    stats.gap = float(getattr(info, "mip_gap", 0.0))
    stats.optimal = model_status == highspy.HighsModelStatus.kOptimal
    if model_status == highspy.HighsModelStatus.kInfeasible:
        if keep.all():
            raise CollageError("the candidates admit no executable exact cover (the ILP is infeasible); "
                               "add single-node candidates")
        keep[:] = True  # infeasible over the priced columns only: try them all
        return _solve_mip(m, keep, abs_gap, threads, deadline, start, stats)
    stopped = model_status in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt)
    if stopped and time.monotonic() >= deadline:
        stats.status = "Time limit reached"  # our callbacks interrupt it at the deadline (see _stop_at)
    if int(getattr(info, "primal_solution_status", 0)) != 2:  # 2: a feasible solution exists
        if start is None or not stopped:
            raise CollageError(f"HiGHS found no plan{' in time' if stopped else ''} ({stats.status})")
        # stopped before it took up the incumbent (it first completes the hand-over columns the incumbent
        # leaves out: seconds on Inception-v2's 268,038 columns): the incumbent is a valid answer
        stats.status = f"{stats.status} before HiGHS had a plan of its own; its incumbent kept"
        return start.copy(), None
    x = np.zeros(m.ncand)
    x[np.flatnonzero(keep)] = np.asarray(h.getSolution().col_value)[:nk]
    return x, float(info.objective_function_value)


def _transition_terms(graph: Graph, m: _Matrix, backends: list[str], holding: Holding, y0: int,
                      transition: Transition | None, unit: float) -> int:
    """The hand-over columns and rows (module docstring); returns how many hand-over columns."""
    nb = len(backends)
    if transition is None or nb < 2:
        return 0
    inf = None
    price = HandOver(backends, transition)

    hi = m.hi

    def y(v: int, b: int) -> int | None:
        k = y0 + v * nb + b
        return k if hi[k] > 0 else None

    count = 0
    for p in range(len(graph)):
        for t in graph.op(p).output:
            if not t:
                continue
            readers = sorted({c for c in graph.consumers(t) if c != p})
            if not readers:
                continue
            nbytes = graph.tensor(t).nbytes
            seen = np.zeros(0, np.int64)  # columns holding an earlier reader
            for j, u in enumerate(readers):
                # partitions holding u and an earlier reader of t: that reader's term pays for t
                earlier = np.intersect1d(holding(u), seen, assume_unique=True) if j else ()
                seen = np.union1d(seen, holding(u))
                for b in range(nb):
                    yub = y(u, b)
                    if yub is None:
                        continue
                    sources = {s: yps for s in range(nb) if s != b and (yps := y(p, s)) is not None}
                    prices = {s: price(s, b, nbytes) for s in sources}
                    if not any(prices.values()):
                        continue
                    zs = {}
                    for s, q in prices.items():
                        if not q:
                            continue
                        z = zs[s] = m.add_cols(1, q * unit, 0.0, 1.0)
                        count += 1
                        if len(prices) > 1:  # z >= y_{u,b} + y_{p,s} - 1 - e
                            row = {z: 1.0, yub: -1.0, sources[s]: -1.0}
                            row.update((int(k), 1.0) for k in earlier)
                            m.row(row, -1.0, inf)
                    if len(zs) == len(prices):  # sum_s z_s >= y_{u,b} - y_{p,b} - e
                        row = {z: 1.0 for z in zs.values()}
                        row[yub] = -1.0
                        ypb = y(p, b)
                        if ypb is not None:
                            row[ypb] = 1.0
                        row.update((int(k), 1.0) for k in earlier)
                        m.row(row, 0.0, inf)
    return count


def _order_rows(m: _Matrix, n: int, succ: list[set[int]], cols: list[Part], holding: Holding) -> None:
    """The ordering formulation of an executable cover (module docstring): positions, two rows per edge."""
    big = float(max(n - 1, 1))
    p0 = m.add_cols(n, 0.0, 0.0, big)
    for u in range(n):
        for v in succ[u]:
            shared = np.intersect1d(holding(u), holding(v), assume_unique=True)
            row = {p0 + v: 1.0, p0 + u: -1.0}
            row.update((int(k), 1.0) for k in shared)
            m.row(row, 1.0, None)                 # p_v - p_u + s_uv >= 1
            row = {p0 + v: 1.0, p0 + u: -1.0}
            row.update((int(k), big) for k in shared)
            m.row(row, None, big)                 # p_v - p_u + M s_uv <= M
    for k, (nodes, _) in enumerate(cols):
        if len(nodes) < 2:
            continue
        comps = _components(nodes, succ)
        for comp in comps[1:]:
            r0, r1 = comps[0][0], comp[0]
            m.row({p0 + r1: 1.0, p0 + r0: -1.0, k: big}, None, 2 * big)   # |p_r1 - p_r0| <= M (1 - x_c)
            m.row({p0 + r0: 1.0, p0 + r1: -1.0, k: big}, None, 2 * big)


def _cycle_cut(graph: Graph, m: _Matrix, parts: list[Part], holding: Holding) -> None:
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
            for c in np.intersect1d(holding(v), holding(nxt), assume_unique=True):
                row[int(c)] = row.get(int(c), 0.0) + 1.0
        for c in np.intersect1d(holding(u), holding(v), assume_unique=True):
            row[int(c)] = row.get(int(c), 0.0) - 1.0
    m.row(row, None, rhs)
