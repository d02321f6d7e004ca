"""Issue 37: the artifact output directory never loses a user's file, and what cannot be written is refused
before anything is measured (one line, exit 2, no traceback).

- ``-o DIR`` holding somebody else's ``manifest.json`` (or an artifact whose files were changed), a non-empty
  folder without a manifest: refused; the cost DB is not even created (nothing was measured);
- re-tuning into an artifact the user added files to: the files are carried over, said in one log line;
- ``-o`` a mount point (``docker run -v host:/out ... -o /out``) or under a parent folder that cannot be
  written: the artifact is written inside the directory; an immutable directory is refused up front;
- ``--archive`` where ``OUT.tar.gz`` is a directory: refused;
- ``collage bench --artifacts`` and ``collage.tune`` make the same checks.
The mount and immutable cases need root (``mount --bind``, ``chattr +i``); they are skipped elsewhere.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime.manifest import MANIFEST
from collage.tuner.export import export
from tests.commands.test_bad_inputs import _assert_one_line, _cli, _conv_model
from tests.helpers import need_backends

TUNE = ["--backends", "onnxruntime", "--budget", "6s"]
USER_FILES = {"index.html": "<h1>my web app</h1>\n", "static/app.js": "console.log(1)\n"}
ADDED = {"NOTES.md": "tuned on the quiet box\n", "inputs/x.npy": None, "partitions/000-onnxruntime/mine.txt": "x\n"}


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """static.onnx and a collage artifact of it (``art``, exported directly: no tune) to copy."""
    need_backends("onnxruntime")
    d = tmp_path_factory.mktemp("outdir")
    onnx.save(_conv_model(1), str(d / "static.onnx"))
    graph = Graph.load(d / "static.onnx")
    export(graph, Plan([Partition(tuple(range(len(graph))), "onnxruntime")]), d / "art")
    return d


def _tree(root: Path) -> dict[str, str]:
    """{relative path: sha256 (a folder: 'dir', a link: its target)} of everything under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = ("link:" + os.readlink(p) if p.is_symlink() else "dir" if p.is_dir()
                    else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _web_app(d: Path) -> Path:
    """A folder of the user's with a manifest.json that is not collage's."""
    for rel, text in USER_FILES.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    (d / MANIFEST).write_text(json.dumps({"name": "my web app", "version": "1.0"}))
    return d


def _add_files(art: Path) -> None:
    for rel, text in ADDED.items():
        (art / rel).parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            np.save(art / rel, np.arange(6, dtype=np.float32))
        else:
            (art / rel).write_text(text)
    (art / "report.html").write_text("<html>the old plan</html>")


def _refused(scene: Path, tmp_path: Path, argv: list[str], needles: list[str], command: str = "tune") -> None:
    """exit 2, one line naming it, and nothing measured: the cost DB was not even created."""
    db = tmp_path / "costs.sqlite"
    proc = _cli(scene, [*argv, "--db", str(db)])
    _assert_one_line(proc, command, needles)
    assert not db.exists(), "the cost DB was opened: the check came after measuring began"


def test_foreign_manifest_is_refused_before_measuring(scene, tmp_path):
    """Old code: the tune replaced the folder (index.html, static/app.js gone), exit 0."""
    out = _web_app(tmp_path / "site")
    before = _tree(out)
    _refused(scene, tmp_path, ["tune", "static.onnx", "-o", str(out), *TUNE], [str(out), MANIFEST,
                                                                                "not a collage artifact"])
    assert _tree(out) == before


def test_changed_artifact_is_refused(scene, tmp_path):
    """A collage manifest whose listed file was edited: not collage's to replace. Old code: replaced, exit 0."""
    out = tmp_path / "art"
    shutil.copytree(scene / "art", out)
    part = next((out / "partitions").iterdir())
    victim = next(part.iterdir())
    victim.write_bytes(victim.read_bytes() + b"edited by hand")
    before = _tree(out)
    _refused(scene, tmp_path, ["tune", "static.onnx", "-o", str(out), *TUNE], [str(out), "checksum mismatch"])
    assert _tree(out) == before


def test_non_empty_folder_without_manifest_is_refused(scene, tmp_path):
    """(Already refused by the old code; kept so.)"""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("\\begin{document}")
    _refused(scene, tmp_path, ["tune", "static.onnx", "-o", str(out), *TUNE], [str(out), "not a collage artifact"])
    assert (out / "thesis.tex").read_text() == "\\begin{document}"


def test_archive_path_that_is_a_directory_is_refused(scene, tmp_path):
    """Old code: a traceback (IsADirectoryError in write_archive) after the whole tune."""
    out = tmp_path / "o2"
    (tmp_path / "o2.tar.gz").mkdir()
    _refused(scene, tmp_path, ["tune", "static.onnx", "-o", str(out), "--archive", *TUNE],
             ["o2.tar.gz", "not a file"])
    assert not out.exists()


def test_api_refuses_foreign_manifest(scene, tmp_path):
    """collage.tune makes the same check (a CollageError before anything is measured)."""
    import collage
    from collage.errors import ArtifactError

    out = _web_app(tmp_path / "site")
    before = _tree(out)
    with pytest.raises(ArtifactError, match="not a collage artifact"):
        collage.tune(str(scene / "static.onnx"), out, backends=["onnxruntime"], db=tmp_path / "c.sqlite",
                     budget="6s", progress=False)
    assert _tree(out) == before and not (tmp_path / "c.sqlite").exists()


def test_bench_refuses_foreign_artifact_folder(scene, tmp_path):
    """bench --artifacts: each model's folder is checked before the first tune. Old code: the tune replaced it
    (its error, had there been one, would have been a row of the results)."""
    arts = tmp_path / "arts"
    out = _web_app(arts / "static")
    before = _tree(out)
    _refused(scene, tmp_path, ["bench", "--models", "static.onnx", "--artifacts", str(arts), "--out",
                               str(tmp_path / "res"), *TUNE], [str(out), MANIFEST], command="bench")
    assert _tree(out) == before and not (tmp_path / "res").exists()


def _tune_ok(scene: Path, tmp_path: Path, out: Path) -> subprocess.CompletedProcess:
    proc = _cli(scene, ["tune", "static.onnx", "-o", str(out), *TUNE, "--db", str(tmp_path / "c.sqlite")])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def _check_artifact(out: Path) -> None:
    from collage.runtime.artifact import load

    a = load(out)  # checks every listed file's checksum
    a.run(a.random_inputs())


def test_retune_keeps_the_files_added_to_an_artifact(scene, tmp_path):
    """Old code: NOTES.md, inputs/x.npy and partitions/000-onnxruntime/mine.txt deleted without a word."""
    out = tmp_path / "art"
    shutil.copytree(scene / "art", out)
    _add_files(out)
    added = {k: v for k, v in _tree(out).items() if k in ADDED}
    proc = _tune_ok(scene, tmp_path, out)
    assert {k: v for k, v in _tree(out).items() if k in ADDED} == added
    lines = [line for line in proc.stderr.splitlines() if "kept 3 file(s)" in line]
    assert len(lines) == 1 and all(k in lines[0] for k in ADDED) and "report.html" in lines[0], proc.stderr
    assert not (out / "report.html").exists()  # the old plan's page: stale
    _check_artifact(out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".art")]


def _need_root_tool(*cmd: str) -> None:
    if os.geteuid() != 0 or shutil.which(cmd[0]) is None:
        pytest.skip(f"needs root and {cmd[0]}")


@contextlib.contextmanager
def _bind_mount(src: Path, mnt: Path):
    _need_root_tool("mount")
    mnt.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True).returncode:
        pytest.skip("mount --bind is not allowed here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@contextlib.contextmanager
def _immutable(path: Path):
    _need_root_tool("chattr")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip(f"chattr +i is not supported on {path}'s file system")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_tune_into_a_mount_point_writes_in_place(scene, tmp_path):
    """``-o`` a bind mount (``docker run -v host:/out ... -o /out``) holding an artifact and the user's files.
    Old code: OSError EBUSY from _replace_dir's rename, a traceback after the whole tune."""
    host = tmp_path / "host"
    shutil.copytree(scene / "art", host)
    _add_files(host)
    added = {k: v for k, v in _tree(host).items() if k in ADDED}
    with _bind_mount(host, tmp_path / "box" / "out") as out:
        _tune_ok(scene, tmp_path, out)
        assert subprocess.run(["mountpoint", "-q", str(out)]).returncode == 0
    assert {k: v for k, v in _tree(host).items() if k in ADDED} == added  # through the mount: in the host folder
    _check_artifact(host)
    assert not [p for p in host.iterdir() if p.name.startswith(".collage-")]


def test_tune_under_an_unwritable_parent_writes_in_place(scene, tmp_path):
    """An empty OUT whose parent cannot be written (immutable): the artifact is built inside OUT. Old code: the
    check refused it (it probed the parent only), though OUT itself is writable."""
    parent = tmp_path / "parent"
    (parent / "out").mkdir(parents=True)
    with _immutable(parent):
        _tune_ok(scene, tmp_path, parent / "out")
    _check_artifact(parent / "out")


def test_immutable_output_directory_is_refused(scene, tmp_path):
    """Nothing can be written in it, nor can it be replaced: refused before measuring (old code: a traceback
    from the rename in _replace_dir after the whole tune)."""
    out = tmp_path / "out"
    out.mkdir()
    with _immutable(out):
        _refused(scene, tmp_path, ["tune", "static.onnx", "-o", str(out), *TUNE], [str(out), "cannot write"])
