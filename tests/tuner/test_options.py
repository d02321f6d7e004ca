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


def test_tune_takes_options_or_its_keywords_and_drops_none():
    """``tune(model, out_dir, options=None, **keywords)``: every keyword reaches TuneOptions (nothing silently
    dropped), an unknown one is refused naming it, and keywords override a TuneOptions given."""
    from collage.errors import OptionTypeError
    from collage.tuner.options import TUNE_KEYWORDS

    params = inspect.signature(tune).parameters
    assert list(params) == ["model", "out_dir", "options", "keywords"]
    fields = set(TuneOptions.__dataclass_fields__)
    assert TUNE_KEYWORDS - {"budget", "tvm_budget"} == fields - {"tvm_budget_s"}
    for name in ("target", "backends", "budget", "db", "refine_trials", "shapes", "limits", "archive", "tolerance",
                 "accuracy", "calibration", "progress", "seed", "budget_s"):
        assert name in TUNE_KEYWORDS, name
    with pytest.raises(OptionTypeError, match="'budgt'"):
        tune("zoo:tiny-resnet", "out", budgt="30s")
    with pytest.raises(OptionTypeError, match="TuneOptions"):
        tune("zoo:tiny-resnet", "out", {"budget": "30s"})
    base = TuneOptions.build(budget="30s", backends=["onnxruntime"], tvm_budget=None)
    assert base.with_keywords(budget="1m").budget_s == 60.0 and base.with_keywords(seed=3).budget_s == 30.0
    assert base.with_keywords(seed=3).backends == ("onnxruntime",) and base.with_keywords(seed=3).seed == 3
    assert base.with_keywords() == base


