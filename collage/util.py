"""Small helpers that import nothing from the collage package (a leaf module)."""
from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path


def cache_dir() -> Path:
    """Where collage keeps caches (zoo models, support tables, cost DB): $COLLAGE_CACHE or ~/.cache/collage."""
    root = os.environ.get("COLLAGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "collage")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def physical_cores() -> int:
    """Cores to run on: the CPUs this process may use (affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def machine_id() -> str:
    """A short identifier of the machine a measurement was taken on (CPU model, cores, arch)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.machine()}|{cpu}|{physical_cores()}c"


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
