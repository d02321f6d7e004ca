"""The Collage search: the cheapest exact cover of the graph by measured candidates.

:func:`search` is a shortest path over states ``(covered, frontier)``:

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

The property test in tests/test_search.py checks the result against :mod:`exhaustive` on random DAGs.
"""
from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from collage.errors import CollageError
from collage.plan import Plan
from collage.search.candidates import Candidate
from collage.search.cover import Transition, to_plan, usable_costs
from collage.search.dp_tables import SCALE, Group, build_groups, prepare, quantize

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)


class SearchStats:
    """What the last :func:`search` did, for benchmarks and logs: ``expanded`` states (kept and expanded)
    and ``pushed`` (state records created or improved)."""

    pushed = 0
    expanded = 0


def _first_zero(mask: int) -> int:
    return (~mask & (mask + 1)).bit_length() - 1


def search(graph: Graph, costs: Mapping[Candidate, Any], transition: Transition | None = None,
           *, stats: SearchStats | None = None, max_states: int = 1_000_000) -> Plan:
    """The cheapest executable exact cover of ``graph`` by the candidates in ``costs`` (module docstring).

    ``max_states`` is a safety valve: past that many expanded states the greedy plan found first is
    returned, with a note saying it is not proven optimal (BERT-base with three backends needs ~2e4).
    """
    t_start = time.perf_counter()
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
    nb = len(backends)
    preds = [0] * n
    succ = [0] * n
    for u, v in graph.dag.edges:
        preds[v] |= 1 << u
        succ[u] |= 1 << v
    sources = sum(1 << i for i in range(n) if not preds[i])

    trans_cache: dict[tuple[int, int, int], int] = {}

    def hand_over(src: int, dst: int, nbytes: int) -> int:
        key = (src, dst, nbytes)
        hit = trans_cache.get(key)
        if hit is None:
            ms = float(transition(backends[src], backends[dst], nbytes)) if transition else 0.0
            if not math.isfinite(ms) or ms < 0:
                raise CollageError(f"transition cost {backends[src]} -> {backends[dst]} for {nbytes} bytes is {ms}; "
                                   "it must be a finite, non-negative number of ms")
            hit = trans_cache[key] = quantize(ms)
        return hit

    groups = build_groups(graph, table, bidx, preds, succ)
    by_min: list[list[tuple[int, int, Group]]] = [[] for _ in range(n)]
    by_node: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    for g in groups:  # sorted by nodes, so by first node
        by_min[g.nodes[0]].append((g.mask, g.ext_pred, g))
        for i in g.nodes:
            by_node[i].append((g.nodes[0], g.mask, g.ext_pred))

    bits = max(1, (nb - 1).bit_length())  # a frontier digit holds a backend index
    digit = (1 << bits) - 1
    h0 = prepare(graph, groups, nb, bits, hand_over)

    # Dominance between states with the same covered set: a frontier node's backend can change the
    # remaining cost by at most (uncovered readers of each of its tensors) x (dearest hand-over of it).
    out_tensors: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (readers mask, max hand-over q)
    for u in range(n):
        for t in graph.op(u).output:
            readers = 0
            for c in graph.consumers(t) if t else ():
                readers |= 1 << c
            if readers:
                size = graph.tensor(t).nbytes
                worst = max((hand_over(a, b, size) for a in range(nb) for b in range(nb) if a != b), default=0)
                out_tensors[u].append((readers, worst))

    # Covered sets get small ids. A state is one int: (frontier << 32) | id, where the frontier holds the
    # backend of the k-th frontier node (by node id) of that covered set in bits k*bits.. of it.
    cov_id: dict[int, int] = {}
    covs: list[int] = []          # id -> covered mask
    fnodes_of: list[list[int]] = []  # id -> frontier nodes, sorted
    moves_of: list[list | None] = []  # id -> allowed steps (lazily)
    reached: list[dict | None] = []   # id -> {frontier: (cost, parts, f, parent state, group, backend)}
    buckets: list[list[int]] = [[] for _ in range(n + 1)]  # covered set size -> ids
    settled: dict[int, tuple] = {}    # state -> its record, once kept

    def register(cov: int, fnodes: list[int]) -> int:
        cid = cov_id.get(cov)
        if cid is None:
            cid = cov_id[cov] = len(covs)
            covs.append(cov)
            fnodes_of.append(fnodes)
            moves_of.append(None)
            reached.append({})
            buckets[cov.bit_count()].append(cid)
        return cid

    def steps_from(cid: int) -> list[tuple]:
        """The candidates covered set ``cid`` may expand (module docstring), each with what the step
        needs from any frontier of it: (group, next id, hand-over reads, kept digits, new digits per backend)."""
        out = []
        covered = covs[cid]
        uncovered = full & ~covered
        fnodes = fnodes_of[cid]
        where = {u: k * bits for k, u in enumerate(fnodes)}
        first = _first_zero(covered)
        rest = sources  # ready nodes read only graph inputs or covered nodes: the frontier's
        for u in fnodes:
            rest |= succ[u]
        rest &= uncovered
        while rest:
            low = rest & -rest
            rest ^= low
            r = low.bit_length() - 1
            if preds[r] & uncovered:
                continue  # not ready
            blocked = False
            for mask, ext_pred, grp in by_min[r]:
                if mask & covered:
                    continue
                if ext_pred & uncovered:
                    blocked = True
                    continue
                new_cov = covered | mask
                new_unc = full & ~new_cov
                merged = sorted([(u, where[u]) for u in fnodes if succ[u] & new_unc]
                                + [(u, -1) for u in grp.outs if succ[u] & new_unc])
                nid = register(new_cov, [u for u, _ in merged])
                # the old digits kept, as runs (old shift, mask, new shift) of consecutive ones
                runs: list[list[int]] = []
                fresh = 0
                for k, (_, src) in enumerate(merged):
                    if src < 0:
                        fresh |= 1 << (k * bits)
                    elif runs and runs[-1][0] + runs[-1][1] == src and runs[-1][2] + runs[-1][1] == k * bits:
                        runs[-1][1] += bits
                    else:
                        runs.append([src, bits, k * bits])
                keep = tuple((src, (1 << width) - 1, dst) for src, width, dst in runs)
                ins = tuple((where[p], rows, hw) for p, rows, hw in grp.ins)
                out.append((grp, nid, ins, keep, tuple(b * fresh for b in range(nb))))
            if not blocked and r > first:
                pairs = by_node[r]  # (first node, mask, outside preds), by first node: those before ``first`` overlap
                for _, mask, ext_pred in pairs[bisect_left(pairs, (first,)):bisect_left(pairs, (r,))]:
                    if not mask & covered and ext_pred & uncovered:
                        blocked = True
                        break
            if not blocked:
                break
        return out

    def enter(grp: Group, ins: list, keep: list, front: int, f: int) -> tuple[int, list, int]:
        """What a step from frontier ``front`` shares across its backends: ``f`` less the heuristic of the
        nodes it covers and of the hand-overs it settles, the transition rows of the tensors it reads
        (by their producers' backends), and the frontier digits that stay."""
        base = f - grp.hconst
        rows = []
        for s, trows, hw in ins:
            pb = (front >> s) & digit
            rows.append(trows[pb])
            base -= hw[pb]
        nf0 = 0
        for src, m, dst in keep:
            nf0 |= ((front >> src) & m) << dst
        return base, rows, nf0

    def successors(cid: int, front: int, f: int):
        """(f, step cost, group, backend, next id, next frontier) of every allowed step (for the dive)."""
        moves = moves_of[cid]
        if moves is None:
            moves = moves_of[cid] = steps_from(cid)
        for grp, nid, ins, keep, brep in moves:
            base, rows, nf0 = enter(grp, ins, keep, front, f)
            for b, q in grp.options:
                step = q + sum(row[b] for row in rows)
                yield base + step + grp.hadd[b], step, grp, b, nid, nf0 | brep[b]

    def dive(rank: Callable[[tuple], Any]) -> tuple[float, list[tuple[Group, int]]]:
        """A greedy plan (the successor ``rank`` puts first at every step) and its cost: an upper bound."""
        cid, front, g_cost, f = register(0, []), 0, 0, h0
        path = []
        while covs[cid] != full:
            pick = min(successors(cid, front, f), default=None, key=rank)
            if pick is None:
                return math.inf, []
            f, step, grp, b, cid, front = pick
            path.append((grp, b))
            g_cost += step
        return g_cost, path

    # two greedy plans, the cheaper one bounds the search: cheapest g + h at every step, and cheapest
    # step per node covered (which finds the whole graph, or large pieces, when per-call costs dominate)
    bound, greedy = min(dive(lambda t: t[0]), dive(lambda t: (t[1] / len(t[2].nodes), t[0])), key=lambda r: r[0])
    log.debug("%s: greedy plan bound %s, heuristic at the start %s (set up in %.3f s)", graph.name, bound, h0,
              time.perf_counter() - t_start)
    stats = stats or SearchStats()

    spread = tuple(range(1, bits))  # shifts that fold a digit onto its lowest bit

    def penalty(pens: list[int], y: int) -> int:
        """Sum of the penalties of the frontier digits flagged in ``y`` (lowest bit of each digit)."""
        total = 0
        while y:
            lowbit = y & -y
            total += pens[(lowbit.bit_length() - 1) // bits]
            y ^= lowbit
        return total

    # Covered sets are settled by increasing size (a step only adds nodes), so when one is taken up every
    # state with that covered set has been reached: keep those no other one dominates, expand them.
    start = register(0, [])
    reached[start][0] = (0, 0, h0, -1, None, 0)
    goal_id = register(full, [])
    expanded = pushed = 0
    goal = None
    deepest = 0
    for size in range(n + 1):
        for cid in buckets[size]:
            found = reached[cid]
            reached[cid] = None
            if not found:
                continue
            covered = covs[cid]
            if covered == full:
                goal = min(found.values(), key=lambda r: r[:2])
                break
            deepest = covered
            unc = full & ~covered
            pens = [sum((r & unc).bit_count() * w for r, w in out_tensors[u]) for u in fnodes_of[cid]]
            worst = sum(pens)
            dcache = {0: 0}
            low_bits = sum(1 << (k * bits) for k in range(len(pens)))  # the lowest bit of each digit
            kept: list[tuple[int, int, int]] = []  # (cost, parts, frontier) of the states kept, by cost
            for cost, parts, front in sorted([(rec[0], rec[1], fr) for fr, rec in found.items()]):
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
                            d = dcache[x] = penalty(pens, x)
                        c1 += d
                        if c1 < cost or (c1 == cost and p1 <= parts):
                            dominated = True
                            break
                    if dominated:
                        continue
                kept.append((cost, parts, front))
                settled[(front << 32) | cid] = found[front]
            moves = moves_of[cid] or steps_from(cid)
            moves_of[cid] = None
            expanded += len(kept)
            if expanded > max_states and greedy:
                stats.expanded, stats.pushed = expanded, pushed
                log.warning("%s: search stopped after %d states; using the greedy plan (%.3f ms, not proven optimal)",
                            graph.name, max_states, bound / SCALE)
                plan = to_plan(graph, [(grp.nodes, backends[b]) for grp, b in greedy], table, transition)
                plan.notes.append(f"search stopped after {max_states} states: greedy plan, not proven optimal")
                return plan
            for g_cost, parts, front in kept:
                key = (front << 32) | cid
                f = found[front][2]
                parts2 = parts + 1
                for grp, nid, ins, keep, brep in moves:
                    if f + grp.least > bound:
                        continue  # no backend for this step keeps g + h within the greedy plan's cost
                    base, rows, nf0 = enter(grp, ins, keep, front, f)
                    hadd = grp.hadd
                    into = reached[nid]
                    for b, q in grp.options:
                        step = q
                        for row in rows:
                            step += row[b]
                        f2 = base + step + hadd[b]
                        if f2 > bound:
                            continue  # g + h beyond the greedy plan's cost: not worth keeping
                        cost = g_cost + step
                        new_front = nf0 | brep[b]
                        old = into.get(new_front)
                        if old is not None and (old[0] < cost or (old[0] == cost and old[1] <= parts2)):
                            continue  # the same state, no dearer
                        into[new_front] = (cost, parts2, f2, key, grp, b)
                        pushed += 1
                        if nid == goal_id and cost < bound:
                            bound = cost  # a complete plan: nothing dearer is worth keeping from now on
        else:
            continue
        break
    stats.expanded, stats.pushed = expanded, pushed
    if goal is None:
        i = _first_zero(deepest)
        raise CollageError(f"{graph.name}: the candidates admit no executable exact cover; the search got stuck "
                           f"before {graph.node_label(i)} (every candidate containing it needs an input that no "
                           "runnable order provides); add single-node candidates for it")
    steps: list[tuple[Group, int]] = []
    rec = goal
    while rec[3] >= 0:
        steps.append((rec[4], rec[5]))
        rec = settled[rec[3]]
    steps.reverse()
    log.debug("%s: search expanded %d states, reached %d", graph.name, stats.expanded, stats.pushed)
    return to_plan(graph, [(grp.nodes, backends[b]) for grp, b in steps], table, transition)
