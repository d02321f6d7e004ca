"""The Collage search: the cheapest exact cover of the graph by measured candidates.

:func:`dp_search` is a shortest path over states ``(covered, frontier)``:

* ``covered`` is the bitset of nodes already assigned. A step adds one candidate (a node set on one
  backend) whose external inputs are all covered, so ``covered`` is always closed under predecessors
  and the sequence of steps is an executable order of the partitions.
* ``frontier`` records, for every covered node whose outputs are still read by an uncovered node,
  the backend that runs it. A step's cost is the candidate's cost plus, for each distinct tensor it
  reads from a node on another backend, ``transition(src, dst, nbytes)``. That cost depends only on
  the frontier, so equal states can be merged (keep the cheapest) and the answer stays exact.
* Costs are compared as integer nanoseconds then partition count: among equally cheap plans the one
  with the fewest partitions wins, so one backend that wins everywhere gives one partition.
* Order: a step only adds nodes, so covered sets are settled by increasing size (Collage's DP over
  covered sets). When a covered set is taken up, every state with it has been reached; those that no
  other one dominates are kept and expanded.
* Dominance: of two states with the same ``covered``, one whose cost, plus for each frontier node
  whose backend differs (number of its uncovered readers) x (dearest hand-over of its tensor), is not
  larger is at least as good, and the other is dropped: any completion of the dropped state costs at
  most that much more from the kept one.
* Options: a node set's backend whose cost exceeds another backend's on the same set by more than the
  most choosing that one can add in hand-overs (into the set, and out of it to every outside reader) is
  dropped before the search (``dp_tables.drop_dominated_options``): every plan with it has a strictly
  cheaper one with the same partitions.
* Bound: ``h``, the chain heuristic of :mod:`collage.search.dp_tables` (shares of candidate costs per
  node and backend, plus the hand-overs along disjoint chains of edges), is admissible and
  consistent. Two greedy plans (cheapest ``g + h`` at every step; cheapest step per node covered)
  are found first, and the bound drops to any complete plan reached on the way; a successor whose
  ``g + h`` exceeds the bound cannot lead to a cheaper plan and is not kept (an equal one is kept, so
  the partition-count tie-break stays exact).
* Encoding, for speed: covered sets get small ids, a state is one int (the frontier's digits above
  the id), and everything a step needs that depends only on the covered set (the next id, which
  frontier digits it reads and keeps) is computed once per covered set.

Which candidates a state expands. Collage expands those containing the first uncovered node ``v``;
with the executability requirement that alone loses covers: with edges 0->2, 1->2 the cover
{0,2},{1} must run {1} first, yet {1} does not contain ``v == 0``. Instead: every exact, executable
cover has one canonical order, "run the ready partition with the smallest first node" (Kahn's
algorithm with that priority), and the total cost does not depend on the order. The search only
prunes steps that canonical order never takes. Call an uncovered node ``r`` *ready* when its
predecessors are covered, and *unblocked* when every candidate containing ``r`` and disjoint from
``covered`` has all its external inputs covered. Let ``r*`` be the smallest unblocked ready node;
only candidates whose first node is at most ``r*`` are expanded. If the canonical order picked ``C``
with ``min(C) > r*``, the partition holding ``r*`` would be ready (``r*`` is unblocked) with a
smaller first node, and picked instead. Usually ``v`` itself is unblocked, ``r* == v``, and the rule
is Collage's.

The property test in tests/search/test_search.py checks the result against :mod:`exhaustive` on random DAGs.
"""
from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from collage.errors import CollageError
from collage.plan import Note, NoteKind, Plan
from collage.search.cost import CostTable
from collage.search.cover import Transition, UsableCosts, to_plan, usable_costs
from collage.search.dp_tables import SCALE, Group, HandOver, build_groups, drop_dominated_options, prepare

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)


class DpStats:
    """What the last :func:`dp_search` did, for benchmarks and logs: ``expanded`` states (kept and expanded),
    ``pushed`` (state records created or improved) and ``dropped`` (backend options that another option of
    the same node set beats whatever the rest of the plan: never expanded)."""

    pushed = 0
    expanded = 0
    dropped = 0


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _first_zero(mask: int) -> int:
    return (~mask & (mask + 1)).bit_length() - 1


class Bucket(NamedTuple):
    """The groups with one first node and one set of outside predecessors."""

    ext_pred: int
    union: int                              # the union of their masks
    members: tuple[tuple[int, Group], ...]  # (mask, group), in the groups' order
    groups: tuple[Group, ...]


def _union(masks: Iterator[int]) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


#: ``tuple.__new__(Record, fields)`` builds a NamedTuple without its Python-level ``__new__`` (the search
#: creates millions of records: 1.9M on Inception-v2).
_make = tuple.__new__


class StateRecord(NamedTuple):
    """How the search reached a state (the cheapest way so far)."""

    cost: int                 # g: the steps' quantized cost so far
    parts: int                # partitions so far (the tie-break)
    f: int                    # g + h
    parent: int               # the encoded state it was reached from; -1 for the start
    group: Group | None       # the step taken into it (None for the start)
    backend: int              # the step's backend index


class Move(NamedTuple):
    """A step a covered set may take (what it reads from the frontier and adds to it is the group's)."""

    group: Group
    next_id: int                                   # id of the covered set after the step


class Successor(NamedTuple):
    """One step from one state (the greedy dives rank these)."""

    f: int
    step: int
    group: Group
    backend: int
    next_id: int
    frontier: int


#: One step of a path: the group and the backend index it runs on.
Step = tuple[Group, int]


class Dive(NamedTuple):
    """A greedy plan: its quantized cost and its steps."""

    cost: int
    path: list[Step]


class Kept(NamedTuple):
    """A state of the covered set being settled that no other one dominates."""

    cost: int
    parts: int
    frontier: int


def dp_search(graph: Graph, costs: CostTable, transition: Transition | None = None,
              *, stats: DpStats | None = None, max_states: int = 1_000_000, deadline: float | None = None) -> Plan:
    """The cheapest executable exact cover of ``graph`` by the candidates in ``costs`` (module docstring).

    ``max_states`` is a safety valve: past that many expanded states the greedy plan found first is
    returned, with a note saying it is not proven optimal (BERT-base with three backends needs ~2e4).
    ``deadline`` (a ``time.monotonic()`` value): raise :class:`OutOfTime` once it has passed, or earlier once
    the covered sets settled so far say it would pass (checked at the first and every 16th covered set, after a second
    of settling: elapsed time x nodes / nodes settled); any thread.
    """
    if len(graph) == 0:
        raise CollageError(f"{graph.name}: the graph has no nodes to place")
    table = usable_costs(graph, costs)
    full = (1 << len(graph)) - 1
    covered_any = 0
    for nodes in table:
        for i in nodes:
            covered_any |= 1 << i
    if covered_any != full:
        i = _first_zero(covered_any)
        raise CollageError(f"{graph.name}: no candidate with a usable cost covers {graph.node_label(i)}: no backend "
                           "supports it, or every measurement of it failed; enable a backend that runs "
                           f"{graph.op_type(i)} (onnxruntime runs every ONNX op)")
    return CoverSearch(graph, table, transition, deadline).run(stats or DpStats(), max_states)


class OutOfTime(CollageError):
    """The search's ``deadline`` passed (or would have before it finished). ``greedy``: the greedy plan it
    had found by then (None if its dives found none), so that whoever takes over need not set up again."""

    greedy: Plan | None = None


class CoverSearch:
    """One run of the search (module docstring): the tables set up once per graph, the covered sets
    registered as they are reached, the greedy bound, then the covered sets settled by increasing size."""

    def __init__(self, graph: Graph, table: UsableCosts, transition: Transition | None,
                 deadline: float | None = None) -> None:
        self.t_start = time.perf_counter()
        self.deadline = deadline
        self.graph, self.table, self.transition = graph, table, transition
        n = self.n = len(graph)
        self.full = (1 << n) - 1
        self.backends = sorted({b for opts in table.values() for b in opts})
        self.nb = len(self.backends)
        self.preds, self.succ = [0] * n, [0] * n
        for u, v in graph.dag.edges:
            self.preds[v] |= 1 << u
            self.succ[u] |= 1 << v
        self.sources = sum(1 << i for i in range(n) if not self.preds[i])
        self.hand_over = HandOver(self.backends, transition)  # quantized, cached
        groups = build_groups(graph, table, {b: k for k, b in enumerate(self.backends)}, self.preds, self.succ)
        self.out_tensors = self._out_tensors()
        self.dropped = drop_dominated_options(groups, self.nb, self.hand_over, self.out_tensors)
        # the groups by first node, bucketed by their outside predecessors (a few hundred buckets where a node
        # starts thousands of groups: Inception-v2's branch tails before a Concat); per bucket the union of the
        # masks and the members (mask, group) in the order of the groups
        by_min: list[dict[int, list[tuple[int, Group]]]] = [{} for _ in range(n)]
        self.by_node: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        for g in groups:  # sorted by nodes, so by first node
            by_min[g.nodes[0]].setdefault(g.ext_pred, []).append((g.mask, g))
            for i in g.nodes:
                self.by_node[i].append((g.nodes[0], g.mask, g.ext_pred))
        self.by_min: list[list[Bucket]] = [
            [Bucket(ext_pred, _union(m for m, _ in members), tuple(members), tuple(g for _, g in members))
             for ext_pred, members in buckets.items()] for buckets in by_min]
        self.rank = {id(g): k for k, g in enumerate(groups)}
        # per first node r, the nodes whose coverage decides which of its groups a covered set may take and
        # whether r is blocked there (their masks and outside predecessors): steps_from's answer for r is a
        # function of ``covered & near[r]``, memoised (covered sets that differ only in other branches share it)
        self.near = [_union(b.union | b.ext_pred for b in buckets) for buckets in self.by_min]
        self.allowed_memo: dict[tuple[int, int], tuple[tuple[Group, ...], bool]] = {}
        self.bits = max(1, (self.nb - 1).bit_length())  # a frontier digit holds a backend index
        self.digit = (1 << self.bits) - 1
        self.h0 = prepare(graph, groups, self.nb, self.bits, self.hand_over)  # and the frontier digits of steps
        # Covered sets get small ids. A state is one int: (frontier << 32) | id, where the frontier holds the
        # backend of frontier node u in bits u*bits.. of it (a fixed place per node: a step keeps the digits
        # of the nodes still read, one AND, and adds its own, one OR).
        self.cov_id: dict[int, int] = {}
        self.covs: list[int] = []                          # id -> covered mask
        self.fnodes_of: list[int] = []                     # id -> frontier nodes (mask)
        self.fdigits_of: list[int] = []                    # id -> every bit of the frontier nodes' digits
        self.moves_of: list[list[Move] | None] = []        # id -> allowed steps (lazily)
        self.reached: list[dict[int, StateRecord] | None] = []  # id -> {frontier: record}
        self.buckets: list[list[int]] = [[] for _ in range(n + 1)]  # covered set size -> ids
        self.settled: dict[int, StateRecord] = {}          # state -> its record, once kept

    # ------------------------------------------------------------------ set-up
    def _out_tensors(self) -> list[list[tuple[int, int]]]:
        """Per node, (readers mask, dearest hand-over) of each output tensor read. Dominance between states
        with the same covered set: a frontier node's backend can change the remaining cost by at most
        (uncovered readers of each of its tensors) x (dearest hand-over of it)."""
        graph, nb = self.graph, self.nb
        out: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
        for u in range(self.n):
            for t in graph.op(u).output:
                readers = 0
                for c in graph.consumers(t) if t else ():
                    readers |= 1 << c
                if readers:
                    size = graph.tensor(t).nbytes
                    worst = max((self.hand_over(a, b, size) for a in range(nb) for b in range(nb) if a != b), default=0)
                    out[u].append((readers, worst))
        return out

    def register(self, cov: int, fnodes: int) -> int:
        """The id of covered set ``cov`` (with frontier nodes ``fnodes``, a mask), registering it when new."""
        cid = self.cov_id.get(cov)
        if cid is None:
            cid = self.cov_id[cov] = len(self.covs)
            self.covs.append(cov)
            self.fnodes_of.append(fnodes)
            bits, digit, digits = self.bits, self.digit, 0
            for u in _bits(fnodes):
                digits |= digit << (u * bits)
            self.fdigits_of.append(digits)
            self.moves_of.append(None)
            self.reached.append({})
            self.buckets[cov.bit_count()].append(cid)
        return cid

    # ------------------------------------------------------------------ steps
    def steps_from(self, cid: int) -> list[Move]:
        """The candidates covered set ``cid`` may expand (module docstring: those whose first node is at
        most the smallest unblocked ready node)."""
        out: list[Move] = []
        covered = self.covs[cid]
        uncovered = self.full & ~covered
        fnodes = self.fnodes_of[cid]
        first = _first_zero(covered)
        rest = self.sources  # ready nodes read only graph inputs or covered nodes: the frontier's
        for u in _bits(fnodes):
            rest |= self.succ[u]
        rest &= uncovered
        while rest:
            low = rest & -rest
            rest ^= low
            r = low.bit_length() - 1
            if self.preds[r] & uncovered:
                continue  # not ready
            key = (r, covered & self.near[r])
            hit = self.allowed_memo.get(key)
            if hit is None:
                hit = self.allowed_memo[key] = self.allowed_at(r, covered)
            allowed, blocked = hit
            if allowed:
                move = self.move
                out.extend(move(covered, fnodes, grp) for grp in allowed)
            if not blocked and r > first:
                blocked = self.blocked_later(r, first, covered, uncovered)
            if not blocked:
                break
        return out

    def allowed_at(self, r: int, covered: int) -> tuple[tuple[Group, ...], bool]:
        """The groups with first node ``r`` disjoint from ``covered`` whose outside inputs it covers (in the
        groups' order), and whether ``r`` is blocked (one disjoint from it still needs an uncovered input)."""
        uncovered = self.full & ~covered
        blocked = False
        allowed: list[Group] = []
        for ext_pred, union, members, grps in self.by_min[r]:
            if ext_pred & uncovered:  # these need an uncovered input: r is blocked if one of them is disjoint
                if not blocked:
                    if not union & covered:
                        blocked = True
                    else:
                        for mask, _ in members:
                            if not mask & covered:
                                blocked = True
                                break
            elif not union & covered:
                allowed.extend(grps)
            else:
                allowed.extend(grp for mask, grp in members if not mask & covered)
        rank = self.rank
        allowed.sort(key=lambda g: rank[id(g)])  # the groups' order, whatever the buckets'
        return tuple(allowed), blocked

    def blocked_later(self, r: int, first: int, covered: int, uncovered: int) -> bool:
        """Whether a candidate holding ``r`` whose first node lies in ``[first, r)`` still needs an uncovered input."""
        pairs = self.by_node[r]  # (first node, mask, outside preds), by first node: those before ``first`` overlap
        for _, mask, ext_pred in pairs[bisect_left(pairs, (first,)):bisect_left(pairs, (r,))]:
            if not mask & covered and ext_pred & uncovered:
                return True
        return False

    def move(self, covered: int, fnodes: int, grp: Group) -> Move:
        """The step of ``grp`` from covered set ``covered`` (frontier nodes ``fnodes``): the next covered set."""
        new_cov = covered | grp.mask
        nid = self.cov_id.get(new_cov)
        if nid is None:
            # the step's members read outside stay (their readers are uncovered: ``covered`` is closed under
            # predecessors); of the old frontier only the step's outside predecessors can leave it
            new_unc = self.full & ~new_cov
            succ = self.succ
            nodes = fnodes | grp.outs_mask
            for p in _bits(fnodes & grp.ext_pred):
                if not succ[p] & new_unc:
                    nodes ^= 1 << p
            nid = self.register(new_cov, nodes)
        return _make(Move, (grp, nid))

    def enter(self, move: Move, front: int, f: int) -> tuple[int, list[tuple[int, ...]], int]:
        """What a step from frontier ``front`` shares across its backends: ``f`` less the heuristic of the
        nodes it covers and of the hand-overs it settles, the transition rows of the tensors it reads
        (by their producers' backends), and the frontier digits that stay."""
        digit = self.digit
        grp = move.group
        base = f - grp.hconst
        rows = []
        for s, trows, hw in grp.at:
            pb = (front >> s) & digit
            rows.append(trows[pb])
            base -= hw[pb]
        return base, rows, front & self.fdigits_of[move.next_id]

    def moves(self, cid: int) -> list[Move]:
        moves = self.moves_of[cid]
        if moves is None:
            moves = self.moves_of[cid] = self.steps_from(cid)
        return moves

    def successors(self, cid: int, front: int, f: int) -> Iterator[Successor]:
        """Every allowed step from state (``cid``, ``front``) with ``f`` = g + h (for the dives)."""
        for mv in self.moves(cid):
            base, rows, nf0 = self.enter(mv, front, f)
            grp = mv.group
            for b, q in grp.options:
                step = q + sum(row[b] for row in rows)
                yield Successor(base + step + grp.hadd[b], step, grp, b, mv.next_id, nf0 | grp.fresh[b])

    def dive(self, rank: Callable[[Successor], tuple[float, ...] | int]) -> Dive | None:
        """A greedy plan (the successor ``rank`` puts first at every step) and its cost, an upper bound; None
        where a step finds no successor (the dive is stuck)."""
        cid, front, g_cost, f = self.register(0, 0), 0, 0, self.h0
        path: list[Step] = []
        while self.covs[cid] != self.full:
            pick = min(self.successors(cid, front, f), default=None, key=rank)
            if pick is None:
                return None
            f, cid, front = pick.f, pick.next_id, pick.frontier
            path.append((pick.group, pick.backend))
            g_cost += pick.step
        return Dive(g_cost, path)

    # ------------------------------------------------------------------ the search
    def run(self, stats: DpStats, max_states: int) -> Plan:
        """Two greedy plans bound the search; then covered sets are settled by increasing size (a step only
        adds nodes, so when one is taken up every state with it has been reached): the states no other one
        dominates are kept and expanded, until the full set is taken up."""
        # cheapest g + h at every step, and cheapest step per node covered (which finds the whole graph, or
        # large pieces, when per-call costs dominate); the cheaper one bounds the search
        dives = [self.dive(lambda t: t.f), self.dive(lambda t: (t.step / len(t.group.nodes), t.f))]
        best = min((d for d in dives if d is not None), key=lambda d: d.cost, default=None)
        self.bound: float = best.cost if best is not None else math.inf  # no greedy plan: nothing bounds it yet
        greedy = best.path if best is not None else []
        log.debug("%s: greedy plan bound %s, heuristic at the start %s (set up in %.3f s)", self.graph.name,
                  self.bound, self.h0, time.perf_counter() - self.t_start)
        start = self.register(0, 0)
        self.reached[start] = {0: StateRecord(0, 0, self.h0, -1, None, 0)}
        self.goal_id = self.register(self.full, 0)
        self.expanded = self.pushed = 0
        try:
            goal, deepest = self.settle_all(greedy, max_states)
        except OutOfTime as e:
            e.greedy = self.plan(greedy) if greedy else None
            raise
        stats.expanded, stats.pushed, stats.dropped = self.expanded, self.pushed, self.dropped
        if isinstance(goal, Plan):
            return goal
        if goal is None:
            i = _first_zero(deepest)
            raise CollageError(f"{self.graph.name}: the candidates admit no executable exact cover; the search got "
                               f"stuck before {self.graph.node_label(i)} (every candidate containing it needs an "
                               "input that no runnable order provides); add single-node candidates for it")
        log.debug("%s: search expanded %d states, reached %d", self.graph.name, stats.expanded, stats.pushed)
        return self.plan(self.path_to(goal))

    def settle_all(self, greedy: list[Step], max_states: int) -> tuple[StateRecord | Plan | None, int]:
        """The covered sets by increasing size: (the goal's record, or the greedy plan past ``max_states``,
        or None when stuck; the deepest covered set taken up)."""
        deepest = 0
        deadline, begun, taken = self.deadline, time.monotonic(), 0
        for size in range(self.n + 1):
            for cid in self.buckets[size]:
                taken += 1
                if deadline is not None and taken & 15 == 1:
                    now = time.monotonic()
                    if now > deadline or (now - begun > 1.0
                                          and begun + (now - begun) * self.n / max(size, 1) > deadline):
                        raise OutOfTime(f"{self.graph.name}: the search would not finish by its deadline "
                                        f"({size} of {self.n} nodes settled)")
                found = self.reached[cid]
                self.reached[cid] = None
                if not found:
                    continue
                covered = self.covs[cid]
                if covered == self.full:
                    return min(found.values(), key=lambda r: (r.cost, r.parts)), deepest
                deepest = covered
                kept = self.undominated(cid, found)
                moves = self.moves_of[cid] or self.steps_from(cid)
                self.moves_of[cid] = None
                self.expanded += len(kept)
                if self.expanded > max_states and greedy:
                    return self.greedy_plan(greedy, max_states), deepest
                self.expand(cid, found, kept, moves)
        return None, deepest

    def undominated(self, cid: int, found: Mapping[int, StateRecord]) -> list[Kept]:
        """The states of covered set ``cid`` that no other one dominates (module docstring), cheapest first;
        they are recorded as settled."""
        bits = self.bits
        unc = self.full & ~self.covs[cid]
        fnodes = list(_bits(self.fnodes_of[cid]))
        pens = {u: sum((r & unc).bit_count() * w for r, w in self.out_tensors[u]) for u in fnodes}
        worst = sum(pens.values())
        dcache = {0: 0}
        low_bits = sum(1 << (u * bits) for u in fnodes)  # the lowest bit of each digit
        spread = tuple(range(1, bits))  # shifts that fold a digit onto its lowest bit
        kept: list[Kept] = []
        for cost, parts, front in sorted([(rec.cost, rec.parts, fr) for fr, rec in found.items()]):
            if kept:
                c1, p1, _ = kept[0]
                if c1 + worst < cost or (c1 + worst == cost and p1 <= parts):
                    break  # the cheapest state dominates this one and every dearer one, whatever the frontiers
                dominated = False
                for c1, p1, f1 in kept:
                    x = y = f1 ^ front
                    for s in spread:
                        y |= x >> s
                    x = y & low_bits
                    d = dcache.get(x)
                    if d is None:
                        d = dcache[x] = _penalty(pens, x, bits)
                    c1 += d
                    if c1 < cost or (c1 == cost and p1 <= parts):
                        dominated = True
                        break
                if dominated:
                    continue
            kept.append(Kept(cost, parts, front))
            self.settled[(front << 32) | cid] = found[front]
        return kept

    def expand(self, cid: int, found: Mapping[int, StateRecord], kept: list[Kept], moves: list[Move]) -> None:
        """Every step of every kept state whose g + h stays within the bound; a complete plan lowers the bound."""
        bound, pushed, goal_id, reached = self.bound, self.pushed, self.goal_id, self.reached
        for g_cost, parts, front in kept:
            key = (front << 32) | cid
            f = found[front].f
            parts2 = parts + 1
            for mv in moves:
                grp, nid = mv
                if f + grp.least > bound:
                    continue  # no backend for this step keeps g + h within the greedy plan's cost
                base, rows, nf0 = self.enter(mv, front, f)
                hadd, fresh = grp.hadd, grp.fresh
                into = reached[nid]
                assert into is not None  # a step reaches a larger covered set: none of them is settled yet
                for b, q in grp.options:
                    step = q
                    for row in rows:
                        step += row[b]
                    f2 = base + step + hadd[b]
                    if f2 > bound:
                        continue  # g + h beyond the greedy plan's cost: not worth keeping
                    cost = g_cost + step
                    new_front = nf0 | fresh[b]
                    old = into.get(new_front)
                    if old is not None and (old[0] < cost or (old[0] == cost and old[1] <= parts2)):  # cost, parts
                        continue  # the same state, no dearer
                    into[new_front] = _make(StateRecord, (cost, parts2, f2, key, grp, b))
                    pushed += 1
                    if nid == goal_id and cost < bound:
                        bound = cost  # a complete plan: nothing dearer is worth keeping from now on
        self.bound, self.pushed = bound, pushed

    # ------------------------------------------------------------------ the answer
    def path_to(self, goal: StateRecord) -> list[Step]:
        """The steps (group, backend index) from the start to ``goal``, in order."""
        steps: list[Step] = []
        rec = goal
        while rec.group is not None:  # the start's record has none
            steps.append((rec.group, rec.backend))
            rec = self.settled[rec.parent]
        steps.reverse()
        return steps

    def plan(self, steps: list[Step]) -> Plan:
        return to_plan(self.graph, [(grp.nodes, self.backends[b]) for grp, b in steps], self.table, self.transition)

    def greedy_plan(self, greedy: list[Step], max_states: int) -> Plan:
        """The greedy plan, when the search stopped at ``max_states`` expanded states."""
        log.warning("%s: search stopped after %d states; using the greedy plan (%.3f ms, not proven optimal)",
                    self.graph.name, max_states, self.bound / SCALE)
        plan = self.plan(greedy)
        plan.notes.append(Note(NoteKind.SEARCH,
                               f"search stopped after {max_states} states: greedy plan, not proven optimal"))
        return plan


def _penalty(pens: Mapping[int, int], y: int, bits: int) -> int:
    """Sum of the penalties of the frontier digits flagged in ``y`` (lowest bit of each digit)."""
    total = 0
    while y:
        lowbit = y & -y
        total += pens[(lowbit.bit_length() - 1) // bits]
        y ^= lowbit
    return total
