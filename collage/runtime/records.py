"""The plain records of a loaded artifact: a tensor's spec, a loaded partition, and what stitching costs.

:class:`collage.runtime.artifact.Artifact` holds them (and ``collage.runtime.artifact`` still exports them), and
:class:`collage.runtime.multisize.MultiSizeArtifact` passes them on from its size sets: a module of their own, so
that the multi-size artifact names them without importing the artifact module that loads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from collage.runtime.manifest import JsonObject

if TYPE_CHECKING:
    from collage.backends.base import Compiled


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    #: an integer input's index range (exclusive), as the manifest records it: random inputs stay in range
    high: int | None = None

    def describe(self) -> str:
        return f"shape {self.shape} {self.dtype.name}"


@dataclass
class LoadedPartition:
    index: int
    backend: str
    directory: Path
    inputs: list[str]
    outputs: list[str]
    compiled: Compiled
    n_nodes: int
    cost_ms: float | None = None


@dataclass
class BoundaryOverhead:
    """What stitching costs: the stitched run minus the partitions' own run times.

    ``per_boundary_ms[k]`` is the overhead of the hand-over between partitions k and k+1, measured
    as (time of running k then k+1) - (time of k alone) - (time of k+1 alone), all interleaved.
    ``in_chain_ms[k]``: partition k's own call timed inside the stitched runs (what it costs where it
    runs, after whatever ran before it), beside ``parts_ms[k]``, the same call alone on its captured inputs.
    """

    stitched_ms: float
    parts_ms: list[float]
    per_boundary_ms: list[float] = field(default_factory=list)
    repeat: int = 0
    in_chain_ms: list[float] = field(default_factory=list)

    @property
    def boundaries(self) -> int:
        return max(0, len(self.parts_ms) - 1)

    @property
    def total_ms(self) -> float:
        return self.stitched_ms - sum(self.parts_ms)

    @property
    def mean_per_boundary_ms(self) -> float:
        return self.total_ms / self.boundaries if self.boundaries else 0.0

    def to_dict(self) -> JsonObject:
        return {"stitched_ms": self.stitched_ms, "parts_ms": list(self.parts_ms), "sum_parts_ms": sum(self.parts_ms),
                "boundaries": self.boundaries, "total_ms": self.total_ms,
                "mean_per_boundary_ms": self.mean_per_boundary_ms, "per_boundary_ms": list(self.per_boundary_ms),
                "in_chain_ms": list(self.in_chain_ms), "repeat": self.repeat}
