"""Loading and running artifacts: round trip in a fresh process, light imports, refusals, feed checks, CLI."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import need_backends
from collage.runtime.manifest import FORMAT_VERSION, MANIFEST
from collage.tuner.export import export
from collage.errors import ArtifactError, CollageError
from collage.graph.ir import Graph
from collage.plan import Partition, Plan

TOL = 1e-4
#: what the deploy path never imports (docs/DESIGN.md "Light deploy path"; pyproject's import-linter contract)
TUNER_MODULES = ("collage.tuner", "collage.search", "collage.measure", "collage.cost_models", "collage.report",
                 "collage.zoo",
                 "collage.graph", "optuna", "pandas", "networkx", "tqdm", "sklearn")


def _model() -> onnx.ModelProto:
    """Two inputs, two outputs, a skip connection across partition cuts."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.2, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("Mul", ["a", "scale"], ["m"]),
        helper.make_node("Relu", ["m"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["logits:0"]),
    ]
    graph = helper.make_graph(
        nodes, "two_in", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
                          helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 8, 1, 1])],
        [helper.make_tensor_value_info("logits:0", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("r1", TensorProto.FLOAT, [1, 8, 8, 8])], initializer=[w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _graph(tmp: Path, spec: str = "helper") -> Graph:
    if spec.startswith("zoo:"):
        from collage import zoo
        return zoo.load_graph(spec)
    path = tmp / "model.onnx"
    onnx.save(_model(), str(path))
    return Graph.load(path)


def _alternating_plan(n: int) -> Plan:
    cuts = [0, n // 3, 2 * n // 3, n]
    names = ["onnxruntime", "openvino", "onnxruntime"]
    return Plan([Partition(tuple(range(cuts[k], cuts[k + 1])), names[k], cost_ms=0.2) for k in range(3)])


def _feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t: rng.standard_normal(graph.tensor(t).shape).astype(np.float32) for t in graph.inputs}


def _reference(graph: Graph, feeds) -> dict[str, np.ndarray]:
    from collage.backends import get_backend
    out = get_backend("onnxruntime").compile(graph.model).run(feeds)
    return {k: np.array(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    need_backends("onnxruntime", "openvino")
    tmp = tmp_path_factory.mktemp("rt")
    graph = _graph(tmp)
    out = export(graph, _alternating_plan(len(graph)), tmp / "out", archive=True)
    return graph, out


def _copy(out: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(out, dest)
    return dest


# ---------------------------------------------------------------------- round trip
_FRESH = textwrap.dedent("""
    import json, sys
    import numpy as np
    import collage
    art = collage.load(sys.argv[1])
    feeds = dict(np.load(sys.argv[2]))
    out = art.run(feeds)
    out2 = art.run(feeds)
    np.savez(sys.argv[3], **out)
    heavy = sorted({m for m in sys.modules for p in json.loads(sys.argv[4]) if m == p or m.startswith(p + ".")})
    print(json.dumps({"heavy": heavy, "backends": art.backends, "parts": len(art.partitions)}))
""")


@pytest.mark.parametrize("spec", ["helper", "zoo:tiny-resnet"])
def test_round_trip_in_a_fresh_process_is_light_and_matches_ort(tmp_path, spec):
    need_backends("onnxruntime", "openvino")
    graph = _graph(tmp_path, spec)
    out = export(graph, _alternating_plan(len(graph)), tmp_path / "out", archive=True)
    feeds = _feeds(graph)
    ref = _reference(graph, feeds)
    np.savez(tmp_path / "feeds.npz", **feeds)
    for target in (out, tmp_path / "out.tar.gz"):
        res = subprocess.run([sys.executable, "-c", _FRESH, str(target), str(tmp_path / "feeds.npz"),
                              str(tmp_path / "got.npz"), json.dumps(TUNER_MODULES)],
                             capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert res.returncode == 0, res.stderr
        info = json.loads(res.stdout.strip().splitlines()[-1])
        assert info["heavy"] == [], f"loading/running an artifact imported tuner modules: {info['heavy']}"
        assert info["backends"] == ["onnxruntime", "openvino"] and info["parts"] == 3
        got = dict(np.load(tmp_path / "got.npz"))
        assert set(got) == set(ref)
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], atol=TOL, rtol=0, err_msg=name)
    # the CLI path too: `collage run OUT --random`
    script = ("import json, sys; from collage.cli import main; rc = main(['run', sys.argv[1], '--random']); "
              "print(json.dumps({'rc': rc, 'heavy': sorted(m for m in sys.modules for p in json.loads(sys.argv[2]) "
              "if m == p or m.startswith(p + '.'))}))")
    res = subprocess.run([sys.executable, "-c", script, str(out), json.dumps(TUNER_MODULES)],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info == {"rc": 0, "heavy": []}, (info, res.stderr)


def _linked_plan(graph: Graph) -> Plan:
    """ResNet residual pieces, the first half on ONNX Runtime, the rest on OpenVINO: consecutive pieces of one
    backend are compiled linked (each runtime's own layout across their cut)."""
    from tests.helpers import residual_pieces

    pieces = residual_pieces(graph)
    names = ["onnxruntime"] * (len(pieces) // 2) + ["openvino"] * (len(pieces) - len(pieces) // 2)
    return Plan([Partition(tuple(p), b) for p, b in zip(pieces, names)])


@pytest.mark.parametrize("kind", ["openvino-bf16", "linked"])
def test_deploy_path_stays_light_for_bf16_and_linked_artifacts(tmp_path, kind):
    """collage.load() + run in a fresh process imports no tuner, search, cost model, report, zoo or graph module,
    and none of optuna, pandas, networkx, tqdm, sklearn: for a lower-precision (bf16) artifact, whose backend
    variant lives beside the fp32 one (collage.backends.openvino.lowp), and for a linked multi-partition one."""
    from collage import zoo
    from tests.helpers import bf16_reason

    need_backends("onnxruntime", "openvino")
    if kind == "openvino-bf16" and bf16_reason():
        pytest.skip(f"no bf16 here: {bf16_reason()}")
    graph = zoo.load_graph("zoo:tiny-resnet")
    plan = Plan.single("openvino-bf16", len(graph)) if kind == "openvino-bf16" else _linked_plan(graph)
    out = export(graph, plan, tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    linked = [p["backend"] for p in manifest["partitions"] if p["entry"].get("linked")]
    assert linked if kind == "linked" else not linked  # the plan really is what the test says it is
    feeds = _feeds(graph)
    np.savez(tmp_path / "feeds.npz", **feeds)
    res = subprocess.run([sys.executable, "-c", _FRESH, str(out), str(tmp_path / "feeds.npz"),
                          str(tmp_path / "got.npz"), json.dumps(TUNER_MODULES)],
                         capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["heavy"] == [], f"loading/running a {kind} artifact imported: {info['heavy']}"
    assert info["parts"] == len(plan.partitions)
    ref = _reference(graph, feeds)
    got = dict(np.load(tmp_path / "got.npz"))
    atol = 0.1 * max(float(np.abs(v).max()) for v in ref.values()) if kind == "openvino-bf16" else TOL
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], atol=atol, rtol=0, err_msg=name)


def test_outputs_survive_the_next_run_and_inputs_are_specified(art):
    from collage.runtime.artifact import load
    graph, out = art
    a = load(out)
    assert [s.name for s in a.inputs] == ["x", "scale"] and a.inputs[0].shape == (1, 4, 8, 8)
    assert [s.name for s in a.outputs] == ["logits:0", "r1"] and a.outputs[0].dtype == np.float32
    f1, f2 = _feeds(graph, 1), _feeds(graph, 2)
    r1 = a.run(f1)
    keep = {k: v.copy() for k, v in r1.items()}
    a.run(f2)
    for k in keep:  # backends reuse their output buffers: graph outputs must have been copied
        np.testing.assert_array_equal(r1[k], keep[k])
    ref = _reference(graph, f1)
    for k in ref:
        np.testing.assert_allclose(r1[k], ref[k], atol=TOL, rtol=0)


def test_boundary_overhead_shape(art):
    from collage.runtime.artifact import load
    a = load(art[1])
    bo = a.boundary_overhead(repeat=3, warmup=1)
    assert bo.boundaries == 2 and len(bo.parts_ms) == 3 and len(bo.per_boundary_ms) == 2
    assert bo.stitched_ms > 0 and all(p > 0 for p in bo.parts_ms)
    assert len(bo.in_chain_ms) == 3 and all(t > 0 for t in bo.in_chain_ms)
    assert sum(bo.in_chain_ms) <= 1.5 * bo.stitched_ms  # the calls inside the stitched runs are part of them
    d = bo.to_dict()
    assert d["total_ms"] == pytest.approx(d["stitched_ms"] - d["sum_parts_ms"])
    json.dumps(d)


# ---------------------------------------------------------------------- feeds
def test_feed_validation_names_the_tensor(art):
    from collage.runtime.artifact import load
    graph, out = art
    a = load(out)
    good = _feeds(graph)
    with pytest.raises(CollageError, match=r"missing input 'scale'.*\(1, 8, 1, 1\) float32"):
        a.run({"x": good["x"]})
    with pytest.raises(CollageError, match=r"unknown input 'y'"):
        a.run({**good, "y": good["x"]})
    with pytest.raises(CollageError,
                       match=r"input 'x': expected shape \(1, 4, 8, 8\) float32, got shape \(1, 4, 8, 9\)"):
        a.run({**good, "x": np.zeros((1, 4, 8, 9), np.float32)})
    with pytest.raises(CollageError, match=r"input 'scale': expected .*float32, got .*float64"):
        a.run({**good, "scale": good["scale"].astype(np.float64)})
    # a non-contiguous view of the right shape and dtype is accepted
    big = np.zeros((1, 4, 8, 16), np.float32)
    a.run({**good, "x": big[..., ::2]})


# ---------------------------------------------------------------------- refusals
def test_flipped_byte_names_the_file(art, tmp_path):
    from collage.runtime.artifact import load
    d = _copy(art[1], tmp_path)
    part = json.loads((d / MANIFEST).read_text())["partitions"][1]
    f = d / part["dir"] / part["files"][-1]["name"]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=rf"{f.name}: checksum mismatch"):
        load(d)


def test_missing_file_names_the_file(art, tmp_path):
    from collage.runtime.artifact import load
    d = _copy(art[1], tmp_path)
    part = json.loads((d / MANIFEST).read_text())["partitions"][2]
    f = d / part["dir"] / part["files"][0]["name"]
    f.unlink()
    with pytest.raises(ArtifactError, match=rf"{f.name}: missing"):
        load(d)


def test_newer_format_says_upgrade(art, tmp_path):
    from collage.runtime.artifact import load
    d = _copy(art[1], tmp_path)
    m = json.loads((d / MANIFEST).read_text())
    m["format_version"] = FORMAT_VERSION + 1
    (d / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=r"manifest\.json: artifact format version 2.*upgrade collage"):
        load(d)


def test_backend_version_mismatch(art, tmp_path, caplog):
    from collage.runtime.artifact import load
    d = _copy(art[1], tmp_path)
    m = json.loads((d / MANIFEST).read_text())
    have = m["backends"]["openvino"]["version"]
    m["backends"]["openvino"]["version"] = "openvino-2019.1.0-fp32-t2"
    (d / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ArtifactError) as e:
        load(d)
    msg = str(e.value)
    assert "'openvino'" in msg and "openvino-2019.1.0-fp32-t2" in msg and have in msg
    assert "re-tune" in msg and "check_versions=False" in msg
    a = load(d, check_versions=False)
    assert "version mismatch" in caplog.text
    assert len(a.run(a.random_inputs())) == 2


def test_backends_are_recreated_as_tuned(art, tmp_path):
    """A machine with another core count still loads the artifact: the recorded thread count is used."""
    from collage.runtime.artifact import load
    d = _copy(art[1], tmp_path)
    m = json.loads((d / MANIFEST).read_text())
    ov = m["backends"]["openvino"]
    old = ov["settings"]["threads"]
    ov["settings"]["threads"] = old + 1
    assert f"-t{old}" in ov["version"]
    ov["version"] = ov["version"].replace(f"-t{old}", f"-t{old + 1}")
    (d / MANIFEST).write_text(json.dumps(m))
    a = load(d)
    assert a.backend_objects["openvino"].version() == ov["version"]
    assert a.backend_objects["openvino"].threads == old + 1
    # an explicit override applies after the version check
    b = load(d, backend_options={"openvino": {"threads": 1}})
    assert b.backend_objects["openvino"].threads == 1
    assert len(b.run(b.random_inputs())) == 2


def _tar_with(tmp_path: Path, good: Path, evil: tarfile.TarInfo, data: bytes = b"x") -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(good, arcname="art")
        tar.addfile(evil, io.BytesIO(data) if evil.isfile() else None)
    return path


@pytest.mark.parametrize("name,kind,link", [("../evil.txt", "file", ""), ("/tmp/abs-evil.txt", "file", ""),
                                            ("art/link", "sym", "../../etc/passwd"),
                                            ("art/hard", "hard", "/etc/passwd")])
def test_unsafe_tar_members_are_refused(art, tmp_path, name, kind, link):
    from collage.runtime.artifact import load
    info = tarfile.TarInfo(name)
    if kind == "file":
        info.size = 1
    else:
        info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
        info.linkname = link
    path = _tar_with(tmp_path, art[1], info)
    with pytest.raises(ArtifactError, match=rf"member {name!r}.*refused"):
        load(path)
    assert not (tmp_path.parent / "evil.txt").exists()


def test_tar_without_manifest(tmp_path):
    from collage.runtime.artifact import load
    path = tmp_path / "x.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("a/readme.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(ArtifactError, match=r"x\.tar\.gz: archive holds no manifest\.json"):
        load(path)


# ---------------------------------------------------------------------- CLI
def test_cli_run_inputs_outputs_repeat(art, tmp_path, capsys):
    from collage.cli import main
    graph, out = art
    feeds = _feeds(graph)
    np.save(tmp_path / "x.npy", feeds["x"])
    np.save(tmp_path / "scale.npy", feeds["scale"])
    rc = main(["run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"scale={tmp_path / 'scale.npy'}",
               "--output", str(tmp_path / "o"), "--repeat", "3"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "logits:0\tshape=(1, 8)\tdtype=float32" in text and "p50" in text
    got = np.load(tmp_path / "o" / "logits_0.npy")  # ':' sanitised
    np.testing.assert_allclose(got, _reference(graph, feeds)["logits:0"], atol=TOL, rtol=0)
    assert main(["run", str(out), "--random"]) == 0
    np.savez(tmp_path / "feeds.npz", **feeds)  # several inputs by name from one .npz
    assert main(["run", str(out), "--input", str(tmp_path / "feeds.npz"), "-o", str(tmp_path / "o2")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o2" / "logits_0.npy"), got)
    capsys.readouterr()
    # a two-input model needs NAME=
    assert main(["run", str(out), "--input", str(tmp_path / "x.npy")]) == 2
    assert "write NAME=FILE" in capsys.readouterr().err
    assert main(["run", str(out), "--input", f"x={tmp_path / 'nope.npy'}"]) == 2
    assert "nope.npy: no such input file" in capsys.readouterr().err


def test_cli_single_input_without_name(tmp_path, capsys):
    need_backends("onnxruntime")
    from collage.cli import main
    from collage.runtime.artifact import load
    g = Graph.load(_single_input_model())
    out = export(g, Plan.single("onnxruntime", len(g)), tmp_path / "a")
    np.save(tmp_path / "in.npy", np.ones((2, 3), np.float32))
    assert main(["run", str(out), "--input", str(tmp_path / "in.npy"), "-o", str(tmp_path / "o")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), np.full((2, 3), 2.0))
    assert load(out).run({"x": np.ones((2, 3), np.float32)})["y"][0, 0] == 2.0


def _single_input_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "dbl",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_reexport_from_a_loaded_artifact_without_recompiling(art, tmp_path):
    """What the tuner does for its final export: reuse the partitions it already compiled and verified."""
    from collage.runtime.artifact import load
    graph, out = art
    a = load(out)
    plan = Plan.from_json((out / "plan.json").read_text())
    again = export(graph, plan, tmp_path / "again", compiled={p.index: p.compiled for p in a.partitions})
    old = json.loads((out / MANIFEST).read_text())["partitions"]
    new = json.loads((again / MANIFEST).read_text())["partitions"]
    assert [f["sha256"] for p in new for f in p["files"]] == [f["sha256"] for p in old for f in p["files"]]
    b, feeds = load(again), _feeds(graph)
    r1 = a.run(feeds)
    for k, v in b.run(feeds).items():
        np.testing.assert_array_equal(v, r1[k])
