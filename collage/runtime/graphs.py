"""CUDA-graph replay of a device-resident plan: captured once, replayed at every run.

Batch 1 on a large GPU is launch-bound (an H200 runs resnet50's kernels in ~1 ms and launches them in ~3), so a
plan whose partitions can all be captured is recorded once into a ``torch.cuda.CUDAGraph`` and each run is one
replay: copy the inputs into the graph's static buffers, replay, read its static outputs.

Which partitions can be captured (:func:`capture_refusal`): a device-resident partition whose compiled form says so
(``capture_refusal()`` returning None: the torch backends on CUDA whose program uploads nothing from the host at
run time); a host partition, one on the CPU, or one of a backend that does not say (TensorRT, ONNX Runtime CUDA:
not checked on a GPU yet) cannot. A partition that cannot be captured splits the plan (:func:`plan_segments`):
consecutive capturable partitions form one captured segment, each refused one runs as it is between them, and
:func:`describe` says where and why (``Artifact.graph_report()``). Shapes are static (an artifact is tuned for fixed
input sizes; a multi-size artifact is one artifact per size), so one capture serves every run.

The decisions are plain functions, tested on the CPU; :class:`GraphReplay` runs only where torch sees a CUDA device
(``graphs_wanted``) and is checked on the GPU by benchmarks/gpu_check.sh. ``COLLAGE_CUDA_GRAPHS=0`` turns replay off.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collage.runtime.parts import Part, call, is_resident, output

#: warm-up runs on a side stream before capturing (cuDNN/cuBLAS pick their algorithms and workspaces there)
WARMUP_RUNS = 3


@dataclass(frozen=True)
class Segment:
    """Consecutive partitions (their positions in the plan) run as one captured graph, or one partition run as it
    is (``captured`` False, with the ``reason`` it cannot be captured)."""

    partitions: tuple[int, ...]
    captured: bool
    reason: str | None = None


def capture_refusal(part: Part) -> str | None:
    """None when ``part`` can be captured in a CUDA graph, else why not (one line)."""
    if not is_resident(part):
        return f"{part.backend} runs on host arrays (not device-resident)"
    ask = getattr(part.compiled, "capture_refusal", None)
    if ask is None:
        return f"{part.backend} does not say its partitions can be captured in a CUDA graph (not checked on a GPU)"
    reason: str | None = ask()
    return reason


def plan_segments(refusals: Sequence[str | None]) -> list[Segment]:
    """The plan cut into captured segments and the partitions that split them (``refusals[k]``: partition k's)."""
    segments: list[Segment] = []
    run: list[int] = []
    for k, reason in enumerate(refusals):
        if reason is None:
            run.append(k)
            continue
        if run:
            segments.append(Segment(tuple(run), True))
            run = []
        segments.append(Segment((k,), False, reason))
    if run:
        segments.append(Segment(tuple(run), True))
    return segments


def describe(segments: Sequence[Segment], parts: Sequence[Part]) -> dict[str, Any]:
    """What replay does with the plan, for a report: the captured segments (partition indices) and each partition
    that splits the plan, with its backend and reason."""
    captured = [[parts[k].index for k in s.partitions] for s in segments if s.captured]
    splits = [{"partition": parts[s.partitions[0]].index, "backend": parts[s.partitions[0]].backend,
               "reason": s.reason} for s in segments if not s.captured]
    whole = len(segments) == 1 and segments[0].captured
    return {"whole_plan": whole, "captured": captured, "splits": splits}


def graphs_wanted(device: str, segments: Sequence[Segment]) -> str | None:
    """None when replay should run (a CUDA device, a captured segment, not turned off), else why not."""
    if os.environ.get("COLLAGE_CUDA_GRAPHS", "1") == "0":
        return "turned off (COLLAGE_CUDA_GRAPHS=0)"
    if not device.startswith("cuda"):
        return f"the artifact's device is {device}, not CUDA"
    if not any(s.captured for s in segments):
        return "no partition can be captured"
    return None


def boundary_tensors(parts: Sequence[Part], segment: Segment, needed_after: set[str]) -> tuple[list[str], list[str]]:
    """(what ``segment`` reads from before it, what it writes that is read after it or leaves the artifact)."""
    inside = [parts[k] for k in segment.partitions]
    made: set[str] = set()
    reads: list[str] = []
    for p in inside:
        reads += [t for t in p.inputs if t not in made and t not in reads]
        made.update(p.outputs)
    writes = [t for p in inside for t in p.outputs if t in needed_after]
    return reads, writes


def _torch() -> Any:
    import torch  # noqa: PLC0415 - only where replay runs (a CUDA device)

    return torch


class CapturedSegment:
    """One captured segment: static input buffers, the graph, its static outputs (overwritten by the next replay)."""

    def __init__(self, parts: Sequence[Part], boundary: tuple[list[str], list[str]], env: Mapping[str, Any],
                 device: str) -> None:
        torch = _torch()
        self.parts = list(parts)
        reads, writes = boundary
        self.static_in = {t: torch.as_tensor(env[t]).to(device, copy=True) for t in reads}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._body()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            got = self._body()
        self.static_out = {t: got[t] for t in writes}

    def _body(self) -> dict[str, Any]:
        env: dict[str, Any] = dict(self.static_in)
        for p in self.parts:
            result = call(p, {t: env[t] for t in p.inputs})
            for t in p.outputs:
                env[t] = output(p, result, t)
        return env

    def replay(self, env: dict[str, Any]) -> None:
        torch = _torch()
        for t, buf in self.static_in.items():
            buf.copy_(torch.as_tensor(env[t]), non_blocking=True)
        self.graph.replay()
        env.update(self.static_out)


class GraphReplay:
    """A plan's segments: captured ones replayed (captured at the first run), the others run as they are."""

    def __init__(self, parts: Sequence[Part], segments: Sequence[Segment], outputs: Sequence[str],
                 device: str) -> None:
        self.parts, self.segments, self.device = list(parts), list(segments), device
        self.captured: dict[int, CapturedSegment] = {}
        self.boundaries: dict[int, tuple[list[str], list[str]]] = {}
        for i, seg in enumerate(self.segments):
            later = {t for s in self.segments[i + 1:] for k in s.partitions for t in self.parts[k].inputs}
            self.boundaries[i] = boundary_tensors(self.parts, seg, later | set(outputs))

    def run(self, env: dict[str, Any], host_input: Any) -> dict[str, Any]:
        """Run the plan on ``env`` (tensors by name); ``host_input(part, value)`` is what a part that is not
        device-resident is fed. Graph outputs in ``env`` are the graphs' own buffers: copy what you keep."""
        for i, seg in enumerate(self.segments):
            if seg.captured:
                if i not in self.captured:
                    self.captured[i] = CapturedSegment([self.parts[k] for k in seg.partitions], self.boundaries[i],
                                                       env, self.device)
                self.captured[i].replay(env)
                continue
            p = self.parts[seg.partitions[0]]
            result = call(p, {t: host_input(p, env[t]) for t in p.inputs})
            for t in p.outputs:
                env[t] = output(p, result, t)
        return env
