"""How the measuring worker times a GPU candidate: CUDA events, on inputs already on the device.

A GPU partition in a device-resident artifact (``collage.runtime.resident``) reads tensors that are already on the
device and leaves its outputs there, so that is how it is measured: the inputs are uploaded once, the compiled
partition is switched to device IO (``device_io``: torch tensors in and out; every GPU backend reads the flag at
each run), and each call is bracketed by CUDA events on torch's current stream (the stream the GPU backends run on;
``collage.backends.cuda_timing`` says why the event time is one call's latency). The call waits for its end event,
so the worker's host clock still sees each call finish and decides when the median is stable as before; the
event times then replace the host times (:meth:`DeviceTimer.stats`).

``device_timer`` answers None for anything else (a CPU backend, a GPU backend on a machine where torch sees no CUDA
device, a compiled form without device IO): those keep the worker's host timing.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def cuda_device(backend: Any) -> str | None:
    """The torch device string a GPU backend runs on ("cuda", "cuda:1"), or None for a CPU backend."""
    device = str(getattr(backend, "device", "cpu"))
    if not device.startswith("cuda"):
        return None
    index = getattr(backend, "device_id", None)
    return f"cuda:{index}" if index is not None and device == "cuda" else device


def _torch() -> Any:
    import torch  # noqa: PLC0415 - only for a GPU candidate

    return torch


class DeviceTimer:
    """A GPU candidate's call on device-resident inputs, timed with CUDA events (module docstring)."""

    def __init__(self, compiled: Any, feeds: Mapping[str, np.ndarray[Any, Any]], device: str) -> None:
        torch = _torch()
        self.compiled = compiled
        compiled.device_io = True
        self.feeds = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in feeds.items()}
        self.stream = torch.cuda.current_stream(device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        #: every call's event time (ms), warm-up calls included
        self.event_ms: list[float] = []

    def __call__(self) -> None:
        self.start.record(self.stream)
        self.compiled.run(self.feeds)
        self.end.record(self.stream)
        self.end.synchronize()
        self.event_ms.append(float(self.start.elapsed_time(self.end)))

    def stats(self, timed: int, ci: Callable[[list[float]], float]) -> dict[str, Any]:
        """The worker's statistics over the last ``timed`` calls' event times (``ci``: its median CI rule)."""
        samples = self.event_ms[-timed:] if timed > 0 else []
        if not samples:
            return {"timer": "cuda_events"}
        s = sorted(samples)
        arr = np.asarray(samples)
        n = len(s)
        return {"median_ms": s[n // 2], "p10_ms": s[int(0.1 * (n - 1))], "p90_ms": s[int(0.9 * (n - 1))],
                "samples": n, "cv": float(arr.std() / arr.mean()) if arr.mean() > 0 else 0.0, "ci": ci(s),
                "mean_ms": float(arr.mean()), "timer": "cuda_events"}


def device_timer(backend: Any, compiled: Any, feeds: Mapping[str, np.ndarray[Any, Any]]) -> DeviceTimer | None:
    """The CUDA-event timer of a GPU candidate (module docstring), or None where host timing stays."""
    device = cuda_device(backend)
    if device is None or not hasattr(compiled, "device_io"):
        return None
    from collage.backends.cuda_timing import torch_cuda

    if torch_cuda() is None:
        return None
    return DeviceTimer(compiled, feeds, device)
