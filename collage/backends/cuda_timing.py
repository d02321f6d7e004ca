"""CUDA helpers shared by the GPU backends: is there a device, what is it called, and timing with CUDA events.

Nothing here imports a GPU runtime at module import. ``cuda_device_count`` / ``gpu_name`` ask PyTorch
when it is installed and otherwise the CUDA driver directly (``libcuda.so.1`` through ctypes), so
TensorRT and ONNX Runtime CUDA can say "no CUDA device" without PyTorch.

Timing (``event_times_ms``): a GPU call returns before the GPU is done, so host clocks lie unless the
stream is synchronised; synchronising after every call adds its own latency. The helper records a
CUDA event before and after each call *on the stream the work runs on* (PyTorch's current stream,
which the GPU backends run on: TensorRT's ``execute_async_v3`` and ONNX Runtime CUDA's
``user_compute_stream`` are given that stream), then waits on the end event and reads the elapsed
GPU time. The start event is reached as soon as it is recorded (the stream is idle), the end event
only after the call's last kernel, so the event time covers host launch gaps as well as GPU work:
it is one call's latency, for asynchronous backends and for ones that block the host (ORT's Run)
alike, without the event-wait wake-up that host clocks add. Host wall time is kept beside it (for
checking) and is what counts when there is no torch CUDA.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


def torch_cuda() -> Any:
    """The ``torch`` module if it is installed and sees a CUDA device, else None."""
    try:
        import torch
    except ImportError:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception as e:  # noqa: BLE001 - a broken driver install is "no device", with the reason logged
        log.debug("torch.cuda.is_available() failed: %s", e)
        return None


@functools.lru_cache(maxsize=1)
def _driver() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if lib.cuInit(0) != 0:
        return None
    return lib


def cuda_device_count() -> int:
    """Visible CUDA devices (0 when there is no driver or no device)."""
    torch = torch_cuda()
    if torch is not None:
        return int(torch.cuda.device_count())
    lib = _driver()
    if lib is None:
        return 0
    n = ctypes.c_int(0)
    return int(n.value) if lib.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0


def no_device_reason() -> str | None:
    """None when a CUDA device is visible, else why not (one line)."""
    if cuda_device_count() > 0:
        return None
    if _driver() is None:
        return "no CUDA device (the NVIDIA driver library libcuda.so.1 cannot be loaded or initialised)"
    return "no CUDA device visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)"


@functools.lru_cache(maxsize=8)
def gpu_name(device: int = 0) -> str:
    """The GPU's name (e.g. 'NVIDIA H200') with its compute capability, or 'none'."""
    torch = torch_cuda()
    if torch is not None:
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} sm{major}{minor}"
    lib = _driver()
    if lib is None:
        return "none"
    dev = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), device) != 0:
        return "none"
    buf = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(buf, 256, dev)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # ..._MINOR
    return f"{buf.value.decode(errors='replace')} sm{major.value}{minor.value}"


def synchronize() -> None:
    """Wait for all work on the current device (no-op without torch CUDA)."""
    torch = torch_cuda()
    if torch is not None:
        torch.cuda.synchronize()


@dataclass
class Sample:
    event_ms: float
    wall_ms: float

    @property
    def ms(self) -> float:
        return self.event_ms if self.event_ms == self.event_ms else self.wall_ms


def event_times_ms(fn: Callable[[], object], repeat: int = 20, warmup: int = 3) -> list[Sample]:
    """Time ``fn`` ``repeat`` times (after ``warmup`` calls) with CUDA events on torch's current stream.

    Without torch CUDA the event time is NaN and only the host wall time (after ``fn`` returns) counts.
    """
    torch = torch_cuda()
    for _ in range(warmup):
        fn()
    samples: list[Sample] = []
    if torch is None:
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            fn()
            samples.append(Sample(float("nan"), (time.perf_counter_ns() - t0) / 1e6))
        return samples
    stream = torch.cuda.current_stream()
    stream.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        wall = (time.perf_counter_ns() - t0) / 1e6
        samples.append(Sample(float(start.elapsed_time(end)), wall))
    return samples


def sample_ms(fn: Callable[[], object], repeat: int = 20, warmup: int = 3) -> list[float]:
    """``event_times_ms`` as plain milliseconds (event time; wall time without torch CUDA)."""
    return [s.ms for s in event_times_ms(fn, repeat, warmup)]
