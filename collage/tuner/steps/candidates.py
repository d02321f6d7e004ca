"""Steps 1-2 of a tune: what each backend takes (every node must be taken by one of them), then the candidates
(enumerated + coarse ranges) in measuring order, after the precision strategy's prescreen."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from collage.errors import UnsupportedError
from collage.tuner.records import Candidates

if TYPE_CHECKING:
    from collage.search.candidates import Candidate
    from collage.tuner.context import JobContext


def check_supports(ctx: JobContext) -> dict[str, dict[int, bool]]:
    """What each backend takes; every node must be taken by one of them (else an UnsupportedError naming it)."""
    graph, names = ctx.graph, ctx.names
    supports = {b.name: b.supports_all(graph) for b in ctx.backends}
    orphans = [i for i in range(len(graph)) if not any(supports[n][i] for n in names)]
    if orphans:
        labels = ", ".join(graph.node_label(i) for i in orphans[:5])
        raise UnsupportedError(f"no backend among {names} takes {labels}"
                               + (f" (and {len(orphans) - 5} more)" if len(orphans) > 5 else "")
                               + "; add a backend that does (onnxruntime runs every standard op)")
    return supports


def candidates(ctx: JobContext, supports: dict[str, dict[int, bool]]) -> Candidates:
    """Candidates (enumerated + coarse ranges) in measuring order; the precision strategy's prescreen."""
    from collage.search.candidates import Limits, candidate_counts, enumerate_candidates
    from collage.search.ranges import range_candidates

    graph = ctx.graph
    limits = ctx.options.limits or Limits()
    cands = enumerate_candidates(graph, supports, limits)
    known = {(c.nodes, c.backend) for c in cands}
    ranged = ([c for c in range_candidates(graph, supports) if (c.nodes, c.backend) not in known]
              if limits.ranges else [])
    cands = measuring_order(cands + ranged, len(graph), {(c.nodes, c.backend) for c in ranged})
    counts = candidate_counts(cands)
    ctx.say("candidates: %s (%d of them coarse ranges)", ", ".join(f"{k} {v}" for k, v in counts.items()),
            len(ranged))
    # lower-precision ranges over the accuracy budget at the model's outputs are not worth timing
    return Candidates(supports, ctx.precision.prescreen(cands), counts)


def measuring_order(cands: Sequence[Candidate], n: int, coarse: set[tuple[tuple[int, ...], str]]) -> list[Candidate]:
    """Candidates in measuring order, so that a budget cut still leaves covers: whole models; then the coarse
    ranges (few, and the pieces a mix that beats one backend end to end is made of): each cut's prefix and
    suffix together, the latest cut first (long prefixes: "all but the tail"), then the segments; then
    single nodes; then the rest, smallest first."""
    def key(c: Candidate) -> tuple:
        if len(c.nodes) == n:
            return (0, 0, 0, c.nodes, c.backend)
        if (c.nodes, c.backend) in coarse:
            cut = c.nodes[-1] + 1 if c.nodes[0] == 0 else c.nodes[0] if c.nodes[-1] == n - 1 else None
            return (1, 0, -cut, c.nodes, c.backend) if cut is not None else (1, 1, len(c.nodes), c.nodes, c.backend)
        return (2 if len(c.nodes) == 1 else 3, 0, len(c.nodes), c.nodes, c.backend)

    return sorted(cands, key=key)
