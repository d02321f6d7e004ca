"""Issue 15 (silently wrong #2): OpenVINO's CPU plugin computes float64 as float32 (and int64 as int32,
uint32/uint64 as signed, int8/uint8 arithmetic saturating). ONNX's own pytorch-operator double cases
came back off by 1e+199..1e+228 without an error. A backend computes a dtype exactly or refuses it in
``supports()``; these tests run ONNX's shipped cases and one-node probes through it."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from collage.errors import CollageError, UnsupportedError
from collage.graph.ir import Graph

DATA = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "pytorch-operator")
DOUBLE_CASES = ["test_operator_add_broadcast", "test_operator_add_size1_right_broadcast",
                "test_operator_add_size1_singleton_broadcast", "test_operator_addconstant"]


def _case(name):
    model = onnx.load(os.path.join(DATA, name, "model.onnx"))
    ds = os.path.join(DATA, name, "test_data_set_0")
    inputs = [numpy_helper.to_array(onnx.load_tensor(p)) for p in sorted(glob.glob(os.path.join(ds, "input_*.pb")))]
    outputs = [numpy_helper.to_array(onnx.load_tensor(p)) for p in sorted(glob.glob(os.path.join(ds, "output_*.pb")))]
    return model, inputs, outputs


@pytest.mark.parametrize("name", DOUBLE_CASES)
def test_onnx_double_cases_are_refused_never_wrong(openvino, name):
    model, inputs, outputs = _case(name)
    assert any(a.dtype == np.float64 for a in inputs + outputs)
    graph = Graph(model)
    reasons = openvino.support_reasons(graph, range(len(graph)))
    assert all(r is not None and "float64" in r for r in reasons.values()), reasons
    with pytest.raises(UnsupportedError, match=r"cannot take op (Add|Constant) .*float64"):
        compiled = openvino.compile(model)
        # before the fix this ran and returned values off by 1e+199 and more:
        feeds = dict(zip([i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}],
                         inputs))
        got = compiled.run(feeds)
        np.testing.assert_allclose(got[model.graph.output[0].name], outputs[0], rtol=1e-7)


def _one(op, dtype, *, to=None):
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    if op == "Cast":
        node, ins, out = helper.make_node("Cast", ["a"], ["y"], name="n", to=to), ["a"], to
    else:
        node, ins, out = helper.make_node(op, ["a", "b"], ["y"], name="n"), ["a", "b"], et
    g = helper.make_graph([node], "probe", [helper.make_tensor_value_info(n, et, [4]) for n in ins],
                          [helper.make_tensor_value_info("y", out, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


EXTREMES = {np.float64: [1.0, 1e-300, 1e300, 1 / 3], np.int64: [1, 2**31 - 1, 2**31, 2**40],
            np.uint64: [1, 2**31, 2**32, 2**40], np.uint32: [1, 2**31, 2**32 - 1, 7], np.int8: [100, 127, -128, 5],
            np.uint8: [200, 255, 1, 0], np.float32: [1.0, 1e-30, 1e30, 1 / 3], np.int32: [1, 2**30, -2**31, 5],
            np.float16: [1.0, 0.5, 100.0, 1 / 3], np.int16: [1, 32767, -32768, 5], np.uint16: [1, 65535, 7, 0]}


@pytest.mark.parametrize("dtype", list(EXTREMES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["Add", "Mul", "Max", "Cast"])
def test_every_dtype_exact_or_refused(openvino, dtype, op):
    """One-node probes at the edges of each type: the answer equals numpy's, or the node is refused."""
    a = np.array(EXTREMES[dtype], dtype=dtype)
    b = a[::-1].copy()
    model = _one(op, dtype, to=T.FLOAT)
    try:
        compiled = openvino.compile(model)
    except UnsupportedError as e:
        assert np.dtype(dtype).name in str(e) and "node 'n'" in str(e)
        return
    try:
        got = compiled.run({"a": a, "b": b} if op != "Cast" else {"a": a})["y"]
    except CollageError as e:  # int64 values past int32 are refused when they enter the partition
        assert dtype == np.int64 and "int64 input 'a' holds values past" in str(e)
        got = compiled.run({"a": a % 1000, "b": b % 1000} if op != "Cast" else {"a": a % 1000})["y"]
        a, b = a % 1000, b % 1000
    with np.errstate(all="ignore"):
        want = {"Add": np.add, "Mul": np.multiply, "Max": np.maximum,
                "Cast": lambda x, _: x.astype(np.float32)}[op](a, b)
    if np.dtype(dtype).kind == "f" and op != "Cast":
        np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == np.float16 else 1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_int64_indices_and_shapes_still_run(openvino):
    """int64 where it holds indices or shapes (bounded by tensor sizes) stays on OpenVINO."""
    x = helper.make_tensor_value_info("x", T.FLOAT, [5, 3])
    ids = helper.make_tensor_value_info("ids", T.INT64, [2])
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    nodes = [helper.make_node("Gather", ["x", "ids"], ["g"], name="gather"),
             helper.make_node("Reshape", ["g", "shape"], ["y"], name="reshape")]
    model = helper.make_model(helper.make_graph(nodes, "gr", [x, ids],
                                                [helper.make_tensor_value_info("y", T.FLOAT, [3, 2])],
                                                [shape]), opset_imports=[helper.make_opsetid("", 17)])
    xv = np.arange(15, dtype=np.float32).reshape(5, 3)
    got = openvino.compile(model).run({"x": xv, "ids": np.array([4, 1], np.int64)})["y"]
    np.testing.assert_array_equal(got, xv[[4, 1]].reshape(3, 2))


def test_int64_mask_cast_runs_in_range_and_refuses_past_int32(openvino):
    """BERT's attention mask (int64 0/1) -> Cast stays on OpenVINO; a value past int32 is refused at run time."""
    model = _one("Cast", np.int64, to=T.FLOAT)
    compiled = openvino.compile(model)
    mask = np.array([1, 1, 0, 2**31 - 1], np.int64)
    np.testing.assert_array_equal(compiled.run({"a": mask})["y"], mask.astype(np.float32))
    mask[0] = 2**31  # the same array object, changed in place: still checked
    with pytest.raises(CollageError, match="int64 input 'a' holds values past"):
        compiled.run({"a": mask})
