"""Small helpers that import nothing from the collage package (a leaf module): cache dir, hashes, machine id,
durations, progress lines, Markdown tables."""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import math
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([a-z]*)")


def parse_duration(text: str | float) -> float:
    """Seconds in a duration: ``90`` or ``90s``, ``10m``, ``1h30m``, ``1.5h`` (units s/sec, m/min, h; a bare
    number is seconds). Raises ValueError, naming the text, for anything else: empty, negative, nan, inf,
    unknown units, garbage. (argparse turns that ValueError into a one-line usage error when this is a
    ``type=``.)"""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise ValueError(f"bad duration {text!r}: use a finite number of seconds >= 0")
        return float(text)
    s = str(text).strip().lower().replace(" ", "")
    parts = _DURATION_PART.findall(s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"bad duration {text!r}: use forms like 90, 90s, 10m, 1h30m or 1.5h")
    unknown = [u for _, u in parts if u not in _DURATION_UNITS]
    if unknown:
        raise ValueError(f"bad duration {text!r}: unknown unit {unknown[0]!r} (use s, m or h)")
    scales = [_DURATION_UNITS[u] for _, u in parts]
    if len(parts) > 1 and (not all(u for _, u in parts) or scales != sorted(set(scales), reverse=True)):
        # "1.5.5" (1.5 + .5), "1m1m", "30s1m", "1h30": each unit at most once, hours before minutes before seconds
        raise ValueError(f"bad duration {text!r}: use forms like 90, 90s, 10m, 1h30m or 1.5h")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def count_arg(minimum: int):
    """An argparse ``type=``: a whole number >= ``minimum``; anything else a usage error naming the text."""
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {minimum} or more")
        return value

    parse.__name__ = f"whole number >= {minimum}"  # argparse names the type in some messages
    return parse


def duration_arg(text: str) -> float:
    """:func:`parse_duration` as an argparse ``type=``: a bad duration is a usage error naming the text."""
    import argparse

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def say(progress: bool, msg: str, *args: object, logger: logging.Logger | None = None, detail: bool = False) -> None:
    """One progress line: logged (lazy %-formatting) and, when ``progress``, printed to stderr as
    ``collage: ...``. A ``detail`` (the search's internals: levels, cut charges) is printed only where the
    logger takes info records (``collage -v``); the default output stays in plain words."""
    logger = logger or logging.getLogger("collage")
    logger.info(msg, *args)
    if progress and (not detail or logger.isEnabledFor(logging.INFO)):
        print("collage: " + (msg % args if args else msg), file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """Where collage keeps caches (zoo models, support tables, cost DB): $COLLAGE_CACHE or ~/.cache/collage."""
    root = os.environ.get("COLLAGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "collage")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``.<stem>.lock`` beside ``path`` (one writer of ``path`` among processes)."""
    with open(path.parent / f".{path.stem}.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def timed_runs(run: Callable[[T], object], feeds: T, repeat: int, warmup: int) -> list[float]:
    """Wall-clock times (ms) of ``repeat`` calls ``run(feeds)`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run(feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        run(feeds)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return times


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def thread_count(threads: int | None) -> int:
    """A backend's ``threads`` option: a whole number >= 1, or None/0 for :func:`physical_cores`; ValueError naming
    anything else (-4 once reached OpenVINO, which then refused every node as if the ops were at fault)."""
    if threads is None or (isinstance(threads, int) and not isinstance(threads, bool) and threads == 0):
        return physical_cores()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"threads must be a whole number >= 1 (0 or none: every core), not {threads!r}")
    return threads


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity; elsewhere every CPU)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return set(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Cores to run on: the CPUs this process may use (affinity), at least 1."""
    return max(1, len(usable_cpus()))


#: the kernel's clock ticks a second (the unit of /proc/stat's and /proc/PID/stat's CPU times)
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_stat(pid: int | str = "self") -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (``state`` first, so field N of proc(5) is item
    N - 3); OSError where it cannot be read (gone, not Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


#: where Linux describes the CPU (tests point it at a fake file)
CPUINFO = "/proc/cpuinfo"


@functools.lru_cache(maxsize=8)
def _cpuinfo(path: str) -> dict[str, str] | None:
    """The first processor's ``key: value`` lines of ``path``, None where it cannot be read (read once per path)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    break
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        return None
    return fields


def cpu_flags() -> frozenset[str] | None:
    """This CPU's feature flags (``avx2``, ``avx512_vnni``, ``amx_tile``, ...) from /proc/cpuinfo, None where that
    cannot be read: the one reader behind the shipped model's machine class and the bf16 / int8 variants' checks."""
    info = _cpuinfo(CPUINFO)
    return None if info is None else frozenset(info.get("flags", "").split())


#: int8 kernels that compute u8 x s8 dot products exactly into 32 bits (VNNI, AMX); without them an x86 CPU's int8
#: kernels multiply-add pairs into 16 bits first (AVX2's vpmaddubsw), which can saturate
INT8_DOT_FLAGS = frozenset({"amx_int8", "avx512_vnni", "avx_vnni"})


#: the kinds :func:`int8_kernels` tells apart, in words (the load warning, the report)
INT8_KERNEL_WORDS = {"vnni": "VNNI / AMX (exact 32-bit dot products)",
                     "avx2": "AVX2 (16-bit multiply-adds that can saturate)"}


def int8_kernels(flags: Iterable[str] | None = None) -> str | None:
    """Which int8 kernels the x86 runtimes run on this CPU (``flags``: /proc/cpuinfo's by default): ``"vnni"``
    (exact 32-bit dot products: VNNI or AMX-INT8), ``"avx2"`` (16-bit multiply-adds that can saturate), None
    (neither, or flags unknown). The two round differently: an int8 plan's error judged on one does not carry
    over to the other (results/demo/avx2-emulated.md)."""
    have = set(flags) if flags is not None else cpu_flags()
    if not have:
        return None
    if have & INT8_DOT_FLAGS:
        return "vnni"
    return "avx2" if "avx2" in have else None


def is_int8(backend: object) -> bool:
    """Whether a backend (or its manifest entry's ``settings``) runs int8 kernels: precision ``int8`` or
    ``int8+<rest>``."""
    precision = backend.get("precision") if isinstance(backend, dict) else getattr(backend, "precision", None)
    return str(precision or "").startswith("int8")


#: oneDNN instruction-set caps (``ONEDNN_MAX_CPU_ISA``, formerly ``DNNL_MAX_CPU_ISA``) without int8 dot products
ONEDNN_NO_VNNI = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE"})


def onednn_below_vnni() -> bool:
    """Whether the environment caps oneDNN (OpenVINO's CPU kernels) below VNNI: its int8 kernels are then AVX2's."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    return cap.strip().upper() in ONEDNN_NO_VNNI


def cpu_class(flags: Iterable[str] | None = None) -> str:
    """The CPU's widest matrix/vector extension and its int8 kernels: ``amx``, ``avx512-vnni``, ``avx512``,
    ``avx2-vnni``, ``avx2``; "" where neither AVX2 nor more is listed (another architecture, unknown flags).
    Machines of one class run the same kernels: costs and int8 errors carry over between them, not across."""
    have = set(flags) if flags is not None else (cpu_flags() or set())
    if "amx_tile" in have:
        return "amx"
    widest = "avx512" if "avx512f" in have else "avx2" if "avx2" in have else ""
    return f"{widest}-vnni" if widest and int8_kernels(have) == "vnni" else widest


@functools.lru_cache(maxsize=1)
def machine_id() -> str:
    """A short identifier of the machine a measurement was taken on (arch, CPU model, cores, and its
    :func:`cpu_class`: VMs name Zen 3 and Zen 5 alike "AMD EPYC", whose costs are ~3x apart); read once per
    process (every cost key holds it: 178,696 keys of one inception_v2 tune read /proc/cpuinfo each)."""
    cpu = (_cpuinfo(CPUINFO) or {}).get("model name") or platform.processor() or ""
    cls = cpu_class()
    return f"{platform.machine()}|{cpu}|{physical_cores()}c" + (f"|{cls}" if cls else "")


def source_commit() -> str:
    """The short git commit of the collage source that runs (``abc1234``, ``abc1234+dirty`` with uncommitted
    changes), or ``"unknown"`` outside a git checkout: benchmark headers name it, so a table says which code
    wrote it (the version string alone does not change between commits)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    if git("rev-parse", "--show-toplevel") != str(root):  # an installed copy (maybe inside another repo)
        return "unknown"
    commit = git("rev-parse", "--short", "HEAD")
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no", "--", "collage", "benchmarks")
                     else "")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A GitHub Markdown table of dict rows (missing cells blank, floats to 3 decimals)."""
    if not rows:
        return "(no rows)\n"
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))

    def cell(v: object) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            if v != v:
                return "nan"
            return f"{v:.2e}" if v and abs(v) < 0.01 else f"{v:.3f}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"
