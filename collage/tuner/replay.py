"""Pricing a plan that will be replayed from a CUDA graph (collage.runtime.graphs).

On target ``cuda`` the artifact captures every run of consecutive capturable partitions into one CUDA graph and
replays it: inside a graph a partition pays no launch and no eager hand-over, so the per-partition cut
(``PartitionCharge.cut_ms``, measured on eager chains) and the switch between two capturable backends are
replaced by the figures measured inside one graph (collage.measure.device_transitions, mode ``graph``). A
partition of a backend that cannot be captured splits the graph: it keeps its eager cut, and every hand-over to
or from it pays the eager switch (the tune's transition model). A backend is capturable when its compiled whole
model says so (``capture_refusal()`` None, the rule collage.runtime.graphs applies to each loaded partition).

Nothing changes on any other target (the same charges and transition objects come back), nor where replay is
turned off (``COLLAGE_CUDA_GRAPHS=0``); a figure not measured yet keeps the eager one.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from collage.tuner.stitching import PartitionCharge

log = logging.getLogger(__name__)

Transition = Callable[[str, str, int], float]


def capture_refusals(compiled: Mapping[str, Any]) -> dict[str, str | None]:
    """Per backend: None when its compiled form says it can be captured in a CUDA graph, else why not."""
    out: dict[str, str | None] = {}
    for name, c in compiled.items():
        ask = getattr(c, "capture_refusal", None)
        out[name] = ask() if ask is not None else f"{name} does not say its partitions can be captured"
    return out


def replay_wanted(target: str) -> bool:
    """Whether plans tuned for ``target`` will be replayed from CUDA graphs (collage.runtime.graphs decides)."""
    from collage.runtime.graphs import Segment, graphs_wanted

    return target == "cuda" and graphs_wanted("cuda", [Segment((0,), True)]) is None


def replay_charges(charges: Mapping[str, PartitionCharge], capturable: frozenset[str],
                   in_graph_cut: Mapping[str, float]) -> dict[str, PartitionCharge]:
    """Each capturable backend's charge with its in-graph cut (where measured); the others' as they are."""
    return {b: dataclasses.replace(c, cut_ms=in_graph_cut[b]) if b in capturable and b in in_graph_cut else c
            for b, c in charges.items()}


def replay_transition(eager: Transition, capturable: frozenset[str],
                      in_graph: Mapping[tuple[str, str], tuple[float, float]]) -> Transition:
    """The switch cost of a replayed plan: in-graph between two capturable backends (where measured), else
    ``eager`` (a partition that cannot be captured splits the graph on both its sides)."""
    def cost(src: str, dst: str, nbytes: int) -> float:
        if src == dst:
            return 0.0
        if src in capturable and dst in capturable and (src, dst) in in_graph:
            fixed, per_byte = in_graph[(src, dst)]
            return max(0.0, fixed + per_byte * nbytes)
        return eager(src, dst, nbytes)

    return cost


@dataclasses.dataclass(frozen=True)
class Priced:
    """The charges and transition model the search prices plans with."""

    charges: dict[str, PartitionCharge]
    transition: Any


def priced_for_target(target: str, charges: dict[str, PartitionCharge], transition: Any,
                      refusals: Mapping[str, str | None], figures: Callable[[frozenset[str]], Any]) -> Priced:
    """What the search prices with on ``target``: unchanged unless plans are replayed (``replay_wanted``); then the
    capturable backends' (``refusals`` None) cut and switches from ``figures(capturable)`` (a ``DeviceFigures`` of
    the ``graph`` mode, asked for only here)."""
    if not replay_wanted(target):
        return Priced(charges, transition)
    capturable = frozenset(b for b, why in refusals.items() if why is None)
    for b, why in refusals.items():
        if why is not None:
            log.info("replay: %s partitions split the CUDA graph (%s); priced with eager hand-overs", b, why)
    if not capturable:
        return Priced(charges, transition)
    got = figures(capturable)
    missing = sorted(b for b in capturable if b not in got.cut)
    if missing:
        log.warning("replay: no in-graph figures measured on this machine for %s: priced as eager chains",
                    ", ".join(missing))
    return Priced(replay_charges(charges, capturable, got.cut), replay_transition(transition, capturable, got.switch))
