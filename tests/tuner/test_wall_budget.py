"""``--budget`` is the wall-clock limit of the whole tune (issue 40 item 1): loading, the baselines, measuring,
search, verification, numerics and export all inside it, each step's share said on stderr; a budget too small
for the baselines alone is refused up front in one line naming an estimate of the least that works.

The tunes run the real ``collage`` command (a subprocess: its start-up counts against the budget too) on a fresh
cost DB, so everything is measured now. The bound checked is 0.75-1.2 of the budget, not the 0.9-1.1 the tune
aims at: this 2-core machine is shared with other work, and a whole model that took 2 s to measure took 15 s
under that load. On the code before, the same tunes took 2-3x their budget (squeezenet --budget 30s: 76-87 s,
results/budget/tune-time-history.md).
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.commands.test_bad_inputs import _assert_one_line, _cli

PHASES = ["loading", "support checks", "candidates", "whole models", "measuring", "baselines", "search",
          "verification", "refinement", "numerics", "export"]


def _timed_tune(tmp_path: Path, model: str, budget: str) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = _cli(tmp_path, ["tune", model, "--budget", budget, "-o", str(tmp_path / "out"),
                           "--db", str(tmp_path / "costs.sqlite")])
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    return took, proc.stderr


def _check_ends_within(took: float, budget_s: float, stderr: str) -> None:
    assert 0.75 * budget_s <= took <= 1.2 * budget_s, f"took {took:.1f} s of a {budget_s:.0f} s budget:\n{stderr}"


def _check_phase_lines(stderr: str, budget_s: float) -> None:
    for phase in PHASES:
        assert re.search(rf"^collage: time: {phase} [0-9.]+ s of {budget_s:.0f} s", stderr, re.M), \
            f"no share line for {phase!r}:\n{stderr}"
    assert re.search(r"^collage: verifying: .* round\(s\), \d+ s left of the budget", stderr, re.M), stderr
    assert re.search(r"^collage: exporting the artifact to .*, \d+ s left of the budget", stderr, re.M), stderr


@pytest.mark.slow
def test_tiny_resnet_tune_ends_within_its_budget_and_says_each_share(tmp_path):
    # old code: a fresh-DB tiny-resnet --budget 20s ran past 30 s (the whole models and the switch costs were
    # outside the budget); and no "time: ..." line
    took, stderr = _timed_tune(tmp_path, "zoo:tiny-resnet", "20s")
    _check_ends_within(took, 20, stderr)
    _check_phase_lines(stderr, 20)


@pytest.mark.slow
def test_squeezenet_tune_ends_within_its_budget(tmp_path):
    # old code: 76-87 s for --budget 30s on a fresh DB (34 s of it the switch costs, after the measuring)
    took, stderr = _timed_tune(tmp_path, "zoo:squeezenet", "30s")
    _check_ends_within(took, 30, stderr)
    assert stderr.count("no switch cost measured") <= 1, stderr  # it was said twice (measuring, then baselines)
    report = (tmp_path / "out" / "report.json").read_text()
    assert '"time"' in report and '"budget_s": 30.0' in report


def test_budget_too_small_for_the_baselines_is_refused_in_one_line(tmp_path):
    # old code: --budget 1s tuned on for over a minute (the whole models outside the budget, then the rest)
    proc = _cli(tmp_path, ["tune", "zoo:squeezenet", "--budget", "1s", "-o", str(tmp_path / "out"),
                           "--db", str(tmp_path / "costs.sqlite")])
    line = _assert_one_line(proc, "tune", ["--budget 1s is too small for squeezenet", "an estimate", "give --budget"])
    least = int(re.search(r"give --budget (\d+)s or more", line).group(1))
    assert 5 <= least <= 120, line
    assert not (tmp_path / "out").exists()


def test_python_budget_too_small_is_an_option_error(tmp_path):
    import collage
    from collage.errors import OptionError

    with pytest.raises(OptionError, match=r"budget 0\.5s is too small .* give --budget \d+s or more"):
        collage.tune("zoo:tiny-resnet", tmp_path / "out", budget=0.5, db=tmp_path / "costs.sqlite", progress=False)
