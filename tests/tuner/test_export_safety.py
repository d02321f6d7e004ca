"""Issue 37, the export's side: an artifact directory that cannot be renamed is written in place, and a crash in
the middle of writing it in place is finished (or undone) by the next check of the directory, the user's files
kept either way. (The CLI cases, a real bind mount among them: tests/commands/test_bad_output_dir.py.)"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest

from collage.graph.ir import Graph
from collage.plan import Partition, Plan
from collage.runtime.artifact import load
from collage.runtime.manifest import MANIFEST
from collage.tuner.export import check_output_location, export
from tests.helpers import need_backends
from tests.runtime.test_artifact import small_model

ROOT = str(Path(__import__("collage").__file__).resolve().parents[1])
NOTES = "my notes\n"


def _plans(graph: Graph) -> tuple[Plan, Plan]:
    """One partition (the old artifact), two (the new one): which one is at OUT tells them apart."""
    return (Plan([Partition(tuple(range(len(graph))), "onnxruntime")]),
            Plan([Partition((0, 1, 2, 3), "onnxruntime"), Partition((4, 5, 6), "onnxruntime")]))


def _partitions(out: Path) -> int:
    return len(load(out).partitions)  # load checks every listed file


def test_rename_refused_falls_back_to_writing_in_place(tmp_path, monkeypatch):
    """A bind mount of a folder of the same file system is no mount point to os.path.ismount: only the rename
    (EBUSY) tells. Simulated here by refusing any rename of OUT itself; the new artifact is copied in."""
    need_backends("onnxruntime")
    onnx.save(small_model(), str(tmp_path / "m.onnx"))
    graph = Graph.load(tmp_path / "m.onnx")
    old_plan, new_plan = _plans(graph)
    out = tmp_path / "out"
    export(graph, old_plan, out)
    (out / "NOTES.md").write_text(NOTES)
    real = os.rename

    def busy(src, dst, *args, **kwargs):
        if Path(src) == out:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", busy)
    assert export(graph, new_plan, out) == out.resolve()
    monkeypatch.undo()
    assert _partitions(out) == 2 and (out / "NOTES.md").read_text() == NOTES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out"]  # nothing left beside it
    assert not [p for p in out.iterdir() if p.name.startswith(".collage-")]  # nor inside


CRASH = textwrap.dedent("""
    import os, sys
    from collage.graph.ir import Graph
    from collage.tuner import export as ex, outdir
    from tests.tuner.test_export_safety import _plans

    out, crash_at = ex.Path(sys.argv[1]), int(sys.argv[2])
    graph = Graph.load(str(out) + ".onnx")
    old_plan, new_plan = _plans(graph)
    ex.export(graph, old_plan, out)
    (out / "NOTES.md").write_text("my notes\\n")
    (out / "partitions" / "mine.txt").write_text("mine\\n")
    outdir.is_mount_point = lambda p: True               # OUT is written in place
    real, calls = os.rename, []

    def crashing_rename(src, dst):
        calls.append(src)
        if len(calls) == crash_at:                      # the process dies before this move
            os._exit(9)
        return real(src, dst)

    os.rename = crashing_rename
    ex.export(graph, new_plan, out)
""")


def _crash(tmp_path: Path, crash_at: int) -> Path:
    out = tmp_path / "art"
    onnx.save(small_model(), str(tmp_path / "art.onnx"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CRASH, str(out), str(crash_at)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert (out / ".collage-replacing").is_file()
    return out


def _user_files_intact(out: Path) -> None:
    assert (out / "NOTES.md").read_text() == NOTES and (out / "partitions" / "mine.txt").read_text() == "mine\n"
    assert not [p for p in out.iterdir() if p.name.startswith(".collage-")]


# in place, 8 moves: the old manifest, partitions, plan.json, report.json aside; then the new ones in, manifest last
@pytest.mark.parametrize("crash_at", [1, 2, 4, 5, 8])
def test_crash_while_writing_in_place_is_finished_by_the_next_check(tmp_path, crash_at):
    need_backends("onnxruntime")
    out = _crash(tmp_path, crash_at)
    assert check_output_location(out) == out.resolve()  # what `collage tune -o OUT` / export call first
    assert _partitions(out) == 2
    _user_files_intact(out)


def test_crash_in_place_with_an_incomplete_new_copy_restores_the_old_one(tmp_path):
    need_backends("onnxruntime")
    out = _crash(tmp_path, 3)  # the old manifest and partitions/ are aside
    from collage.tuner.outdir import recover_replaced

    journal = json.loads((out / ".collage-replacing").read_text())
    (out / journal["new"] / MANIFEST).unlink()  # as if the new copy were not complete
    assert "restored the previous artifact" in recover_replaced(out)
    assert _partitions(out) == 1
    _user_files_intact(out)
    assert recover_replaced(out) is None  # nothing left to do


def test_a_kept_file_the_new_artifact_also_has_is_kept_under_another_name(tmp_path):
    """(An old manifest may name its plan otherwise: its plan.json is then the user's, and the new artifact
    writes one too.) Nothing is overwritten; the log line says where it went."""
    from collage.tuner.outdir import OutputLocation, carry_over, kept_line

    old, new = tmp_path / "old", tmp_path / "new"
    (old / "docs").mkdir(parents=True)
    (old / "plan.json").write_text("mine")
    (old / "docs" / "a.md").write_text("a")
    new.mkdir()
    (new / "plan.json").write_text("collage's")
    where = OutputLocation(old, kept=("docs/a.md", "plan.json"), dropped=("report.html",),
                           replaced=("manifest.json", "report.html"))
    renamed = carry_over(where, new)
    assert renamed == {"plan.json": "plan.json.kept"}
    assert (new / "plan.json").read_text() == "collage's" and (new / "plan.json.kept").read_text() == "mine"
    assert (new / "docs" / "a.md").read_text() == "a"
    line = kept_line(where, renamed)
    assert "kept 2 file(s)" in line and "plan.json as plan.json.kept" in line and "report.html" in line


def test_the_kept_line_of_a_replaced_report_only_names_it():
    """Re-tuning into an artifact with only its old report.html (no file of the user's): the line said
    'kept 0 file(s) not part of the old artifact: ; dropped the old report.html'."""
    from collage.tuner.outdir import OutputLocation, kept_line

    line = kept_line(OutputLocation(Path("/x/out"), dropped=("report.html",), replaced=("report.html",)), {})
    assert line.startswith("/x/out: dropped the old report.html") and "kept" not in line
