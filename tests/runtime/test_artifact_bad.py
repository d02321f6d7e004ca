"""Issue 37: the deploy path (``collage run``, ``collage.load``, ``collage report``) never gives a number that looks
right but is wrong, and never a traceback.

1. NaN or infinity in an input is refused at the artifact boundary (an OpenVINO partition turned an all-NaN image
   into finite probabilities where ONNX Runtime gives NaN), unless ``allow_nonfinite`` / ``--allow-nonfinite``.
2. ``collage report`` refuses a report.json / plan.json of another model (it showed the other model's name and
   timings beside this model's ops).
3. A tampered manifest (a key missing or of the wrong type, an unknown dtype, a negative dimension) is one line
   naming manifest.json and the key, exit 2 (tracebacks before).
4. ``collage run`` / ``report`` on an .onnx file says it is a model to tune first (it said "corrupted artifact").
5. A .tar.gz unpacks only the manifest and what it lists, of the sizes it declares.
6. ``art.run([x])`` is an InputTypeError (a TypeError too); a partition whose files hold non-UTF-8 names is
   refused at load in one line saying so.

CLI cases run the real ``collage`` command (a subprocess) with the helpers of tests/commands/test_bad_inputs.py.
"""
from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import collage
from collage.errors import ArtifactError, CollageError, InputError, InputTypeError
from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime.manifest import MANIFEST
from collage.tuner.export import export, write_archive
from collage.util import sha256_file
from tests.commands.test_bad_inputs import _assert_one_line, _cli
from tests.helpers import need_backends


def _classifier(seed: int = 0, name: str = "tiny") -> onnx.ModelProto:
    """x[1,3,8,8] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Softmax -> probs[1,4]: a small image classifier."""
    w = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Softmax", ["f"], ["probs"], axis=1, name="softmax")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("probs", T.FLOAT, [1, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _export(d: Path, name: str, backend: str, seed: int = 0) -> Path:
    onnx.save(_classifier(seed), str(d / f"{name}.onnx"))
    graph = Graph.load(d / f"{name}.onnx")
    return export(graph, Plan([Partition(tuple(range(len(graph))), backend, 0.01)], predicted_ms=0.01), d / name,
                  report={"model": graph.name, "source": graph.source, "plan_ms": 0.01 * (seed + 1)})


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """Artifacts of the classifier: on ONNX Runtime ("ort"), on OpenVINO ("ov"), and of other weights ("other");
    input files."""
    need_backends("onnxruntime", "openvino")
    d = tmp_path_factory.mktemp("bad37")
    _export(d, "ort", "onnxruntime")
    _export(d, "ov", "openvino")
    _export(d, "other", "onnxruntime", seed=1)
    write_archive(d / "ort")
    np.save(d / "nan.npy", np.full((1, 3, 8, 8), np.nan, np.float32))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(d / "x.npy", x)
    x[0, 1, 2, 3] = np.inf
    np.save(d / "inf.npy", x)
    return d


def _copy(scene: Path, tmp_path: Path, name: str = "ort") -> tuple[Path, dict]:
    d = tmp_path / name
    shutil.copytree(scene / name, d)
    return d, json.loads((d / MANIFEST).read_text())


# ---------------------------------------------------------------------- 1. NaN / infinity
@pytest.mark.parametrize("art", ["ort", "ov"])
def test_nan_input_is_refused_naming_the_input(scene, art):
    """Before: the OpenVINO artifact returned finite probabilities on an all-NaN image (ONNX Runtime: NaN)."""
    a = collage.load(scene / art)
    with pytest.raises(InputError, match=r"input 'x' holds 192 NaN and 0 infinite value\(s\).*allow_nonfinite=True"):
        a.run({"x": np.load(scene / "nan.npy")})
    one = np.load(scene / "x.npy")
    one[0, 0, 0, 0] = np.nan  # one NaN pixel: OpenVINO's output stayed near the clean one
    with pytest.raises(InputError, match=r"1 NaN .* index \(0, 0, 0, 0\)"):
        a.run({"x": one})
    assert np.isfinite(a.run({"x": np.load(scene / "x.npy")})["probs"]).all()


def test_nonfinite_allowed_on_request_and_why_it_is_not_the_default(scene):
    """On request NaN runs; ONNX Runtime propagates it, OpenVINO answers uniform probabilities (0.25 each):
    the number that looks right (README "Artifact format"; if this changes, revisit the note there)."""
    nan = np.load(scene / "nan.npy")
    assert np.isnan(collage.load(scene / "ort", allow_nonfinite=True).run({"x": nan})["probs"]).all()
    assert np.isfinite(collage.load(scene / "ov", allow_nonfinite=True).run({"x": nan})["probs"]).all()


def test_cli_nan_and_inf_inputs(scene):
    line = _assert_one_line(_cli(scene, ["run", "ov", "--input", "x=nan.npy"]), "run",
                            ["'x'", "192 NaN", "--allow-nonfinite"])
    assert "Traceback" not in line
    _assert_one_line(_cli(scene, ["run", "ov", "--input", "x=inf.npy"]), "run", ["'x'", "1 infinite", "(0, 1, 2, 3)"])
    proc = _cli(scene, ["run", "ort", "--input", "x=nan.npy", "--allow-nonfinite"])
    assert proc.returncode == 0 and "probs\tshape=(1, 4)" in proc.stdout, proc.stderr


# ---------------------------------------------------------------------- 2. report.json / plan.json of another model
@pytest.mark.parametrize("which", ["report.json", "plan.json"])
def test_report_refuses_files_of_another_model(scene, tmp_path, which):
    """Before: exit 0, the other model's timings shown with this model's ops."""
    d, _ = _copy(scene, tmp_path)
    shutil.copy(scene / "other" / which, d / which)
    _assert_one_line(_cli(scene, ["report", str(d)]), "report", [f"{d / which}", "another model"])


def test_report_refuses_plan_of_other_partitions_and_old_report_of_other_name(scene, tmp_path):
    d, m = _copy(scene, tmp_path)
    plan = json.loads((d / "plan.json").read_text())
    plan.pop("model_sha256")  # as written before the stamp: the partitions are still compared
    plan["partitions"][0]["backend"] = "openvino"
    (d / "plan.json").write_text(json.dumps(plan))
    _assert_one_line(_cli(scene, ["report", str(d)]), "report", ["plan.json", "partition 0 is 'openvino'",
                                                                 "manifest.json says 'onnxruntime'"])
    shutil.copy(scene / "ort" / "plan.json", d / "plan.json")
    report = json.loads((d / "report.json").read_text())
    report.pop("model_sha256")
    (d / "report.json").write_text(json.dumps({**report, "model": "resnet50"}))
    _assert_one_line(_cli(scene, ["report", str(d)]), "report", ["report.json", "'resnet50'", "'tiny'"])
    (d / "report.json").write_text(json.dumps(report))  # an old report of this model: shown
    assert _cli(scene, ["report", str(d)]).returncode == 0


# ---------------------------------------------------------------------- 3. tampered manifests
def _set(path: str, value):
    def edit(m: dict) -> None:
        *keys, last = path.split(".")
        node = m
        for k in keys:
            node = node[int(k)] if isinstance(node, list) else node[k]
        if value is _DELETE:
            del node[int(last) if isinstance(node, list) else last]
        else:
            node[int(last) if isinstance(node, list) else last] = value
    return edit


_DELETE = object()

#: (id, edit, needles): every one was a traceback (or a misleading line) before
TAMPERS = [
    ("files-a-string", _set("partitions.0.files", "model.onnx"), ["'partitions[0].files'", "a list", "not a string"]),
    ("unknown-dtype", _set("inputs.0.dtype", "float33"), ["'inputs[0].dtype'", "'float33'"]),
    ("backends-a-list", _set("backends", ["onnxruntime"]), ["'backends'", "an object", "not a list"]),
    ("negative-dim", _set("inputs.0.shape.1", -3), ["'inputs[0].shape[1]'", "-3", "negative"]),
    ("shape-a-string", _set("outputs.0.shape", "1,4"), ["'outputs[0].shape'", "a list"]),
    ("missing-input-name", _set("inputs.0.name", _DELETE), ["'inputs[0]'", "lacks ['name']"]),
    ("missing-backend-version", _set("backends.onnxruntime.version", _DELETE), ["'backends.onnxruntime'", "version"]),
    ("index-a-string", _set("partitions.0.index", "0"), ["'partitions[0].index'", "a whole number"]),
    ("index-out-of-order", _set("partitions.0.index", 3), ["'partitions[0].index'", "not 0"]),
    ("nodes-an-object", _set("partitions.0.nodes", {"0": 1}), ["'partitions[0].nodes'", "a list"]),
    ("entry-a-list", _set("partitions.0.entry", []), ["'partitions[0].entry'", "an object"]),
    ("options-a-string", _set("backends.onnxruntime.options", "fast"), ["'backends.onnxruntime.options'"]),
    ("file-sha-a-number", _set("partitions.0.files.0.sha256", 7), ["'partitions[0].files[0].sha256'", "a string"]),
    ("file-bytes-negative", _set("partitions.0.files.0.bytes", -1), ["'partitions[0].files[0].bytes'", "negative"]),
    ("unmade-input", _set("partitions.0.inputs", ["ghost"]), ["'partitions[0].inputs'", "'ghost'"]),
    ("unmade-output", _set("outputs.0.name", "ghost"), ["'outputs'", "'ghost'", "no partition makes"]),
    ("name-not-utf8", _set("inputs.0.name", "x\udcff"), ["'inputs[0].name'", "not valid UTF-8"]),
    ("report-outside", _set("report", "../report.json"), ["'report'", "outside the artifact"]),
    ("model-a-string", _set("model", "tiny"), ["'model'", "an object"]),
    ("partition-a-list", _set("partitions.0", []), ["partition 0 lacks field(s)"]),
]


@pytest.mark.parametrize("case", TAMPERS, ids=[c[0] for c in TAMPERS])
def test_tampered_manifest_is_one_line_naming_the_key(scene, tmp_path, case):
    name, edit, needles = case
    d, m = _copy(scene, tmp_path)
    edit(m)
    (d / MANIFEST).write_text(json.dumps(m))
    _assert_one_line(_cli(scene, ["run", str(d), "--random"]), "run", [str(d / MANIFEST), *needles])
    with pytest.raises(ArtifactError, match="manifest.json"):
        collage.load(d)
    if name in ("files-a-string", "negative-dim"):  # report reads it with the same check
        _assert_one_line(_cli(scene, ["report", str(d)]), "report", [str(d / MANIFEST), *needles])


@pytest.mark.parametrize("dtype,known", [("float32", True), ("bool", True), ("bfloat16", True), ("int4", True),
                                         ("object", True), ("float33", False), ("str", False), ("f4", False),
                                         ("V8", False), ("datetime64", False)])
def test_dtype_names_the_manifest_may_hold(dtype, known):
    """The numpy names of ONNX's tensor types as collage's graph gives them (``object``: ONNX strings, which the
    ONNX backend API exports) and nothing else."""
    from collage.runtime.manifest import known_dtype
    assert known_dtype(dtype) is known


# ---------------------------------------------------------------------- 4. an ONNX model given as the artifact
@pytest.mark.parametrize("command", ["run", "report"])
def test_onnx_model_given_as_artifact(scene, tmp_path, command):
    """Before: "unreadable manifest (...); the artifact is corrupted: re-export it"."""
    shutil.copy(scene / "ort.onnx", tmp_path / "model.bin")  # recognised by its first bytes too
    for path in (scene / "ort.onnx", tmp_path / "model.bin"):
        argv = [command, str(path)] + (["--random"] if command == "run" else [])
        line = _assert_one_line(_cli(scene, argv), command, [str(path), "an ONNX model, not a collage artifact",
                                                             "collage tune"])
        assert "corrupted" not in line


# ---------------------------------------------------------------------- 5. what an archive may unpack
def _archive_with(scene: Path, tmp_path: Path, extra: tarfile.TarInfo, data: bytes) -> Path:
    path = tmp_path / "extra.tar.gz"
    with tarfile.open(scene / "ort.tar.gz") as src, tarfile.open(path, "w:gz") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        dst.addfile(extra, io.BytesIO(data))
    return path


def _unpacked(tmp: Path) -> dict[str, int]:
    return {str(p.relative_to(tmp)): p.stat().st_size for p in tmp.rglob("*") if p.is_file()}


def test_unlisted_member_is_never_unpacked(scene, tmp_path, monkeypatch, caplog):
    """Before: every member was extracted to TMPDIR (a 1 GiB one too); here an 8 MiB one stands for it."""
    info = tarfile.TarInfo("ort/partitions/big.bin")
    info.size = 8 << 20
    archive = _archive_with(scene, tmp_path, info, bytes(info.size))
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    a = collage.load(archive)
    try:
        unpacked = _unpacked(tmp)
        assert not any(name.endswith("big.bin") for name in unpacked), unpacked
        assert sum(unpacked.values()) < 1 << 20
        assert "big.bin" in caplog.text and "left packed" in caplog.text
        assert a.run({"x": np.load(scene / "x.npy")})["probs"].shape == (1, 4)
    finally:
        a.close()


def test_listed_member_of_another_size_is_refused(scene, tmp_path, monkeypatch):
    m = json.loads((scene / "ort" / MANIFEST).read_text())
    part = m["partitions"][0]
    info = tarfile.TarInfo(f"ort/{part['dir']}/{part['files'][0]['name']}")  # a second copy, bigger: the last wins
    info.size = part["files"][0]["bytes"] + 4096
    archive = _archive_with(scene, tmp_path, info, bytes(info.size))
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    with pytest.raises(ArtifactError, match=rf"member '{info.name}' holds {info.size} bytes, manifest.json declares"):
        collage.load(archive)
    assert _unpacked(tmp) == {}
    _assert_one_line(_cli(scene, ["report", str(archive)]), "report", ["declares", "refused"])


# ---------------------------------------------------------------------- 6. Python API types, odd names
@pytest.mark.parametrize("feeds", [[np.zeros((1, 3, 8, 8), np.float32)], (np.zeros((1, 3, 8, 8), np.float32),),
                                   np.zeros((1, 3, 8, 8), np.float32)], ids=["list", "tuple", "array"])
def test_run_with_a_list_is_a_typed_error(scene, feeds):
    """Before: a bare TypeError (unhashable type) or a CollageError for an array's rows."""
    a = collage.load(scene / "ort")
    with pytest.raises(InputTypeError, match=r"inputs must be a dict \{input name: array\}.*'x'") as e:
        a.run(feeds)
    assert isinstance(e.value, TypeError) and isinstance(e.value, CollageError)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_non_utf8_names_in_partition_files(scene, tmp_path, backend):
    """A partition whose files name tensors in bytes that are not UTF-8 (consistent checksums): one line saying
    so at load (the tune refuses such models; only an edited artifact holds them)."""
    d, m = _copy(scene, tmp_path, "ort" if backend == "onnxruntime" else "ov")
    part = m["partitions"][0]
    patched = 0
    for f in part["files"]:
        p = d / part["dir"] / f["name"]
        data = p.read_bytes()
        patched += data.count(b"probs")
        p.write_bytes(data.replace(b"probs", b"\xff\xfe\xfd\xfc\xfb"))
        f["sha256"] = sha256_file(p)
    assert patched
    (d / MANIFEST).write_text(json.dumps(m))
    _assert_one_line(_cli(scene, ["run", str(d), "--random"]), "run", [part["dir"], "not valid UTF-8"])
