"""How much of this machine other processes used while collage measured: timings are only as good as the quiet
they were taken in.

A tune's baselines, candidates and verification are medians of timed calls; another process on the same cores
slows some of them, and a decision between two backends within the slowdown can flip. The timings cannot tell
that themselves (issue 40's tune-time series: shufflenet's first 1-minute tunes ran beside tests and type checks
and measured their baselines 1.3-2x slower than tunes minutes later, and nothing in their output said so); the
kernel's counters can.

:class:`ContentionSampler` reads, every ``interval_s`` in a daemon thread, the CPU time the CPUs this process may
run on spent busy (``/proc/stat``: user, nice, system, irq, softirq and steal: a hypervisor's other guests are
other processes too) and the CPU time of this process and its descendants (the measuring workers: live ones
from ``/proc/PID/stat``, exited ones in their parent's ``cutime``/``cstime``). Busy time that is not ours, per
second of wall time, is other processes' load in CPUs. The sampler keeps it per window and per named phase
(report.json's ``time.others``); ``collage.report.coverage.busy_line`` says it in words where the machine was busy.

Linux only: elsewhere (no ``/proc/stat``) nothing is sampled and nothing is said.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from collage.util import CLK_TCK, proc_stat, usable_cpus

#: seconds between samples, and samples a window spans (the busiest window is what a warning names)
INTERVAL_S, WINDOW = 1.0, 5

def busy_s(cpus: set[int]) -> float | None:
    """CPU-seconds ``cpus`` spent busy since boot (``/proc/stat``'s per-CPU lines), None where unreadable."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        if not (line.startswith("cpu") and line[3:4].isdigit()):
            continue
        name, *ticks = line.split()
        if int(name[3:]) in cpus:
            v = [int(x) for x in ticks[:8]] + [0] * (8 - len(ticks[:8]))
            user, nice, system, _idle, _iowait, irq, softirq, steal = v
            total += user + nice + system + irq + softirq + steal
    return total / CLK_TCK


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU-seconds of the process and its reaped children), None where it is gone."""
    try:
        rest = proc_stat(pid)  # state, ppid, ... utime (14th field), stime, cutime, cstime (17th)
        return int(rest[1]), sum(int(x) for x in rest[11:15]) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _children(pid: int) -> list[int] | None:
    """``pid``'s child processes (``/proc/PID/task/TID/children``), None where the kernel does not list them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue  # the thread ended meanwhile
    return out


def _all_children() -> dict[int, list[int]]:
    """Every process's children, from every process's parent (the slow way: a scan of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        st = _stat(int(entry)) if entry.isdigit() else None
        if st is not None:
            children.setdefault(st[0], []).append(int(entry))
    return children


def own_s(pid: int | None = None) -> float:
    """CPU-seconds of process ``pid`` (this one) and its descendants: each live one's user and system time and
    that of its exited, reaped children."""
    root = os.getpid() if pid is None else pid
    scanned: dict[int, list[int]] | None = None
    total, todo = 0.0, [root]
    while todo:
        p = todo.pop()
        st = _stat(p)
        if st is None:
            continue
        total += st[1]
        kids = _children(p)
        if kids is None:
            scanned = scanned if scanned is not None else _all_children()
            kids = scanned.get(p, [])
        todo += kids
    return total


@dataclass
class Sample:
    t: float  # time.monotonic()
    busy: float
    own: float


def sample(cpus: set[int]) -> Sample | None:
    busy = busy_s(cpus)
    return None if busy is None else Sample(time.monotonic(), busy, own_s())


def others_cpus(a: Sample, b: Sample) -> float:
    """Other processes' load between two samples, in CPUs (never below 0: the counters tick at different
    moments)."""
    wall = b.t - a.t
    return max(0.0, (b.busy - a.busy) - (b.own - a.own)) / wall if wall > 0 else 0.0


@dataclass
class ContentionSampler:
    """Samples in a daemon thread from ``start()`` to ``stop()``; :meth:`mark` names the phase that begins."""

    interval_s: float = INTERVAL_S
    window: int = WINDOW
    cpus: set[int] = field(default_factory=usable_cpus)
    samples: list[tuple[Sample, str]] = field(default_factory=list)
    _phase: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the thread and mark() both take samples
    _thread: threading.Thread | None = None

    def start(self) -> ContentionSampler:
        first = sample(self.cpus)
        if first is None:  # not Linux: nothing to say
            return self
        self.samples.append((first, self._phase))
        self._thread = threading.Thread(target=self._run, name="collage-contention", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        with self._lock:
            s = sample(self.cpus)
            if s is not None:
                self.samples.append((s, self._phase))

    def mark(self, phase: str) -> None:
        """The phase from now on (samples are credited to the phase they end in)."""
        if self._thread is not None:
            self._take()
        self._phase = phase

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._take()
            self._thread = None

    def by_phase(self) -> dict[str, float]:
        """Other processes' mean load in CPUs over each phase's samples."""
        spent: dict[str, float] = {}
        wall: dict[str, float] = {}
        for (a, _), (b, phase) in zip(self.samples, self.samples[1:]):
            spent[phase] = spent.get(phase, 0.0) + others_cpus(a, b) * (b.t - a.t)
            wall[phase] = wall.get(phase, 0.0) + (b.t - a.t)
        return {p: round(spent[p] / wall[p], 3) for p in spent if wall[p] > 0}

    def busiest(self) -> tuple[float, str] | None:
        """The busiest window of ``window`` x ``interval_s`` seconds (the whole span where it is shorter): other
        processes' load in CPUs, and the phase it ended in. A window is measured in seconds, not samples: the
        phases' marks add samples milliseconds apart, where one clock tick (10 ms) reads as most of a CPU."""
        if len(self.samples) < 2:
            return None
        span = min(self.window * self.interval_s, self.samples[-1][0].t - self.samples[0][0].t)
        best: tuple[float, str] | None = None
        start = 0
        for end in range(1, len(self.samples)):
            b, phase = self.samples[end]
            while start + 1 < end and b.t - self.samples[start + 1][0].t >= span:
                start += 1  # the latest start that still spans the window
            a = self.samples[start][0]
            if b.t - a.t < span:
                continue
            load = others_cpus(a, b)
            if best is None or load > best[0]:
                best = (round(load, 3), phase)
        return best

    def report(self) -> dict[str, Any] | None:
        """report.json's ``time.others``: the CPUs this process may use, other processes' mean load per phase and
        their busiest window, or None where nothing was sampled."""
        peak = self.busiest()
        if peak is None:
            return None
        return {"cpus": len(self.cpus), "by_phase": self.by_phase(), "peak_cpus": peak[0], "peak_phase": peak[1],
                "window_s": self.window * self.interval_s}
