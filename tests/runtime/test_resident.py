"""Device-resident artifacts (collage.runtime.resident) on the CPU: the torch backend with device_io stands in for a
GPU backend (its tensors are torch tensors either way). Between two resident partitions the tensor is handed over
as a torch tensor (no host copy); host copies happen at the artifact's own inputs and outputs and where a CPU
partition reads; run() still takes and returns numpy, run_tensors() torch tensors. On a GPU the same paths run with
CUDA tensors in benchmarks/gpu_check.sh (tests/backends/test_backends_gpu.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import ort_reference
from collage import zoo
from collage.errors import InputError
from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime import resident
from collage.runtime.artifact import load
from collage.tuner.export import export

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0 for these tests)")


def _export(tmp_path: Path, backends: list[str]) -> tuple[Graph, Path]:
    graph = Graph.load(zoo.model_path("tiny-resnet"))
    n, k = len(graph), len(backends)
    cuts = [round(i * n / k) for i in range(k + 1)]
    plan = Plan([Partition(tuple(range(a, b)), name) for a, b, name in zip(cuts, cuts[1:], backends)])
    return graph, export(graph, plan, tmp_path / "art", backend_options={"torch": {"device": "cpu"}})


def _close(got: dict[str, Any], want: dict[str, np.ndarray]) -> None:
    for name, ref in want.items():
        value = got[name]
        value = value.numpy() if isinstance(value, torch.Tensor) else value
        np.testing.assert_allclose(value, ref, rtol=1e-4, atol=1e-5, err_msg=name)


def _record_feeds(art: Any) -> list[dict[str, type]]:
    """Wrap each partition's run: what types it was given, per call."""
    seen: list[dict[str, type]] = []
    for p in art.partitions:
        inner = p.compiled.run
        p.compiled.run = lambda feeds, inner=inner: (seen.append({k: type(v) for k, v in feeds.items()}),
                                                     inner(feeds))[1]
    return seen


def test_resident_partitions_hand_over_torch_tensors(tmp_path):
    graph, out = _export(tmp_path, ["torch", "torch"])
    art = load(out, device_resident=True)
    assert art._resident is not None and art._resident.resident == [True, True]
    seen = _record_feeds(art)
    feeds = art.random_inputs(1)
    got = art.run(feeds)
    assert all(isinstance(v, np.ndarray) for v in got.values())  # run: numpy out, as always
    _close(got, ort_reference(graph.model, feeds))
    assert all(t is torch.Tensor for t in seen[1].values())  # the boundary between them: no host copy


def test_a_cpu_partition_between_reads_host_arrays(tmp_path):
    graph, out = _export(tmp_path, ["torch", "onnxruntime", "torch"])
    art = load(out, device_resident=True)
    assert art._resident.resident == [True, False, True]
    seen = _record_feeds(art)
    feeds = art.random_inputs(2)
    _close(art.run(feeds), ort_reference(graph.model, feeds))
    assert all(t is np.ndarray for t in seen[1].values())


def test_run_tensors_takes_and_returns_torch_tensors(tmp_path):
    graph, out = _export(tmp_path, ["torch", "onnxruntime"])
    art = load(out, device_resident=True)
    feeds = art.random_inputs(3)
    got = art.run_tensors({k: torch.from_numpy(v) for k, v in feeds.items()})
    assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in got.values())
    _close(got, ort_reference(graph.model, feeds))
    name = art.inputs[0].name
    with pytest.raises(InputError, match=f"input '{name}': expected"):
        art.run_tensors({name: torch.zeros(art.inputs[0].shape, dtype=torch.float64)})
    with pytest.raises(InputError, match="missing input"):
        art.run_tensors({})


def test_host_artifacts_are_unchanged(tmp_path):
    _, out = _export(tmp_path, ["torch", "onnxruntime"])
    assert load(out)._resident is None  # a CPU torch partition is no GPU one: device_io stays off by default
    assert load(out, device_resident=False)._resident is None


def test_resident_options_turn_device_io_on_for_gpu_backends():
    manifest = {"backends": {"onnxruntime": {"device": "cpu"}, "torch": {"device": "cuda"},
                             "torch-inductor": {"device": "cpu"}}}
    assert resident.resident_options(manifest, None, None) == {"torch": {"device_io": True}}
    assert resident.resident_options(manifest, None, True) == {"torch": {"device_io": True},
                                                               "torch-inductor": {"device_io": True}}
    assert resident.resident_options(manifest, {"torch": {"device_io": False}}, None) == {"torch": {"device_io": False}}
    assert resident.resident_options(manifest, None, False) == {}
