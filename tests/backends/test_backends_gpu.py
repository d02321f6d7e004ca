"""GPU backends (tensorrt, onnxruntime-cuda, torch): what can be checked without a GPU, and the GPU
conformance checks that run where a backend is available (they skip here with available()'s reason).

No GPU needed: the TensorRT engine/timing cache keys (fakes for the version strings), the precise
"why not" of every GPU backend on a machine without one, the manifest of an artifact whose partition
runs on a "cuda" backend, and the torch backend's ONNX interpreter on the CPU against the ONNX
Runtime reference (skipped when torch is not installed).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.helpers import model_feeds, ort_reference
from collage import zoo
from collage.backends import REGISTRY, backend_names, get_backend, unavailable_reason
from collage.backends import cuda_timing
from collage.backends.onnxruntime.session import make_session
from collage.backends.tensorrt import TensorRTBackend, engine_cache_key, engine_cache_path, timing_cache_path
from collage.errors import CollageError, UnsupportedError

RTOL, ATOL = 1e-4, 1e-5
GPU_RTOL, GPU_ATOL = 1e-3, 1e-4  # cuDNN/cuBLAS pick other algorithms than MLAS (TF32 is off)
GPU_BACKENDS = ["tensorrt", "onnxruntime-cuda", "torch", "torch-inductor"]
#: the zoo cuts torch-inductor is checked on (a convolution stem and an attention layer)
INDUCTOR_CUTS = ("tiny-resnet:stem", "tiny-bert:layer")


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "case", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _w(*shape, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 0.2).astype(np.float32)


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    return model_feeds(model, seed, int_high=3)


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return ort_reference(model, feeds)


def _close(got: dict[str, Any], want: dict[str, np.ndarray], rtol=RTOL, atol=ATOL) -> None:
    assert set(got) == set(want)
    for name, ref in want.items():
        value = got[name]
        if not isinstance(value, np.ndarray):
            value = value.detach().cpu().numpy()
        assert value.shape == ref.shape, name
        assert value.dtype == ref.dtype, name
        np.testing.assert_allclose(value, ref, rtol=rtol, atol=atol, err_msg=name)


# ---------------------------------------------------------------------- TensorRT cache keys (pure Python)
SHA = "ab" * 32


def test_engine_cache_key_changes_with_everything_that_invalidates_an_engine():
    base = dict(trt_version="10.3.0", gpu="NVIDIA H200 sm90", precision="fp32", builder_options={"workspace_mb": 4096})
    key = engine_cache_key(SHA, **base)
    assert key == engine_cache_key(SHA, **dict(base))  # stable
    changed = [
        engine_cache_key("cd" * 32, **base),
        engine_cache_key(SHA, **{**base, "trt_version": "10.4.0"}),
        engine_cache_key(SHA, **{**base, "gpu": "NVIDIA A100-SXM4-80GB sm80"}),
        engine_cache_key(SHA, **{**base, "precision": "fp16"}),
        engine_cache_key(SHA, **{**base, "builder_options": {"workspace_mb": 1024}}),
    ]
    assert len({key, *changed}) == 1 + len(changed)


def test_backend_cache_key_uses_its_version_gpu_and_precision(monkeypatch, tmp_path):
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))
    monkeypatch.setattr(TensorRTBackend, "trt_version", lambda self: "10.3.0")
    monkeypatch.setattr(TensorRTBackend, "gpu", lambda self: "NVIDIA H200 sm90")
    data = b"model bytes"
    k32 = TensorRTBackend().cache_key(data)
    assert k32 == TensorRTBackend().cache_key(data)
    assert k32 != TensorRTBackend(precision="fp16").cache_key(data)
    assert k32 != TensorRTBackend().cache_key(b"other weights")
    assert TensorRTBackend().version() == "tensorrt-10.3.0-NVIDIA_H200_sm90-fp32"
    monkeypatch.setattr(TensorRTBackend, "gpu", lambda self: "NVIDIA L4 sm89")
    assert TensorRTBackend().cache_key(data) != k32
    assert TensorRTBackend().version() != "tensorrt-10.3.0-NVIDIA_H200_sm90-fp32"
    monkeypatch.setattr(TensorRTBackend, "trt_version", lambda self: "10.4.0")
    assert TensorRTBackend().cache_key(data) != k32
    # both caches live under COLLAGE_CACHE; the timing cache is per TensorRT version and GPU
    assert engine_cache_path(k32).is_relative_to(tmp_path)
    t1, t2 = timing_cache_path("10.3.0", "NVIDIA H200 sm90"), timing_cache_path("10.4.0", "NVIDIA H200 sm90")
    assert t1 != t2 and t1.is_relative_to(tmp_path)
    assert timing_cache_path("10.3.0", "NVIDIA L4 sm89") != t1


class _FakeTrt:
    """Just enough of the tensorrt 10 module to drive TensorRTBackend._parse/_build without a GPU."""

    __version__ = "10.9.9"

    class Logger:
        WARNING = 2

        def __init__(self, level):
            pass

    class MemoryPoolType:
        WORKSPACE = "workspace"

    class BuilderFlag:
        TF32, FP16 = "TF32", "FP16"

    class _Err:
        def __init__(self, node):
            self._node = node

        def desc(self):
            return "No importer registered for op: Einsum"

        def node(self):
            return self._node

        def node_operator(self):
            return "Einsum"

    class _Cache:
        def __init__(self, data):
            self.data = data

        def serialize(self):
            return self.data + b"+timings"

    class _Config:
        def __init__(self):
            self.flags, self.pools = {"TF32"}, {}

        def set_memory_pool_limit(self, pool, size):
            self.pools[pool] = size

        def clear_flag(self, flag):
            self.flags.discard(flag)

        def set_flag(self, flag):
            self.flags.add(flag)

        def create_timing_cache(self, data):
            return _FakeTrt._Cache(bytes(data))

        def set_timing_cache(self, cache, ignore_mismatch):
            self.cache = cache

        def get_timing_cache(self):
            return self.cache

    class Builder:
        configs: list = []

        def __init__(self, logger):
            pass

        def create_network(self, flags):
            return object()

        def create_builder_config(self):
            config = _FakeTrt._Config()
            _FakeTrt.Builder.configs.append(config)
            return config

        def build_serialized_network(self, network, config):
            return b"ENGINE:" + ",".join(sorted(config.flags)).encode()

    class OnnxParser:
        def __init__(self, network, logger):
            self.errors = []

        def parse(self, data):
            model = onnx.load_from_string(data)
            self.errors = [_FakeTrt._Err(i) for i, nd in enumerate(model.graph.node) if nd.op_type == "Einsum"]
            return not self.errors

        @property
        def num_errors(self):
            return len(self.errors)

        def get_error(self, i):
            return self.errors[i]


def test_tensorrt_build_flags_caches_and_parse_errors_with_a_fake_module(monkeypatch, tmp_path):
    import collage.backends.tensorrt as trt_mod

    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))
    monkeypatch.setattr(trt_mod, "_trt", lambda: _FakeTrt)
    monkeypatch.setattr(trt_mod, "_LOGGER", None)
    monkeypatch.setattr(TensorRTBackend, "gpu", lambda self: "NVIDIA H200 sm90")
    ok = _model([n("Relu", ["x"], ["y"], name="r")], [("x", F, [2, 3])], [("y", F, [2, 3])])
    bad = _model([n("Relu", ["x"], ["r"], name="ok"),
                  n("Einsum", ["r", "r"], ["y"], equation="ij,ij->i", name="my_einsum")],
                 [("x", F, [3, 4])], [("y", F, [3])])
    backend = TensorRTBackend()
    assert backend._check_supported(ok) is None
    assert "No importer registered for op: Einsum" in backend._check_supported(bad)
    with pytest.raises(UnsupportedError, match=r"tensorrt cannot take op Einsum \(node 'my_einsum'"):
        backend._build(bad)
    assert backend._build(ok) == b"ENGINE:"  # fp32: TF32 cleared, no FP16
    assert _FakeTrt.Builder.configs[-1].pools == {"workspace": 4096 << 20}
    assert TensorRTBackend(precision="fp16")._build(ok) == b"ENGINE:FP16,TF32"
    tpath = timing_cache_path("10.9.9", "NVIDIA H200 sm90")
    assert tpath.read_bytes() == b"+timings+timings"  # written, then read back and extended by the second build


def test_tensorrt_rejects_unknown_precision():
    with pytest.raises(CollageError, match="precision"):
        TensorRTBackend(precision="int8")


# ---------------------------------------------------------------------- why a GPU backend cannot run here
def test_gpu_backends_are_registered_for_cuda():
    for name in GPU_BACKENDS:
        assert name in backend_names("cuda")
        assert name not in backend_names("cpu")


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_tensorrt_reason_when_not_installed():
    if _has("tensorrt"):
        pytest.skip("tensorrt is installed here")
    assert unavailable_reason("tensorrt") == "tensorrt not installed: pip install 'collage[gpu]'"


def test_tensorrt_reason_when_no_device(monkeypatch):
    import collage.backends.tensorrt as trt_mod

    monkeypatch.setattr(trt_mod, "_trt", lambda: object())
    monkeypatch.setattr(trt_mod, "no_device_reason", lambda: "no CUDA device visible (check CUDA_VISIBLE_DEVICES)")
    assert TensorRTBackend().available() == "no CUDA device visible (check CUDA_VISIBLE_DEVICES)"


def test_onnxruntime_cuda_reason_says_the_gpu_wheel_replaces_the_cpu_one():
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA execution provider")
    reason = unavailable_reason("onnxruntime-cuda")
    assert "has no CUDAExecutionProvider" in reason
    assert "onnxruntime-gpu REPLACES onnxruntime" in reason and "never install both" in reason


def test_torch_reason_without_cuda():
    if not _has("torch"):
        assert "torch is not installed" in unavailable_reason("torch")
        return
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device here")
    reason = unavailable_reason("torch")
    assert reason.startswith(("no CUDA device", "this torch build")) and "CUDA" in reason
    assert get_backend("torch", device="cpu").available() is None


def test_no_device_reason_without_driver(monkeypatch):
    monkeypatch.setattr(cuda_timing, "cuda_device_count", lambda: 0)
    monkeypatch.setattr(cuda_timing, "_driver", lambda: None)
    assert "libcuda.so.1" in cuda_timing.no_device_reason()


def test_host_timing_without_cuda(monkeypatch):
    monkeypatch.setattr(cuda_timing, "torch_cuda", lambda: None)
    calls = []
    samples = cuda_timing.event_times_ms(lambda: calls.append(1), repeat=5, warmup=2)
    assert len(calls) == 7 and len(samples) == 5
    assert all(s.event_ms != s.event_ms and s.ms == s.wall_ms >= 0 for s in samples)


# ---------------------------------------------------------------------- ORT CUDA's binding code, on the CPU
def test_onnxruntime_cuda_binding_code_runs_with_cpu_buffers(tmp_path):
    """The IO-binding / save / load code of onnxruntime-cuda, with its buffers and provider moved to the CPU."""
    from collage.backends.onnxruntime.cuda import OnnxRuntimeCudaBackend

    class CpuBuffers(OnnxRuntimeCudaBackend):
        ort_device = "cpu"

        def providers(self):
            return ["CPUExecutionProvider"]

    backend = CpuBuffers(strict=False)
    assert backend.provider_options()["use_tf32"] == "0"
    graph_model = zoo.load_model("tiny-mobilenetv2")
    feeds = _feeds(graph_model)
    want = _reference(graph_model, feeds)
    compiled = backend.compile(graph_model)
    assert not compiled.reuses_outputs
    first = compiled.run(feeds)
    _close(first, want)
    other = {k: v * 0.5 for k, v in feeds.items()}
    _close(compiled.run(other), _reference(graph_model, other))
    _close(first, want)  # host outputs are copies: the second run did not overwrite them
    entry = compiled.save(tmp_path)
    assert entry["device"] == "cuda" and entry["files"][0].startswith("onnxruntime-cuda-")
    _close(backend.load(tmp_path, entry).run(feeds), want)


# ---------------------------------------------------------------------- a "cuda" partition in an artifact
class FakeCudaBackend:
    """Runs on ONNX Runtime CPU but claims device "cuda" and saves like the TensorRT backend."""

    name = "fake-cuda"
    device = "cuda"
    precision = "fp32"

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = device_id

    def available(self):
        return None

    def version(self):
        return "fake-cuda-1-NVIDIA_H200_sm90-fp32"

    @property
    def options(self):
        return {"precision": "fp32", "device_id": self.device_id}

    def compile(self, model):
        return _FakeCompiled(model, self)

    def load(self, directory, entry):
        return _FakeCompiled(onnx.load(str(Path(directory) / entry["files"][0])), self)


class _FakeCompiled:
    reuses_outputs = False

    def __init__(self, model, backend):
        self.model, self.backend = model, backend.name
        self.sess = make_session(model)
        self.input_names = [i.name for i in self.sess.get_inputs()]
        self.output_names = [o.name for o in self.sess.get_outputs()]

    def run(self, feeds):
        return dict(zip(self.output_names, self.sess.run(None, dict(feeds))))

    def save(self, directory):
        onnx.save(self.model, str(Path(directory) / "fake.engine"))
        (Path(directory) / "fake.io.json").write_text("{}")
        return {"backend": self.backend, "files": ["fake.engine", "fake.io.json"], "format": "tensorrt engine",
                "device": "cuda", "key": "k" * 64, "gpu": "NVIDIA H200 sm90", "tensorrt": "10.3.0"}


def test_manifest_round_trip_of_a_cuda_partition(monkeypatch, tmp_path):
    from collage.runtime.manifest import read_manifest
    from collage.tuner.export import export
    from collage.graph.ir import Graph
    from collage.plan import Partition, Plan
    from collage.runtime.artifact import load

    monkeypatch.setitem(REGISTRY, "fake-cuda", (f"{__name__}:FakeCudaBackend", "cuda"))
    monkeypatch.setitem(sys.modules, __name__, sys.modules[__name__])
    graph = Graph.load(zoo.model_path("tiny-mobilenetv2"))
    n = len(graph)
    plan = Plan([Partition(tuple(range(n // 2)), "onnxruntime"), Partition(tuple(range(n // 2, n)), "fake-cuda")])
    out = export(graph, plan, tmp_path / "art", target="cuda", backend_options={"fake-cuda": {"device_id": 0}})
    manifest = read_manifest(out)
    assert manifest["target"] == "cuda"
    assert manifest["backends"]["fake-cuda"]["device"] == "cuda"
    assert manifest["backends"]["onnxruntime"]["device"] == "cpu"
    part = manifest["partitions"][1]
    assert part["backend"] == "fake-cuda" and part["entry"]["device"] == "cuda"
    assert part["entry"]["gpu"] == "NVIDIA H200 sm90" and {f["name"] for f in part["files"]} == {"fake.engine",
                                                                                                 "fake.io.json"}
    art = load(out)
    feeds = art.random_inputs()
    _close(art.run(feeds), _reference(graph.model, feeds), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- the torch interpreter on the CPU
def _torch_cpu(**kw):
    pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0 for these tests)")
    from collage.backends.torch.backend import TorchBackend

    return TorchBackend(device="cpu", **kw)


n = helper.make_node
F = T.FLOAT
X4 = ("x", F, [1, 4, 9, 9])


def _single_ops() -> dict[str, onnx.ModelProto]:
    return {
        "conv_asym_pads": _model([n("Conv", ["x", "W", "B"], ["y"], pads=[0, 1, 2, 1], strides=[2, 1], name="c")],
                                 [X4], [("y", F, None)], [("W", _w(6, 4, 3, 3)), ("B", _w(6, seed=1))]),
        "conv_group_same": _model([n("Conv", ["x", "W"], ["y"], group=2, auto_pad="SAME_UPPER", strides=[2, 2])],
                                  [X4], [("y", F, None)], [("W", _w(4, 2, 3, 3))]),
        "batchnorm_relu": _model([n("BatchNormalization", ["x", "s", "b", "m", "v"], ["t"], epsilon=1e-3),
                                  n("Relu", ["t"], ["y"])], [X4], [("y", F, None)],
                                 [("s", _w(4) + 1), ("b", _w(4, seed=1)), ("m", _w(4, seed=2)),
                                  ("v", np.abs(_w(4, seed=3)) + 0.5)]),
        "maxpool_ceil": _model([n("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                  ceil_mode=1)], [X4], [("y", F, None)]),
        "maxpool_asym": _model([n("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1])],
                               [X4], [("y", F, None)]),
        "avgpool_pad": _model([n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                              [X4], [("y", F, None)]),
        "avgpool_incl": _model([n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                  count_include_pad=1)], [X4], [("y", F, None)]),
        "gap_flatten_gemm": _model([n("GlobalAveragePool", ["x"], ["g"]), n("Flatten", ["g"], ["f"]),
                                    n("Gemm", ["f", "W", "C"], ["y"], transB=1, alpha=0.5, beta=2.0)],
                                   [X4], [("y", F, None)], [("W", _w(5, 4)), ("C", _w(5))]),
        "softmax_opset11": _model([n("Softmax", ["x"], ["y"], axis=1)], [X4], [("y", F, None)], opset=11),
        "softmax_last": _model([n("Softmax", ["x"], ["y"])], [X4], [("y", F, None)]),
        "clip_min_only": _model([n("Clip", ["x", "lo"], ["y"])], [X4], [("y", F, None)],
                                [("lo", np.array(0.1, np.float32))]),
        "clip6": _model([n("Clip", ["x", "lo", "hi"], ["y"])], [X4], [("y", F, None)],
                        [("lo", np.array(0, np.float32)), ("hi", np.array(0.3, np.float32))]),
        "layernorm_erf": _model([n("LayerNormalization", ["x", "s", "b"], ["t"], axis=-1, epsilon=1e-5),
                                 n("Erf", ["t"], ["y"])], [("x", F, [2, 3, 8])], [("y", F, None)],
                                [("s", _w(8) + 1), ("b", _w(8, seed=1))]),
        "gather_neg": _model([n("Gather", ["E", "i"], ["y"], axis=0)], [("i", T.INT64, [2, 3])], [("y", F, None)],
                             [("E", _w(7, 5))]),
        "gather_axis1": _model([n("Gather", ["x", "i"], ["y"], axis=1)], [X4], [("y", F, None)],
                               [("i", np.array([3, -1, 0], np.int64))]),
        "reshape_transpose": _model([n("Reshape", ["x", "s"], ["r"]), n("Transpose", ["r"], ["y"], perm=[0, 2, 1])],
                                    [X4], [("y", F, None)], [("s", np.array([0, 4, -1], np.int64))]),
        "concat_matmul": _model([n("Concat", ["a", "b"], ["c"], axis=-1), n("MatMul", ["c", "W"], ["y"])],
                                [("a", F, [2, 3, 4]), ("b", F, [2, 3, 2])], [("y", F, None)], [("W", _w(6, 5))]),
        "reduce_mean18": _model([n("ReduceMean", ["x", "ax"], ["y"], keepdims=0)], [X4], [("y", F, None)],
                                [("ax", np.array([1, -1], np.int64))], opset=18),
        "reduce_mean13": _model([n("ReduceMean", ["x"], ["y"], axes=[2, 3])], [X4], [("y", F, None)], opset=13),
        "unsqueeze_squeeze": _model([n("Unsqueeze", ["x", "a"], ["u"]), n("Squeeze", ["u", "a"], ["y"])],
                                    [X4], [("y", F, None)], [("a", np.array([0, -1], np.int64))]),
        "where_cast": _model([n("Greater", ["x", "z"], ["c"]), n("Cast", ["c"], ["cf"], to=T.FLOAT),
                              n("Where", ["c", "x", "cf"], ["y"])], [X4], [("y", F, None)],
                             [("z", np.array(0.0, np.float32))]),
        "sub_div_pow_sqrt": _model([n("Sub", ["x", "m"], ["d"]), n("Pow", ["d", "p"], ["q"]),
                                    n("Add", ["q", "e"], ["r"]), n("Sqrt", ["r"], ["s"]), n("Div", ["d", "s"], ["y"])],
                                   [X4], [("y", F, None)],
                                   [("m", np.array(0.5, np.float32)), ("p", np.array(2.0, np.float32)),
                                    ("e", np.array(1e-3, np.float32))]),
        "sigmoid_tanh_mul": _model([n("Sigmoid", ["x"], ["s"]), n("Tanh", ["x"], ["t"]), n("Mul", ["s", "t"], ["y"])],
                                   [X4], [("y", F, None)]),
        "int_div": _model([n("Div", ["a", "b"], ["y"])], [("a", T.INT64, [6]), ("b", T.INT64, [6])],
                          [("y", T.INT64, None)]),
        "shape_chain": _model([n("Shape", ["x"], ["sh"]), n("Gather", ["sh", "zero"], ["b"], axis=0),
                               n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Concat", ["bu", "m1"], ["ns"], axis=0),
                               n("Reshape", ["x", "ns"], ["y"])], [X4], [("y", F, None)],
                              [("zero", np.array(0, np.int64)), ("ax0", np.array([0], np.int64)),
                               ("m1", np.array([-1], np.int64))]),
        "constant_expand_sum": _model([n("Constant", [], ["k"], value=numpy_helper.from_array(_w(4, 1, 1), "k")),
                                       n("Expand", ["k", "shp"], ["e"]), n("Sum", ["x", "e", "x"], ["y"])],
                                      [X4], [("y", F, None)], [("shp", np.array([1, 4, 9, 9], np.int64))]),
    }


SINGLE_OPS = _single_ops()


@pytest.mark.parametrize("case", sorted(SINGLE_OPS))
def test_torch_interpreter_matches_onnxruntime(case):
    backend = _torch_cpu()
    model = SINGLE_OPS[case]
    feeds = _feeds(model)
    if case == "gather_neg":
        feeds["i"] = np.array([[0, -1, 3], [6, -7, 2]], np.int64)
    if case == "int_div":
        feeds = {"a": np.array([7, -7, 9, 1, 0, -9], np.int64), "b": np.array([2, 2, -4, 3, 5, 4], np.int64)}
    compiled = backend.compile(model)
    _close(compiled.run(feeds), _reference(model, feeds))


def test_constant_shape_chains_are_folded():
    backend = _torch_cpu()
    compiled = backend.compile(SINGLE_OPS["shape_chain"])
    assert [s.label.split()[0] for s in compiled._program.steps] == ["Reshape"]


def _zoo_cuts() -> dict[str, tuple[str, slice]]:
    return {"tiny-resnet:all": ("tiny-resnet", slice(None)), "tiny-resnet:stem": ("tiny-resnet", slice(0, 8)),
            "tiny-mobilenetv2:all": ("tiny-mobilenetv2", slice(None)),
            "tiny-bert:all": ("tiny-bert", slice(None)), "tiny-bert:layer": ("tiny-bert", slice(10, 45))}


@pytest.mark.parametrize("cut", sorted(_zoo_cuts()))
def test_torch_interpreter_on_zoo_subgraphs(cut):
    backend = _torch_cpu()
    name, sl = _zoo_cuts()[cut]
    graph = zoo.load_graph(f"zoo:{name}")
    nodes = list(range(len(graph)))[sl]
    model = graph.extract(nodes) if len(nodes) < len(graph) else graph.model
    assert all(backend.supports_all(graph).values())
    feeds = _feeds(model)
    _close(backend.compile(model).run(feeds), _reference(model, feeds))


def test_torch_unsupported_op_names_op_and_node():
    backend = _torch_cpu()
    model = _model([n("Relu", ["x"], ["r"], name="ok"), n("Einsum", ["r", "r"], ["y"], equation="ij,ij->i",
                                                                  name="my_einsum")],
                   [("x", F, [3, 4])], [("y", F, [3])])
    with pytest.raises(UnsupportedError, match=r"Einsum.*my_einsum"):
        backend.compile(model)
    from collage.graph.ir import Graph

    g = Graph.load(model)
    answers = backend.supports_all(g)
    assert answers == {0: True, 1: False}
    assert "op table" in backend.support_reason(g, 1)


def test_torch_unsupported_attribute_is_a_reason():
    backend = _torch_cpu()
    model = _model([n("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln3")], [("x", F, [2, 8])],
                   [("y", F, [2, 8]), ("mean", F, [2, 1])], [("s", _w(8))])
    with pytest.raises(UnsupportedError, match=r"LayerNormalization.*ln3.*Mean"):
        backend.compile(model)


def test_torch_device_io_takes_and_returns_tensors():
    backend = _torch_cpu(device_io=True)
    import torch

    model = SINGLE_OPS["sigmoid_tanh_mul"]
    feeds = _feeds(model)
    got = backend.compile(model).run({"x": torch.from_numpy(feeds["x"])})
    assert isinstance(got["y"], torch.Tensor)
    _close(got, _reference(model, feeds))


def test_torch_artifact_round_trip_on_cpu(tmp_path):
    _torch_cpu()
    from collage.runtime.manifest import read_manifest
    from collage.tuner.export import export
    from collage.graph.ir import Graph
    from collage.plan import Partition, Plan
    from collage.runtime.artifact import load

    graph = Graph.load(zoo.model_path("tiny-resnet"))
    k = len(graph) // 2
    plan = Plan([Partition(tuple(range(k)), "torch"), Partition(tuple(range(k, len(graph))), "onnxruntime")])
    out = export(graph, plan, tmp_path / "art", backend_options={"torch": {"device": "cpu"}})
    manifest = read_manifest(out)
    assert manifest["backends"]["torch"]["settings"]["device"] == "cpu"
    art = load(out)
    feeds = art.random_inputs(1)
    _close(art.run(feeds), _reference(graph.model, feeds))


# ---------------------------------------------------------------------- GPU conformance (device machine only)
@pytest.fixture(params=GPU_BACKENDS, scope="module")
def gpu_backend(request):
    reason = unavailable_reason(request.param)
    if reason is not None:
        pytest.skip(f"backend {request.param} unavailable: {reason}")
    return get_backend(request.param)


@pytest.mark.parametrize("cut", sorted(_zoo_cuts()))
def test_gpu_backend_matches_reference_and_round_trips(gpu_backend, cut, tmp_path):
    if gpu_backend.name == "torch-inductor" and cut not in INDUCTOR_CUTS:
        pytest.skip("torch-inductor: two cuts only (each compile takes seconds; gpu_check.sh has 7 minutes)")
    name, sl = _zoo_cuts()[cut]
    graph = zoo.load_graph(f"zoo:{name}")
    nodes = list(range(len(graph)))[sl]
    model = graph.extract(nodes) if len(nodes) < len(graph) else graph.model
    feeds = _feeds(model)
    want = _reference(model, feeds)
    compiled = gpu_backend.compile(model)
    _close({k: np.array(v) for k, v in compiled.run(feeds).items()}, want, GPU_RTOL, GPU_ATOL)
    entry = compiled.save(tmp_path)
    assert entry["files"] and all((tmp_path / f).is_file() for f in entry["files"])
    loaded = gpu_backend.load(tmp_path, entry)
    _close({k: np.array(v) for k, v in loaded.run(feeds).items()}, want, GPU_RTOL, GPU_ATOL)


def test_gpu_backend_device_io(gpu_backend):
    import torch

    backend = get_backend(gpu_backend.name, device_io=True)
    model = SINGLE_OPS["conv_asym_pads"]
    feeds = _feeds(model)
    compiled = backend.compile(model)
    got = compiled.run({"x": torch.from_numpy(feeds["x"]).cuda()})
    assert isinstance(got["y"], torch.Tensor) and got["y"].is_cuda
    _close(got, _reference(model, feeds), GPU_RTOL, GPU_ATOL)
    times = cuda_timing.sample_ms(lambda: compiled.run({"x": torch.from_numpy(feeds["x"]).cuda()}), repeat=5)
    assert len(times) == 5 and all(t > 0 for t in times)


def test_gpu_backend_refuses_an_op_it_cannot_take(gpu_backend):
    from collage.graph.ir import Graph

    model = _model([n("Relu", ["x"], ["r"], name="ok"),
                    n("StringNormalizer", ["s"], ["y"], name="strings")], [("x", F, [3, 4]), ("s", T.STRING, [2])],
                   [("r", F, [3, 4]), ("y", T.STRING, [2])])
    g = Graph.load(model)
    assert gpu_backend.supports_all(g)[1] is False
    with pytest.raises(CollageError, match="StringNormalizer"):
        gpu_backend.compile(model)


def test_tensorrt_second_compile_hits_the_engine_cache(monkeypatch, tmp_path):
    reason = unavailable_reason("tensorrt")
    if reason is not None:
        pytest.skip(f"backend tensorrt unavailable: {reason}")
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))
    backend = get_backend("tensorrt")
    model = SINGLE_OPS["conv_asym_pads"]
    first = backend.compile(model)
    assert engine_cache_path(first.key).is_file()
    assert timing_cache_path(backend.trt_version(), backend.gpu()).is_file()
    import collage.backends.tensorrt as trt_mod

    monkeypatch.setattr(trt_mod.TensorRTBackend, "_build", lambda self, m: pytest.fail("rebuilt a cached engine"))
    second = backend.compile(model)
    assert second.key == first.key
