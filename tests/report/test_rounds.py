"""How steady the plan's lead is (collage.report.rounds): from report.json's ``verification`` rounds, the rounds
the plan was ahead of the best other single backend in, and the per-round ratio's range; a split lead is called a
near tie. The report's baselines section and the tune command's summary say it."""
from __future__ import annotations

from collage.report.model import Report
from collage.report.rounds import Lead, lead, rounds_line


def _report(plan: str | None, round_ms: dict[str, list[float]], baselines: dict[str, float]) -> dict:
    return {"plan_ms": 1.0, "baselines": baselines,
            "verification": {"rounds": min(map(len, round_ms.values())), "plan": plan, "round_ms": round_ms}}


def test_a_steady_lead_names_the_best_other_backend_and_the_range():
    r = _report("plan", {"plan": [1.0, 1.0, 2.0], "openvino": [1.2, 1.3, 2.5], "onnxruntime": [1.5, 1.6, 3.2]},
                {"openvino": 1.3, "onnxruntime": 1.6})
    line = rounds_line(r)
    assert line == ("round by round: the plan was faster than openvino, the best other single backend, in 3 of 3 "
                    "interleaved rounds; openvino / plan per round 1.20-1.30x")
    assert rounds_line(Report.from_dict(r)) == line  # a record or its JSON alike


def test_a_split_lead_is_a_near_tie_and_a_mostly_held_one_is_not():
    tie = _report("onnxruntime", {"onnxruntime": [2.0, 2.0, 2.0, 2.0], "openvino": [1.9, 2.1, 2.2, 1.95]},
                  {"onnxruntime": 2.0, "openvino": 2.02})
    line = rounds_line(tie)
    assert line.startswith("round by round: onnxruntime (the plan) was faster than openvino, the best other single "
                           "backend, in 2 of 4 interleaved rounds; openvino / plan per round 0.95-1.10x: a near tie,")
    assert lead(tie) == Lead("onnxruntime", "openvino", 2, 4, 0.95, 1.1) and lead(tie).near_tie
    mostly = _report("plan", {"plan": [1.0] * 5, "openvino": [1.3, 1.2, 1.25, 1.4, 0.98]}, {"openvino": 1.25})
    assert lead(mostly).wins == 4 and not lead(mostly).near_tie
    assert ": not ahead in every round" in rounds_line(mostly) and "near tie" not in rounds_line(mostly)


def test_a_plan_that_is_a_backend_is_not_compared_with_itself_nor_with_the_searched_plan():
    # never-worse made openvino the plan: the searched plan ("plan") lost and is no single backend
    r = _report("openvino", {"plan": [3.0, 3.0], "openvino": [2.0, 2.0], "onnxruntime": [2.4, 2.6]},
                {"openvino": 2.0, "onnxruntime": 2.5})
    assert rounds_line(r) == ("round by round: openvino (the plan) was faster than onnxruntime, the best other single "
                              "backend, in 2 of 2 interleaved rounds; onnxruntime / plan per round 1.20-1.30x")


def test_nothing_is_said_without_rounds_or_a_competitor():
    assert rounds_line(None) is None
    assert rounds_line({"plan_ms": 1.0, "baselines": {"openvino": 2.0}}) is None  # an older report.json
    assert rounds_line(_report(None, {"plan": [1.0]}, {"openvino": 2.0})) is None  # the plan not in the rounds
    assert rounds_line(_report("plan", {"plan": [1.0]}, {"openvino": 2.0})) is None  # a baseline from the cost DB
    one = _report("plan", {"plan": [1.0], "openvino": [1.5]}, {"openvino": 1.5})
    assert rounds_line(one) == ("one interleaved round only (the budget left no time for more): openvino, the best "
                                "other single backend, / plan 1.50x in it; how steady a lead is shows over several "
                                "rounds")
