"""Ops ONNX's shape inference does not know (ONNX Runtime's ``com.microsoft`` ops) are sized by ONNX Runtime.

The model is what a user gets from ONNX Runtime's own quantizer: ``quantize_dynamic`` turns an LSTM into
``com.microsoft::DynamicQuantizeLSTM``, followed here, as in a PyTorch export (ddddocr's OCR model, 1.6.1), by a
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` on its output and a graph output declared ``[1, seqlen]`` that
computes ``[6, 16]``. Before ``collage.graph.contrib`` it was refused at load ("tensor 'Y' (output of node
'lstm_quant') has no static shape after inference"). An op whose output size follows the values it reads
(``com.microsoft::Unique``) stays refused, in one line naming the node and the op.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

import collage
from collage.errors import ModelError
from collage.graph.ir import Graph
from collage.search.candidates import Limits

SEQ, INPUT, HIDDEN = 6, 8, 16


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """ONNX Runtime's quantizer and optimizer log advice ("pre-process the model first") on the root logger: quiet
    for their call only (a root logger left at ERROR hid every later test's warnings from caplog)."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def _quantized_lstm(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=HIDDEN, name="lstm"),
             helper.make_node("Shape", ["Y"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i0"], ["s0"], axis=0, name="first"),
             helper.make_node("Unsqueeze", ["s0", "ax"], ["u0"], name="unsqueeze"),
             helper.make_node("Concat", ["u0", "m1"], ["t"], axis=0, name="target"),
             helper.make_node("Reshape", ["Y", "t"], ["y"], name="reshape")]
    inits = [nh.from_array(rng.normal(0, .3, (1, 4 * HIDDEN, INPUT)).astype(np.float32), "W"),
             nh.from_array(rng.normal(0, .3, (1, 4 * HIDDEN, HIDDEN)).astype(np.float32), "R"),
             nh.from_array(np.array(0, np.int64), "i0"), nh.from_array(np.array([0], np.int64), "ax"),
             nh.from_array(np.array([-1], np.int64), "m1")]
    g = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", T.FLOAT, ["seq", 1, INPUT])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, "seqlen"])], inits)
    fp32, int8 = tmp_path / "lstm.onnx", tmp_path / "lstm-int8.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), fp32)
    from onnxruntime.quantization import quantize_dynamic

    with quiet_logging():
        quantize_dynamic(fp32, int8)
    assert [n.op_type for n in onnx.load(int8).graph.node if n.domain == "com.microsoft"] == ["DynamicQuantizeLSTM"]
    return int8


def test_a_dynamically_quantized_lstm_loads_with_every_tensor_sized(tmp_path) -> None:
    g = Graph.load(_quantized_lstm(tmp_path), shapes={"x": (SEQ, 1, INPUT)})
    lstm = next(i for i in range(len(g)) if g.op_type(i) == "DynamicQuantizeLSTM")
    assert g.tensor(g.op(lstm).output[0]).shape == (SEQ, 1, 1, HIDDEN)
    assert g.tensor("y").shape == (SEQ, HIDDEN)               # computed, not the declared [1, seqlen]
    assert "Shape" not in {g.op_type(i) for i in range(len(g))}  # its size folded once ONNX Runtime gave it


def test_a_dynamically_quantized_lstm_tunes_and_runs_as_onnx_runtime_does(tmp_path) -> None:
    model = _quantized_lstm(tmp_path)
    result = collage.tune(str(model), tmp_path / "out", shapes={"x": (SEQ, 1, INPUT)},
                          backends=["onnxruntime", "openvino"], db=str(tmp_path / "costs.sqlite"),
                          limits=Limits(max_nodes=1), progress=False)
    x = np.random.default_rng(1).normal(size=(SEQ, 1, INPUT)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the declared [1, seqlen] output is the model's flaw, warned of on every run
    want = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    art = collage.load(tmp_path / "out")
    try:
        got = art.run({"x": x})["y"]
    finally:
        art.close()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert result.report["load"]["nodes_after"] < result.report["load"]["nodes_before"]  # the Shape chain folded

def test_a_contrib_op_writing_a_graph_output_declared_with_symbolic_sizes_loads() -> None:
    """ONNX Runtime's 4-bit quantizer's form: ``MatMulNBits`` writes the graph output ``[1, seq, 64]``. Its size,
    found by ONNX Runtime, went into the value infos while the graph output (its symbolic size cleared) stayed
    unsized, so the load asked ONNX Runtime again forever (``collage tune`` printed nothing for 300 s)."""
    k, n, block = 32, 64, 32
    g = helper.make_graph([helper.make_node("MatMulNBits", ["x", "B", "scales"], ["y"], domain="com.microsoft",
                                            K=k, N=n, bits=4, block_size=block, name="mm_q4")], "nbits",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, "seq", k])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, "seq", n])],
                          [nh.from_array(np.full((n, k // block, block // 2), 0x88, np.uint8), "B"),
                           nh.from_array(np.ones(n * (k // block), np.float32), "scales")])
    m = helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                           helper.make_opsetid("com.microsoft", 1)])
    loaded: list[Graph] = []
    worker = threading.Thread(target=lambda: loaded.append(Graph.load(m, shapes={"x": (1, 5, k)})), daemon=True)
    worker.start()
    worker.join(timeout=60)  # a load that never ends fails here instead of hanging the suite
    assert loaded, "Graph.load did not return within 60 s"
    assert loaded[0].tensor("y").shape == (1, 5, n)


def test_a_contrib_op_whose_size_follows_the_values_it_reads_is_refused(tmp_path) -> None:
    g = helper.make_graph([helper.make_node("Unique", ["x"], ["u", "i", "c"], domain="com.microsoft", name="uniq"),
                           helper.make_node("Relu", ["u"], ["y"], name="relu")], "unique",
                          [helper.make_tensor_value_info("x", T.FLOAT, [5])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(ModelError) as e:
        Graph.load(m)
    assert "'uniq'" in str(e.value) and "ONNX does not know com.microsoft op Unique" in str(e.value), e.value
    assert "\n" not in str(e.value)


def test_quantized_ops_and_recurrences_count_the_flops_of_their_float_form(tmp_path) -> None:
    """ConvInteger, MatMulInteger and DynamicQuantizeLSTM (quantize_dynamic of a float model) have the float
    model's multiply-accumulates; an LSTM counts its steps' products (it counted one FLOP an output element: the
    int8 ddddocr OCR model read 0.01 GFLOPs, its float twin 0.97, and the budget's least was estimated from it)."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["img", "K"], ["c"], name="conv"),
             helper.make_node("Reshape", ["c", "flat"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "M"], ["m"], name="matmul"),
             helper.make_node("Unsqueeze", ["m", "ax"], ["seq"], name="as_sequence"),
             helper.make_node("LSTM", ["seq", "W", "R"], ["Y"], hidden_size=HIDDEN, name="lstm")]
    inits = [nh.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "K"),
             nh.from_array(np.array([1, -1], np.int64), "flat"),
             nh.from_array(rng.normal(size=(144, INPUT)).astype(np.float32), "M"),
             nh.from_array(np.array([0], np.int64), "ax"),
             nh.from_array(rng.normal(size=(1, 4 * HIDDEN, INPUT)).astype(np.float32), "W"),
             nh.from_array(rng.normal(size=(1, 4 * HIDDEN, HIDDEN)).astype(np.float32), "R")]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("img", T.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("Y", T.FLOAT, None)], inits)
    fp32, int8 = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), fp32)
    from onnxruntime.quantization import quantize_dynamic

    with quiet_logging():
        quantize_dynamic(fp32, int8)
    from collage.graph.stats import inspect_graph

    f, q = inspect_graph(Graph.load(fp32)), inspect_graph(Graph.load(int8))
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"} <= set(q.ops)
    conv, matmul, lstm = 2 * 4 * 36 * 27, 2 * 1 * INPUT * 144, 2 * 1 * 1 * 4 * HIDDEN * (INPUT + HIDDEN)
    assert f.mac_flops == q.mac_flops == conv + matmul + lstm, (f.op_flops, q.op_flops)


@pytest.mark.slow
def test_a_transformer_fused_by_onnx_runtimes_optimizer_tunes(tmp_path) -> None:
    """ONNX Runtime's transformer optimizer (a usual step before deploying a BERT) writes com.microsoft
    SkipLayerNormalization and Gelu; the model was refused at load ("tensor 'encoder.layer.0.attention.output.
    LayerNorm' (output of node 'SkipLayerNorm_AddBias_0') has no static shape after inference")."""
    from onnxruntime.transformers import optimizer

    from collage import zoo

    fused = tmp_path / "bert-fused.onnx"
    with quiet_logging():  # "producer not matched"
        optimizer.optimize_model(str(zoo.model_path("tiny-bert-masked")), model_type="bert", num_heads=0,
                                 hidden_size=0, opt_level=1).save_model_to_file(str(fused))
    assert {"SkipLayerNormalization", "Gelu"} <= {n.op_type for n in onnx.load(fused).graph.node
                                                  if n.domain == "com.microsoft"}
    collage.tune(str(fused), tmp_path / "out", backends=["onnxruntime", "openvino"], db=str(tmp_path / "c.sqlite"),
                 limits=Limits(max_nodes=1), progress=False)
    feeds = {"input_ids": np.random.default_rng(0).integers(0, 100, (1, 16)).astype(np.int64),
             "attention_mask": np.ones((1, 16), np.int64)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(str(fused), so, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, feeds)))
    art = collage.load(tmp_path / "out")
    try:
        got = art.run(feeds)
    finally:
        art.close()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, atol=1e-4, err_msg=name)
