"""Interleaved timing (collage.tuner.checks): rounds of blocks, and medians paired round by round.

The machine's speed moves within seconds (results/measurement/machine-level-seconds.md) and the first call after
another runtime ran pays for the switch (results/budget/timing-method.md); these tests give the runners synthetic
costs, since they are about the timing method, not about a backend."""
from __future__ import annotations

import random
import statistics
import time

import pytest

from collage.tuner.checks import interleaved_rounds, measure_interleaved, paired_medians


def test_paired_medians_rank_by_the_per_round_ratio_when_the_level_moves():
    # a slows 5% behind b in every round but the last, where the machine sped up between a's block and b's:
    # plain medians take a's middle round (1.5) and b's first (1.05) and call b 30% faster
    per = {"a": [1.0, 2.0, 1.5], "b": [1.05, 2.1, 0.9]}
    assert statistics.median(per["b"]) < statistics.median(per["a"])
    paired = paired_medians(per)
    assert paired["b"] / paired["a"] == pytest.approx(1.05)  # the median of the per-round ratios
    # scaled by the median level, the last round's (geometric mean of its two times); a sits 1.05 ** -0.5 under it
    assert paired["a"] == pytest.approx((1.5 * 0.9) ** 0.5 / 1.05 ** 0.5)


def test_paired_medians_of_one_runner_are_its_plain_median():
    assert paired_medians({"a": [3.0, 1.0, 2.0, 10.0]}) == {"a": pytest.approx(2.5)}
    assert paired_medians({}) == {}


def switching_runners(n_a: int, n_b: int, ms: float = 2.0, switch_ms: float = 3.0):
    """``n_a`` runners of runtime A and ``n_b`` of B, equally fast (``ms``), whose first call after the other
    runtime ran pays ``switch_ms`` more (another runtime's threads and weights, as a real switch)."""
    last: list[str] = [""]

    def runner(runtime: str):
        def call() -> None:
            time.sleep((ms + (switch_ms if last[0] not in ("", runtime) else 0.0)) / 1e3)
            last[0] = runtime
        return call

    return {**{f"A{i}": runner("A") for i in range(n_a)}, **{f"B{i}": runner("B") for i in range(n_b)}}


def test_blocks_leave_the_switch_out_of_the_medians():
    # benchmarks.tune_time timed shufflenet's 5 OpenVINO and 2 ONNX Runtime artifacts one call each in a shuffled
    # round: ONNX Runtime's calls followed a switch 5 times in 6, OpenVINO's 1 in 3 (its table read ONNX Runtime
    # 1.14x slower; in blocks 1.02-1.03: results/budget/timing-method.md)
    runners = switching_runners(5, 2)
    per = interleaved_rounds(runners, rounds=6, min_time_s=0.02, warmup_s=0.0, shuffle=random.Random(0))
    paired = paired_medians(per)
    a = statistics.median(paired[k] for k in paired if k.startswith("A"))
    b = statistics.median(paired[k] for k in paired if k.startswith("B"))
    assert b / a == pytest.approx(1.0, abs=0.1)
    assert max(paired.values()) < 2.0 + 3.0 / 2  # no median carries the 3 ms switch (one that did: 5 ms)


def test_single_calls_charge_the_switch_to_the_runtime_with_fewer_runners():
    # the method the blocks replace (benchmarks.timing_method times it beside them), on the same runners: the
    # check above is not true by construction
    from benchmarks.timing_method import single_calls

    runners = switching_runners(5, 2)
    per = single_calls(runners, {k: k[0] for k in runners}, 30, random.Random(0))
    a = statistics.median(statistics.median(v["all"]) for k, v in per.items() if k.startswith("A"))
    b = statistics.median(statistics.median(v["all"]) for k, v in per.items() if k.startswith("B"))
    assert b / a > 1.5
    assert statistics.median(per["B0"]["switch"]) > statistics.median(per["A0"]["other"]) + 2.0  # split by what ran


def test_a_shuffle_changes_the_order_of_every_round_and_times_each_runner_once_a_round():
    calls: list[str] = []
    runners = {k: (lambda k=k: calls.append(k)) for k in "abcd"}
    per = interleaved_rounds(runners, rounds=5, min_time_s=0.0, warmup_s=0.0, shuffle=random.Random(1))
    assert all(len(v) == 5 for v in per.values())
    warm = 4 * 3
    rounds = [tuple(dict.fromkeys(calls[warm + 12 * r: warm + 12 * (r + 1)])) for r in range(5)]
    assert all(sorted(r) == list("abcd") for r in rounds) and len(set(rounds)) > 1
    calls.clear()
    measure_interleaved(runners, rounds=2, min_time_s=0.0, warmup_s=0.0)  # the tune's own: the order given
    assert calls[warm:] == [k for k in "abcd" for _ in range(3)] * 2
