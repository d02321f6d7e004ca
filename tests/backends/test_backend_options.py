"""Backend constructors that take their options as one dataclass (collage.backends.options.takes_options) still
read, for every caller, as constructors with keyword parameters: the CLI's option check, the worker's
``resolve_backend(name, options)`` and the artifact loader's recorded settings."""
from __future__ import annotations

import inspect

import pytest

from collage.backends import check_options, get_backend, option_names
from collage.backends.onnxruntime.backend import OnnxRuntimeBackend
from collage.errors import CollageError

ORT = ["threads", "spin", "shared_pool", "opt_level", "precision", "residual_fusion", "spin_us", "wait", "pool_nice",
       "park"]
TVM = ["tuning", "trials", "tuning_db", "isolate", "dlight", "mcpu", "threads", "check_timeout_s", "compile_timeout_s",
       "seed"]


def test_option_names_are_the_dataclass_fields_in_order():
    assert option_names("onnxruntime") == ORT
    assert option_names("tvm") == TVM
    params = inspect.signature(OnnxRuntimeBackend.__init__).parameters
    assert params["spin_us"].default == 100 and params["shared_pool"].default is True
    assert params["threads"].kind is inspect.Parameter.KEYWORD_ONLY


def test_keywords_reach_the_backend_and_unknown_ones_are_refused():
    b = get_backend("onnxruntime", shared_pool=False, wait="stop", spin_us=0, threads=1)
    assert (b.shared_pool, b.wait, b.spin_us, b.threads) == (False, "stop", 0, 1)
    assert b.options["wait"] == "stop"
    with pytest.raises(CollageError, match="wait must be one of"):
        get_backend("onnxruntime", wait="nap")
    with pytest.raises(TypeError, match="OnnxRuntimeBackend.*'trials'"):
        get_backend("onnxruntime", trials=2)
    with pytest.raises(CollageError, match="backend 'tvm' has no option 'spin'"):
        check_options("tvm", {"spin": True})
    # subclasses pass keywords to the decorated constructor
    assert get_backend("onnxruntime-int8", threads=1).residual_fusion is False


def test_tvm_options_without_tvm_installed():
    t = get_backend("tvm", tuning="metaschedule", trials=8, mcpu="x", threads=1)
    assert (t.tuning, t.trials, t._mcpu, t.threads, t.isolate) == ("metaschedule", 8, "x", 1, True)
    with pytest.raises(CollageError, match="trials must be at least 1"):
        get_backend("tvm", trials=0)
