"""One artifact for several input sizes (issue 38 part 3): ``--shape x=1,3,{8,16},8`` tunes each size set and
writes one multi-size artifact; ``collage.load`` picks the plan by the feeds' shapes and runs a size it was not
tuned for on the original model (ONNX Runtime), saying so once per size; ``collage run --random`` runs the
first size set; a changed ``dynamic/model.onnx`` is refused by its checksum."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import collage
from collage.errors import ArtifactError, CollageError, ModelError, OptionError
from collage.runtime.manifest import MANIFEST
from collage.tuner.sizes import parse_size_sets, size_sets
from tests.commands.test_bad_inputs import _assert_one_line, _cli

TUNED = [(1, 3, 8, 8), (1, 3, 16, 8)]


def test_brace_form_parses_to_size_sets() -> None:
    assert parse_size_sets(["x=1,3,48,{160,320,640}"]) == [{"x": (1, 3, 48, w)} for w in (160, 320, 640)]
    assert parse_size_sets(["x=1,{2,3},{4,5}"]) == [{"x": (1, h, w)} for h in (2, 3) for w in (4, 5)]
    # the single-size form as before; a name given again lists another size set; inputs combine as a product
    assert parse_size_sets(["x=1,3,224,224"]) == [{"x": (1, 3, 224, 224)}]
    assert parse_size_sets([]) == [{}]
    assert parse_size_sets(["x=1,8", "x=1,16", "x=1,8"]) == [{"x": (1, 8)}, {"x": (1, 16)}]
    assert parse_size_sets(["a=1,{8,16}", "b=2"]) == [{"a": (1, 8), "b": (2,)}, {"a": (1, 16), "b": (2,)}]
    for bad in ("x=1,{},8", "x=1,{2,3", "x=1,{2,0}", "x=1,{a,2}", "x=1,{2,3}4", "={2,3}"):
        with pytest.raises(ModelError, match="bad --shape"):
            parse_size_sets([bad])
    # the Python form: a dict (one size set) or a list of dicts
    assert size_sets({"x": [1, 8]}) == [{"x": (1, 8)}]
    assert size_sets([{"x": [1, 8]}, {"x": (1, 16)}, {"x": [1, 8]}]) == [{"x": (1, 8)}, {"x": (1, 16)}]
    with pytest.raises(OptionError):
        size_sets([[1, 8]])


def _dynamic_conv() -> onnx.ModelProto:
    """Conv + Relu with symbolic height and width."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "dynconv",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 4, "H", "W"])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """The model tuned for two sizes by the real command, with its archive."""
    d = tmp_path_factory.mktemp("dynsizes")
    onnx.save(_dynamic_conv(), str(d / "dyn.onnx"))
    proc = _cli(d, ["tune", "dyn.onnx", "-o", "out", "--shape", "x=1,3,{8,16},8", "--backends", "onnxruntime",
                    "--budget", "8s", "--max-nodes", "2", "--db", str(d / "costs.sqlite"), "--archive", "-q"])
    assert proc.returncode == 0, proc.stderr
    assert "2 size sets" in proc.stdout, proc.stdout
    return d


def _reference(d: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(d / "dyn.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("where", ["out", "out.tar.gz"])
def test_one_artifact_runs_every_size(tuned, where, caplog) -> None:
    manifest = json.loads((tuned / "out" / MANIFEST).read_text())
    assert manifest["kind"] == "multi-size"
    assert [tuple(s["inputs"]["x"]) for s in manifest["sizes"]] == TUNED
    art = collage.load(tuned / where)
    try:
        rng = np.random.default_rng(1)
        for shape in TUNED:  # each tuned size runs its own plan
            x = rng.standard_normal(shape).astype(np.float32)
            assert art.artifact_for({"x": x}) is not None
            np.testing.assert_allclose(art.run({"x": x})["y"], _reference(tuned, x), rtol=1e-5, atol=1e-5)
        x = rng.standard_normal((1, 3, 12, 20)).astype(np.float32)  # not tuned: the dynamic model, said once
        assert art.artifact_for({"x": x}) is None
        with caplog.at_level(logging.WARNING, logger="collage"):
            for _ in range(2):
                np.testing.assert_allclose(art.run({"x": x})["y"], _reference(tuned, x), rtol=1e-5, atol=1e-5)
        warned = [r for r in caplog.records if "was not tuned" in r.getMessage()]
        assert len(warned) == 1 and "x=[1, 3, 12, 20]" in warned[0].getMessage(), caplog.text
        assert art.backends == ["onnxruntime"]
        assert art.random_inputs()["x"].shape == TUNED[0]
        with pytest.raises(CollageError, match="input 'x'"):
            art.run({"x": np.zeros((1, 5, 8, 8), np.float32)})  # 5 channels: the model takes 3
    finally:
        art.close()


def test_run_random_and_report(tuned) -> None:
    proc = _cli(tuned, ["run", "out", "--random"])
    assert proc.returncode == 0, proc.stderr
    assert "shape=(1, 4, 8, 8)" in proc.stdout  # the first size set
    proc = _cli(tuned, ["report", "out"])
    assert proc.returncode == 0, proc.stderr
    assert "Size set 1 of 2: x=[1, 3, 8, 8]" in proc.stdout and "Size set 2 of 2: x=[1, 3, 16, 8]" in proc.stdout


def test_tampered_dynamic_model_is_refused(tuned, tmp_path) -> None:
    shutil.copytree(tuned / "out", tmp_path / "out")
    model = tmp_path / "out" / "dynamic" / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        collage.load(tmp_path / "out")
    _assert_one_line(_cli(tmp_path, ["run", "out", "--random"]), "run", ["model.onnx", "checksum mismatch"])


def test_bad_brace_form_is_one_line(tuned, tmp_path) -> None:
    proc = _cli(tuned, ["tune", "dyn.onnx", "-o", str(tmp_path / "o"), "--shape", "x=1,3,{8,},8"])
    _assert_one_line(proc, "tune", ["x=1,3,{8,},8", "lists no size"])
