"""THE seeded-input rule (collage.seeded_inputs, collage.graph.inputs): one generator for zoo, tuner, worker,
runtime and tests."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from collage import zoo
from collage.errors import InputError
from collage.graph.inputs import index_bounds, input_specs, random_inputs
from collage.seeded_inputs import InputSpec, seeded_inputs


def _gather_model():
    table = numpy_helper.from_array(np.zeros((7, 3), np.float32), "table")
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]),
         helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "m"], ["y"])],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 5]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [3])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 5, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        initializer=[table])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_rule_on_a_model():
    m = _gather_model()
    assert index_bounds(m) == {"ids": 7}
    assert [(s.name, s.high) for s in input_specs(m)] == [("ids", 7), ("attention_mask", None), ("x", None),
                                                          ("flag", None)]
    for seed in range(5):
        f = random_inputs(m, seed)
        assert list(f) == ["ids", "attention_mask", "x", "flag"]
        assert f["ids"].dtype == np.int64 and 0 <= f["ids"].min() and f["ids"].max() < 7
        assert f["x"].dtype == np.float32 and f["x"].shape == (2, 5)
        assert f["flag"].dtype == np.bool_
        for row in f["attention_mask"]:  # a prefix of ones, at least half the row, then zeros
            ones = int(row.sum())
            assert ones >= 2 and (row[:ones] == 1).all() and (row[ones:] == 0).all()
        again = random_inputs(m, seed)
        assert all(np.array_equal(f[k], again[k]) for k in f)
    assert not np.array_equal(random_inputs(m, 0)["x"], random_inputs(m, 1)["x"])


def test_ints_without_a_range_use_int_high_and_strings_are_refused():
    spec = InputSpec("k", (1000,), np.dtype(np.int32))
    assert seeded_inputs([spec])["k"].max() == 3
    assert seeded_inputs([spec], int_high=9)["k"].max() == 8
    with pytest.raises(InputError, match="'s'"):
        seeded_inputs([InputSpec("s", (2,), np.dtype(object))])


def test_graph_and_model_and_artifact_draw_the_same_values(tmp_path):
    from collage.plan import Plan
    from collage.runtime.artifact import load
    from collage.tuner.export import export

    graph = zoo.load_graph("zoo:tiny-bert")
    assert [s.high for s in input_specs(graph)][0] is not None  # input_ids index the embedding table
    art = load(export(graph, Plan.single("onnxruntime", len(graph)), tmp_path / "a"))
    for seed in (0, 3):
        a, b, c = random_inputs(graph, seed), random_inputs(graph.model, seed), art.random_inputs(seed)
        assert list(a) == list(b) == list(c)
        for k in a:
            assert np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k]), k
        assert zoo.random_inputs(graph, seed=seed).keys() == a.keys()
