"""The names the tuner called before :func:`collage.search.solve` (#39), kept while callers move to it:
``search_exact(..., decompose=False)`` is ``solve(..., strategy="dp-ilp")``, ``ExactStats`` is
:class:`~collage.search.solver.SolveStats`. New code calls :func:`collage.search.solve`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from collage.search.solver import (
    DP_STATES,
    DP_TIME_LIMIT,
    ILP_GRACE_S,
    ILP_TIME_LIMIT,
    SolveLimits,
    SolveStats,
    ilp_held,
    solve,
)

if TYPE_CHECKING:
    from collage.graph.ir import Graph
    from collage.plan import Plan
    from collage.search.cost import CostTable
    from collage.search.cover import Transition

ExactStats = SolveStats


def search_exact(graph: Graph, costs: CostTable, transition: Transition | None = None, *,
                 stats: SolveStats | None = None, max_states: int = DP_STATES,
                 dp_time_limit: float | None = DP_TIME_LIMIT, ilp_time_limit: float = ILP_TIME_LIMIT,
                 decompose: bool = True) -> Plan:
    """``solve(graph, costs, transition)`` with the limits as keywords (``decompose=False``: strategy "dp-ilp")."""
    return solve(graph, costs, transition, strategy="auto" if decompose else "dp-ilp",
                 limits=SolveLimits(max_states, dp_time_limit, ilp_time_limit), stats=stats)


__all__ = ["DP_STATES", "DP_TIME_LIMIT", "ILP_GRACE_S", "ILP_TIME_LIMIT", "ExactStats", "ilp_held", "search_exact"]
