"""The one entry of the search: :func:`solve` finds the cheapest executable exact cover of a graph by its
candidates, with one of several strategies that answer the same question at the same prices.

Strategies (``strategy=``):

* ``"auto"`` (what the tuner calls): module by module where the graph allows, else the DP, and where its
  frontier explodes, the same problem solved exactly as an ILP.
* ``"dp-ilp"``: ``"auto"`` without the module-by-module step (the DP, then the ILP where it runs out).
* ``"forkjoin"``: module by module only (:func:`collage.search.forkjoin.forkjoin_search`); CollageError
  where the graph or its candidates do not have that shape.
* ``"dp"``: the DP only (:func:`collage.search.dp.dp_search`): past ``max_states`` its greedy plan, with a note;
  past ``dp_time_limit`` :class:`~collage.search.dp.OutOfTime`.
* ``"ilp"``: the ILP only (:func:`collage.search.ilp.ilp_search`, in this process).
* ``"exhaustive"``: the brute-force reference (:func:`collage.search.exhaustive.exhaustive_search`, tests;
  graphs up to 16 nodes).

How ``"auto"`` goes. :func:`collage.search.forkjoin.forkjoin_search` answers first where the graph is a series
of fork-join modules of plain chains (Inception, ResNet, MobileNet, DenseNet, the plain CNNs; not the
transformers, whose attention splits inside a layer): the same optimum as the DP (its plan priced again as the
DP prices it; the DP answers where that differed), with each module's chains solved apart (Inception-v2 with
three backends: 110,649 DP states in 12-30 s; module by module 2.8-3.9 s on the same machine:
results/search/search-time.md). :func:`collage.search.dp.dp_search` is exact and fast while the frontier (covered
nodes still read by uncovered ones) stays narrow; past its state valve it returns its greedy plan, "not proven
optimal". ``"auto"`` gives the DP ``dp_time_limit`` seconds and ``max_states`` expanded states, and when either
runs out solves the same cover with :func:`collage.search.ilp.ilp_search` (HiGHS), seeded with the DP's greedy
plan when it has one, so the answer is still the proven optimum (or, past ``ilp_time_limit``, the best plan
HiGHS found, with a note). HiGHS runs in a forked process (:func:`ilp_held`), stopped ``ILP_GRACE_S`` past its
limit where it does not stop itself (then the greedy plan ships, with a note).

The DP's time limit is a deadline the DP checks as it settles covered sets (any thread): it stops when
the deadline has passed or when its progress so far (nodes settled per second) says it would pass it, so
a graph whose frontier explodes (the ladder stress graph) goes to the ILP early, while one that needs
long but steady work (Inception-v2 with three backends: ~111,000 states, 12-35 s by machine) finishes.
States are a poor clock: Inception-v2's four branches make each state dear (~9,000 states/s against
~20,000 on BERT-base).
"""
from __future__ import annotations

import logging
import multiprocessing
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Literal, TypeAlias

from collage.errors import CollageError
from collage.plan import Note, NoteKind, Plan
from collage.search.cost import CostTable
from collage.search.cover import Transition
from collage.search.dp import DpStats, OutOfTime, dp_search
from collage.search.exhaustive import exhaustive_search
from collage.search.forkjoin import ForkJoinStats, forkjoin_search
from collage.search.ilp import IlpStats

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

Strategy: TypeAlias = Literal["auto", "dp-ilp", "forkjoin", "dp", "ilp", "exhaustive"]
STRATEGIES: tuple[Strategy, ...] = ("auto", "dp-ilp", "forkjoin", "dp", "ilp", "exhaustive")

#: DP states expanded before the ILP takes over (with the time limit, whichever comes first). Inception-v2
#: with three backends needs ~113,000, every other zoo model under 20,000 (results/search/search-time.md).
DP_STATES = 250_000
#: Seconds the DP may take (or is projected to take) before the ILP takes over. Every zoo model's DP takes
#: under 2 s on the Xeon of results/search/search-time.md except Inception-v2's with three backends (~12 s); on a
#: slower machine (an AMD EPYC VM, ~3x slower in Python) that one takes ~35 s, and the ILP it would hand over
#: to (42 s on the Xeon) did not return in 10 min there, past its own limit (HiGHS's root-node heuristics do
#: not check it): so a DP whose progress is steady gets room for ~3x that.
DP_TIME_LIMIT = 90.0
#: Seconds HiGHS may take before the best plan found so far is used (with a "not proven optimal" note).
ILP_TIME_LIMIT = 60.0
#: Seconds past ``ILP_TIME_LIMIT`` before the ILP's process is stopped and the DP's greedy plan is used.
ILP_GRACE_S = 30.0


@dataclass(frozen=True)
class SolveLimits:
    """How far :func:`solve` lets each strategy go: the DP's expanded states and seconds (None: no deadline),
    and HiGHS's seconds."""

    max_states: int = DP_STATES
    dp_time_limit: float | None = DP_TIME_LIMIT
    ilp_time_limit: float = ILP_TIME_LIMIT


@dataclass
class SolveStats:
    """What the last :func:`solve` did: whether the module-by-module search answered, the DP's counters,
    whether the ILP ran (its stats; None where it did not), and times (s)."""

    forkjoin: ForkJoinStats = field(default_factory=ForkJoinStats)
    dp: DpStats = field(default_factory=DpStats)
    dp_s: float = 0.0
    ilp: IlpStats | None = None
    ilp_s: float = 0.0

    @property
    def method(self) -> str:
        return "ilp" if self.ilp is not None else "forkjoin" if self.forkjoin.solved else "dp"


def solve(graph: Graph, costs: CostTable, transition: Transition | None = None, *, strategy: Strategy = "auto",
          limits: SolveLimits | None = None, stats: SolveStats | None = None) -> Plan:
    """The cheapest executable exact cover of ``graph`` by the candidates with a usable cost in ``costs``
    (``{Candidate: raw cost}``, :class:`collage.search.cost.Cost`), plus ``transition(src, dst, nbytes)`` ms per
    distinct tensor a partition reads from another backend; by ``strategy`` (module docstring). Among equally
    cheap plans the one with the fewest partitions. ``stats`` (optional) says what was done."""
    limits = limits if limits is not None else SolveLimits()
    stats = stats if stats is not None else SolveStats()
    stats.forkjoin = ForkJoinStats()
    if strategy not in STRATEGIES:
        raise CollageError(f"unknown search strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
    if strategy == "exhaustive":
        return exhaustive_search(graph, costs, transition)
    if strategy == "ilp":
        return _ilp_alone(graph, costs, transition, limits, stats)
    if strategy in ("auto", "forkjoin"):
        plan = forkjoin_search(graph, costs, transition, stats=stats.forkjoin)
        if plan is not None:
            log.debug("%s: solved module by module in %.2f s (%d modules, %d chains)", graph.name,
                      stats.forkjoin.seconds, stats.forkjoin.modules, stats.forkjoin.chains)
            return plan
        if strategy == "forkjoin":
            raise CollageError(f"{graph.name}: not solved module by module: {stats.forkjoin.why_not}")
    if strategy == "dp":
        t0 = time.perf_counter()
        try:
            return dp_search(graph, costs, transition, stats=stats.dp, max_states=limits.max_states,
                             deadline=_deadline(limits))
        finally:
            stats.dp_s = time.perf_counter() - t0
    return _dp_then_ilp(graph, costs, transition, limits, stats)


def _deadline(limits: SolveLimits) -> float | None:
    return time.monotonic() + limits.dp_time_limit if limits.dp_time_limit else None


def _ilp_alone(graph: Graph, costs: CostTable, transition: Transition | None, limits: SolveLimits,
               stats: SolveStats) -> Plan:
    from collage.search.ilp import ilp_search

    stats.ilp = IlpStats()
    t0 = time.perf_counter()
    try:
        return ilp_search(graph, costs, transition, time_limit=limits.ilp_time_limit, stats=stats.ilp)
    finally:
        stats.ilp_s = time.perf_counter() - t0


def _dp_then_ilp(graph: Graph, costs: CostTable, transition: Transition | None, limits: SolveLimits,
                 stats: SolveStats) -> Plan:
    """The DP, and where it runs out of states or time the ILP from its greedy plan (module docstring)."""
    max_states = limits.max_states
    t0 = time.perf_counter()
    plan: Plan | None
    greedy: Plan | None
    try:
        # past max_states the DP returns its greedy plan; past the deadline it raises with it: either way that
        # plan (its two dives) is HiGHS's first incumbent, so the ILP's answer is never worse than it
        plan = greedy = dp_search(graph, costs, transition, stats=stats.dp, max_states=max_states,
                                  deadline=_deadline(limits))
    except OutOfTime as e:
        plan, greedy = None, e.greedy
    stats.dp_s = time.perf_counter() - t0
    if plan is not None and stats.dp.expanded <= max_states:
        return plan
    why = f"passed {max_states} states" if plan is not None else f"ran past {limits.dp_time_limit:g} s"
    log.info("%s: the DP %s (%.1f s); solving exactly as an ILP (HiGHS)%s", graph.name, why, stats.dp_s,
             f" from its greedy plan ({greedy.predicted_ms or 0.0:.3f} ms)" if greedy is not None else "")
    t1 = time.perf_counter()
    held = limits.ilp_time_limit + ILP_GRACE_S
    plan = ilp_held(graph, costs, transition, start=greedy, stats=stats, time_limit=limits.ilp_time_limit, held=held)
    stats.ilp_s = time.perf_counter() - t1
    return _noted(graph, plan, greedy, why, held, limits, stats)


def _noted(graph: Graph, plan: Plan | None, greedy: Plan | None, why: str, held: float, limits: SolveLimits,
           stats: SolveStats) -> Plan:
    """The ILP's answer (``plan``; None where HiGHS was stopped) or the DP's ``greedy`` plan, with the note that
    says which and why (``why``: how the DP ran out)."""
    if plan is None:  # HiGHS ran past its limit and was stopped: the greedy plan, saying so
        log.warning("%s: HiGHS did not answer within %g s; using the DP's greedy plan (not proven optimal)",
                    graph.name, held)
        if greedy is None:
            raise CollageError(f"{graph.name}: the search found no plan in time: the DP ran out and HiGHS did not "
                               f"answer within {held:g} s")
        greedy.notes.append(Note(NoteKind.SEARCH, f"search: the DP's frontier {why}; HiGHS did not answer within "
                                 f"{held:g} s and was stopped: the DP's greedy plan, not proven optimal"))
        return greedy
    ilp = stats.ilp
    assert ilp is not None  # ilp_held set it
    if ilp.kept == "start":  # HiGHS was stopped before it had a plan of its own
        plan.notes.append(Note(NoteKind.SEARCH, f"search: the DP's frontier {why}; HiGHS had no plan of its own "
                               f"within {limits.ilp_time_limit:g} s: the DP's greedy plan, not proven optimal"))
        return plan
    how = "proven optimal" if ilp.optimal else "best found, not proven optimal"
    plan.notes.append(Note(NoteKind.SEARCH, f"search: the DP's frontier {why}; solved as an ILP with HiGHS in "
                           f"{stats.ilp_s:.1f} s ({how}"
                           + (f"; the DP's greedy plan was {greedy.predicted_ms or 0.0:.3f} ms)" if greedy is not None
                              else ")")))
    return plan


def ilp_held(graph: Graph, costs: CostTable, transition: Transition | None = None, *,
             start: Plan | None = None, stats: SolveStats | None = None, time_limit: float = ILP_TIME_LIMIT,
             held: float | None = None) -> Plan | None:
    """:func:`collage.search.ilp.ilp_search` with ``time_limit`` in a forked child that is killed after ``held``
    seconds (default ``time_limit + ILP_GRACE_S``; None then): HiGHS does not check its limit everywhere
    (results/search/search-time-epyc.md: 10+ min against 60 s at the root node), and a tune must not hang on it.
    ``stats.ilp`` gets the child's IlpStats. In-process where fork is unavailable."""
    from collage.search.ilp import ilp_search

    stats = stats if stats is not None else SolveStats()
    stats.ilp = IlpStats()  # this run's; the child's stats replace them when it answers
    held = held if held is not None else time_limit + ILP_GRACE_S
    if "fork" not in multiprocessing.get_all_start_methods():
        return ilp_search(graph, costs, transition, start=start, stats=stats.ilp, time_limit=time_limit)
    ctx = multiprocessing.get_context("fork")
    answer, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_ilp_child, args=(send, graph, costs, transition, start, time_limit),
                        name="collage-ilp")
    child.start()
    send.close()
    try:
        if not answer.poll(held):
            return None
        got: tuple[Plan | None, IlpStats, CollageError | None] = answer.recv()
    except EOFError:  # the child died without a word (killed, or HiGHS aborted)
        return None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        answer.close()
    plan, ilp_stats, error = got
    if error is not None:
        raise error
    stats.ilp = ilp_stats
    return plan


def _ilp_child(send: Connection, graph: Graph, costs: CostTable, transition: Transition | None,
               greedy: Plan | None, time_limit: float) -> None:
    from collage.search.ilp import ilp_search

    stats = IlpStats()
    try:
        plan = ilp_search(graph, costs, transition, start=greedy, stats=stats, time_limit=time_limit)
    except Exception as e:  # said to the parent, which raises it (a CollageError as it is, anything else named)
        send.send((None, stats, e if isinstance(e, CollageError) else
                   CollageError(f"{graph.name}: the ILP failed: {type(e).__name__}: {e}")))
    else:
        send.send((plan, stats, None))
    send.close()
