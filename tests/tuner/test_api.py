"""The Python API as a notebook user meets it: ``collage.tune`` any number of times in one process, typed
errors, a result with the report's partition DataFrame and JSON."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

import collage
from collage.errors import BackendUnavailable, CollageError
from tests.helpers import need_backends


def _mlp():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("MatMul", ["r", "w"], ["y"])], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_tune_twice_in_one_process(tmp_path):
    need_backends("onnxruntime")
    results = []
    for k in range(2):  # the README example run twice in a notebook
        assert callable(collage.tune)
        results.append(collage.tune(_mlp(), tmp_path / f"out{k}", backends=["onnxruntime"],
                                    db=tmp_path / "costs.sqlite", progress=False))
    for res in results:
        df = res.partitions
        assert isinstance(df, pd.DataFrame) and list(df["backend"]) == ["onnxruntime"] and df["ops"].sum() == 3
        data = json.loads(res.to_json())
        assert data["artifact"] == str(res.out_dir) and data["partitions"][0]["nodes"] == 3
        assert data["coverage"]["distinct"] >= 1
    art = collage.load(results[1].out_dir)
    x = np.ones((4, 8), np.float32)
    assert art.run({"x": x})["y"].shape == (4, 8)


def test_an_unavailable_backend_raises_backend_unavailable(tmp_path):
    from collage.backends import get_backend
    name = next((n for n in ("tensorrt", "onnxruntime-cuda", "tvm", "openvino") if get_backend(n).available()), None)
    if name is None:
        pytest.skip("every backend is available here")
    with pytest.raises(BackendUnavailable, match=name) as e:
        collage.tune(_mlp(), tmp_path / "out", backends=["onnxruntime", name], db=tmp_path / "c.sqlite", progress=False)
    assert isinstance(e.value, CollageError)
