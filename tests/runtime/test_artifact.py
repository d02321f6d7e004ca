"""Export of a plan as an artifact: manifest contents, checksums, atomic replacement, refusals."""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import need_backends
from collage.runtime.manifest import FORMAT_VERSION, MANIFEST, read_manifest
from collage.tuner.export import export
from collage.errors import ArtifactError
from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime.artifact import BoundaryOverhead
from collage.util import sha256_bytes, sha256_file


def small_model() -> onnx.ModelProto:
    """x -> Conv -> Relu -> Conv -> Add(skip) -> Relu -> GlobalAveragePool -> Flatten -> y, plus a second output."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.2, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y.out/0"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y.out/0", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("r1", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializer=[w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def small_graph(tmp_path: Path) -> Graph:
    path = tmp_path / "small.onnx"
    onnx.save(small_model(), str(path))
    return Graph.load(path)


def three_way_plan(n: int, backends=("onnxruntime", "openvino", "onnxruntime")) -> Plan:
    cuts = [0, n // 3, 2 * n // 3, n]
    return Plan([Partition(tuple(range(cuts[k], cuts[k + 1])), backends[k], cost_ms=0.1 * (k + 1),
                           runner_up=(backends[(k + 1) % 3], 0.5)) for k in range(3)], predicted_ms=0.7)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    need_backends("onnxruntime", "openvino")
    tmp = tmp_path_factory.mktemp("art")
    graph = small_graph(tmp)
    plan = three_way_plan(len(graph))
    report = {"model": "small", "plan_ms": 1.5, "baselines": {"onnxruntime": 2.0}, "notes": ["hello"],
              "numerics": {"max_abs_err": np.float32(1e-6)},  # numpy scalars must serialise
              "boundary_overhead_ms": BoundaryOverhead(1.0, [0.3, 0.3, 0.3], [0.02, 0.03], 5)}  # and result objects
    out = export(graph, plan, tmp / "out", report=report, archive=True)
    return graph, plan, out


def test_manifest_records_versions_partitions_and_checksums(exported):
    graph, plan, out = exported
    m = read_manifest(out)
    assert m["format_version"] == FORMAT_VERSION
    assert m["model"]["sha256"] == sha256_file(graph.source) and m["model"]["sha256_of"] == "source file"
    from collage.backends import get_backend
    assert m["backends"]["openvino"]["version"] == get_backend("openvino").version()
    assert m["backends"]["onnxruntime"]["version"] == get_backend("onnxruntime").version()
    assert [p["backend"] for p in m["partitions"]] == ["onnxruntime", "openvino", "onnxruntime"]
    assert [p["dir"] for p in m["partitions"]] == ["partitions/000-onnxruntime", "partitions/001-openvino",
                                                    "partitions/002-onnxruntime"]
    assert sorted(i for p in m["partitions"] for i in p["nodes"]) == list(range(len(graph)))
    assert m["inputs"] == [{"name": "x", "shape": [1, 4, 8, 8], "dtype": "float32"}]
    assert [o["name"] for o in m["outputs"]] == ["y.out/0", "r1"]
    produced = {"x"}
    for p, part in zip(m["partitions"], plan.partitions):
        assert set(p["inputs"]) <= produced, "partitions must be listed in execution order"
        produced |= set(p["outputs"])
        assert p["ops"] == [graph.op_type(i) for i in p["nodes"]]
        assert p["cost_ms"] == part.cost_ms and tuple(p["runner_up"]) == part.runner_up
        for f in p["files"]:
            assert sha256_file(out / p["dir"] / f["name"]) == f["sha256"]
    assert {"y.out/0", "r1"} <= produced
    # r1 is a graph output AND feeds a later partition: it must leave partition 0
    assert "r1" in m["partitions"][0]["outputs"]


def test_plan_and_report_written(exported):
    graph, plan, out = exported
    saved = Plan.from_json((out / "plan.json").read_text())
    assert [p.nodes for p in saved.partitions] == [p.nodes for p in plan.partitions]
    assert all(p.inputs and p.outputs for p in saved.partitions)  # boundaries filled in
    report = json.loads((out / "report.json").read_text())
    assert report["notes"] == ["hello"] and report["numerics"]["max_abs_err"] == pytest.approx(1e-6)
    assert report["boundary_overhead_ms"]["per_boundary_ms"] == [0.02, 0.03]
    assert report["boundary_overhead_ms"]["total_ms"] == pytest.approx(0.1)


def test_archive_holds_the_directory(exported):
    _, _, out = exported
    tar_path = out.parent / (out.name + ".tar.gz")
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
    assert f"{out.name}/{MANIFEST}" in names
    assert all(n.startswith(out.name + "/") for n in names)
    assert oct((tar_path.stat().st_mode) & 0o777) != oct(0o600)


def test_model_sha_of_in_memory_model(tmp_path):
    need_backends("onnxruntime")
    graph = Graph.load(small_model())
    out = export(graph, Plan.single("onnxruntime", len(graph)), tmp_path / "a")
    m = read_manifest(out)
    assert m["model"]["sha256_of"] == "serialized model"
    assert m["model"]["sha256"] == sha256_bytes(graph.model.SerializeToString())


def test_reexport_replaces_atomically_and_failure_keeps_the_old(tmp_path):
    need_backends("onnxruntime", "openvino")
    graph = small_graph(tmp_path)
    out = export(graph, Plan.single("onnxruntime", len(graph)), tmp_path / "out")
    before = (out / MANIFEST).read_text()
    # a failing export (precompiled partition of the wrong nodes) must leave the old artifact intact
    from collage.backends import get_backend
    wrong = get_backend("onnxruntime").compile(graph.extract([0]))
    with pytest.raises(ArtifactError, match="partition 0"):
        export(graph, Plan.single("onnxruntime", len(graph)), out, compiled={0: wrong})
    assert (out / MANIFEST).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "small.onnx"], "temporary dirs left behind"
    # a successful one replaces it
    out2 = export(graph, three_way_plan(len(graph)), out)
    assert out2 == out and len(read_manifest(out)["partitions"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "small.onnx"]


def test_precompiled_partitions_are_used(tmp_path):
    need_backends("onnxruntime", "openvino")
    graph = small_graph(tmp_path)
    plan = three_way_plan(len(graph))
    from collage.backends import get_backend
    c1 = get_backend("openvino").compile(graph.extract(plan.partitions[1].nodes))
    out = export(graph, plan, tmp_path / "out", compiled={1: c1})
    assert read_manifest(out)["partitions"][1]["files"][0]["name"].endswith(".xml")


def test_refuses_to_replace_a_foreign_directory(tmp_path):
    need_backends("onnxruntime")
    graph = small_graph(tmp_path)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a collage artifact"):
        export(graph, Plan.single("onnxruntime", len(graph)), foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_refuses_bad_plans(tmp_path):
    need_backends("onnxruntime")
    graph = small_graph(tmp_path)
    n = len(graph)
    with pytest.raises(ArtifactError, match="no partition|exactly once"):
        export(graph, Plan([Partition(tuple(range(n - 1)), "onnxruntime")]), tmp_path / "a")
    backwards = Plan([Partition(tuple(range(3, n)), "onnxruntime"), Partition((0, 1, 2), "onnxruntime")])
    with pytest.raises(ArtifactError, match="executable order"):
        export(graph, backwards, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_read_manifest_refusals(exported, tmp_path):
    _, _, out = exported
    with pytest.raises(ArtifactError, match="no such artifact"):
        read_manifest(tmp_path / "nothing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError, match=r"no manifest\.json"):
        read_manifest(empty)
    newer = tmp_path / "newer"
    shutil.copytree(out, newer)
    m = json.loads((newer / MANIFEST).read_text())
    m["format_version"] = FORMAT_VERSION + 1
    (newer / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=r"newer/manifest\.json.*upgrade collage"):
        read_manifest(newer)
    (newer / MANIFEST).write_text("{not json")
    with pytest.raises(ArtifactError, match=r"manifest\.json: unreadable"):
        read_manifest(newer)
    m["format_version"] = FORMAT_VERSION
    bad = json.loads(json.dumps(m))
    bad["partitions"][0]["files"][0]["name"] = "../../../etc/passwd"
    (newer / MANIFEST).write_text(json.dumps(bad))
    with pytest.raises(ArtifactError, match="partition 0 lists a bad file entry"):
        read_manifest(newer)
    del m["partitions"]
    (newer / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="partitions"):
        read_manifest(newer)
