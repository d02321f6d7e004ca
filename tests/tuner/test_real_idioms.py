"""Tunes of the idioms real exported models are made of (issue 38): sizes computed from shapes (folded at load
under the fixed sizes), control flow kept whole, 0-d inputs; and the numerics checked against the model as read,
so that a folding bug fails the tune. Models: tests/graph/test_fold.py."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import collage.graph.load as load
from collage.errors import CollageError
from collage.search.candidates import Limits
from collage.tuner.job import tune
from tests.commands.test_bad_inputs import _cli
from tests.graph.test_fold import flatten_model, if_model, loop_model, range_model, scalar_model
from tests.helpers import need_backends


def _quick(model, out, tmp_path, backends=("onnxruntime",), **kw):
    return tune(model, out, backends=list(backends), budget="8s", limits=Limits(max_nodes=2), progress=False,
                db=tmp_path / "costs.db", **kw)


def test_cli_tunes_paddle_flatten_with_a_symbolic_batch(tmp_path):
    # old code: exit 2, "tensor 'flat' (output of node 'flatten') has no static shape after inference"
    onnx.save(flatten_model(), str(tmp_path / "flatten.onnx"))
    out = tmp_path / "out"
    proc = _cli(tmp_path, ["tune", "flatten.onnx", "--shape", "x=2,3,4,4", "--budget", "8s", "--max-nodes", "2",
                           "--backends", "onnxruntime", "--db", str(tmp_path / "c.db"), "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert "folded at load by onnxslim" in proc.stdout and "10 -> 4 nodes" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["load"]["nodes_before"] == 10 and report["load"]["nodes_after"] == 4
    assert report["numerics"]["ok"]
    md = _cli(tmp_path, ["report", str(out)])
    assert "Folded at load by onnxslim" in md.stdout, md.stdout


def test_range_over_a_size_tunes(tmp_path):
    # old code: ModelError "tensor 'grid' (output of node 'range') has no static shape after inference"
    res = _quick(range_model(), tmp_path / "out", tmp_path, shapes={"x": (1, 6)})
    assert res.report["numerics"]["ok"] and res.report["load"]["nodes_after"] == 2


def test_if_reading_outer_tensors_tunes_and_verifies(tmp_path):
    need_backends("onnxruntime", "openvino")
    res = _quick(if_model(), tmp_path / "out", tmp_path, backends=("onnxruntime", "openvino"))
    assert res.report["numerics"]["ok"]
    from collage.runtime.artifact import load as load_artifact

    art = load_artifact(res.out_dir)
    for x in (np.ones((1, 4), np.float32), -np.ones((1, 4), np.float32)):  # both branches
        a = np.maximum(x, 0)
        want = 1 / (1 + np.exp(-(a * 2 if x.sum() > 0 else x - a)))
        np.testing.assert_allclose(art.run({"x": x})["y"], want, rtol=1e-5)


def test_loop_reading_an_outer_tensor_tunes_and_verifies(tmp_path):
    res = _quick(loop_model(), tmp_path / "out", tmp_path)
    assert res.report["numerics"]["ok"]


def test_scalar_input_tunes_and_runs_from_a_0d_npy(tmp_path):
    # old code: every candidate was handed gain of shape (1,): "input 'gain' has shape (1,), the partition expects
    # ()"; no candidate covered the Mul, and the tune failed
    need_backends("onnxruntime", "openvino")
    out = tmp_path / "out"
    res = _quick(scalar_model(), out, tmp_path, backends=("onnxruntime", "openvino"))
    assert res.report["numerics"]["ok"] and set(res.baselines) == {"onnxruntime", "openvino"}
    np.save(tmp_path / "x.npy", np.arange(-4, 4, dtype=np.float32).reshape(1, 8))
    np.save(tmp_path / "gain.npy", np.float32(3.0))
    proc = _cli(tmp_path, ["run", str(out), "-i", "x=x.npy", "-i", "gain=gain.npy", "-o", "got"])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "got" / "y.npy"), 3.0 * np.maximum(np.arange(-4, 4), 0)[None])


def test_a_folding_bug_fails_verification(tmp_path, monkeypatch):
    """The plan is checked against ONNX Runtime on the model as read: a folded constant that is wrong cannot pass."""
    real = load.fold

    def corrupting(model, source):
        folded, folding = real(model, source)
        for t in folded.graph.initializer:
            arr = numpy_helper.to_array(t)
            if arr.dtype == np.float32 and arr.shape == (6,):  # the folded Range
                t.CopyFrom(numpy_helper.from_array(arr + 1, t.name))
        return folded, folding

    monkeypatch.setattr(load, "fold", corrupting)
    with pytest.raises(CollageError, match="differ from the ONNX Runtime reference"):
        _quick(range_model(), tmp_path / "out", tmp_path, shapes={"x": (1, 6)})
    assert not (tmp_path / "out").exists()
