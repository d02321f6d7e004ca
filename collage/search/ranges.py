"""Range candidates: coarse pieces of the graph between its narrow cuts, for mixes of big partitions.

:mod:`collage.search.candidates` grows small convex sets (a few nodes, one heavy op), which tells
which backend wins per op; but every partition boundary costs real time in a stitched plan (a layout
conversion pair per cut in a conv net, thread hand-over between runtimes: results/chains/chain.md), so a mix
of small pieces rarely beats one backend end to end. Range candidates give the search big pieces to
mix: "the first half on one backend, the rest on another"; and, under an accuracy budget, "bf16
everywhere except the sensitive tail".

Node ids are a topological order, so a contiguous id range ``[a, b)`` is always convex: a path from
``u`` to ``v`` (both in the range) only passes nodes with ids between ``id(u)`` and ``id(v)``. The range
ends sit at *narrow cuts*: positions ``c`` where the fewest node outputs computed before ``c`` are
still read at or after ``c`` (a ResNet's block ends: one tensor; a BERT's layer ends: the hidden
state and the attention mask, used when the narrowest cuts are too few). With boundaries ``0 < c_1 < ... < c_k < n`` the
candidates per backend are the segments between neighbouring boundaries, every prefix ``[0, c_i)`` and every suffix
``[c_i, n)``: ``3k - 1`` distinct sets, each kept where the backend takes all of its nodes. The whole graph is
not repeated here (``enumerate_candidates`` has it).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from collage.search.candidates import Candidate

if TYPE_CHECKING:
    from collage.graph.ir import Graph

#: Most cuts kept (evenly spread by node position when a graph has more narrow cuts).
MAX_CUTS = 24
#: Fewer cuts than this at the narrowest width: the next width's cuts count too, up to MAX_WIDTH live outputs.
MIN_CUTS = 8
MAX_WIDTH = 3


def crossings(graph: Graph) -> list[int]:
    """``out[c]`` for ``c`` in ``0..n``: how many nodes before ``c`` have an output read at or after ``c``."""
    n = len(graph)
    delta = [0] * (n + 1)
    for u in range(n):
        last = max(graph.dag.successors(u), default=u)
        if last > u:
            delta[u + 1] += 1  # live from the position after u ...
            delta[last + 1] -= 1  # ... up to and including the position of its last reader
    out, live = [], 0
    for c in range(n + 1):
        live += delta[c]
        out.append(live)
    return out


def narrow_cuts(graph: Graph, max_cuts: int = MAX_CUTS, min_piece: int = 2) -> list[int]:
    """Positions ``0 < c < n`` with the fewest live node outputs (widened while there are fewer than
    ``MIN_CUTS``), at most ``max_cuts`` of them, each piece between neighbouring cuts at least
    ``min_piece`` nodes."""
    n = len(graph)
    if n < 2 * min_piece:
        return []
    live = crossings(graph)
    inner = range(min_piece, n - min_piece + 1)
    width = min(live[c] for c in inner)
    while True:
        cuts: list[int] = []
        for c in inner:
            if live[c] <= width and (not cuts or c - cuts[-1] >= min_piece):
                cuts.append(c)
        if len(cuts) >= min(MIN_CUTS, max_cuts) or width >= MAX_WIDTH:
            break
        width += 1  # too few of the narrowest: a BERT's layer ends carry the mask as well
    if len(cuts) > max_cuts:  # spread evenly over the graph
        step = len(cuts) / max_cuts
        cuts = [cuts[int(k * step + step / 2)] for k in range(max_cuts)]
    return cuts


def range_candidates(graph: Graph, supports: Mapping[str, Mapping[int, bool]],
                     max_cuts: int = MAX_CUTS) -> list[Candidate]:
    """Segments, prefixes and suffixes at the narrow cuts, per backend that takes all their nodes
    (module docstring); deterministic order: backend, then start, then end."""
    n = len(graph)
    cuts = narrow_cuts(graph, max_cuts)
    if not cuts:
        return []
    bounds = [0, *cuts, n]
    spans = {(a, b) for a, b in zip(bounds, bounds[1:])}
    spans |= {(0, c) for c in cuts} | {(c, n) for c in cuts}
    spans.discard((0, n))
    out = []
    for backend in sorted(supports):
        table = supports[backend]
        bad = [i for i in range(n) if not table.get(i, False)]
        for a, b in sorted(spans):
            if not any(a <= i < b for i in bad):
                out.append(Candidate(tuple(range(a, b)), backend))
    return out
