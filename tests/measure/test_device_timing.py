"""GPU candidates in the measuring worker (collage.backends.device_timing): which candidates get CUDA-event timing on
device-resident inputs, the statistics over the timed calls, and that the worker reports those event times. The
CUDA events themselves run on the GPU machine (the last test, in benchmarks/gpu_check.sh)."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from collage.backends import device_timing
from collage.measure import worker


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


class _Backend:
    def __init__(self, device: str, device_id: int | None = None) -> None:
        self.device = device
        if device_id is not None:
            self.device_id = device_id


def test_which_candidates_are_timed_on_the_device(monkeypatch):
    assert device_timing.cuda_device(_Backend("cpu")) is None
    assert device_timing.cuda_device(_Backend("cuda")) == "cuda"
    assert device_timing.cuda_device(_Backend("cuda:1")) == "cuda:1"
    assert device_timing.cuda_device(_Backend("cuda", device_id=2)) == "cuda:2"  # TensorRT, ORT-CUDA
    compiled = type("C", (), {"device_io": False})()
    assert device_timing.device_timer(_Backend("cpu"), compiled, {}) is None
    assert device_timing.device_timer(_Backend("cuda"), object(), {}) is None  # no device IO: host timing
    monkeypatch.setattr("collage.backends.cuda_timing.torch_cuda", lambda: None)
    assert device_timing.device_timer(_Backend("cuda"), compiled, {}) is None  # torch sees no CUDA device


def test_stats_are_over_the_timed_calls_only():
    timer = device_timing.DeviceTimer.__new__(device_timing.DeviceTimer)
    timer.event_ms = [50.0, 40.0] + [1.0, 2.0, 3.0, 4.0, 5.0]  # two warm-up calls first
    got = timer.stats(5, lambda s: 0.01)
    assert got["median_ms"] == 3.0 and got["samples"] == 5 and got["p90_ms"] == 4.0 and got["mean_ms"] == 3.0
    assert got["timer"] == "cuda_events" and got["ci"] == 0.01


class _FakeTimer:
    """Stands in for DeviceTimer on the CPU: runs the partition, 'events' say 0.25 ms per call."""

    def __init__(self, compiled: Any, feeds: dict[str, np.ndarray]) -> None:
        self.compiled, self.feeds, self.event_ms = compiled, feeds, []

    def __call__(self) -> None:
        self.compiled.run(self.feeds)
        self.event_ms.append(0.25)

    stats = device_timing.DeviceTimer.stats


def test_the_worker_reports_event_times_for_a_gpu_candidate(monkeypatch):
    monkeypatch.setattr(worker, "device_timer", lambda b, c, feeds: _FakeTimer(c, feeds))
    got = worker.measure_model(lambda msg: None,
                               worker.MeasureJob(_relu().SerializeToString(), "onnxruntime", {}, 0.2, 0))
    assert got["timer"] == "cuda_events" and got["median_ms"] == 0.25
    assert set(got["samples_ms"]) == {0.25} and got["samples"] == len(got["samples_ms"])


def test_a_cpu_candidate_keeps_host_timing():
    got = worker.measure_model(lambda msg: None,
                               worker.MeasureJob(_relu().SerializeToString(), "onnxruntime", {}, 0.2, 0))
    assert "timer" not in got and got["median_ms"] > 0


def test_gpu_candidate_timed_with_cuda_events():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: CUDA events run on the GPU machine")
    got = worker.measure_model(lambda msg: None, worker.MeasureJob(_relu().SerializeToString(), "torch", {}, 0.5, 0))
    assert got["timer"] == "cuda_events" and 0 < got["median_ms"] < 5
