"""Handing the cores over when a run switches runtime: a pool that spins after its runs is parked while
another runtime runs (Linux).

ONNX Runtime's process-wide pool (collage's default, the fastest for ONNX Runtime alone and for chains of
its partitions) keeps its worker spinning ~50-60 ms after every run, and Python has no control of that
pool's spinning (results/transitions/transitions-wait.md). On a 2-core machine the next runtime's call shares the
cores with that spin: tens of milliseconds at BERT-base scale (results/transitions/transitions.md). Lowering the
worker's priority does not fix it (``pool_nice``: a yielding oneTBB worker hands the core straight back
to the spinner until the next tick; SCHED_IDLE likewise: results/transitions/transitions.md,
results/transitions/transitions-nice.md).

So a pool registered here (:func:`register`, by its threads' ids) is *parked* while another runtime runs:
each of its threads gets a real-time signal whose handler is libc's ``sleep``, so it blocks in the kernel
and takes no core; when its own runtime runs next, a second signal (handler: a no-op) ends that sleep and
the thread goes back to its loop. Every partition's ``run`` calls :func:`run_on` with its runtime first
(one comparison when the runtime does not change), so only a switch pays: two ``tgkill`` calls per
thread. Parked threads are idle: a run of their runtime has returned, and its next run (or session
creation, for ONNX Runtime) wakes them before it starts; so does the interpreter's exit (ONNX Runtime joins
its workers at exit). A wake is sent only once the thread sleeps in the park handler (read from
/proc/self/task/<tid>/syscall): sent while the park is still pending, the kernel would run the wake's
handler first and the park's sleep after it, to its end. A run that bypasses :func:`run_on` (an ONNX
Runtime session's raw call, in the same process) is still computed: the pool's caller does the parked
worker's share itself (checked in tests/backends/test_handover.py); and a parked thread wakes by itself
after the signal's number of seconds (``sleep(signum)``, ~40 s) in any case.

Only ONNX Runtime's pool is registered. OpenVINO's oneTBB workers wait for more work only ~1 ms after a
call (its switch to ONNX Runtime costs under a millisecond at BERT-base: results/transitions/transitions.md), and
OpenVINO also uses them outside ``run`` (compiling): a worker parked while it held a oneTBB lock could hold a compile
up.

Off where it cannot work (not Linux, no ``tgkill``, or another handler already on the signals): then
:func:`register` answers False and nothing is parked. One process, one set of pools: the state here is
process-wide and guarded by a lock; runs of different runtimes from several threads at once are not a
case collage has (a plan's partitions run one after another).
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable

log = logging.getLogger(__name__)

#: the park signal (its handler sleeps ``PARK`` seconds at most) and the wake signal (a no-op handler that
#: ends that sleep; sent only once the thread sleeps in it: :func:`_wake`)
PARK = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else 0
WAKE = PARK + 1

_lock = threading.Lock()
_pools: dict[str, list[int]] = {}   # runtime -> thread ids that spin after its runs
_parked: set[str] = set()           # runtimes whose threads are parked now
_current: str | None = None         # the runtime that ran last
_libc: ctypes.CDLL | None = None
_ready: bool | None = None          # the signals are installed (None: not tried yet)
#: how long a wake waits for a thread to reach the park handler's sleep (a park signal just sent is taken
#: within microseconds by a spinning worker; a blocked one is woken by it and taken when next scheduled)
WAKE_WAIT_S = 0.05
#: the system calls libc's sleep blocks in (clock_nanosleep, nanosleep), as /proc/<tid>/syscall writes them
_SLEEP_CALLS = {b"230", b"35"} if os.uname().machine == "x86_64" else {b"115", b"101"}


def _install() -> bool:
    """Install the two handlers once (libc's ``sleep`` and ``getpid``); False where that is not possible."""
    global _libc, _ready
    if _ready is not None:
        return _ready
    _ready = False
    if not sys.platform.startswith("linux") or not PARK:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        tgkill, sig = libc.tgkill, libc.signal
    except (OSError, AttributeError):  # a libc without tgkill (glibc < 2.30)
        return False
    sig.restype = ctypes.c_void_p
    sig.argtypes = [ctypes.c_int, ctypes.c_void_p]
    tgkill.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    handlers = {PARK: ctypes.cast(libc.sleep, ctypes.c_void_p).value,
                WAKE: ctypes.cast(libc.getpid, ctypes.c_void_p).value}  # getpid: a no-op that ends the sleep
    installed: list[tuple[int, int | None]] = []
    for num, handler in handlers.items():
        old = sig(num, handler)
        installed.append((num, old))
        if old not in (None, 0):  # SIG_DFL is 0: someone else uses this signal; give it back and stay off
            for n, o in installed:
                sig(n, o)
            log.debug("handover: signal %d already has a handler; pools are not parked", num)
            return False
    _libc, _ready = libc, True
    atexit.register(wake_all)  # ONNX Runtime joins its pool's workers when the process exits
    return True


def register(runtime: str, thread_ids: Iterable[int]) -> bool:
    """Park ``thread_ids`` (a pool of ``runtime`` that spins after its runs) while another runtime runs.
    Python's own threads are never taken. False (and nothing registered) where parking cannot work."""
    tids = sorted(set(thread_ids) - {t.native_id for t in threading.enumerate()})
    with _lock:
        if not tids or not _install():
            return False
        _pools.setdefault(runtime, []).extend(tids)
    log.debug("handover: %s's threads %s are parked while another runtime runs", runtime, tids)
    return True


def run_on(runtime: str) -> None:
    """Called first by every partition's ``run``: wake ``runtime``'s parked threads, park every other pool."""
    global _current
    if runtime == _current:
        return
    with _lock:
        _current = runtime
        if not _pools:
            return
        if runtime in _parked:
            _wake(_pools[runtime])
            _parked.discard(runtime)
        for other, tids in _pools.items():
            if other != runtime and other not in _parked:
                _park(tids)
                _parked.add(other)


def _park(tids: list[int]) -> None:
    pid = os.getpid()
    for tid in list(tids):
        if _libc.tgkill(pid, tid, PARK) != 0 and ctypes.get_errno() == errno.ESRCH:
            tids.remove(tid)  # the thread has ended: forget it


def _wake(tids: list[int]) -> None:
    """Wake each thread once it sleeps in the park handler. Not before: with the park still pending, the
    kernel would stack both handlers and run the wake's first, and the park's sleep would then run its
    full ~40 s. A thread that has not reached the sleep within ``WAKE_WAIT_S`` is sent the wake anyway."""
    pid = os.getpid()
    for tid in list(tids):
        t_end = time.monotonic() + WAKE_WAIT_S
        while not _sleeping(tid) and time.monotonic() < t_end:
            os.sched_yield()
        if _libc.tgkill(pid, tid, WAKE) != 0 and ctypes.get_errno() == errno.ESRCH:
            tids.remove(tid)


def _sleeping(tid: int) -> bool:
    """Whether thread ``tid`` is blocked in the sleep of the park handler (its system call, from /proc)."""
    try:
        with open(f"/proc/self/task/{tid}/syscall", "rb") as f:
            first = f.read(16).split(b" ", 1)[0]
    except OSError:  # the thread has ended, or /proc cannot tell: nothing to wait for
        return True
    return first in _SLEEP_CALLS


def threads(runtime: str) -> list[int]:
    """The thread ids registered for ``runtime`` (for tests and logs)."""
    with _lock:
        return list(_pools.get(runtime, ()))


def parked() -> set[str]:
    """The runtimes whose pools are parked now (for tests and logs)."""
    with _lock:
        return set(_parked)


def wake_all() -> None:
    """Wake every parked pool (at exit, and before code that runs a runtime without :func:`run_on`)."""
    global _current
    with _lock:
        for runtime in list(_parked):
            _wake(_pools[runtime])
        _parked.clear()
        _current = None
