"""Progress of a long step, fitted to where stderr goes (a leaf module: imports nothing of collage).

- stderr is a terminal: a tqdm bar; with a deadline (the tune's budget), its ETA never reads past it.
- stderr is a file or a pipe (CI logs): no bar; one summary line when the step ends
  (``collage: measuring resnet50: candidates: 159/242 cand (2 of them done before this step) in 14.6 s,
  failed=0``), instead of a line per update.
- disabled (``--quiet``, ``progress=False``): nothing.

    with progress_bar(total=len(todo), desc="measuring x", unit="cand", enabled=progress,
                      deadline=time.monotonic() + budget_s) as bar:
        ...
        bar.update(1)
        bar.set_postfix(failed=2)

``track(iterable, ...)`` wraps an iterable the same way.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Bar:
    """What every kind of bar offers: update, set_postfix, close, a context manager."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int = 0) -> None:
        self.total, self.desc, self.unit, self.n, self.initial = total, desc, unit, initial, initial
        self.postfix: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, refresh: bool = True, **kw: Any) -> None:
        self.postfix.update(kw)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SummaryLine(_Bar):
    """No bar; one line on stderr when the step ends."""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        done = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        done += f" {self.unit}" + (f" ({self.initial} of them done before this step)" if self.initial else "")
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        print(f"collage: {self.desc}: {done} in {time.monotonic() - self.t0:.1f} s{extra}",
              file=sys.stderr, flush=True)


def _tqdm_bar(total: int | None, desc: str, unit: str, initial: int, deadline: float | None) -> Any:
    from tqdm import tqdm

    class BudgetBar(tqdm):
        """A tqdm bar whose ETA is at most the time left to ``deadline`` (the step stops there)."""

        @property
        def format_dict(self) -> dict[str, Any]:
            d = super().format_dict
            if deadline is None or not d.get("total"):
                return d
            left = max(0.0, deadline - time.monotonic())
            done = d["n"] - self.initial
            rate = d.get("rate") or (done / d["elapsed"] if d["elapsed"] and done > 0 else None)
            eta = (d["total"] - d["n"]) / rate if rate else float("inf")
            if eta > left:
                d["bar_format"] = ("{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<" + _clock(left)
                                   + " budget, {rate_fmt}{postfix}]")
            return d

    return BudgetBar(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, leave=True)


def progress_bar(total: int | None, desc: str, unit: str = "it", *, enabled: bool = True, initial: int = 0,
                 deadline: float | None = None) -> Any:
    """A bar for a step of ``total`` units (module docstring); ``deadline`` is a ``time.monotonic()`` value."""
    if not enabled:
        return _Bar(total, desc, unit, initial)
    if stderr_is_terminal():
        return _tqdm_bar(total, desc, unit, initial, deadline)
    return _SummaryLine(total, desc, unit, initial)


def track(iterable: Iterable[T], desc: str, unit: str = "it", *, total: int | None = None, enabled: bool = True,
          deadline: float | None = None) -> Iterator[T]:
    """Iterate ``iterable`` with a ``progress_bar`` (closed when the loop ends, however it ends)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress_bar(total, desc, unit, enabled=enabled, deadline=deadline) as bar:
        for item in iterable:
            yield item
            bar.update(1)
