"""The search: the cheapest assignment of a graph's nodes to backends, as an executable exact cover by
measured candidates.

One entry: :func:`solve` (``collage.search.solver``) with a strategy: ``"auto"`` (what the tuner calls:
module by module where the graph is a series of fork-join modules of chains, else the DP, and the ILP where
the DP's frontier explodes), or one of them alone (``"forkjoin"``, ``"dp"``, ``"ilp"``), or the brute-force
reference (``"exhaustive"``). Around it: the candidates per backend (``candidates``, ``ranges``), what a
candidate costs (``cost.Cost``: a value, failed or unknown), covers and plans (``cover``), and an Optuna
refinement of a plan by measured end-to-end latency (``refine``).

The strategies themselves: :func:`dp_search` (``dp``), :func:`forkjoin_search` (``forkjoin``),
:func:`ilp_search` (``ilp``), :func:`exhaustive_search` (``exhaustive``).

The search sees costs (numbers per candidate and per hand-over), never runtimes: nothing here imports
a backend or the cost models.
"""
from __future__ import annotations

from collage.search.candidates import HEAVY_OPS, Candidate, Limits, candidate_counts, enumerate_candidates
from collage.search.cost import Cost, CostTable
from collage.search.cover import check_plan, cover_cost, plan_from_parts
from collage.search.dp import DpStats, dp_search
from collage.search.exhaustive import exhaustive_search
from collage.search.forkjoin import ForkJoinStats, forkjoin_search
from collage.search.ilp import IlpOptions, IlpStats, ilp_search
from collage.search.solver import STRATEGIES, SolveLimits, SolveStats, Strategy, solve

__all__ = [
    "HEAVY_OPS", "Candidate", "Limits", "candidate_counts", "enumerate_candidates",
    "Cost", "CostTable", "check_plan", "cover_cost", "plan_from_parts",
    "solve", "Strategy", "STRATEGIES", "SolveLimits", "SolveStats",
    "DpStats", "dp_search", "ForkJoinStats", "forkjoin_search", "IlpOptions", "IlpStats", "ilp_search",
    "exhaustive_search",
]  # plus refine / RefineOptions / RefineResult, imported on first use (they need optuna)


def __getattr__(name: str) -> object:
    # refine imports optuna: only on use, so that `import collage.search` stays light
    if name in ("refine", "RefineOptions", "RefineResult"):
        import importlib

        return getattr(importlib.import_module("collage.search.refine"), name)
    raise AttributeError(name)
