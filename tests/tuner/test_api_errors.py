"""``collage.tune`` given arguments of the wrong kind or out of range (issue 37): a typed error before any work,
a CollageError that is also the built-in type a Python caller expects (OptionTypeError: a TypeError,
OptionError: a ValueError), naming the keyword; and the command line's texts for ``shapes`` and
``backend_options`` accepted."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import collage
from collage.errors import CollageError, ModelError, OptionError, OptionTypeError
from collage.graph.ir import Graph
from collage.search.candidates import Limits
from collage.tuner.options import TuneOptions
from tests.helpers import need_backends


def _relu(dims=("n", 4)):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


#: (id, tune's keywords beyond the model and out_dir, the error class, needles in its message)
CASES = [
    ("model-int", {"model": 123}, OptionTypeError, ["model", "int 123"]),
    ("out-dir-int", {"out_dir": 5}, OptionTypeError, ["out_dir", "int 5"]),
    ("budget-garbage", {"budget": "abc"}, OptionError, ["budget", "'abc'"]),
    ("budget-bool", {"budget": True}, OptionTypeError, ["budget", "bool"]),
    ("budget-s-text", {"budget_s": "5"}, OptionTypeError, ["budget_s", "str '5'"]),
    ("budget-and-budget-s", {"budget": "5s", "budget_s": 5}, OptionTypeError, ["not both"]),
    ("tvm-budget-garbage", {"tvm_budget": "x", "backends": ["onnxruntime", "tvm"]}, OptionError, ["tvm_budget", "'x'"]),
    ("shapes-bad-text", {"shapes": "x=a,b"}, OptionError, ["shapes", "x=a,b", "integers"]),
    ("shapes-int", {"shapes": 5}, OptionTypeError, ["shapes", "int 5"]),
    ("shapes-dims-text", {"shapes": {"x": "2,4"}}, OptionTypeError, ["shapes['x']", "'2,4'"]),
    ("shapes-dim-negative", {"shapes": {"x": (2, -4)}}, OptionError, ["shapes['x']", "negative"]),
    ("shapes-dim-past-int64", {"shapes": {"x": (10**20, 4)}}, OptionError, ["'x'", "int64"]),
    ("backend-options-bad-text", {"backend_options": ["threads=2"]}, OptionError, ["backend_options", "threads=2"]),
    ("backend-options-int", {"backend_options": 3}, OptionTypeError, ["backend_options", "int 3"]),
    ("backend-options-inner", {"backend_options": {"onnxruntime": 2}}, OptionTypeError,
     ["backend_options['onnxruntime']", "int 2"]),
    ("backends-int", {"backends": 5}, OptionTypeError, ["backends", "int 5"]),
    ("backends-not-names", {"backends": [1]}, OptionTypeError, ["backends", "[1]"]),
    ("target-int", {"target": 5}, OptionTypeError, ["target", "int 5"]),
    ("target-unknown", {"target": "gpu"}, OptionError, ["target", "'gpu'", "cpu, cuda"]),
    ("refine-trials-text", {"refine_trials": "3"}, OptionTypeError, ["refine_trials", "str '3'"]),
    ("tolerance-list", {"tolerance": [1]}, OptionTypeError, ["tolerance", "list"]),
    ("seed-text", {"seed": "a"}, OptionTypeError, ["seed", "str 'a'"]),
    ("limits-int", {"limits": 5}, OptionTypeError, ["limits", "int 5"]),
    ("limits-max-nodes-zero", {"limits": Limits(max_nodes=0)}, OptionError, ["max_nodes", "0"]),
    ("archive-text", {"archive": "no"}, OptionTypeError, ["archive", "str 'no'"]),
    ("progress-none", {"progress": None}, OptionTypeError, ["progress", "None"]),
    ("db-int", {"db": 5}, OptionTypeError, ["db", "int 5"]),
    ("accuracy-int", {"accuracy": 5}, OptionTypeError, ["accuracy", "int 5"]),
    ("calibration-int", {"calibration": 5}, OptionTypeError, ["calibration", "int 5"]),
    ("cluster-int", {"cluster": 5}, OptionTypeError, ["cluster", "int 5"]),
    ("measure-order-int", {"measure_order": 3}, OptionTypeError, ["measure_order", "int 3"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_keyword_is_a_typed_error_before_any_work(tmp_path, case):
    _, keywords, error, needles = case
    args = {"model": _relu(), "out_dir": tmp_path / "out", "backends": ["onnxruntime"], "progress": False,
            "db": tmp_path / "c.sqlite", **keywords}
    with pytest.raises(error) as e:
        collage.tune(args.pop("model"), args.pop("out_dir"), **args)
    assert isinstance(e.value, CollageError)
    assert isinstance(e.value, TypeError if error is OptionTypeError else ValueError)
    assert isinstance(e.value, OptionError)  # one class to catch every bad option
    message = str(e.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    assert not (tmp_path / "out").exists() and not (tmp_path / "c.sqlite").exists()


def test_the_command_line_texts_are_taken_for_shapes_and_backend_options():
    o = TuneOptions.build(backends=["onnxruntime"], shapes="x=2,4", backend_options=["onnxruntime.threads=1"])
    assert o.shapes == {"x": (2, 4)} and o.backend_options == {"onnxruntime": {"threads": 1}}
    o = TuneOptions.build(backends=["onnxruntime"], shapes=["x=2,4", "y=3"], backend_options="onnxruntime.threads=2")
    assert o.shapes == {"x": (2, 4), "y": (3,)} and o.backend_options == {"onnxruntime": {"threads": 2}}
    o = TuneOptions.build(backends=["onnxruntime"], shapes={"x": np.array([2, 4])})
    assert o.shapes == {"x": (2, 4)}


def test_a_tune_with_the_text_forms(tmp_path):
    need_backends("onnxruntime")
    res = collage.tune(_relu(), tmp_path / "out", backends=["onnxruntime"], shapes="x=2,4",
                       backend_options=["onnxruntime.opt_level=basic"], db=tmp_path / "c.sqlite", progress=False)
    art = collage.load(res.out_dir)
    x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)
    np.testing.assert_array_equal(art.run({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("dims", [(10**20, 4), (2**32, 2**32), ("2", 4), 7])
def test_graph_load_refuses_a_shape_that_is_no_shape(dims):
    with pytest.raises(ModelError, match="'x'|not a sequence"):
        Graph(_relu(), shapes={"x": dims})
