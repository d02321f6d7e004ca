"""Bad inputs, third round (issue 37), given to the real ``collage`` command: each ends with exit code 2 and one
line on stderr naming the node, tensor or input, before anything is measured (the helpers and the rules are
tests/commands/test_bad_inputs.py's).

Covers what used to end in a traceback, a hang or a misleading message: names that are not valid UTF-8, a
``--shape`` dimension past int64 or a total past int64 or this machine's memory, a graph without outputs, an
initializer whose raw data is shorter than its dims, and ``--max-nodes`` far past the graph's node count (it
used to allocate a list that long). A sparse initializer is made dense at load, and the model tunes.
"""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.commands.test_bad_inputs import _ROOT, _assert_one_line, _cli, _save

X14, Y14 = helper.make_tensor_value_info("x", T.FLOAT, [1, 4]), helper.make_tensor_value_info("y", T.FLOAT, [1, 4])


def _rename(src: Path, dst: Path, old: bytes, new: bytes) -> None:
    """``src`` saved as ``dst`` with every name ``old`` (a unique marker) written as the raw bytes ``new``: the
    onnx package refuses to set a name that is not UTF-8, so the bytes are edited (same length)."""
    data = src.read_bytes()
    assert len(old) == len(new) and data.count(old) >= 1
    dst.write_bytes(data.replace(old, new))


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad3")
    relus = [helper.make_node("Relu", ["x"], ["QQ"], name="r"), helper.make_node("Relu", ["QQ"], ["y"], name="r2")]
    _save(d / "named.onnx", relus, [X14], [Y14])
    _rename(d / "named.onnx", d / "utf8-output.onnx", b"QQ", b"\xff\xfe")  # r's output, r2's input
    _save(d / "named_in.onnx", [helper.make_node("Relu", ["QX"], ["y"], name="r")],
          [helper.make_tensor_value_info("QX", T.FLOAT, [1, 4])], [Y14])
    _rename(d / "named_in.onnx", d / "utf8-input.onnx", b"QX", b"\xc3\x28")  # the graph input and r's input
    _save(d / "sym.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")],
          [helper.make_tensor_value_info("x", T.FLOAT, ["n", "m"])],
          [helper.make_tensor_value_info("y", T.FLOAT, ["n", "m"])])
    _save(d / "static.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [X14], [Y14])
    _save(d / "nooutputs.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [X14], [])
    # 10,000 weights: past the 4,096 the checker's skeleton keeps, so only the load's own check can see the cut
    w = numpy_helper.from_array(np.ones((100, 100), np.float32), "w")
    w.raw_data = w.raw_data[:8000]
    _save(d / "shortraw.onnx", [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
          [helper.make_tensor_value_info("x", T.FLOAT, [100, 100])],
          [helper.make_tensor_value_info("y", T.FLOAT, [100, 100])], inits=[w])
    _save(d / "scalar.onnx", [helper.make_node("Relu", ["s"], ["y"], name="r")],
          [helper.make_tensor_value_info("s", T.FLOAT, [])], [helper.make_tensor_value_info("y", T.FLOAT, [])])
    return d


#: (id, argv, needles in the error line); paths relative to the scene folder
CASES = [
    ("utf8-node-output", ["tune", "utf8-output.onnx", "-o", "o1", "--backends", "onnxruntime"],
     ["utf8-output.onnx", "node #0 (Relu 'r')", "output 0", "not valid UTF-8", "rename it"]),
    ("utf8-graph-input", ["inspect", "utf8-input.onnx"], ["utf8-input.onnx", "node #0 (Relu 'r')", "not valid UTF-8"]),
    ("shape-past-int64", ["tune", "sym.onnx", "--shape", "x=99999999999999999999,4", "-o", "o1"],
     ["x=99999999999999999999,4", "'x'", "int64"]),
    ("shape-elements-past-int64", ["tune", "sym.onnx", "--shape", "x=4294967296,4294967296", "-o", "o1",
                                   "--backends", "onnxruntime"], ["x=4294967296,4294967296", "'x'", "int64"]),
    ("shape-past-memory",
     ["tune", "sym.onnx", "--shape", "x=100000000,1000000", "-o", "o1", "--backends", "onnxruntime"],
     ["'x'", "GiB", "memory", "--shape x="]),
    ("no-outputs", ["tune", "nooutputs.onnx", "-o", "o1", "--backends", "onnxruntime"],
     ["nooutputs.onnx", "no outputs"]),
    ("initializer-short-raw-data", ["tune", "shortraw.onnx", "-o", "o1", "--backends", "onnxruntime"],
     ["shortraw.onnx", "'w'", "[100, 100]", "40000 bytes", "8000 bytes"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_one_line_exit_2(scene, case):
    _, argv, needles = case
    proc = _cli(scene, argv)
    _assert_one_line(proc, argv[0], needles)
    assert not (scene / "o1").exists()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def test_max_nodes_far_past_the_graph_allocates_nothing(scene, tmp_path):
    """--max-nodes 1e20 on a one-node graph is --max-nodes 1: the tune ends within 3 GB of address space (the
    enumeration once built a list that long: 1.5 GB in 12 s, and on)."""
    import os

    proc = subprocess.run([sys.executable, "-m", "collage.cli", "tune", "static.onnx", "-o", str(tmp_path / "out"),
                           "--backends", "onnxruntime", "--max-nodes", "99999999999999999999",
                           "--db", str(tmp_path / "c.sqlite")], cwd=scene, capture_output=True, text=True,
                          timeout=120, preexec_fn=_limit_memory,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([_ROOT, os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out").is_dir()


def test_scalar_input_is_tuned_or_refused_in_one_line(scene):
    """A 0-d input: tuned (once scalars are measured) or refused, after its measurement failed (whose warning
    comes first), by one error line that names the node and the failure, not "no backend supports it"."""
    proc = _cli(scene, ["tune", "scalar.onnx", "-o", "o-scalar", "--backends", "onnxruntime"])
    if proc.returncode == 0:
        return
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("collage tune: error: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr
    for needle in ("#0 Relu 'r'", "every measurement", "onnxruntime", "'s'"):
        assert needle in errors[0], errors[0]
    assert "no backend supports it" not in errors[0]


def test_sparse_initializer_is_made_dense_and_tunes(tmp_path):
    """A sparse initializer (values 2 and 5 at [0,1] and [0,3]) is made dense at load: the model tunes and its
    artifact adds the dense tensor."""
    import collage

    vals = numpy_helper.from_array(np.array([2.0, 5.0], np.float32), "b")
    idx = numpy_helper.from_array(np.array([[0, 1], [0, 3]], np.int64), "b_idx")
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "sparse", [X14], [Y14],
                          sparse_initializer=[helper.make_sparse_tensor(vals, idx, [1, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "sparse.onnx"))
    proc = _cli(tmp_path, ["tune", "sparse.onnx", "-o", "out", "--backends", "onnxruntime",
                           "--db", "c.sqlite"])
    assert proc.returncode == 0, proc.stderr
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    y = collage.load(tmp_path / "out").run({"x": x})["y"]
    np.testing.assert_array_equal(y, x + np.array([[0, 2, 0, 5]], np.float32))
