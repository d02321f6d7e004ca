"""Bad inputs given to the real ``collage`` command (a subprocess each): every case ends with exit code 2,
exactly one non-empty line on stderr naming the problem, and no traceback (issue 15's corpus).

Covers what used to end in a traceback (negative / contradictory / empty ``--shape``, a damaged cost DB,
a truncated .tar.gz, an .npz with an object member, ``run --output FILE``, ``-o`` read-only or under a
file) and what already worked (malformed, truncated, unknown op, symbolic dims, bad inputs, tampered
artifacts, unsafe archives). For the tamper cases the test also checks that nothing outside the artifact
was opened (the outside file is a FIFO: opening it would block the loader, and the case would time out)
and that no code ran (an unlisted TVM library whose constructor would write a sentinel file).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime.manifest import MANIFEST
from collage.tuner.export import export, write_archive
from collage.util import sha256_file

TIMEOUT = 120


def _conv_model(batch: int | str = "n") -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "small",
                          [helper.make_tensor_value_info("x", T.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [batch, 4, 8, 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _save(path: Path, nodes, inputs, outputs, *, opsets: dict | None = None, inits=(), ir_version: int | None = None):
    """A one-graph model of ``nodes`` saved at ``path`` (opset 17 of the default domain unless ``opsets``)."""
    model = helper.make_model(helper.make_graph(nodes, path.stem, inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid(k, v) for k, v in (opsets or {"": 17}).items()])
    if ir_version is not None:
        model.ir_version = ir_version
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """Files the cases point at: models, an artifact and its archive, cost DBs, inputs."""
    d = tmp_path_factory.mktemp("bad")
    onnx.save(_conv_model(), str(d / "sym.onnx"))
    onnx.save(_conv_model(1), str(d / "static.onnx"))
    onnx.save(_conv_model(0), str(d / "dim0.onnx"))
    (d / "notes.onnx").write_text("this is a text file, not a model\n")
    data = (d / "static.onnx").read_bytes()
    (d / "cut.onnx").write_bytes(data[: len(data) // 2])
    x2, y2 = helper.make_tensor_value_info("x", T.FLOAT, [2]), helper.make_tensor_value_info("y", T.FLOAT, [2])
    x14, y14 = helper.make_tensor_value_info("x", T.FLOAT, [1, 4]), helper.make_tensor_value_info("y", T.FLOAT, [1, 4])
    _save(d / "custom.onnx", [helper.make_node("FancyOp", ["x"], ["y"], domain="com.example", name="fancy")], [x2],
          [y2], opsets={"": 17, "com.example": 1})
    _save(d / "unknown.onnx", [helper.make_node("NoSuchOp", ["x"], ["y"], name="nosuch")], [x2], [y2])
    _save(d / "badattr.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r", foo=1)], [x14], [y14], ir_version=8)
    _save(d / "ghost.onnx", [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")], [x14], [y14])
    _save(d / "noout.onnx", [helper.make_node("Relu", ["x"], ["a"], name="r")], [x14], [y14])
    _save(d / "opset99.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [x14], [y14], opsets={"": 99})
    _save(d / "strings.onnx", [helper.make_node("Identity", ["x"], ["y"], name="same")],
          [helper.make_tensor_value_info("x", T.STRING, [2])], [helper.make_tensor_value_info("y", T.STRING, [2])])
    _save(d / "topk.onnx", [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="topk"),  # k an input:
                            helper.make_node("Relu", ["v"], ["y"], name="relu")],  # the size depends on its value
          [x14, helper.make_tensor_value_info("k", T.INT64, [1])], [helper.make_tensor_value_info("y", T.FLOAT, None)])
    _save(d / "constout.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [x14],  # once refused at export
          [y14, helper.make_tensor_value_info("k", T.FLOAT, [2])],
          inits=[numpy_helper.from_array(np.ones(2, np.float32), "k")])

    graph = Graph.load(d / "static.onnx")
    export(graph, Plan([Partition(tuple(range(len(graph))), "onnxruntime")]), d / "art")
    write_archive(d / "art")
    archive = (d / "art.tar.gz").read_bytes()
    (d / "trunc.tar.gz").write_bytes(archive[: len(archive) // 2])
    (d / "fake.tar.gz").write_bytes(b"neither gzip nor tar")
    with tarfile.open(d / "evil.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))

    np.save(d / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    np.save(d / "x_wrong.npy", np.zeros((1, 3, 9, 9), np.float32))
    np.savez(d / "obj.npz", x=np.array([{"a": 1}], dtype=object))
    (d / "afile").write_text("a file, not a directory\n")

    # a cost DB with a damaged page (the costs table's root page), one of another program
    db = d / "costs.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE costs_v1 (fingerprint TEXT, x REAL)")
    c.executemany("INSERT INTO costs_v1 VALUES (?, ?)", [(f"fp{i}", i) for i in range(200)])
    c.execute("CREATE TABLE collage_meta (name TEXT PRIMARY KEY, value TEXT)")
    c.commit()
    root = c.execute("SELECT rootpage FROM sqlite_master WHERE name='costs_v1'").fetchone()[0]
    page = c.execute("PRAGMA page_size").fetchone()[0]
    c.close()
    with open(db, "r+b") as f:
        f.seek(page * (root - 1))
        f.write(b"\x07" + b"\xff" * 64)
    other = sqlite3.connect(d / "other.sqlite")
    other.execute("CREATE TABLE t (a)")
    other.commit()
    other.close()
    return d


def _tampered(scene: Path, name: str, edit) -> Path:
    d = scene / name
    if not d.exists():
        shutil.copytree(scene / "art", d)
        m = json.loads((d / MANIFEST).read_text())
        edit(d, m)
        (d / MANIFEST).write_text(json.dumps(m))
    return d


def _checksum(d: Path, m: dict) -> None:
    part = m["partitions"][0]
    f = d / part["dir"] / part["files"][0]["name"]
    f.write_bytes(f.read_bytes() + b"\0")


def _outside_fifo(d: Path, m: dict) -> None:
    fifo = d.parent / f"{d.name}-outside.onnx"
    if not fifo.exists():
        os.mkfifo(fifo)
    m["partitions"][0]["entry"]["files"] = [str(fifo)]


def _dotdot(d: Path, m: dict) -> None:
    fifo = d.parent / f"{d.name}-outside.onnx"
    if not fifo.exists():
        os.mkfifo(fifo)
    m["partitions"][0]["files"][0]["name"] = f"../../../{fifo.name}"


def _symlink_out(d: Path, m: dict) -> None:
    part = m["partitions"][0]
    inside = d / part["dir"] / part["files"][0]["name"]
    outside = d.parent / f"{d.name}-outside.onnx"
    shutil.move(inside, outside)
    inside.symlink_to(outside)


#: (id, argv, needles in the error line). Paths are relative to the scene folder (the cwd of the command).
CASES = [
    # --shape
    ("shape-negative", ["tune", "sym.onnx", "--shape", "x=1,-3,8,8", "-o", "o1"], ["x=1,-3,8,8", "negative"]),
    ("shape-zero", ["tune", "sym.onnx", "--shape", "x=0,3,8,8", "-o", "o1"], ["x=0,3,8,8", "size 0"]),
    ("shape-channels", ["tune", "sym.onnx", "--shape", "x=1,5,8,8", "-o", "o1"], ["'conv'", "5 channels", "take 3"]),
    ("shape-not-integers", ["tune", "sym.onnx", "--shape", "x=a,b", "-o", "o1"], ["x=a,b", "integers"]),
    ("shape-unknown-input", ["tune", "sym.onnx", "--shape", "nope=1,3,8,8", "-o", "o1"], ["nope"]),
    ("symbolic-dims", ["tune", "sym.onnx", "-o", "o1"], ["'x'", "--shape x=1,3,8,8"]),
    ("model-dim0", ["inspect", "dim0.onnx"], ["'x'", "size 0", "--shape x=1,3,8,8"]),
    # models
    ("not-onnx", ["inspect", "notes.onnx"], ["notes.onnx", "not a readable ONNX model"]),
    ("truncated-onnx", ["inspect", "cut.onnx"], ["cut.onnx"]),
    ("missing-model", ["tune", "nothere.onnx", "-o", "o1"], ["nothere.onnx", "no such file"]),
    ("unknown-domain", ["inspect", "custom.onnx"], ["FancyOp", "com.example"]),
    ("unknown-op", ["tune", "unknown.onnx", "-o", "o1", "--backends", "onnxruntime"], ["NoSuchOp"]),
    ("measure-runs-checker", ["measure", "badattr.onnx", "--backends", "onnxruntime", "--db", "m.sqlite"],
     ["badattr.onnx", "ONNX checker", "foo"]),
    # cost DB
    ("db-damaged-page", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--db", "costs.sqlite"],
     ["costs.sqlite", "damaged", "Move it away"]),
    ("db-damaged-measure", ["measure", "static.onnx", "--backends", "onnxruntime", "--db", "costs.sqlite"],
     ["costs.sqlite", "damaged"]),
    ("db-not-collage", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--db", "other.sqlite"],
     ["other.sqlite", "not a collage cost DB"]),
    ("db-not-sqlite", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--db", "afile"],
     ["afile", "not an SQLite file"]),
    ("tune-guided-no-budget", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--measure-order",
                               "guided"], ["--budget", "guided"]),
    # output locations (checked before any measuring)
    ("tune-o-under-file", ["tune", "static.onnx", "-o", "afile/out", "--backends", "onnxruntime"],
     ["afile", "is a file"]),
    ("tune-o-is-file", ["tune", "static.onnx", "-o", "afile", "--backends", "onnxruntime"],
     ["afile", "not a directory"]),
    ("tune-o-read-only", ["tune", "static.onnx", "-o", "/proc/collage-h15/out", "--backends", "onnxruntime"],
     ["/proc", "cannot write"]),
    ("run-output-existing-file", ["run", "art", "--random", "--output", "afile"], ["afile", "not a directory"]),
    ("run-output-under-file", ["run", "art", "--random", "--output", "afile/outs"], ["afile", "is a file"]),
    # inputs
    ("npz-object-member", ["run", "art", "--input", "obj.npz"], ["obj.npz", "'x'", "pickled"]),
    ("input-wrong-shape", ["run", "art", "--input", "x=x_wrong.npy"], ["'x'", "(1, 3, 9, 9)"]),
    ("input-missing-file", ["run", "art", "--input", "x=nope.npy"], ["nope.npy", "no such input file"]),
    ("input-repeated", ["run", "art", "--input", "x=x.npy", "--input", "x=x.npy"], ["'x'", "twice"]),
    ("input-unknown-name", ["run", "art", "--input", "y=x.npy"], ["'y'"]),
    ("no-inputs", ["run", "art"], ["no inputs"]),
    # artifacts
    ("artifact-missing", ["run", "nothere", "--random"], ["nothere", "no such artifact"]),
    ("archive-truncated", ["run", "trunc.tar.gz", "--random"], ["trunc.tar.gz", "truncated"]),
    ("archive-not-an-archive", ["run", "fake.tar.gz", "--random"], ["fake.tar.gz", "not a readable .tar.gz"]),
    ("backend-option-out-of-range", ["tune", "static.onnx", "-o", "o1", "--backend-option", "openvino.threads=-4"],
     ["'openvino'", "threads", "-4"]),
    ("archive-unsafe", ["run", "evil.tar.gz", "--random"], ["evil.tar.gz", "unsafe archive"]),
    ("tamper-checksum", ["run", "@checksum", "--random"], ["checksum mismatch"]),
    ("tamper-entry-outside", ["run", "@outside_fifo", "--random"], ["outside.onnx", "refused"]),
    ("tamper-dotdot", ["run", "@dotdot", "--random"], ["bad file entry", "refused"]),
    ("tamper-symlink-out", ["run", "@symlink_out", "--random"], ["leads outside the artifact"]),
    # report and annotate check an artifact's files as run does; annotate writes no file into one, nor a non-ONNX
    ("report-missing-file", ["report", "@delete_part"], ["missing", "incomplete"]),
    ("report-checksum", ["report", "@checksum"], ["checksum mismatch"]),
    ("annotate-checksum", ["annotate", "@checksum", "-o", "ann.onnx"], ["checksum mismatch"]),
    ("annotate-bad-report", ["annotate", "@bad_report", "-o", "ann.onnx"], ["report.json", "unreadable report"]),
    ("annotate-o-not-onnx", ["annotate", "art", "-o", "ann.json"], ["ann.json", "ending in .onnx"]),
    ("annotate-o-directory", ["annotate", "art", "-o", "."], ["ending in .onnx", "not a directory"]),
    ("annotate-o-inside-artifact", ["annotate", "art", "-o", "art/ann.onnx"], ["art/ann.onnx", "inside the artifact"]),
    # option values (checked before any measuring)
    ("tune-no-backend", ["tune", "static.onnx", "-o", "o1", "--backends", ","], ["no backend named"]),
    ("tune-atol-nan", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--atol", "nan"],
     ["atol", "nan"]),
    ("tune-rtol-inf", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--rtol", "inf"],
     ["rtol", "inf"]),
    ("tune-atol-negative", ["tune", "static.onnx", "-o", "o1", "--backends", "onnxruntime", "--atol=-1"],
     ["atol", "-1"]),
    # models refused before anything is measured
    ("tune-string-input", ["tune", "strings.onnx", "-o", "o1", "--backends", "onnxruntime"],
     ["'x'", "no random values"]),
    ("tune-opset-too-new", ["tune", "opset99.onnx", "-o", "o1", "--backends", "onnxruntime"],
     ["opset99.onnx", "opset 99", "opset <= "]),
    ("data-dependent-shape", ["tune", "topk.onnx", "-o", "o1"], ["'v'", "'topk'", "could not follow TopK"]),
    ("constant-output", ["tune", "constout.onnx", "-o", "o1", "--backends", "onnxruntime"], ["'k'", "a constant"]),
    ("inspect-reads-undefined", ["inspect", "ghost.onnx", "--support"], ["'add_ghost'", "'ghost'"]),
    ("inspect-output-unproduced", ["inspect", "noout.onnx"], ["noout.onnx", "'y'"]),
    # bench: every model checked before the first tune; no results file written
    ("bench-unknown-model", ["bench", "--models", "zoo:tiny-resnet,zoo:nope", "--out", "res"], ["'nope'"]),
    ("bench-missing-file", ["bench", "--models", "nothere.onnx", "--out", "res"], ["nothere.onnx", "no such"]),
    ("bench-no-model", ["bench", "--models", ",", "--out", "res"], ["no model named"]),
    ("bench-model-twice", ["bench", "--models", "zoo:tiny-resnet,zoo:tiny-resnet", "--out", "res"], ["named twice"]),
    ("bench-not-onnx", ["bench", "--models", "zoo:tiny-resnet,notes.onnx", "--out", "res"],
     ["notes.onnx", "not a readable ONNX model"]),
    ("bench-backend-option", ["bench", "--models", "zoo:tiny-resnet", "--out", "res", "--backend-option",
                              "openvino.threads=-4"], ["'openvino'", "threads"]),
    ("bench-unknown-backend", ["bench", "--models", "zoo:tiny-resnet", "--out", "res", "--backends", "nope"],
     ["nope"]),
]
def _delete_part(d: Path, m: dict) -> None:
    part = m["partitions"][0]
    (d / part["dir"] / part["files"][0]["name"]).unlink()


def _bad_report(d: Path, m: dict) -> None:
    (d / m.get("report", "report.json")).write_text("{not json")


EDITS = {"checksum": _checksum, "outside_fifo": _outside_fifo, "dotdot": _dotdot, "symlink_out": _symlink_out,
         "delete_part": _delete_part, "bad_report": _bad_report}


#: the collage under test (a worktree's, not whatever is installed) for the subprocesses too
_ROOT = str(Path(__import__("collage").__file__).resolve().parents[1])


def _cli(cwd: Path, argv: list[str], env: dict | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    try:
        return subprocess.run([sys.executable, "-m", "collage.cli", *argv], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONPATH": path, **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"collage {' '.join(argv)} did not finish in {timeout}s (did it open a FIFO outside the artifact?)")


def _assert_one_line(proc: subprocess.CompletedProcess, command: str, needles: list[str]) -> str:
    err = proc.stderr
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{err}"
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith(f"collage {command}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_one_line_exit_2(scene, case):
    _, argv, needles = case
    argv = list(argv)
    if argv[1].startswith("@"):
        name = argv[1][1:]
        argv[1] = str(_tampered(scene, f"art-{name}", EDITS[name]))
    before = {p: p.read_bytes() for p in (scene / "costs.sqlite", scene / "other.sqlite")}
    proc = _cli(scene, argv)
    _assert_one_line(proc, argv[0], needles)
    for p, data in before.items():  # a DB collage refuses is left exactly as it was
        assert p.read_bytes() == data, f"{p.name} was written to"
    assert not (scene / "o1").exists() and not (scene / "res").exists()


def test_tamper_unlisted_tvm_library_runs_no_code(scene, tmp_path):
    """A tvm partition whose manifest does not list tvm_lib.so: exit 2, one line, and the library's constructor
    (which writes a sentinel file when the library is dlopened) never ran."""
    from collage.backends.tvm.backend import LIB_FILE, META_FILE, TVMBackend

    reason = TVMBackend().available()
    if reason:
        pytest.skip(f"tvm: {reason}")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the sentinel library")
    d = tmp_path / "art-tvm"
    shutil.copytree(scene / "art", d)
    m = json.loads((d / MANIFEST).read_text())
    pdir = d / "partitions" / "000-tvm"
    pdir.mkdir()
    src = tmp_path / "s.c"
    src.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include <stdlib.h>
        __attribute__((constructor)) static void sentinel(void) {
            const char *p = getenv("COLLAGE_SENTINEL");
            if (p) { FILE *f = fopen(p, "w"); if (f) { fputs("ran", f); fclose(f); } }
        }
    """))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(pdir / LIB_FILE), str(src)], check=True)
    (pdir / META_FILE).write_text(json.dumps({"inputs": [], "outputs": []}))
    tvm = TVMBackend()
    m["backends"] = {"tvm": {"version": tvm.version(), "device": "cpu", "options": {}, "settings": tvm.options}}
    m["partitions"][0].update(backend="tvm", dir="partitions/000-tvm", entry={"inputs": ["x"], "outputs": ["y"]},
                              files=[{"name": META_FILE, "sha256": sha256_file(pdir / META_FILE), "bytes": 1}])
    (d / MANIFEST).write_text(json.dumps(m))
    sentinel = tmp_path / "ran.txt"
    proc = _cli(scene, ["run", str(d), "--random"], env={"COLLAGE_SENTINEL": str(sentinel)})
    _assert_one_line(proc, "run", [LIB_FILE, "not in the partition's checked file list"])
    assert not sentinel.exists(), "the unlisted library's code ran"


def test_read_only_db_is_named_clearly(scene, tmp_path, monkeypatch):
    """(In-process: the tests may run as root, for whom chmod does not make a file read-only.)"""
    from collage.measure import db as dbmod
    from collage.errors import CollageError

    path = tmp_path / "ro.sqlite"
    dbmod.SQLiteCostDB(path).close()
    real_access = os.access
    monkeypatch.setattr(dbmod.os, "access", lambda p, mode, **k: False if Path(p) == path and mode & os.W_OK
                        else real_access(p, mode, **k))
    with pytest.raises(CollageError, match=r"ro\.sqlite.*read-only.*writable"):
        dbmod.SQLiteCostDB(path)


def test_new_db_in_read_only_folder_is_named_clearly(tmp_path, monkeypatch):
    """A new DB in a read-only folder: the message once said to move away a file that did not exist. (A healthy
    DB there was called damaged, "its measurements are lost": SQLite's own open fails first on a read-only mount,
    which a test run as root cannot make; the writability check now comes before that open.)"""
    from collage.measure import db as dbmod
    from collage.errors import CollageError

    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "costs.sqlite"
    real_access = os.access
    monkeypatch.setattr(dbmod.os, "access", lambda p, mode, **k: False if Path(p) == folder and mode & os.W_OK
                        else real_access(p, mode, **k))
    with pytest.raises(CollageError, match=r"costs\.sqlite: .*/ro is read-only") as e:
        dbmod.SQLiteCostDB(path)
    assert "damaged" not in str(e.value) and "Move it away" not in str(e.value)
