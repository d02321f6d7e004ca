"""One candidate measured in an isolated worker process: ``Measurer`` (start, replace and talk to the
``python -m collage.measure.worker`` process; a crash, exception or timeout becomes a failed
measurement with its reason), ``Measurement`` (one window's statistics) and ``combine_rounds`` (one
cost from several windows), ``failure_kind`` (what a failure belongs to: the structure, the model file, or
the moment), and ``machine_lock`` (one measurement at a time on this machine).

How candidates are scheduled into windows, deduplicated and stored: ``collage.measure.schedule``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.measure.db import FILE, STRUCTURE, TRANSIENT, Cost, CostKey
from collage.measure.worker import MeasureJob
from collage.errors import MeasurementError
from collage.util import cache_dir

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)


DEFAULT_TIMEOUT_S = 120.0
DEFAULT_CAP_S = 2.0
#: Allowance for starting a worker and importing a backend's runtime (before ``timeout_s`` starts).
LOAD_TIMEOUT_S = 120.0
#: Warm-up per candidate (seconds of calls after the compile, at least 3 calls), shared by its rounds.
WARMUP_S = 0.2
#: How far a candidate whose calls are slow (not hung: its first call returned) may run past timeout_s.
MAX_EXTENSION_S = 3600.0


@dataclass(frozen=True)
class WindowSettings:
    """How ``Measurer`` runs a measurement window: ``timeout_s`` from the compile on (a slow candidate whose
    first call returned gets more, up to ``MAX_EXTENSION_S``), ``cap_s`` of timed calls after ``warmup_s`` of
    warm-up, inputs drawn with ``seed``, the reference probe timed next to it with ``probe``, and at most
    ``lock_timeout_s`` (None: ``LOCK_WAIT_S``) of waiting for the machine lock."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    cap_s: float = DEFAULT_CAP_S
    warmup_s: float = WARMUP_S
    seed: int = 0
    probe: bool = False
    lock_timeout_s: float | None = None


@dataclass
class Measurement:
    """What one measurement gives: the ``Cost`` fields minus the key, plus spread statistics."""

    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    samples: int = 0
    compile_s: float | None = None
    error: str | None = None
    cv: float | None = None
    mean_ms: float | None = None
    ci: float | None = None  # relative half-width of the median's 95% CI (rounds > 1: half-range of round medians)
    wall_s: float = 0.0
    rounds: int = 1
    round_ms: list[float] = field(default_factory=list)  # each window's median
    probe_ms: float | None = None  # reference probe next to the window (mean over rounds)
    samples_ms: list[float] = field(default_factory=list, repr=False)  # single-call times (thinned)

    @property
    def ok(self) -> bool:
        return self.error is None and self.median_ms is not None

    def to_cost(self, key: CostKey, file: str | None = None) -> Cost:
        """The cost to store under ``key``; a failure gets its kind (``failure_kind``) and, when the model file
        caused it, ``file`` (the model's ``Graph.digest()``; without one the failure is transient)."""
        kind = failure_kind(self.error) if self.error is not None else None
        if kind == FILE and not file:
            kind = TRANSIENT
        return Cost.from_key(key, median_ms=self.median_ms, p10_ms=self.p10_ms, p90_ms=self.p90_ms,
                             samples=self.samples, compile_s=self.compile_s, error=self.error, kind=kind,
                             file=file if kind == FILE else None)


#: Errors of a disturbed measurement, not of the candidate: a hang caught by the timeout (a loaded machine
#: slows a candidate past it), a worker killed from outside (SIGKILL: the kernel's OOM killer under another job's
#: memory, a user's kill) or gone before its job was sent.
_TRANSIENT = re.compile(r"^timeout after |worker crashed \(SIGKILL\)|worker gone before the job was sent")
#: Errors that say the backend cannot take the structure (an op, an attribute or a type it has no implementation
#: of): the same for every model with the fingerprint.
_STRUCTURAL = re.compile(r"^UnsupportedError: |NOT_IMPLEMENTED|Could not find an implementation for|"
                         r"[Nn]ot (?:yet )?(?:implemented|supported)|"
                         r"[Uu]nsupported (?:op|operation|operator|type|data ?type)|"
                         r"No conversion rule found", re.S)


def failure_kind(error: str) -> str:
    """What the failure ``error`` (a ``Measurement.error`` text) belongs to (``collage.measure.db``):
    ``"transient"`` for a disturbed measurement (``_TRANSIENT``), ``"structure"`` where the backend says it does not
    take an op or type (``_STRUCTURAL``), else ``"file"``: the fingerprint leaves the weights, large integer
    constants, tensor names and subgraph bodies out, any of which can make a candidate fail, so a failure not known
    to be structural is kept for its model only (another model measures it again, once)."""
    if _TRANSIENT.search(error):
        return TRANSIENT
    if _STRUCTURAL.search(error):
        return STRUCTURE
    return FILE


def window_warmup_s(rounds: int) -> float:
    """Warm-up of one window when a candidate is measured in ``rounds``: its share of ``WARMUP_S``."""
    return max(0.05, WARMUP_S / max(1, rounds))


def _weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of ``values`` where each value counts with its weight (lowest value whose
    cumulative weight reaches ``q`` percent)."""
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    i = min(int(np.searchsorted(cum, q / 100.0 * cum[-1])), len(values) - 1)
    return float(values[order][i])


def combine_rounds(rounds: Sequence[Measurement]) -> Measurement:
    """One measurement from several windows of the same candidate: the median of the windows' medians.

    A window the machine was slow in moves one round median, not the combined cost. p10/p90 come from
    the pooled single-call times with each round weighing the same (a noisy round runs to its time cap
    and would otherwise outnumber a steady one that stopped at its minimum), kept on either side of the
    median; CV and mean from the pooled times, ``samples`` is their total, ``compile_s`` the median
    compile time, ``ci`` the half-range of the round medians relative to the result. A failed round
    fails the whole measurement (its error is kept).
    """
    if not rounds:
        raise ValueError("combine_rounds needs at least one round")
    bad = next((r for r in rounds if not r.ok), None)
    if bad is not None:
        return Measurement(error=bad.error, wall_s=sum(r.wall_s for r in rounds), rounds=len(rounds))
    if len(rounds) == 1:
        return rounds[0]
    meds = sorted(r.median_ms for r in rounds)
    med = float(np.median(meds))
    per_round = [r.samples_ms or [r.median_ms] for r in rounds]
    pooled = np.asarray([x for xs in per_round for x in xs])
    weights = np.asarray([1.0 / len(xs) for xs in per_round for _ in xs])
    p10, p90 = _weighted_percentile(pooled, weights, 10), _weighted_percentile(pooled, weights, 90)
    probes = [r.probe_ms for r in rounds if r.probe_ms is not None]
    return Measurement(median_ms=med, p10_ms=min(p10, med), p90_ms=max(p90, med),
                       samples=sum(r.samples for r in rounds),
                       compile_s=float(np.median([r.compile_s or 0.0 for r in rounds])),
                       cv=float(pooled.std() / pooled.mean()) if pooled.mean() > 0 else 0.0,
                       mean_ms=float(pooled.mean()), ci=(meds[-1] - meds[0]) / (2 * med) if med > 0 else None,
                       wall_s=sum(r.wall_s for r in rounds), rounds=len(rounds), round_ms=meds,
                       probe_ms=float(np.mean(probes)) if probes else None, samples_ms=pooled.tolist())


#: How long a wait for the machine lock may last when the caller sets no limit: the longest a sane measurement
#: window of another process takes (its load allowance and timeout); then ``MeasurementError``, never a hang.
LOCK_WAIT_S = DEFAULT_TIMEOUT_S + LOAD_TIMEOUT_S
#: A wait for the machine lock longer than this is said (once per other process), so a slow job says why.
LOCK_SAY_S = 1.0
_said_waiting: set[str] = set()


def _lock_holder(fd: int) -> str:
    """What the lock file says of the process holding it ("pid N on HOST"), or "another process"."""
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process"


def _acquire(fd: int, deadline: float, path: os.PathLike, timeout_s: float) -> None:
    """``flock`` ``fd`` exclusively, polling, until ``deadline``; then ``MeasurementError`` naming the holder."""
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = time.monotonic()
            holder = _lock_holder(fd)
            if now - t0 > LOCK_SAY_S and holder not in _said_waiting:
                _said_waiting.add(holder)
                log.warning("waiting for another measuring process (%s) to finish its measurement: one measurement "
                            "at a time on this machine (%s)", holder, path)
            if now > deadline:
                raise MeasurementError(f"another measuring process ({holder}) held {path} for over {timeout_s:.0f} s;"
                                       " is a measurement job stuck? (remove nothing: the lock frees itself when that "
                                       "process ends)") from None
            time.sleep(0.02)


@contextlib.contextmanager
def machine_lock(timeout_s: float | None = None) -> Iterator[None]:
    """Exclusive lock so that no two measurements (in any process) overlap on this machine's cores.

    Waits up to ``timeout_s`` (None: ``LOCK_WAIT_S``) for the process holding it, then raises
    ``MeasurementError``. Fair between processes: a waiter first takes a turnstile (``measure.lock.queue``)
    and holds it until it has the lock, so the holder, going through the turnstile for its next window,
    lets the waiter measure first instead of taking the lock back at once (two jobs alternate windows; a
    job never waits on another's whole run). The lock file holds its holder's pid and host, said in the
    waiting line."""
    limit = LOCK_WAIT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + limit
    path = cache_dir() / "measure.lock"
    gate = os.open(cache_dir() / "measure.lock.queue", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        os.close(gate)
        raise
    try:
        try:
            _acquire(gate, deadline, path, limit)
            _acquire(fd, deadline, path, limit)
        finally:
            os.close(gate)  # the turnstile: the next waiter's turn
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _signal_name(code: int | None) -> str:
    if code is None:
        return "unknown exit"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Measurer:
    """Owns one worker process; ``measure`` runs one candidate in it (context manager)."""

    def __init__(self, *, lock: bool = True) -> None:
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._log: Any = None
        self.lock = lock
        self.restarts = 0
        self._runtime: str | None = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        # a fresh interpreter (not multiprocessing): works whatever the parent's __main__ is
        ours, theirs = socket.socketpair()
        self._log = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "collage.measure.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, env=env)
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _log_tail(self, limit: int = 600) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - limit))
            text = self._log.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return " ".join(text.split())[-limit:]

    def _kill(self) -> None:
        if self._proc is not None:
            if self._alive():
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
            self._cleanup()
            self.restarts += 1

    def _cleanup(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._log is not None:
            self._log.close()
        self._proc = self._conn = self._log = None

    def close(self) -> None:
        """Stop the worker (politely, then by force)."""
        if self._proc is not None:
            with contextlib.suppress(OSError, BrokenPipeError, ValueError):
                self._conn.send(None)
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
            self._cleanup()

    def _job(self, job: tuple, timeout_s: float) -> tuple[str, Any, str]:
        """Send a job; return (kind, payload, last phase) with kind in result|error|crash|timeout."""
        if not self._alive():
            if self._proc is not None:
                self._kill()
            self._start()
        phase = "start"
        try:
            self._conn.send(job)
        except (BrokenPipeError, OSError):
            self._kill()
            return "crash", "worker gone before the job was sent", phase
        # starting the worker and importing the runtime get their own allowance; timeout_s runs from compile
        deadline = time.monotonic() + max(timeout_s, LOAD_TIMEOUT_S)
        while True:
            left = deadline - time.monotonic()
            try:
                ready = left > 0 and self._conn.poll(min(left, 1.0))
            except (EOFError, OSError):
                ready = True
            if not ready:
                if time.monotonic() >= deadline:
                    self._kill()
                    return "timeout", f"timeout after {timeout_s:.0f} s during {phase} (worker killed)", phase
                if not self._alive():
                    ready = True
                else:
                    continue
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(5)
                code = self._proc.returncode
                tail = self._log_tail()
                self._kill()
                return "crash", (f"worker crashed ({_signal_name(code)}) during {phase}"
                                 + (f"; its last output: {tail}" if tail else "")), phase
            if kind == "phase":
                phase = payload
                if phase == "compile":
                    deadline = time.monotonic() + timeout_s
                continue
            if kind == "estimate":  # a slow but working candidate gets the time it needs, within reason
                deadline = max(deadline, time.monotonic() + min(2.0 * payload + 10.0, MAX_EXTENSION_S))
                continue
            return kind, payload, phase

    def measure(self, model: onnx.ModelProto, backend: str, options: Mapping[str, Any] | None = None,
                settings: WindowSettings | None = None, *, feeds: Mapping[str, np.ndarray] | None = None,
                rounds: int = 1) -> Measurement:
        """Measure ``model`` on ``backend`` (registry name or ``module:Class``) in the worker.

        Inputs not in ``feeds`` are seeded random arrays (integer indices in range of what they index).
        ``rounds`` > 1 takes that many windows of ``settings.cap_s / rounds`` each (a compile each, a warm-up
        of ``window_warmup_s(rounds)``: ``settings.warmup_s`` is not used), back to back, and combines them
        (``combine_rounds``); ``measure_candidates`` spreads the rounds over the job instead, which averages
        over slow periods of the machine. ``settings.probe`` times the reference probe next to each window
        (``Measurement.probe_ms``).
        Waits for the machine lock (another process measuring) up to ``settings.lock_timeout_s`` (None:
        ``LOCK_WAIT_S``), then raises ``MeasurementError``; every other failure is returned as ``error``.
        """
        settings = settings or WindowSettings()
        blob = model.SerializeToString()
        window = dataclasses.replace(settings, cap_s=settings.cap_s / max(1, rounds), warmup_s=window_warmup_s(rounds))
        done = []
        for _ in range(max(1, rounds)):
            r = self.measure_bytes(blob, backend, options, window, feeds=feeds)
            done.append(r)
            if not r.ok:
                break
        return combine_rounds(done)

    def measure_bytes(self, blob: bytes, backend: str, options: Mapping[str, Any] | None = None,
                      settings: WindowSettings | None = None, *,
                      feeds: Mapping[str, np.ndarray] | None = None) -> Measurement:
        """One measurement window of a serialized model (``measure`` with ``rounds=1``)."""
        s = settings or WindowSettings()
        if self._runtime not in (None, backend):
            self.close()  # one runtime per worker process: no idle thread pool of another runtime around
        self._runtime = backend
        job = MeasureJob(blob, backend, dict(options or {}), float(s.cap_s), int(s.seed), dict(feeds or {}),
                         bool(s.probe), float(s.warmup_s))
        t0 = time.perf_counter()
        with machine_lock(s.lock_timeout_s) if self.lock else contextlib.nullcontext():
            kind, payload, _ = self._job(("measure", *job), s.timeout_s)
        wall = time.perf_counter() - t0
        if kind == "result":
            return Measurement(median_ms=payload["median_ms"], p10_ms=payload["p10_ms"], p90_ms=payload["p90_ms"],
                               samples=payload["samples"], compile_s=payload["compile_s"], cv=payload["cv"],
                               mean_ms=payload["mean_ms"], ci=payload["ci"], wall_s=wall,
                               round_ms=[payload["median_ms"]], probe_ms=payload.get("probe_ms"),
                               samples_ms=list(payload.get("samples_ms", ())))
        text = payload[0] if kind == "error" else payload
        return Measurement(error=str(text), wall_s=wall)

    def call(self, target: str, kwargs: Mapping[str, Any], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
        """Run ``module:function(**kwargs)`` in a fresh worker under the machine lock; MeasurementError on failure."""
        self.close()
        self._runtime = None
        with machine_lock() if self.lock else contextlib.nullcontext():
            kind, payload, _ = self._job(("call", target, dict(kwargs)), timeout_s)
        if kind == "result":
            return payload
        text = payload[0] if kind == "error" else payload
        raise MeasurementError(f"{target}: {text}")
