"""torch-inductor and the torch precision variants (collage.backends.torch.variants) on the CPU: registered for cuda,
available on a CPU where they can compute (tf32 and fp16 refuse with the reason), lower precision for the tuner's
accuracy-budgeted search, numerically what they claim (bf16 really is bf16, its outputs keep the ONNX types), and
torch-inductor really compiled (its support check compiles nothing). The GPU side runs in
tests/backends/test_backends_gpu.py on the device machine (benchmarks/gpu_check.sh)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.helpers import model_feeds, ort_reference
from collage import zoo
from collage.backends import REGISTRY, VARIANTS, backend_names, get_backend, unavailable_reason
from collage.errors import CollageError

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0 for these tests)")

LOW = ["torch-tf32", "torch-bf16", "torch-fp16"]


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 128)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((128, 16)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [8, 16])],
                              initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_registered_for_cuda_and_the_variants_only_by_name():
    assert "torch-inductor" in REGISTRY and "torch-inductor" in backend_names("cuda")
    for name in LOW:
        assert VARIANTS[name][1] == "cuda" and name not in backend_names(None)
        assert get_backend(name, device="cpu").precision == name.split("-")[1]


def test_available_on_a_cpu_where_they_compute():
    assert unavailable_reason("torch", device="cpu") is None
    assert unavailable_reason("torch-inductor", device="cpu") is None
    assert unavailable_reason("torch-bf16", device="cpu") is None
    assert "CUDA tensor-core" in unavailable_reason("torch-tf32", device="cpu")
    assert "CUDA only" in unavailable_reason("torch-fp16", device="cpu")
    assert "CUDA only" in unavailable_reason("torch", device="cpu", precision="fp16")
    if not torch.cuda.is_available():  # the registered (cuda) instances say there is no device
        assert "CUDA" in unavailable_reason("torch-inductor")


def test_variants_are_lower_precision_for_the_tuner():
    from collage.tuner.precision.tuner import check_backends

    fp32 = [get_backend("torch", device="cpu"), get_backend("torch-inductor", device="cpu")]
    assert check_backends(fp32, None) == []
    with pytest.raises(CollageError, match="torch-bf16.*accuracy budget"):
        check_backends([*fp32, get_backend("torch-bf16", device="cpu")], None)


def test_a_variant_keeps_its_precision():
    assert get_backend("torch-bf16", device="cpu", precision="bf16").precision == "bf16"  # as a manifest records it
    with pytest.raises(CollageError, match="computes in bf16"):
        get_backend("torch-bf16", device="cpu", precision="fp32")
    versions = {get_backend(n, device="cpu").version() for n in ["torch", "torch-inductor", "torch-bf16"]}
    assert len(versions) == 3  # cost and support keys differ


def test_bf16_computes_in_bf16_and_returns_the_onnx_types():
    model = _mlp()
    feeds = model_feeds(model)
    want = ort_reference(model, feeds)["y"]
    exact = get_backend("torch", device="cpu").compile(model).run(feeds)["y"]
    low = get_backend("torch-bf16", device="cpu").compile(model).run(feeds)["y"]
    assert exact.dtype == low.dtype == np.float32
    np.testing.assert_allclose(exact, want, rtol=1e-4, atol=1e-5)
    err = float(np.max(np.abs(low - want)) / np.max(np.abs(want)))
    assert 1e-4 < err < 5e-2  # bf16's 8-bit mantissa: visibly off fp32, still the same function


def test_bf16_on_a_zoo_model_with_device_io():
    graph = zoo.load_graph("zoo:tiny-bert")
    feeds = model_feeds(graph.model, int_high=3)
    compiled = get_backend("torch-bf16", device="cpu", device_io=True).compile(graph.model)
    got = compiled.run({k: torch.from_numpy(v) for k, v in feeds.items()})
    ref = ort_reference(graph.model, feeds)
    for name, want in ref.items():
        assert got[name].dtype == torch.from_numpy(want).dtype
        assert np.allclose(got[name].numpy(), want, atol=0.1 * float(np.abs(want).max()) + 1e-3)


def test_inductor_support_check_compiles_nothing(monkeypatch, tmp_path):
    from collage.graph.ir import Graph

    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("the support check compiled"))
    assert all(get_backend("torch-inductor", device="cpu").supports_all(Graph.load(_mlp())).values())


def test_each_program_gets_its_own_code_object():
    from collage.backends.torch.variants import fresh_entry

    a = fresh_entry(lambda env: {"y": env["x"] + 1}, ["x"], ["y"])
    b = fresh_entry(lambda env: {"y": env["x"] * 2}, ["x"], ["y"])
    assert a.__code__ is not b.__code__  # dynamo's per-code-object cache (and its recompile limit) is not shared
    assert a(torch.ones(2))[0].tolist() == [2.0, 2.0] and b(torch.ones(2))[0].tolist() == [2.0, 2.0]


# TorchInductor's first compile in a process: 8 s here (AMD EPYC, 2 cores), so not marked slow
def test_inductor_compiles_and_matches_the_reference(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    from collage.backends.torch.variants import InductorRunner

    model = _mlp()
    feeds = model_feeds(model)
    compiled = get_backend("torch-inductor", device="cpu").compile(model)
    assert isinstance(compiled._run, InductorRunner)
    np.testing.assert_allclose(compiled.run(feeds)["y"], ort_reference(model, feeds)["y"], rtol=1e-4, atol=1e-5)
    assert any(tmp_path.rglob("*.py"))  # Inductor wrote generated code: the partition really was compiled


@pytest.mark.slow  # two TorchInductor compiles of an attention layer: 35 s on two cores
def test_inductor_compiles_attention_with_the_pattern_passes_off(monkeypatch, tmp_path):
    """tiny-bert's attention: TorchInductor's attention fusion fails on it (torch 2.13), so it compiles again with the
    pattern passes off, and the outputs match the reference."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    graph = zoo.load_graph("zoo:tiny-bert")
    model = graph.extract(list(range(10, 45)))
    feeds = model_feeds(model, int_high=3)
    compiled = get_backend("torch-inductor", device="cpu").compile(model)
    got, want = compiled.run(feeds), ort_reference(model, feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)
    assert compiled._run.patterns_off  # if this fails, torch fixed the fusion: keep the retry, drop this line


# ---------------------------------------------------------------------- on a GPU (benchmarks/gpu_check.sh)
@pytest.mark.parametrize("name", LOW)
def test_variant_on_cuda_is_close_and_keeps_the_onnx_types(name):
    reason = unavailable_reason(name)
    if reason is not None:
        pytest.skip(f"{name} unavailable: {reason}")
    graph = zoo.load_graph("zoo:tiny-resnet")
    feeds = model_feeds(graph.model)
    compiled = get_backend(name, device_io=True).compile(graph.model)
    got = compiled.run({k: torch.from_numpy(v).cuda() for k, v in feeds.items()})
    for out, want in ort_reference(graph.model, feeds).items():
        assert got[out].is_cuda and got[out].dtype == torch.float32
        value = got[out].cpu().numpy()
        assert float(np.max(np.abs(value - want))) <= 0.05 * float(np.max(np.abs(want))) + 1e-3, out
