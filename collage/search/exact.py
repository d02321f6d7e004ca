"""The search the tuner calls: the DP, and where its frontier explodes, the same problem solved exactly as an ILP.

:func:`collage.search.dp.search` is exact and fast while the frontier (covered nodes still read by
uncovered ones) stays narrow; past its state valve it returns its greedy plan, "not proven optimal".
:func:`search_exact` runs the DP with a valve of ``max_states`` (a few seconds of it) and, when the
valve trips, solves the same cover with :func:`collage.search.ilp.ilp_search` (HiGHS), seeded with the
DP's greedy plan, so the answer is still the proven optimum (or, past ``ilp_time_limit``, the best plan
HiGHS found, never worse than the greedy one, with a note). Same arguments and result as ``search``.
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
from collage.search.dp import SearchStats, search

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: DP states expanded before the ILP takes over (~20,000 states/s here: a few seconds). BERT-base with
#: three backends needs 18,610, every other zoo model fewer (results/search-time.md).
DP_STATES = 25_000
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
                 ilp_time_limit: float = ILP_TIME_LIMIT) -> Plan:
    """The cheapest executable exact cover: the DP, or the ILP where the DP's valve trips (module docstring)."""
    stats = stats if stats is not None else ExactStats()
    t0 = time.perf_counter()
    plan = search(graph, costs, transition, stats=stats.dp, max_states=max_states)
    stats.dp_s = time.perf_counter() - t0
    if stats.dp.expanded <= max_states:
        return plan
    from collage.search.ilp import IlpStats, ilp_search

    greedy = plan
    stats.ilp = IlpStats()
    log.info("%s: the DP stopped after %d states (%.1f s); solving exactly as an ILP (HiGHS), from its greedy plan "
             "(%.3f ms)", graph.name, max_states, stats.dp_s, greedy.predicted_ms or 0.0)
    t1 = time.perf_counter()
    plan = ilp_search(graph, costs, transition, start=greedy, stats=stats.ilp, time_limit=ilp_time_limit)
    stats.ilp_s = time.perf_counter() - t1
    how = "proven optimal" if stats.ilp.optimal else "best found, not proven optimal"
    plan.notes.append(f"search: the DP's frontier passed {max_states} states; solved as an ILP with HiGHS in "
                      f"{stats.ilp_s:.1f} s ({how}; the DP's greedy plan was {greedy.predicted_ms or 0.0:.3f} ms)")
    return plan
