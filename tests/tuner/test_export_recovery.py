"""Issue 15, checked too late / misleading: replacing an artifact is two renames; a crash between them must
be recoverable (the next export finishes or undoes it), and SIGTERM is handled like Ctrl-C."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from collage.runtime.manifest import MANIFEST
from collage.tuner.export import check_output_location, recover_replaced
from tests.helpers import need_backends

ROOT = str(Path(__import__("collage").__file__).resolve().parents[1])

CRASH = textwrap.dedent("""
    import os, sys
    import onnx
    from collage.graph.ir import Graph
    from collage.plan import Partition, Plan
    from collage.tuner import export as ex
    from tests.runtime.test_artifact import small_model

    out = sys.argv[1]
    onnx.save(small_model(), out + ".onnx")
    graph = Graph.load(out + ".onnx")
    plan = Plan([Partition(tuple(range(len(graph))), "onnxruntime")])
    ex.export(graph, plan, out)                         # the old artifact
    (ex.Path(out) / "old-marker").write_text("old")
    real = os.rename
    calls = []

    def crashing_rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:                             # between the two renames: the process dies
            os._exit(9)
        return real(src, dst)

    ex.os.rename = crashing_rename
    ex.export(graph, plan, out)
""")


def _crash(tmp_path: Path) -> Path:
    out = tmp_path / "art"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CRASH, str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert not out.exists()  # what a crash between the renames used to leave: OUT missing...
    hidden = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".art."))
    assert any(".old-" in n for n in hidden) and any(".tmp-" in n for n in hidden), hidden  # ...both copies beside it
    return out


def test_crash_between_renames_is_finished_by_the_next_run(tmp_path):
    need_backends("onnxruntime")
    out = _crash(tmp_path)
    journal = json.loads((tmp_path / ".art.replacing").read_text())
    new_manifest = (tmp_path / journal["new"] / MANIFEST).read_bytes()
    assert check_output_location(out) == out.resolve()  # what `collage tune -o OUT` / export call first
    assert (out / MANIFEST).read_bytes() == new_manifest  # the new, complete copy
    assert (out / "old-marker").read_text() == "old"  # a file the old artifact did not list: carried over (#37)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".art")] == []


def test_crash_with_an_incomplete_new_copy_restores_the_old_one(tmp_path):
    need_backends("onnxruntime")
    out = _crash(tmp_path)
    journal = json.loads((tmp_path / ".art.replacing").read_text())
    (tmp_path / journal["new"] / MANIFEST).unlink()  # the new copy is not complete
    assert "restored the previous artifact" in recover_replaced(out)
    assert (out / "old-marker").read_text() == "old"
    assert recover_replaced(out) is None  # nothing left to do


SLOW_TUNE = textwrap.dedent("""
    import sys, time
    from collage.measure import schedule as measure
    real = measure.measure_candidates

    def slow(*args, **kwargs):
        print("MEASURING", file=sys.stderr, flush=True)
        time.sleep(60)
        return real(*args, **kwargs)

    measure.measure_candidates = slow
    from collage.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    """SIGTERM while tuning: a message, exit 143, the scratch folder removed."""
    need_backends("onnxruntime")
    from tests.runtime.test_artifact import small_model
    import onnx

    onnx.save(small_model(), str(tmp_path / "m.onnx"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch),
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TUNE, "tune", str(tmp_path / "m.onnx"), "-o",
                             str(tmp_path / "out"), "--backends", "onnxruntime", "--db", str(tmp_path / "c.sqlite")],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    seen = ""
    while "MEASURING" not in seen and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    assert "MEASURING" in seen, seen
    assert any(p.name.startswith("collage-tune-") for p in scratch.iterdir())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    assert not any(p.name.startswith("collage-tune-") for p in scratch.iterdir())  # the scratch folder is gone
    assert not (tmp_path / "out").exists()
