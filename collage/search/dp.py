"""The Collage search: the cheapest exact cover of the graph by measured candidates.

:func:`search` is a shortest path (A*) over states ``(covered, frontier)``:

* ``covered`` is the bitset of nodes already assigned. A step adds one candidate (a node set on one
  backend) whose external inputs are all covered, so ``covered`` is always closed under predecessors
  and the sequence of steps is an executable order of the partitions.
* ``frontier`` records, for every covered node whose outputs are still read by an uncovered node,
  the backend that runs it. A step's cost is the candidate's cost plus, for each distinct tensor it
  reads from a node on another backend, ``transition(src, dst, nbytes)``. That cost depends only on
  the frontier, so equal states can be merged (keep the cheapest) and the answer stays exact.
* Costs are compared as integer nanoseconds then partition count: among equally cheap plans the one
  with the fewest partitions wins, so one backend that wins everywhere gives one partition.
* The heuristic is admissible and consistent: every candidate's cost is split over its nodes in
  proportion to fixed weights (each node's cheapest single-node cost), and each uncovered node counts
  its cheapest share over the candidates that contain it. Any cover pays at least the sum of those.
* Dominance: of two states with the same ``covered``, one whose cost, plus for each frontier node
  whose backend differs (number of its uncovered readers) x (dearest hand-over of its tensor), is not
  larger is at least as good, and the other is dropped: any completion of the dropped state costs at
  most that much more from the kept one. A greedy plan found first bounds the costs worth pushing.

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

The property test in tests/test_search.py checks the result against :mod:`exhaustive` on random DAGs.
"""
from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collage.errors import CollageError
from collage.plan import Partition, Plan
from collage.search.candidates import Candidate

if TYPE_CHECKING:
    from collage.graph import Graph

log = logging.getLogger(__name__)

Transition = Callable[[str, str, int], float]

#: Costs are compared in integer units of 1e-6 ms (nanoseconds): sums are exact, so "equal cost"
#: is well defined for the partition-count tie-break.
_SCALE = 1_000_000


def quantize(ms: float) -> int:
    return int(round(ms * _SCALE))


def cost_ms(value: Any) -> float | None:
    """A usable cost in ms from what a cost table holds, or None (missing, failed, not finite)."""
    if value is None:
        return None
    if not isinstance(value, (int, float)):
        if getattr(value, "ok", True) is False or getattr(value, "error", None):
            return None
        for attr in ("median_ms", "ms", "cost_ms"):
            if hasattr(value, attr):
                value = getattr(value, attr)
                break
        else:
            return None
        if value is None:
            return None
    value = float(value)
    if not math.isfinite(value) or value < 0:
        return None
    return value


def usable_costs(graph: Graph, costs: Mapping[Candidate, Any]) -> dict[tuple[int, ...], dict[str, float]]:
    """Usable costs grouped by node set: ``{nodes: {backend: ms}}`` (missing / failed ones dropped)."""
    n = len(graph)
    table: dict[tuple[int, ...], dict[str, float]] = {}
    for cand, value in costs.items():
        ms = cost_ms(value)
        if ms is None:
            continue
        if cand.nodes[0] < 0 or cand.nodes[-1] >= n:
            raise CollageError(f"candidate {cand} names a node outside {graph.name} (nodes 0..{n - 1}); "
                               "were the costs computed for another model?")
        table.setdefault(cand.nodes, {})[cand.backend] = ms
    return table


@dataclass
class _Group:
    """One node set with its usable costs, precomputed for the search."""

    nodes: tuple[int, ...]
    mask: int
    ext_pred: int                          # predecessors outside the set
    reads: tuple[tuple[int, int], ...]     # (producer node, nbytes) per distinct tensor read from outside
    outs: tuple[int, ...]                  # member nodes with a consumer outside the set
    options: tuple[tuple[int, int, float], ...]  # (backend index, quantized cost, cost ms)


class SearchStats:
    """What the last :func:`search` did (states pushed / expanded), for benchmarks and logs."""

    pushed = 0
    expanded = 0


def _bits(mask: int) -> list[int]:
    return [i for i, c in enumerate(reversed(bin(mask))) if c == "1"]


def _first_zero(mask: int) -> int:
    return (~mask & (mask + 1)).bit_length() - 1


def search(graph: Graph, costs: Mapping[Candidate, Any], transition: Transition | None = None,
           *, stats: SearchStats | None = None, max_states: int = 1_000_000) -> Plan:
    """The cheapest executable exact cover of ``graph`` by the candidates in ``costs`` (module docstring).

    ``max_states`` is a safety valve: past that many expanded states the greedy plan found first is
    returned, with a note saying it is not proven optimal (BERT-base with three backends needs ~2e4).
    """
    n = len(graph)
    if n == 0:
        raise CollageError(f"{graph.name}: the graph has no nodes to place")
    full = (1 << n) - 1
    table = usable_costs(graph, costs)
    covered_any = 0
    for nodes in table:
        for i in nodes:
            covered_any |= 1 << i
    if covered_any != full:
        i = _first_zero(covered_any)
        raise CollageError(f"{graph.name}: no candidate with a usable cost covers {graph.node_label(i)}: no backend "
                           "supports it, or every measurement of it failed; enable a backend that runs "
                           f"{graph.op_type(i)} (onnxruntime runs every ONNX op)")
    backends = sorted({b for opts in table.values() for b in opts})
    bidx = {b: k for k, b in enumerate(backends)}
    preds = [0] * n
    succ = [0] * n
    for u, v in graph.dag.edges:
        preds[v] |= 1 << u
        succ[u] |= 1 << v

    groups: list[_Group] = []
    for nodes, opts in sorted(table.items()):
        mask = graph.mask(nodes)
        ext_pred = 0
        for i in nodes:
            ext_pred |= preds[i]
        ext_pred &= ~mask
        entering, _ = graph.boundary(nodes)
        reads = []
        for t in entering:
            p = graph.producer(t)
            if p is not None:
                reads.append((p, graph.tensor(t).nbytes))
        outs = tuple(i for i in nodes if succ[i] & ~mask)
        options = tuple((bidx[b], quantize(ms), ms) for b, ms in sorted(opts.items()))
        groups.append(_Group(nodes, mask, ext_pred, tuple(reads), outs, options))
    by_min: list[list[_Group]] = [[] for _ in range(n)]
    by_node: list[list[_Group]] = [[] for _ in range(n)]
    # Heuristic: split each candidate's cost over its nodes in proportion to fixed node weights (the
    # cheapest single-node cost); any cover pays at least the sum of its nodes' cheapest shares.
    weight = [0.0] * n
    for g in groups:
        if len(g.nodes) == 1:
            weight[g.nodes[0]] = min(q for _, q, _ in g.options)
    min_share: list[int | None] = [None] * n
    for g in groups:
        by_min[g.nodes[0]].append(g)
        q = min(o[1] for o in g.options)
        total = sum(weight[i] for i in g.nodes)
        for i in g.nodes:
            by_node[i].append(g)
            share = int(q * weight[i] // total) if total > 0 else q // len(g.nodes)
            if min_share[i] is None or share < min_share[i]:
                min_share[i] = share
    h_of_group = {id(g): sum(min_share[i] for i in g.nodes) for g in groups}
    h0 = sum(min_share)

    trans_cache: dict[tuple[int, int, int], tuple[int, float]] = {}

    def hand_over(src: int, dst: int, nbytes: int) -> tuple[int, float]:
        key = (src, dst, nbytes)
        hit = trans_cache.get(key)
        if hit is None:
            ms = float(transition(backends[src], backends[dst], nbytes)) if transition else 0.0
            if not math.isfinite(ms) or ms < 0:
                raise CollageError(f"transition cost {backends[src]} -> {backends[dst]} for {nbytes} bytes is {ms}; "
                                   "it must be a finite, non-negative number of ms")
            hit = trans_cache[key] = (quantize(ms), ms)
        return hit

    # Dominance between states with the same covered set: a frontier node's backend can change the
    # remaining cost by at most (uncovered readers of each of its tensors) x (dearest hand-over of it).
    out_tensors: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (readers mask, max hand-over q)
    for u in range(n):
        for t in graph.op(u).output:
            readers = 0
            for c in graph.consumers(t) if t else ():
                readers |= 1 << c
            if readers:
                nbytes = graph.tensor(t).nbytes
                worst = max((hand_over(a, b, nbytes)[0] for a in range(len(backends))
                             for b in range(len(backends)) if a != b), default=0)
                out_tensors[u].append((readers, worst))

    # A frontier is an int: the backend index of the k-th frontier node (by id) in bits k*bits.. of it.
    bits = max(1, (len(backends) - 1).bit_length())
    digit = (1 << bits) - 1

    fnodes_cache: dict[int, list[int]] = {}

    def frontier_nodes(cov: int) -> list[int]:
        hit = fnodes_cache.get(cov)
        if hit is None:
            unc = full & ~cov
            hit = fnodes_cache[cov] = [u for u in _bits(cov) if succ[u] & unc]
        return hit

    def penalties(cov: int) -> list[int]:
        unc = full & ~cov
        return [sum((r & unc).bit_count() * w for r, w in out_tensors[u]) for u in frontier_nodes(cov)]

    alive: dict[int, list] = {}  # covered -> [penalties, [(frontier, cost, parts)] by cost, sum of penalties]

    def steps_from(covered: int) -> list[tuple]:
        """The candidates a covered set may expand (see the module docstring), with what each needs to
        build the next state from any frontier of this covered set (its nodes depend on ``covered`` only)."""
        out = []
        uncovered = full & ~covered
        fnodes = frontier_nodes(covered)
        where = {u: k * bits for k, u in enumerate(fnodes)}
        rest = uncovered
        while rest:
            low = rest & -rest
            rest ^= low
            r = low.bit_length() - 1
            if preds[r] & uncovered:
                continue  # not ready
            blocked = False
            for grp in by_node[r]:
                if grp.mask & covered == 0 and grp.ext_pred & uncovered:
                    blocked = True
                    break
            for grp in by_min[r]:
                if grp.mask & covered or grp.ext_pred & uncovered:
                    continue
                new_cov = covered | grp.mask
                new_unc = full & ~new_cov
                merged = sorted([(u, k * bits) for k, u in enumerate(fnodes) if succ[u] & new_unc]
                                + [(u, -1) for u in grp.outs if succ[u] & new_unc])
                # the next frontier: (old shift or -1 for "this step's backend", new shift)
                template = tuple((src, k * bits) for k, (_, src) in enumerate(merged))
                read_pos = tuple((where[p], nbytes) for p, nbytes in grp.reads)
                out.append((r, grp, new_cov, template, read_pos, h_of_group[id(grp)]))
            if not blocked:
                break
        return out

    steps_cache: dict[int, list[tuple]] = {}

    def successors(covered: int, frontier: int, limit: float = math.inf):
        """(step cost, heuristic drop, group, backend, next covered, next frontier) of every allowed step
        whose ``step - drop`` (the growth of g + h) is at most ``limit``."""
        moves = steps_cache.get(covered)
        if moves is None:
            moves = steps_cache[covered] = steps_from(covered)
        for r, grp, new_cov, template, read_pos, hg in moves:
            for b, q, _ in grp.options:
                step = q
                for shift, nbytes in read_pos:
                    pb = (frontier >> shift) & digit
                    if pb != b:
                        step += hand_over(pb, b, nbytes)[0]
                if step - hg > limit:
                    continue
                new_front = 0
                for src, dst in template:
                    new_front |= (((frontier >> src) & digit) if src >= 0 else b) << dst
                yield step, hg, grp, b, new_cov, new_front

    def dive() -> tuple[float, list[tuple[_Group, int]]]:
        """A greedy plan (cheapest g + h at every step) and its cost: an upper bound that prunes pushes."""
        covered, frontier, g_cost = 0, 0, 0
        h = h0
        path = []
        while covered != full:
            pick = min(((g_cost + step + h - hg, step, hg, new_cov, new_front, grp, b)
                        for step, hg, grp, b, new_cov, new_front in successors(covered, frontier)),
                       default=None, key=lambda t: t[0])
            if pick is None:
                return math.inf, []
            _, step, hg, covered, frontier, grp, b = pick
            path.append((grp, b))
            g_cost += step
            h -= hg
        return g_cost, path

    bound, greedy = dive()
    log.debug("%s: greedy plan bound %s", graph.name, bound)
    stats = stats or SearchStats()
    stats.pushed = stats.expanded = 0
    start = (0, 0)
    best: dict[tuple[int, int], tuple[int, int]] = {start: (0, 0)}
    parent: dict[tuple[int, int], tuple[tuple[int, int], _Group, int] | None] = {start: None}
    heap: list[tuple[int, int, int, int, int, int]] = [(h0, 0, 0, 0, 0, 0)]
    tick = 0
    goal = None
    deepest = 0
    while heap:
        f, parts, g_cost, _, covered, frontier = heapq.heappop(heap)
        key = (covered, frontier)
        if best.get(key) != (g_cost, parts):
            continue  # stale entry
        if covered == full:
            goal = key
            break
        stats.expanded += 1
        if stats.expanded > max_states and greedy:
            log.warning("%s: search stopped after %d states; using the greedy plan (%.3f ms, not proven optimal)",
                        graph.name, max_states, bound / _SCALE)
            plan = _to_plan(graph, [(grp.nodes, backends[b]) for grp, b in greedy], table, transition)
            plan.notes.append(f"search stopped after {max_states} states: greedy plan, not proven optimal")
            return plan
        if covered.bit_count() > deepest.bit_count():
            deepest = covered
        h = f - g_cost
        # successors whose g + h exceeds the greedy plan's cost are not worth pushing
        for step, hg, grp, b, new_cov, new_front in successors(covered, frontier, bound - f):
            h2 = h - hg
            cost2 = g_cost + step
            cand = (cost2, parts + 1)
            nkey = (new_cov, new_front)
            old = best.get(nkey)
            if old is not None and old <= cand:
                continue  # the same state, no dearer
            if not _admit(alive, best, new_cov, new_front, cand, penalties, bits, digit):
                continue  # dominated by a state with the same covered set
            best[nkey] = cand
            parent[nkey] = (key, grp, b)
            tick += 1
            stats.pushed += 1
            heapq.heappush(heap, (cand[0] + h2, cand[1], cand[0], tick, new_cov, new_front))
    if goal is None:
        i = _first_zero(deepest)
        raise CollageError(f"{graph.name}: the candidates admit no executable exact cover; the search got stuck "
                           f"before {graph.node_label(i)} (every candidate containing it needs an input that no "
                           "runnable order provides); add single-node candidates for it")
    steps: list[tuple[_Group, int]] = []
    key = goal
    while parent[key] is not None:
        prev, grp, b = parent[key]
        steps.append((grp, b))
        key = prev
    steps.reverse()
    log.debug("%s: search expanded %d states, pushed %d", graph.name, stats.expanded, stats.pushed)
    return _to_plan(graph, [(grp.nodes, backends[b]) for grp, b in steps], table, transition)


def _admit(alive: dict[int, list], best: dict, cov: int, front: int, cand: tuple[int, int],
           penalties: Callable[[int], list[int]], bits: int, digit: int) -> bool:
    """Record state (cov, front) at cost ``cand`` unless a state with the same covered set dominates it
    (cheaper even after paying for every frontier backend that differs); drop the ones it dominates."""
    slot = alive.get(cov)
    if slot is None:
        # the frontier's nodes are a function of the covered set, so are their penalties
        pens = penalties(cov)
        slot = alive[cov] = [pens, [], sum(pens)]
    pens, entries, worst = slot  # entries sorted by cost: only cheaper ones can dominate the newcomer
    cost, parts = cand
    if entries and (entries[0][1] + worst, entries[0][2]) <= cand:
        return False  # the cheapest state dominates whatever the frontiers
    j = len(entries)  # first entry not cheaper than the newcomer: from there on it may dominate them
    for k, (f1, c1, p1) in enumerate(entries):
        if c1 >= cost:
            j = min(j, k)
            if c1 > cost:
                break
        diff = 0
        x = f1 ^ front
        while x:
            pos = ((x & -x).bit_length() - 1) // bits
            diff += pens[pos]
            x &= ~(digit << (pos * bits))
        if (c1 + diff, p1) <= (cost, parts):
            return False
    keep = entries[:j]
    keep.append((front, cost, parts))
    for entry in entries[j:]:
        f1, c1, p1 = entry
        diff = 0
        x = f1 ^ front
        while x:
            pos = ((x & -x).bit_length() - 1) // bits
            diff += pens[pos]
            x &= ~(digit << (pos * bits))
        if (cost + diff, parts) <= (c1, p1):
            best.pop((cov, f1), None)  # dominated by the newcomer: its heap entry goes stale
            continue
        keep.append(entry)
    slot[1] = keep
    return True


def cover_cost(graph: Graph, parts: list[tuple[tuple[int, ...], str]],
               table: Mapping[tuple[int, ...], Mapping[str, float]],
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


def _to_plan(graph: Graph, parts: list[tuple[tuple[int, ...], str]],
             table: Mapping[tuple[int, ...], Mapping[str, float]], transition: Transition | None) -> Plan:
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
        plan.notes.append(f"transitions between backends: {moved:.3f} ms of the predicted {compute + moved:.3f} ms")
    return plan


def plan_from_parts(graph: Graph, parts: list[tuple[tuple[int, ...], str]],
                    costs: Mapping[Candidate, Any], transition: Transition | None = None) -> Plan:
    """A Plan (boundaries, fingerprints, runner-ups, predicted ms) for given ``(nodes, backend)`` parts.

    Every part needs a usable cost in ``costs``; the order is kept as given (check it with
    :func:`check_plan`).
    """
    table = usable_costs(graph, costs)
    for nodes, b in parts:
        if b not in table.get(tuple(nodes), {}):
            raise CollageError(f"no usable cost for nodes {list(nodes)} on {b}")
    return _to_plan(graph, [(tuple(nodes), b) for nodes, b in parts], table, transition)


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
