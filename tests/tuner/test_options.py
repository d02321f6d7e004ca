"""TuneOptions: what tune() is asked, validated once; the budget read as a duration."""
from __future__ import annotations

import inspect

import pytest

from collage.tuner.job import tune
from collage.tuner.options import DEFAULT_BACKENDS, DEFAULT_TOLERANCE, TuneOptions


def test_budget_is_a_duration_and_budget_s_still_works():
    assert TuneOptions.build(budget="30s").budget_s == 30.0
    assert TuneOptions.build(budget="1h30m").budget_s == 5400.0
    assert TuneOptions.build(budget=90).budget_s == 90.0
    assert TuneOptions.build(budget_s=12.5).budget_s == 12.5
    assert TuneOptions.build().budget_s is None
    with pytest.raises(TypeError, match="not both"):
        TuneOptions.build(budget="30s", budget_s=30)
    with pytest.raises(ValueError, match="'-1m'"):
        TuneOptions.build(budget="-1m")


def test_defaults_and_refusals():
    o = TuneOptions.build()
    assert o.backends == DEFAULT_BACKENDS and dict(o.tolerance) == DEFAULT_TOLERANCE and o.target == "cpu"
    assert TuneOptions.build(backends=["onnxruntime"]).backends == ("onnxruntime",)
    with pytest.raises(ValueError, match="refine_trials"):
        TuneOptions.build(refine_trials=-1)
    with pytest.raises(ValueError, match="atol and rtol"):
        TuneOptions.build(tolerance={"abs": 1.0})
    with pytest.raises(ValueError, match="no backend"):
        TuneOptions.build(backends=[])
    with pytest.raises(ValueError, match="finite"):
        TuneOptions.build(budget_s=float("nan"))


def test_tune_signature_is_explicit():
    params = inspect.signature(tune).parameters
    assert list(params)[:2] == ["model", "out_dir"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[2:])
    for name in ("target", "backends", "budget", "db", "refine_trials", "shapes", "limits", "archive", "tolerance",
                 "accuracy", "calibration", "progress", "seed", "budget_s"):
        assert name in params, name
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    # every option of tune reaches TuneOptions (nothing silently dropped)
    fields = set(TuneOptions.__dataclass_fields__)
    assert set(params) - {"model", "out_dir", "budget", "tvm_budget"} == fields - {"tvm_budget_s"}
