"""The report's boundary-overhead figure is measured inside the budget (issue 40 item 1): not at all for a
one-partition plan (no boundary; a whisper-tiny-encoder plan's 23 rounds ran 8.6 s past a 60 s budget, found
by benchmarks/tune_time.py), cut to the rounds that fit what is left, skipped when nothing is left. The
artifact here only counts its calls: the test is about the budget's arithmetic."""
from __future__ import annotations

import time
from types import SimpleNamespace

from collage.tuner.clock import Deadline
from collage.tuner.steps.finish import boundary_overhead


class CountingArtifact:
    def __init__(self, partitions: int) -> None:
        self.partitions = [object()] * partitions
        self.calls: list[int] = []

    def boundary_overhead(self, feeds, repeat=20, warmup=3):
        self.calls.append(repeat)
        return {"repeat": repeat}


def _ctx(total_s: float | None, spent_s: float = 0.0):
    said: list[str] = []
    clock = Deadline(total_s, start=time.monotonic() - spent_s)
    return SimpleNamespace(clock=clock, feeds={}, say=lambda fmt, *a: said.append(fmt % a)), said


def test_one_partition_has_no_boundary_to_measure():
    art = CountingArtifact(1)
    ctx, _ = _ctx(None)
    assert boundary_overhead(ctx, art, plan_ms=187.0) is None
    assert art.calls == []


def test_unbudgeted_runs_all_rounds():
    art = CountingArtifact(3)
    assert boundary_overhead(_ctx(None)[0], art, plan_ms=187.0) == {"repeat": 20}


def test_rounds_are_cut_to_what_is_left():
    art = CountingArtifact(3)
    ctx, _ = _ctx(60.0, spent_s=50.0)  # 7 s left (5% slack): a round of a 187 ms plan is 0.56 s
    boundary_overhead(ctx, art, plan_ms=187.0)
    assert 3 <= art.calls[0] <= 11


def test_skipped_when_the_budget_is_spent():
    art = CountingArtifact(3)
    ctx, said = _ctx(60.0, spent_s=58.0)
    assert boundary_overhead(ctx, art, plan_ms=187.0) is None
    assert art.calls == [] and said and "not measured" in said[0]
