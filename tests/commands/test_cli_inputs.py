"""Bad models given to the CLI: each gives ONE line on stderr that names the problem, exit code 2,
no traceback. Most cases call ``collage.cli.main`` in-process; one runs the real command."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from collage import zoo
from collage.cli import main


def _inspect(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert "Traceback" not in err and lines[0].startswith("collage inspect: error: ")
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


def _save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _symbolic_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 5), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["tokens", "w"], ["y"]),
                               helper.make_node("Relu", ["y"], ["z"])],
                              "sym", [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 5])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_not_onnx(capsys, tmp_path) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n")
    rc, _, err = _inspect(capsys, str(path))
    _assert_one_line_error(rc, err, str(path), "not a readable ONNX model")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_onnx(capsys, tmp_path, fraction: float) -> None:
    data = zoo.model_path("tiny-resnet").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    rc, _, err = _inspect(capsys, str(path))
    _assert_one_line_error(rc, err, str(path))


def test_unknown_domain(capsys, tmp_path) -> None:
    graph = helper.make_graph([helper.make_node("FancyOp", ["x"], ["y"], domain="com.example", name="fancy")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    rc, _, err = _inspect(capsys, _save(model, tmp_path / "custom.onnx"))
    _assert_one_line_error(rc, err, "FancyOp", "com.example", "fancy")


def test_symbolic_dims_need_shape_and_shape_fixes_it(capsys, tmp_path) -> None:
    path = _save(_symbolic_model(), tmp_path / "sym.onnx")
    rc, _, err = _inspect(capsys, path)
    _assert_one_line_error(rc, err, "tokens", "batch", "--shape tokens=")
    rc, out, err = _inspect(capsys, path, "--shape", "tokens=3,4")
    assert rc == 0, err
    assert "[3,4]" in out and "[3,5]" in out and "MatMul" in out


def test_shape_for_unknown_input(capsys, tmp_path) -> None:
    path = _save(_symbolic_model(), tmp_path / "sym.onnx")
    rc, _, err = _inspect(capsys, path, "--shape", "nope=1,4")
    _assert_one_line_error(rc, err, "nope", "tokens")


def test_missing_file(capsys, tmp_path) -> None:
    path = tmp_path / "absent.onnx"
    rc, _, err = _inspect(capsys, str(path))
    _assert_one_line_error(rc, err, str(path), "no such file")


def test_unknown_zoo_name_lists_the_zoo(capsys) -> None:
    rc, _, err = _inspect(capsys, "zoo:resnet51")
    _assert_one_line_error(rc, err, "resnet51", "resnet50", "tiny-bert")


def test_inspect_reports_counts_and_flops(capsys) -> None:
    rc, out, err = _inspect(capsys, "zoo:tiny-resnet")
    assert rc == 0, err
    g = zoo.load_graph("zoo:tiny-resnet")
    assert f"nodes:      {len(g)}" in out
    assert "data  float32  [1,3,64,64]" in out and "Conv" in out and "Sum" in out
    from collage.graph.stats import inspect_graph, node_flops
    r = inspect_graph(g)
    conv = next(i for i in range(len(g)) if g.op_type(i) == "Conv")
    # stem: 16 x 32 x 32 outputs, each 3 x 7 x 7 MACs
    assert node_flops(g, conv) == 2 * 16 * 32 * 32 * 3 * 7 * 7
    assert r.flops > r.mac_flops > 0.9 * r.flops
    assert r.params == sum(int(np.prod(t.dims)) for t in g.initializers.values())


def test_real_command_no_traceback(tmp_path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x07garbage" * 10)
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "collage.cli", "inspect", str(path)], capture_output=True,
                          text=True, env=env, timeout=120)
    _assert_one_line_error(proc.returncode, proc.stderr, str(path))
    assert proc.stdout == ""


def test_zoo_list(capsys) -> None:
    rc = main(["zoo", "list"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "tiny-bert" in out and "onnx-light" in out and "built" in out
    line = next(row for row in out.splitlines() if row.startswith("tiny-resnet "))
    assert "data[1x3x64x64]" in line
