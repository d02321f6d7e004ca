"""Weight-only quantized MatMuls are computed in fp32 by the fp32 backends, as ONNX defines them.

Found with a model of the form LLM exporters write (int8 weights through ``DequantizeLinear`` into ``MatMul``; and
ONNX Runtime's own ``MatMulNBits`` 4-bit quantizer's output): from level ``extended`` ONNX Runtime fuses
DequantizeLinear + MatMul into ``MatMulNBits`` at accuracy level 4, quantizing the activations to int8 on the fly
(0.28 off on outputs up to 49, where the unfused graph is within 2e-5 of float64), and OpenVINO's CPU plugin in f32
quantizes the activations of such MatMuls to int8 in groups of 32 (``DYNAMIC_QUANTIZATION_GROUP_SIZE``: 0.024 off
ONNX Runtime on a 4-bit MLP). ONNX Runtime is also the numerics reference, so its error passed every check: a tune
of the int8-weight model shipped it. The fp32 backends now ask for fp32 compute
(``session.qdq_matmulnbits_accuracy_level`` 1; ``DYNAMIC_QUANTIZATION_GROUP_SIZE`` 0).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

import collage
from collage.backends import get_backend, reference_backend
from collage.search.candidates import Limits

D, ROWS = 256, 64


def _int8_weights_model() -> tuple[onnx.ModelProto, np.ndarray]:
    """x @ DequantizeLinear(W8, per-column scale): the model and its float64 weights."""
    rng = np.random.default_rng(0)
    w8 = rng.integers(-128, 128, (D, 4 * D)).astype(np.int8)
    scale = (rng.random(4 * D) * 0.01 + 0.001).astype(np.float32)
    g = helper.make_graph([helper.make_node("DequantizeLinear", ["W8", "scale"], ["W"], axis=1, name="dq"),
                           helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "int8_weights",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, ROWS, D])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, ROWS, 4 * D])],
                          [nh.from_array(w8, "W8"), nh.from_array(scale, "scale")])
    model = helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    return model, w8.astype(np.float64) * scale.astype(np.float64)


def _nbits_model() -> onnx.ModelProto:
    """x @ W as ``com.microsoft::MatMulNBits`` (4 bits, blocks of 32, the default zero point 8, accuracy level
    unset: fp32 compute), as ONNX Runtime's ``MatMulNBitsQuantizer`` writes it."""
    rng = np.random.default_rng(1)
    n, k, block = 4 * D, D, 32
    q = rng.integers(0, 16, (n, k // block, block)).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)  # two 4-bit values a byte, low nibble first
    scales = (rng.random(n * (k // block)) * 0.02 + 0.005).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMulNBits", ["x", "B", "scales"], ["y"], domain="com.microsoft",
                                            K=k, N=n, bits=4, block_size=block, name="mm_q4")], "nbits",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, ROWS, D])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, ROWS, n])],
                          [nh.from_array(packed, "B"), nh.from_array(scales, "scales")])
    return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                              helper.make_opsetid("com.microsoft", 1)])


def _x() -> np.ndarray:
    return np.random.default_rng(2).standard_normal((1, ROWS, D)).astype(np.float32)


def test_onnx_runtime_and_the_reference_compute_int8_weights_in_fp32() -> None:
    model, w = _int8_weights_model()
    want = _x().astype(np.float64) @ w
    for backend in (reference_backend(), get_backend("onnxruntime", shared_pool=False, opt_level="all")):
        got = backend.compile(model).run({"x": _x()})["y"]
        assert np.abs(got - want).max() < 1e-4 * np.abs(want).max(), backend.version()


def test_openvino_fp32_computes_int8_weights_in_fp32(openvino) -> None:
    model, w = _int8_weights_model()
    want = _x().astype(np.float64) @ w
    got = openvino.compile(model).run({"x": _x()})["y"]
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_openvino_fp32_runs_matmulnbits_as_onnx_runtime_defines_it(openvino) -> None:
    model = _nbits_model()
    want = reference_backend().compile(model).run({"x": _x()})["y"]
    got = openvino.compile(model).run({"x": _x()})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("backends", [["onnxruntime"], ["openvino"]])
def test_a_tuned_int8_weight_model_runs_as_onnx_defines_it(tmp_path, backends) -> None:
    """The whole path: a tune's artifact (whichever plan) equals float64, not ONNX Runtime's int8 shortcut."""
    model, w = _int8_weights_model()
    path = tmp_path / "int8w.onnx"
    onnx.save(model, path)
    collage.tune(str(path), tmp_path / "out", backends=backends, db=str(tmp_path / "costs.sqlite"),
                 limits=Limits(max_nodes=2), progress=False)
    art = collage.load(tmp_path / "out")
    try:
        got = art.run({"x": _x()})["y"]
    finally:
        art.close()
    want = _x().astype(np.float64) @ w
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_an_untuned_size_of_a_multi_size_artifact_runs_int8_weights_in_fp32(tmp_path) -> None:
    """The multi-size artifact's whole-model fallback (an ONNX Runtime session of its own) computes in fp32 too."""
    model, w = _int8_weights_model()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "rows"
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_param = "rows"
    path = tmp_path / "int8w.onnx"
    onnx.save(model, path)
    collage.tune(str(path), tmp_path / "out", shapes=[{"x": (1, 16, D)}, {"x": (1, 32, D)}], backends=["onnxruntime"],
                 db=str(tmp_path / "costs.sqlite"), limits=Limits(max_nodes=2), progress=False)
    x = np.random.default_rng(3).standard_normal((1, 24, D)).astype(np.float32)
    art = collage.load(tmp_path / "out")
    try:
        got = art.run({"x": x})["y"]
    finally:
        art.close()
    want = x.astype(np.float64) @ w
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_onnx_runtime_dequantizes_weight_only_partitions_once_at_load(tmp_path) -> None:
    """A partition quantized in its weights only is saved as a plain fp32 MatMul (the weights dequantized once);
    one that quantizes activations (a QuantizeLinear) keeps ONNX Runtime's QDQ handling."""
    from collage.backends.onnxruntime.backend import weight_only_quantized

    model, _ = _int8_weights_model()
    assert weight_only_quantized(model)
    entry = get_backend("onnxruntime", shared_pool=False).compile(model).save(tmp_path)
    assert [n.op_type for n in onnx.load(tmp_path / entry["files"][0]).graph.node] == ["MatMul"]
    qdq = onnx.ModelProto()
    qdq.CopyFrom(model)
    g = qdq.graph
    g.node.insert(0, helper.make_node("QuantizeLinear", ["x", "xs"], ["xq"]))
    g.node.insert(1, helper.make_node("DequantizeLinear", ["xq", "xs"], ["xd"]))
    g.node[3].input[0] = "xd"
    g.initializer.append(nh.from_array(np.array(0.05, np.float32), "xs"))
    assert not weight_only_quantized(qdq)
