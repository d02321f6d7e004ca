"""Issue 15 (silently wrong #1): a graph output that is also a graph input (an identity graph, or a
model passing an input through). ONNX Runtime never writes such an output into a pre-bound buffer, so
``OrtCompiled`` returned uninitialised memory (2.55e+22). Every backend, and ONNX Runtime's saved,
linked and CUDA-binding variants, must return the input's values."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from collage.backends import get_backend, unavailable_reason


def _model(kind: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])
    if kind == "identity":  # no node at all: the output IS the input
        nodes, outs = [], [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])]
    else:  # a computed output and the input passed through
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
        outs = [helper.make_tensor_value_info("y", T.FLOAT, [2, 3, 4]),
                helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])]
    return helper.make_model(helper.make_graph(nodes, kind, [x], outs), opset_imports=[helper.make_opsetid("", 17)])


def _check(compiled, kind):
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((2, 3, 4)).astype(np.float32) + 10 * seed
        out = compiled.run({"x": x})
        np.testing.assert_array_equal(out["x"], x)
        if kind != "identity":
            np.testing.assert_array_equal(out["y"], np.maximum(x, 0))


def _backend(name):
    reason = unavailable_reason(name)
    if reason is not None:
        pytest.skip(f"{name}: {reason}")
    return get_backend(name)


@pytest.mark.parametrize("kind", ["identity", "passthrough"])
@pytest.mark.parametrize("name", ["onnxruntime", "openvino"])
def test_output_that_is_an_input(name, kind, tmp_path):
    backend = _backend(name)
    compiled = backend.compile(_model(kind))
    _check(compiled, kind)
    entry = compiled.save(tmp_path)
    _check(backend.load(tmp_path, entry), kind)


@pytest.mark.parametrize("kind", ["identity", "passthrough"])
def test_output_that_is_an_input_onnxruntime_cuda_binding(kind):
    """onnxruntime-cuda shares the binding scheme: its code, with buffers on the CPU."""
    from collage.backends.onnxruntime.cuda import OnnxRuntimeCudaBackend

    class CpuBuffers(OnnxRuntimeCudaBackend):
        ort_device = "cpu"

        def providers(self):
            return ["CPUExecutionProvider"]

    _check(CpuBuffers(strict=False).compile(_model(kind)), kind)


def test_output_that_is_an_input_onnxruntime_linked():
    backend = _backend("onnxruntime")
    first, second = backend.compile_linked([_model("passthrough"), _model("identity")])
    _check(first, "passthrough")
    _check(second, "identity")
