"""Progress where stderr goes: a bar on a terminal (ETA bounded by the deadline), one line in a log, nothing
when disabled."""
from __future__ import annotations

import io
import time

from collage import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_one_summary_line_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    for _ in progress.track(range(50), "measuring x", "cand"):
        pass
    with progress.progress_bar(10, "errors x", "cand") as bar:
        bar.update(4)
        bar.set_postfix(failed=1)
    err = capsys.readouterr().err
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("collage: ")]
    assert len(err.splitlines()) == 2 and "measuring x: 50/50 cand in" in err and "4/10 cand" in err
    assert "failed=1" in err and "\r" not in err


def test_nothing_when_disabled(capsys):
    for _ in progress.track(range(5), "x", enabled=False):
        pass
    assert capsys.readouterr().err == ""


def test_eta_on_a_terminal_never_runs_past_the_deadline(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    bar = progress.progress_bar(1000, "measuring x", "cand", deadline=time.monotonic() + 30)
    bar.update(1)
    time.sleep(0.2)
    bar.update(1)  # ~10 cand/s: 998 left would be ~100 s, the deadline is 30 s away
    text = bar.__str__()
    bar.close()
    assert "budget" in text and ("<00:30 budget" in text or "<00:29 budget" in text), text
    free = progress.progress_bar(1000, "measuring y", "cand")  # no deadline: tqdm's own ETA
    free.update(1)
    assert "budget" not in str(free)
    free.close()
