"""One loaded partition as the device-resident runner and the CUDA-graph replay see it (what they ask of
:class:`collage.runtime.artifact.LoadedPartition`, as a Protocol: neither imports the artifact module), and the
calls they share: run it, read an output, bring a tensor to the host."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from collage.errors import CollageError


class Part(Protocol):
    """A loaded partition: its index, backend name, folder, tensor names in and out, and its compiled form."""

    index: int
    backend: str
    directory: Path
    inputs: list[str]
    outputs: list[str]
    compiled: Any


def is_resident(part: Part) -> bool:
    """Whether ``part`` takes and returns torch tensors (loaded with ``device_io=True``)."""
    return bool(getattr(part.compiled, "device_io", False))


def to_host(value: Any) -> np.ndarray[Any, Any]:
    """A numpy array of ``value`` (a torch tensor on any device, or an array); a fresh copy for a tensor."""
    if isinstance(value, np.ndarray):
        return value
    return np.array(value.detach().cpu().numpy(), copy=True)


def call(part: Part, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """``part``'s run on ``feeds``; CollageError naming the partition when its backend fails."""
    try:
        result: dict[str, Any] = part.compiled.run(feeds)
    except CollageError:
        raise
    except Exception as e:
        raise CollageError(f"partition {part.index} ({part.backend}, {part.directory.name}) failed: "
                           f"{type(e).__name__}: {e}") from e
    return result


def output(part: Part, result: Mapping[str, Any], name: str) -> Any:
    """Output ``name`` of ``part``'s ``result``; CollageError when the partition did not return it."""
    try:
        return result[name]
    except KeyError:
        raise CollageError(f"partition {part.index} ({part.backend}, {part.directory.name}) returned no tensor "
                           f"{name!r} (it returned {sorted(result)}); the artifact is inconsistent: re-export it"
                           ) from None


def last_uses(parts: list[Part]) -> dict[str, int]:
    """The index of the last partition reading each tensor (intermediate tensors are dropped after it)."""
    return {t: p.index for p in parts for t in p.inputs}
