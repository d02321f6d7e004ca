"""CUDA-graph replay of a plan (collage.runtime.graphs): its decisions on the CPU (which partitions can be captured,
where the plan splits, what crosses a segment's boundary, when replay runs at all) and its orchestration with a host
stand-in for the graph (inputs copied into the static buffers at every run, outputs read from the static ones). The
capture itself runs on a GPU only (the last tests, in benchmarks/gpu_check.sh)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import ort_reference
from collage import zoo
from collage.backends.torch.backend import capture_refusal as torch_refusal
from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime import graphs
from collage.runtime.artifact import load
from collage.runtime.graphs import Segment
from collage.tuner.export import export

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0 for these tests)")
CUDA = torch.cuda.is_available()


@dataclass
class _Part:
    index: int
    inputs: list[str]
    outputs: list[str]
    compiled: Any = None
    backend: str = "torch"
    directory: Path = field(default_factory=lambda: Path("p"))


class _Says:
    device_io = True

    def __init__(self, reason: str | None) -> None:
        self.reason = reason

    def capture_refusal(self) -> str | None:
        return self.reason


def test_a_partition_that_cannot_be_captured_splits_the_plan():
    assert graphs.plan_segments([None, None, None]) == [Segment((0, 1, 2), True)]
    assert graphs.plan_segments([None, None, "cpu", None]) == [
        Segment((0, 1), True), Segment((2,), False, "cpu"), Segment((3,), True)]
    assert graphs.plan_segments(["a", "b"]) == [Segment((0,), False, "a"), Segment((1,), False, "b")]
    assert graphs.plan_segments([]) == []


def test_which_partitions_can_be_captured():
    host = type("Host", (), {"device_io": False})()
    silent = type("Silent", (), {"device_io": True})()
    assert "host arrays" in graphs.capture_refusal(_Part(0, [], [], host, "onnxruntime"))
    assert "does not say" in graphs.capture_refusal(_Part(0, [], [], silent, "tensorrt"))
    assert graphs.capture_refusal(_Part(0, [], [], _Says(None))) is None
    assert graphs.capture_refusal(_Part(0, [], [], _Says("no"))) == "no"
    # the torch program: CUDA work only, nothing uploaded from the host at run time
    assert torch_refusal("cuda", ["Conv (node 'c')", "Relu (node 'r')"]) is None
    assert "Shape (node 's')" in torch_refusal("cuda", ["Conv (node 'c')", "Shape (node 's')"])
    assert "runs on cpu" in torch_refusal("cpu", ["Conv (node 'c')"])


def test_segment_boundaries_and_report():
    parts = [_Part(0, ["x"], ["a"]), _Part(1, ["a"], ["b"]), _Part(2, ["b", "a"], ["c", "d"]),
             _Part(3, ["c"], ["y"], backend="onnxruntime")]
    seg = Segment((1, 2), True)
    assert graphs.boundary_tensors(parts, seg, {"c", "y"}) == (["a"], ["c"])  # d is read by nobody after
    segs = graphs.plan_segments([None, None, None, "host"])
    assert graphs.describe(segs, parts) == {"whole_plan": False, "captured": [[0, 1, 2]],
                                            "splits": [{"partition": 3, "backend": "onnxruntime", "reason": "host"}]}
    assert graphs.describe(graphs.plan_segments([None]), parts[:1])["whole_plan"] is True


def test_when_replay_runs(monkeypatch):
    captured = [Segment((0,), True)]
    assert graphs.graphs_wanted("cuda", captured) is None
    assert "not CUDA" in graphs.graphs_wanted("cpu", captured)
    assert "no partition" in graphs.graphs_wanted("cuda:1", [Segment((0,), False, "x")])
    monkeypatch.setenv("COLLAGE_CUDA_GRAPHS", "0")
    assert "turned off" in graphs.graphs_wanted("cuda", captured)


def _export(tmp_path: Path, backends: list[str], device: str) -> tuple[Graph, Path]:
    graph = Graph.load(zoo.model_path("tiny-resnet"))
    n, k = len(graph), len(backends)
    cuts = [round(i * n / k) for i in range(k + 1)]
    plan = Plan([Partition(tuple(range(a, b)), name) for a, b, name in zip(cuts, cuts[1:], backends)])
    return graph, export(graph, plan, tmp_path / "art", backend_options={"torch": {"device": device}})


def test_a_cpu_artifact_reports_why_it_is_not_replayed(tmp_path):
    _, out = _export(tmp_path, ["torch", "onnxruntime"], "cpu")
    report = load(out, device_resident=True).graph_report()
    assert report["replayed"] is False and "not CUDA" in report["why_not"]
    assert [s["backend"] for s in report["splits"]] == ["torch", "onnxruntime"]
    assert load(out).graph_report() is None  # a host artifact


class _HostGraph:
    """Stands in for a captured CUDA graph on the CPU: replay re-runs the body into the static output buffers."""

    def __init__(self, seg: graphs.CapturedSegment) -> None:
        self.seg = seg

    def replay(self) -> None:
        got = self.seg._body()
        for t, buf in self.seg.static_out.items():
            buf.copy_(got[t])


class _HostCapture(graphs.CapturedSegment):
    def __init__(self, parts: Any, boundary: Any, env: Any, device: str) -> None:
        self.parts = list(parts)
        reads, writes = boundary
        self.static_in = {t: torch.as_tensor(env[t]).clone() for t in reads}
        got = self._body()
        self.static_out = {t: got[t].clone() for t in writes}
        self.graph = _HostGraph(self)


def test_replay_orchestration_with_a_host_stand_in(monkeypatch, tmp_path):
    graph, out = _export(tmp_path, ["torch", "onnxruntime", "torch", "torch"], "cpu")
    monkeypatch.setattr(graphs, "capture_refusal", lambda p: None if graphs.is_resident(p) else "host")
    monkeypatch.setattr(graphs, "graphs_wanted", lambda device, segments: None)
    monkeypatch.setattr(graphs, "CapturedSegment", _HostCapture)
    art = load(out, device_resident=True)
    assert art.graph_report()["captured"] == [[0], [2, 3]]
    for seed in (1, 2):  # the second run must not replay the first run's inputs
        feeds = art.random_inputs(seed)
        want = ort_reference(graph.model, feeds)
        got = art.run(feeds)
        for name, ref in want.items():
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)
    kept = art.run(art.random_inputs(1))
    art.run(art.random_inputs(2))
    np.testing.assert_allclose(next(iter(kept.values())), next(iter(ort_reference(
        graph.model, art.random_inputs(1)).values())), rtol=1e-4, atol=1e-5)  # outputs are copies of the buffers


# ---------------------------------------------------------------------- on a GPU (benchmarks/gpu_check.sh)
@pytest.mark.skipif(not CUDA, reason="no CUDA device: the capture itself runs on the GPU machine")
def test_whole_plan_replayed_on_cuda(tmp_path):
    graph, out = _export(tmp_path, ["torch", "torch"], "cuda")
    art = load(out)
    report = art.graph_report()
    assert report["replayed"] and report["whole_plan"], report
    for seed in (1, 2):
        feeds = art.random_inputs(seed)
        got = art.run_tensors({k: torch.from_numpy(v).cuda() for k, v in feeds.items()})
        for name, ref in ort_reference(graph.model, feeds).items():
            assert got[name].is_cuda
            np.testing.assert_allclose(got[name].cpu().numpy(), ref, rtol=1e-3, atol=1e-4, err_msg=name)


@pytest.mark.skipif(not CUDA, reason="no CUDA device: the capture itself runs on the GPU machine")
def test_a_host_partition_splits_the_graph_on_cuda(tmp_path):
    graph, out = _export(tmp_path, ["torch", "onnxruntime", "torch"], "cuda")
    art = load(out)
    report = art.graph_report()
    assert report["captured"] == [[0], [2]] and report["splits"][0]["backend"] == "onnxruntime", report
    feeds = art.random_inputs(3)
    got = art.run(feeds)
    for name, ref in ort_reference(graph.model, feeds).items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-3, atol=1e-4, err_msg=name)
