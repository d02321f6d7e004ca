"""The search: candidates per backend, the Collage DP over them, the same problem solved module by module
where the graph is a series of fork-join modules of chains (``forkjoin``) and as an ILP (HiGHS) where the
DP's frontier explodes (``search_exact`` runs the first that applies: module by module, the DP, the ILP),
a brute-force reference, and an Optuna refinement of the DP's plan by measured end-to-end latency.

The search sees costs (numbers per candidate and per hand-over), never runtimes: nothing here imports
a backend or the cost models.
"""
from __future__ import annotations

from collage.search.candidates import HEAVY_OPS, Candidate, Limits, candidate_counts, enumerate_candidates
from collage.search.cover import check_plan, cover_cost, plan_from_parts
from collage.search.dp import SearchStats, search
from collage.search.exact import ExactStats, search_exact
from collage.search.exhaustive import exhaustive_search
from collage.search.ilp import IlpStats, ilp_search

__all__ = [
    "HEAVY_OPS", "Candidate", "Limits", "candidate_counts", "enumerate_candidates",
    "SearchStats", "check_plan", "cover_cost", "plan_from_parts", "search", "exhaustive_search",
    "ExactStats", "search_exact", "IlpStats", "ilp_search",
]  # plus refine / RefineResult, imported on first use (they need optuna)


def __getattr__(name: str):
    # refine imports optuna: only on use, so that `import collage.search` stays light
    if name in ("refine", "RefineResult"):
        import importlib

        return getattr(importlib.import_module("collage.search.refine"), name)
    raise AttributeError(name)
