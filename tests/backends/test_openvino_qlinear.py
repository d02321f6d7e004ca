"""OpenVINO and ONNX Runtime's ``com.microsoft`` QLinear ops (what ``quantize_static(...,
quant_format=QuantFormat.QOperator)`` writes between its QLinearConv / QLinearMatMul nodes).

Measured one node at a time against ONNX Runtime, which defines the ops: an output past its int8 / uint8 range
wraps around on the CPU plugin where ONNX Runtime saturates (QLinearAdd of two large values came back -96 where
ONNX Runtime gives 127; QLinearAdd, Mul, LeakyRelu, Sigmoid, Concat and AveragePool off by up to 255). Inside the
calibrated range the values agree, so a tune's numerics check on one input can pass and a deployed input past
the range come back wrong: the plugin refuses these ops (``collage.backends.openvino.inexact``). The standard
QLinearConv and QLinearMatMul saturate on both and are still taken.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx import numpy_helper as nh

from collage.errors import UnsupportedError
from collage.graph.ir import Graph

MS = "com.microsoft"


def _scales(dtype: np.dtype, out_scale: float) -> list[onnx.TensorProto]:
    return [nh.from_array(np.array(0.05, np.float32), "as"), nh.from_array(np.array(0, dtype), "az"),
            nh.from_array(np.array(0.05, np.float32), "bs"), nh.from_array(np.array(0, dtype), "bz"),
            nh.from_array(np.array(out_scale, np.float32), "ys"), nh.from_array(np.array(0, dtype), "yz")]


def _model(node: onnx.NodeProto, inputs: list[str], shape: list[int], out_shape: list[int], dtype: np.dtype,
           extra: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([node], "one", [helper.make_tensor_value_info(n, et, shape) for n in inputs],
                          [helper.make_tensor_value_info("y", et, out_shape)], _scales(dtype, 0.01) + list(extra))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)])


CONTRIB = {
    "QLinearAdd": (["a", "as", "az", "b", "bs", "bz", "ys", "yz"], {}),
    "QLinearMul": (["a", "as", "az", "b", "bs", "bz", "ys", "yz"], {}),
    "QLinearLeakyRelu": (["a", "as", "az", "ys", "yz"], {"alpha": 0.1}),
    "QLinearAveragePool": (["a", "as", "az", "ys", "yz"], {"kernel_shape": [1, 1]}),
}


def _feeds(model: onnx.ModelProto, dtype: np.dtype) -> dict[str, np.ndarray]:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    return {i.name: rng.integers(info.min, info.max + 1, [d.dim_value for d in i.type.tensor_type.shape.dim],
                                 dtype=np.int64).astype(dtype) for i in model.graph.input}


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("op", sorted(CONTRIB))
def test_a_contrib_qlinear_op_is_refused_never_wrapped(openvino, op, dtype) -> None:
    names, attrs = CONTRIB[op]
    node = helper.make_node(op, names, ["y"], domain=MS, name=op, **attrs)
    model = _model(node, [n for n in ("a", "b") if n in names], [1, 4, 4, 4], [1, 4, 4, 4], dtype)
    graph = Graph(model)
    reason = openvino.support_reasons(graph, range(len(graph)))[0]
    assert reason is not None and "wraps around" in reason and op in reason, reason
    with pytest.raises(UnsupportedError, match="wraps around"):
        openvino.compile(model)


def test_the_plugin_wraps_what_onnx_runtime_saturates(openvino) -> None:
    """The refusal's reason, measured: the plugin run without collage's check (ov.Core on the model) returns
    wrapped values on a QLinearAdd whose sum passes int8."""
    import openvino as ov

    node = helper.make_node("QLinearAdd", CONTRIB["QLinearAdd"][0], ["y"], domain=MS)
    model = _model(node, ["a", "b"], [1, 64], [1, 64], np.int8)
    feeds = _feeds(model, np.int8)
    want = _ort(model, feeds)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
    got = compiled(feeds)[compiled.outputs[0]]
    assert np.abs(want.astype(int) - got.astype(int)).max() > 100      # wrapped: 127 came back negative


def test_qlinear_conv_and_matmul_saturate_on_both_and_are_taken(openvino) -> None:
    w = nh.from_array(np.random.default_rng(1).integers(-100, 100, (64, 16)).astype(np.int8), "w")
    ws, wz = nh.from_array(np.array(0.02, np.float32), "ws"), nh.from_array(np.array(0, np.int8), "wz")
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "w", "ws", "wz", "ys", "yz"], ["y"])
    model = _model(node, ["a"], [1, 64], [1, 16], np.int8, [w, ws, wz])
    feeds = _feeds(model, np.int8)
    want = _ort(model, feeds)
    assert (np.abs(want) == 127).any()                                  # saturated
    np.testing.assert_array_equal(openvino.compile(model).run(feeds)["y"], want)


def test_a_model_quantized_by_onnx_runtime_in_qoperator_form_tunes(openvino, tmp_path) -> None:
    """``quantize_static`` (QOperator) of zoo:tiny-resnet: QLinearConv, com.microsoft QLinearAveragePool, QGemm,
    QLinearSoftmax. Before, OpenVINO took the QLinearAveragePool and the tune ended in "plan output(s)
    ['softmax'] differ from the ONNX Runtime reference ... tensor 'flatten_quantized' max abs err 240"."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    import collage
    from collage import zoo
    from collage.search.candidates import Limits
    from tests.graph.test_contrib_ops import quiet_logging

    src = zoo.model_path("tiny-resnet")
    inp = onnx.load(src).graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{inp.name: np.random.default_rng(k).random(shape).astype(np.float32)} for k in range(4)])

        def get_next(self):
            return next(self.it, None)

    quantized = tmp_path / "q.onnx"
    with quiet_logging():
        quantize_static(str(src), str(quantized), Calibration(), quant_format=QuantFormat.QOperator)
    assert "QLinearAveragePool" in {n.op_type for n in onnx.load(quantized).graph.node if n.domain == MS}
    result = collage.tune(str(quantized), tmp_path / "out", backends=["onnxruntime", "openvino"],
                          db=str(tmp_path / "c.sqlite"), limits=Limits(max_nodes=1), progress=False)
    assert result.report["numerics"]["ok"]
    feeds = {inp.name: 3 * np.random.default_rng(9).random(shape).astype(np.float32)}  # past the calibrated range
    art = collage.load(tmp_path / "out")
    try:
        got = art.run(feeds)
    finally:
        art.close()
    want = _ort(onnx.load(quantized), feeds)
    np.testing.assert_allclose(next(iter(got.values())), want, atol=1e-3)
