"""The search the tuner calls: the DP, and where its frontier explodes, the same problem solved exactly as an ILP.

:func:`collage.search.dp.search` is exact and fast while the frontier (covered nodes still read by
uncovered ones) stays narrow; past its state valve it returns its greedy plan, "not proven optimal".
:func:`search_exact` gives the DP ``dp_time_limit`` seconds and ``max_states`` expanded states, and when
either runs out solves the same cover with :func:`collage.search.ilp.ilp_search` (HiGHS), seeded with
the DP's greedy plan when it has one, so the answer is still the proven optimum (or, past
``ilp_time_limit``, the best plan HiGHS found, with a note). Same arguments and result as ``search``.

The DP's time limit is a deadline the DP checks as it settles covered sets (any thread): it stops when
the deadline has passed or when its progress so far (nodes settled per second) says it would pass it, so
a graph whose frontier explodes (the ladder stress graph) goes to the ILP early, while one that needs
long but steady work (Inception-v2 with three backends: ~111,000 states, 12-35 s by machine) finishes.
States are a poor clock: Inception-v2's four branches make each state dear (~9,000 states/s against
~20,000 on BERT-base).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collage.plan import Plan
from collage.search.candidates import Candidate
from collage.search.cover import Transition
from collage.search.dp import OutOfTime, SearchStats, search

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: DP states expanded before the ILP takes over (with the time limit, whichever comes first). Inception-v2
#: with three backends needs ~113,000, every other zoo model under 20,000 (results/search-time.md).
DP_STATES = 250_000
#: Seconds the DP may take (or is projected to take) before the ILP takes over. Every zoo model's DP takes
#: under 2 s on the Xeon of results/search-time.md except Inception-v2's with three backends (~12 s); on a
#: slower machine (an AMD EPYC VM, ~3x slower in Python) that one takes ~35 s, and the ILP it would hand over
#: to (42 s on the Xeon) did not return in 10 min there, past its own limit (HiGHS's root-node heuristics do
#: not check it): so a DP whose progress is steady gets room for ~3x that.
DP_TIME_LIMIT = 90.0
#: Seconds HiGHS may take before the best plan found so far is used (with a "not proven optimal" note).
ILP_TIME_LIMIT = 60.0


@dataclass
class ExactStats:
    """What the last :func:`search_exact` did: the DP's counters, whether the ILP ran, and times (s)."""

    dp: SearchStats = field(default_factory=SearchStats)
    dp_s: float = 0.0
    ilp: Any = None   # collage.search.ilp.IlpStats when the ILP ran
    ilp_s: float = 0.0

    @property
    def method(self) -> str:
        return "ilp" if self.ilp is not None else "dp"


def search_exact(graph: Graph, costs: Mapping[Candidate, Any], transition: Transition | None = None, *,
                 stats: ExactStats | None = None, max_states: int = DP_STATES,
                 dp_time_limit: float | None = DP_TIME_LIMIT, ilp_time_limit: float = ILP_TIME_LIMIT) -> Plan:
    """The cheapest executable exact cover: the DP, or the ILP where the DP runs out (module docstring)."""
    stats = stats if stats is not None else ExactStats()
    t0 = time.perf_counter()
    try:
        # past max_states the DP returns its greedy plan; past the deadline it raises with it: either way that
        # plan (its two dives) is HiGHS's first incumbent, so the ILP's answer is never worse than it
        plan = greedy = search(graph, costs, transition, stats=stats.dp, max_states=max_states,
                               deadline=time.monotonic() + dp_time_limit if dp_time_limit else None)
    except OutOfTime as e:
        plan, greedy = None, e.greedy
    stats.dp_s = time.perf_counter() - t0
    if plan is not None and stats.dp.expanded <= max_states:
        return plan
    from collage.search.ilp import IlpStats, ilp_search

    why = (f"passed {max_states} states" if plan is not None else f"ran past {dp_time_limit:g} s")
    stats.ilp = IlpStats()
    log.info("%s: the DP %s (%.1f s); solving exactly as an ILP (HiGHS)%s", graph.name, why, stats.dp_s,
             f" from its greedy plan ({greedy.predicted_ms or 0.0:.3f} ms)" if greedy is not None else "")
    t1 = time.perf_counter()
    plan = ilp_search(graph, costs, transition, start=greedy, stats=stats.ilp, time_limit=ilp_time_limit)
    stats.ilp_s = time.perf_counter() - t1
    how = "proven optimal" if stats.ilp.optimal else "best found, not proven optimal"
    plan.notes.append(f"search: the DP's frontier {why}; solved as an ILP with HiGHS in {stats.ilp_s:.1f} s ({how}"
                      + (f"; the DP's greedy plan was {greedy.predicted_ms or 0.0:.3f} ms)" if greedy is not None else ")"))
    return plan
