"""Issue 15 (silently wrong #3): one list of files per partition, checked before anything is opened.

Before, ``verify_files`` checked the manifest's ``files`` list but the ORT and OpenVINO loaders opened the
names in ``entry["files"]`` (a second, unchecked list: absolute paths and ``..`` passed), and the TVM loader
dlopened ``tvm_lib.so`` whether or not it was listed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

import collage
from collage.errors import ArtifactError
from collage.runtime.manifest import MANIFEST
from collage.tuner.export import export
from collage.util import sha256_file
from tests.helpers import need_backends
from tests.runtime.test_artifact import small_graph, three_way_plan


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    need_backends("onnxruntime", "openvino")
    tmp = tmp_path_factory.mktemp("files")
    graph = small_graph(tmp)
    return export(graph, three_way_plan(len(graph)), tmp / "out")


def _copy(artifact, tmp_path) -> tuple[Path, dict]:
    d = tmp_path / "art"
    shutil.copytree(artifact, d)
    return d, json.loads((d / MANIFEST).read_text())


def _save(d, m):
    (d / MANIFEST).write_text(json.dumps(m))


def _record_sessions(monkeypatch) -> list[str]:
    """Every file an ONNX Runtime partition session is created from (a sentinel for "was it opened")."""
    from collage.backends.onnxruntime.backend import OnnxRuntimeBackend

    opened: list[str] = []
    original = OnnxRuntimeBackend.open_session

    def spy(self, data, *args, **kwargs):
        if isinstance(data, str):
            opened.append(os.path.realpath(data))
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(OnnxRuntimeBackend, "open_session", spy)
    return opened


def test_manifest_has_one_file_list(artifact):
    m = json.loads((artifact / MANIFEST).read_text())
    for part in m["partitions"]:
        assert "files" not in part["entry"] and part["files"]
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    assert collage.load(artifact).run({"x": x})["y.out/0"].shape == (1, 8)


def test_entry_naming_an_unlisted_file_inside_is_refused(artifact, tmp_path, monkeypatch):
    """A second model put beside the listed one and named in entry.files: loaded unchecked, exit 0, before."""
    d, m = _copy(artifact, tmp_path)
    part = m["partitions"][2]
    listed = part["files"][0]["name"]
    other = onnx.load(str(d / part["dir"] / listed))
    for init in other.graph.initializer:  # different weights, same interface
        init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init) * 0 + 1, init.name))
    onnx.save(other, str(d / part["dir"] / "evil.onnx"))
    part["entry"]["files"] = ["evil.onnx"]
    _save(d, m)
    opened = _record_sessions(monkeypatch)
    with pytest.raises(ArtifactError, match=r"names file 'evil.onnx'.*refused"):
        collage.load(d)
    assert not any(p.endswith("evil.onnx") for p in opened)


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_entry_naming_a_file_outside_is_refused_unopened(artifact, tmp_path, monkeypatch, how):
    d, m = _copy(artifact, tmp_path)
    part = m["partitions"][0]
    outside = tmp_path / "outside.onnx"
    shutil.copyfile(d / part["dir"] / part["files"][0]["name"], outside)
    part["entry"]["files"] = [str(outside) if how == "absolute" else "../../../outside.onnx"]
    _save(d, m)
    opened = _record_sessions(monkeypatch)
    with pytest.raises(ArtifactError, match="outside.onnx"):
        collage.load(d)
    assert str(outside.resolve()) not in opened and opened == []  # refused before any partition was opened


def test_listed_file_that_is_a_symlink_out_is_refused(artifact, tmp_path, monkeypatch):
    """Same bytes (the checksum matches), but the file lies outside the artifact."""
    d, m = _copy(artifact, tmp_path)
    part = m["partitions"][0]
    inside = d / part["dir"] / part["files"][0]["name"]
    outside = tmp_path / "outside.onnx"
    shutil.move(inside, outside)
    inside.symlink_to(outside)
    opened = _record_sessions(monkeypatch)
    with pytest.raises(ArtifactError, match=r"leads outside the artifact"):
        collage.load(d)
    assert opened == []


def test_openvino_weights_must_be_listed(artifact, tmp_path):
    d, m = _copy(artifact, tmp_path)
    part = m["partitions"][1]
    assert [f["name"][-4:] for f in part["files"]] == [".xml", ".bin"]
    part["files"] = part["files"][:1]
    _save(d, m)
    with pytest.raises(ArtifactError, match=r"\.bin"):
        collage.load(d)


SENTINEL_C = textwrap.dedent("""
    #include <stdio.h>
    #include <stdlib.h>
    __attribute__((constructor)) static void collage_sentinel(void) {
        const char *p = getenv("COLLAGE_SENTINEL");
        if (p) { FILE *f = fopen(p, "w"); if (f) { fputs("ran", f); fclose(f); } }
    }
""")


def _sentinel_so(tmp_path: Path) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the sentinel library")
    src, lib = tmp_path / "sentinel.c", tmp_path / "tvm_lib.so"
    src.write_text(SENTINEL_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_tvm_library_not_listed_is_never_loaded(artifact, tmp_path, monkeypatch):
    """A tvm partition whose manifest does not list tvm_lib.so: load refuses and the library's code never runs
    (its constructor would write a sentinel file the moment it is dlopened)."""
    from collage.backends.tvm.backend import LIB_FILE, META_FILE, TVMBackend

    reason = TVMBackend().available()
    if reason:
        pytest.skip(f"tvm: {reason}")
    sentinel = tmp_path / "ran.txt"
    monkeypatch.setenv("COLLAGE_SENTINEL", str(sentinel))
    d, m = _copy(artifact, tmp_path)
    part = m["partitions"][2]
    pdir = d / "partitions" / "002-tvm"
    pdir.mkdir()
    shutil.copyfile(_sentinel_so(tmp_path), pdir / LIB_FILE)
    (pdir / META_FILE).write_text(json.dumps({"inputs": [], "outputs": []}))
    tvm = TVMBackend()
    m["backends"]["tvm"] = {"version": tvm.version(), "device": "cpu", "options": {}, "settings": tvm.options}
    part.update(backend="tvm", dir="partitions/002-tvm", entry={"inputs": [], "outputs": []},
                files=[{"name": META_FILE, "sha256": sha256_file(pdir / META_FILE), "bytes": 1}])
    _save(d, m)
    with pytest.raises(ArtifactError, match=rf"{LIB_FILE}: not in the partition's checked file list"):
        collage.load(d)
    assert not sentinel.exists(), "the unlisted library's code ran"
    # the same library, listed with its checksum, is loaded (and runs its code): the checksum guards
    # against damage, not against whoever can edit the manifest (README: trust an artifact's source)
    part["files"].append({"name": LIB_FILE, "sha256": sha256_file(pdir / LIB_FILE), "bytes": 1})
    _save(d, m)
    with pytest.raises(ArtifactError):
        collage.load(d)  # not a TVM module: refused after dlopen
    assert sentinel.exists()
