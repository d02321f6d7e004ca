"""Every wait of a tune is bounded (issue 37): a ``--cluster`` address where nothing listens is refused in one
line, a wait for another process's measurement is fair and bounded and said, two tunes sharing a cache
both end, and SIGTERM ends a tune within seconds at any point, keeping what was measured.

The tunes run the real ``collage`` command in a subprocess (``tests.commands.test_bad_inputs``' helpers) on
``zoo:tiny-resnet``; the lock tests hold ``collage.measure.measurer.machine_lock`` from another process.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collage.measure.connect import get_db
from collage.errors import MeasurementError
from tests.commands.test_bad_inputs import _ROOT, _assert_one_line


def _env(cache: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "COLLAGE_CACHE": str(cache)}


def _collage(cache: Path, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "collage.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(cache))


def _finish(proc: subprocess.Popen, within_s: float) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of ``proc``, which must end within ``within_s``."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after {within_s:.0f} s; stderr tail:\n{err[-2000:]}")
    return proc.returncode, out, err, time.monotonic() - t0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


# ---------------------------------------------------------------------- 1. --cluster where nothing listens
@pytest.mark.parametrize("form", ["{}", "ray://{}"], ids=["host-port", "ray-client"])
def test_cluster_address_nothing_listens_is_refused_in_one_line(tmp_path, form):
    """Before: ``--cluster 127.0.0.1:PORT`` never returned (ray.init retried a GCS connection 20 x 35 s)."""
    address = form.format(f"127.0.0.1:{_closed_port()}")
    proc = _collage(tmp_path / "cache", "tune", "zoo:tiny-resnet", "-o", str(tmp_path / "out"), "--budget", "5s",
                    "--cluster", address)
    code, out, err, took = _finish(proc, 90)
    _assert_one_line(subprocess.CompletedProcess(proc.args, code, out, err), "tune",
                     [f"cannot reach the Ray cluster at {address!r}", "connection refused"])
    assert took < 60


# ---------------------------------------------------------------------- 2. the machine lock
_HOLDER = textwrap.dedent("""
    import sys, time
    from collage.measure.measurer import machine_lock
    hold, total = float(sys.argv[1]), float(sys.argv[2])
    end = time.monotonic() + total
    while time.monotonic() < end:  # a long measuring job: one window after the other, back to back
        with machine_lock(60):
            print("holding", flush=True)
            time.sleep(hold)
""")


def _holder(cache: Path, hold_s: float, total_s: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(hold_s), str(total_s)], stdout=subprocess.PIPE,
                            text=True, env=_env(cache))
    assert proc.stdout.readline().strip() == "holding"  # it has the lock
    return proc


def test_waiting_for_a_busy_machine_is_fair_and_said(tmp_path, monkeypatch, caplog):
    """Before: a process measuring window after window took the lock back within microseconds of releasing it,
    while the waiter polled every 20 ms: the waiter never got it (MeasurementError after its timeout; without
    one, the tune waited as long as the other job ran)."""
    from collage.measure.measurer import machine_lock

    cache = tmp_path / "cache"
    monkeypatch.setenv("COLLAGE_CACHE", str(cache))
    holder = _holder(cache, 1.5, 40)
    try:
        t0 = time.monotonic()
        with caplog.at_level("WARNING"), machine_lock(timeout_s=15):
            took = time.monotonic() - t0
        assert took < 5, f"waited {took:.1f} s for a holder whose windows last 1.5 s"
        said = [r.getMessage() for r in caplog.records if "waiting for another measuring process" in r.getMessage()]
        assert said and f"pid {holder.pid}" in said[0], caplog.text
    finally:
        holder.kill()
        holder.wait()


def test_waiting_for_a_stuck_measurement_is_bounded(tmp_path, monkeypatch):
    from collage.measure.measurer import machine_lock

    cache = tmp_path / "cache"
    monkeypatch.setenv("COLLAGE_CACHE", str(cache))
    holder = _holder(cache, 60, 60)
    try:
        t0 = time.monotonic()
        with pytest.raises(MeasurementError, match=f"another measuring process \\(pid {holder.pid} on .*\\) held"):
            with machine_lock(timeout_s=2):
                pass
        assert time.monotonic() - t0 < 6
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_two_budgeted_tunes_sharing_a_cache_both_end(tmp_path):
    """Two 3 s-budget tunes of one model on one COLLAGE_CACHE (one cost DB, one machine lock), beside a third
    process that measures for their first 45 s (long enough for both to reach their measuring on a loaded
    machine: with 8 s and 20 s they were once still loading the model when it let go): both end with a plan, and
    say that they waited."""
    cache = tmp_path / "cache"
    holder = _holder(cache, 45, 45)
    args = ["--budget", "8s", "--max-nodes", "1", "--no-ranges", "--backends", "onnxruntime,openvino"]
    tunes = [_collage(cache, "tune", "zoo:tiny-resnet", "-o", str(tmp_path / f"out{i}"), *args) for i in (1, 2)]
    try:
        said = []
        for proc in tunes:
            code, out, err, _ = _finish(proc, 400)
            assert code == 0, err[-3000:]
            assert "measured end to end" in out
            said.append("waiting for another measuring process" in err)
        # the first to reach the lock waits for the holder and says so; the other may instead wait for the first's
        # claim on the same whole models (one cost DB) and take its costs from the DB
        assert any(said), said
    finally:
        holder.kill()
        holder.wait()
        for proc in tunes:
            if proc.poll() is None:
                proc.kill()


# ---------------------------------------------------------------------- 3. SIGTERM
def _terminate(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    code, _, err, took = _finish(proc, 30)
    assert took < 12, f"took {took:.1f} s to end after SIGTERM"
    return code, err


def _one_terminated_line(code: int, err: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 143, err[-3000:]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("collage tune: terminated (SIGTERM)"), err[-3000:]


def test_sigterm_while_the_command_loads_is_one_line(tmp_path):
    """Before: a SIGTERM while the subcommand's modules were imported (parsing the arguments) ended in a
    ``Terminated`` traceback and exit code 1."""
    proc = _collage(tmp_path / "cache", "-q", "tune", "zoo:tiny-resnet", "-o", str(tmp_path / "out"))
    time.sleep(0.8)
    _one_terminated_line(*_terminate(proc))


def test_sigterm_while_measuring_keeps_the_costs(tmp_path):
    cache = tmp_path / "cache"
    db_path = tmp_path / "costs.sqlite"
    proc = _collage(cache, "-q", "tune", "zoo:tiny-resnet", "-o", str(tmp_path / "out"), "--db", str(db_path),
                    "--backends", "onnxruntime")
    deadline = time.monotonic() + 240
    rows = 0
    while time.monotonic() < deadline and proc.poll() is None:
        rows = len(get_db(db_path).all()) if db_path.exists() else 0
        if rows >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None and rows >= 3, "the tune measured some candidates and is still measuring"
    _one_terminated_line(*_terminate(proc))
    db = get_db(db_path)
    assert len(db.all()) >= rows and db.claims() == []
    assert not (tmp_path / "out").exists()
