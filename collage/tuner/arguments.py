"""``collage.tune``'s arguments checked for their types before anything runs, and the text forms the command
line uses read the same way from Python.

A Python caller who passes the wrong kind of value gets an :class:`collage.errors.OptionTypeError` (a
``TypeError`` and an ``OptionError``) naming the keyword, what it takes and what it got; a value of the right
kind out of its range an :class:`collage.errors.OptionError` (a ``ValueError``). ``shapes`` and
``backend_options`` also take the command line's texts (``"x=1,3,224,224"``, ``["tvm.trials=64"]``);
``budget`` and ``tvm_budget`` a duration text or seconds.
"""
from __future__ import annotations

import numbers
import os
import reprlib
from collections.abc import Mapping
from typing import Any

from collage.errors import CollageError, ModelError, OptionError, OptionTypeError
from collage.util import parse_duration

#: the devices a tune can target
TARGETS = ("cpu", "cuda")


def _got(value: object) -> str:
    return f"{type(value).__name__} {reprlib.repr(value)}"


def require(ok: bool, name: str, takes: str, value: object) -> None:
    """An OptionTypeError naming keyword ``name``, what it ``takes`` and ``value`` unless ``ok``."""
    if not ok:
        raise OptionTypeError(f"tune: {name} takes {takes}, not {_got(value)}")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_path(value: object) -> bool:
    return isinstance(value, (str, os.PathLike))


def check_sources(model: object, out_dir: object) -> None:
    """``model`` is an ONNX path, ``zoo:NAME`` or ModelProto; ``out_dir`` a path."""
    import onnx

    require(_is_path(model) or isinstance(model, onnx.ModelProto), "model",
            "an ONNX file path, 'zoo:NAME' or an onnx.ModelProto", model)
    require(_is_path(out_dir), "out_dir", "a directory path (str or os.PathLike)", out_dir)


def duration(name: str, value: object) -> float | None:
    """A duration keyword (``budget``, ``tvm_budget``): None, seconds, or a text such as ``"10m"``."""
    if value is None:
        return None
    require(isinstance(value, str) or _is_number(value), name, "a duration ('30s', '10m', '1h30m') or seconds", value)
    try:
        return float(parse_duration(value))  # type: ignore[arg-type]
    except ValueError as e:
        raise OptionError(f"tune: {name}: {e}") from None


def seconds(name: str, value: object) -> float | None:
    """A keyword in seconds (``budget_s``): None or a number."""
    if value is None:
        return None
    require(_is_number(value), name, "a number of seconds", value)
    return float(value)  # type: ignore[arg-type]


def shapes(value: object) -> dict[str, tuple[int, ...]] | None:
    """``shapes``: None, ``{name: (d1, d2, ...)}``, or the command line's ``"name=d1,d2,..."`` (one text or a
    list of them); dimensions are checked when the model is loaded (against its inputs)."""
    from collage.graph.ir import parse_shapes
    from collage.graph.model_checks import check_dims

    if value is None:
        return None
    takes = "{input name: (d1, d2, ...)} or 'NAME=D1,D2,...' texts"
    if isinstance(value, str):
        value = [value]
    try:
        if not isinstance(value, Mapping):
            require(isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value), "shapes", takes,
                    value)
            return parse_shapes(value, option="shapes")  # type: ignore[arg-type]
        out = {}
        for name, dims in value.items():
            require(isinstance(name, str), "shapes", takes + " (the keys are input names)", name)
            require((isinstance(dims, (list, tuple)) or hasattr(dims, "tolist"))
                    and all(_is_int(d) for d in list(dims)), f"shapes[{name!r}]",
                    "a sequence of whole numbers such as (1, 3, 224, 224)", dims)
            out[name] = check_dims(name, list(dims), f"shapes[{name!r}] {reprlib.repr(dims)}")
        return out
    except ModelError as e:
        raise OptionError(f"tune: {e}") from None


def backend_options(value: object) -> dict[str, dict[str, Any]]:
    """``backend_options``: None, ``{backend: {option: value}}``, or the command line's
    ``["BACKEND.OPTION=VALUE", ...]`` (a single text too)."""
    from collage.backends import parse_backend_options

    if value is None:
        return {}
    takes = "{backend: {option: value}} or 'BACKEND.OPTION=VALUE' texts"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Mapping):
        require(isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value), "backend_options",
                takes, value)
        try:
            return parse_backend_options(value)  # type: ignore[arg-type]
        except CollageError as e:
            raise OptionError(f"tune: backend_options: {e}") from None
    for name, opts in value.items():
        require(isinstance(name, str), "backend_options", takes + " (the keys are backend names)", name)
        require(isinstance(opts, Mapping) and all(isinstance(k, str) for k in opts), f"backend_options[{name!r}]",
                "a mapping of option names to values", opts)
    return {name: dict(opts) for name, opts in value.items()}


def check_types(o: Any) -> None:
    """Every field of ``o`` (a :class:`collage.tuner.options.TuneOptions`, which calls this from its
    ``__post_init__``) of the kind it documents (OptionTypeError naming the field otherwise)."""
    from collage.measure.accuracy import Budget
    from collage.measure.db import CostDB
    from collage.measure.executor import Executor
    from collage.search.candidates import Limits

    require(isinstance(o.target, str), "target", f"one of {', '.join(TARGETS)}", o.target)
    if o.target not in TARGETS:
        raise OptionError(f"tune: target must be one of {', '.join(TARGETS)}, not {o.target!r}")
    require(all(isinstance(b, str) for b in o.backends), "backends", "backend names (str)", list(o.backends))
    for name in ("budget_s", "tvm_budget_s"):
        value = getattr(o, name)
        require(value is None or _is_number(value), name, "a number of seconds", value)
    require(o.db is None or _is_path(o.db) or isinstance(o.db, CostDB), "db",
            "a path, a sqlite:/// or postgresql:// URL, or a CostDB", o.db)
    require(_is_int(o.refine_trials), "refine_trials", "a whole number", o.refine_trials)
    require(o.shapes is None or isinstance(o.shapes, Mapping), "shapes", "{input name: (d1, d2, ...)}", o.shapes)
    require(o.limits is None or isinstance(o.limits, Limits), "limits", "a collage.search.candidates.Limits",
            o.limits)
    if o.limits is not None:
        require(_is_int(o.limits.max_nodes), "limits.max_nodes", "a whole number", o.limits.max_nodes)
        if o.limits.max_nodes < 1:
            raise OptionError(f"tune: limits.max_nodes must be 1 or more, not {o.limits.max_nodes}")
    for name in ("archive", "progress"):
        require(isinstance(getattr(o, name), bool), name, "True or False", getattr(o, name))
    require(isinstance(o.tolerance, Mapping), "tolerance", "{'atol': ..., 'rtol': ...}", o.tolerance)
    require(_is_int(o.seed), "seed", "a whole number", o.seed)
    require(o.accuracy is None or isinstance(o.accuracy, (str, Budget)), "accuracy",
            "a budget text such as 'cos=0.999,rel=0.01' or a Budget", o.accuracy)
    require(o.calibration is None or _is_path(o.calibration), "calibration", "an .npz path", o.calibration)
    require(o.cluster is None or isinstance(o.cluster, (str, Executor)), "cluster",
            "'auto', 'ray://HOST:PORT' or an Executor", o.cluster)
    require(isinstance(o.backend_options, Mapping), "backend_options", "{backend: {option: value}}",
            o.backend_options)
    require(isinstance(o.measure_order, str), "measure_order", "'auto', 'enumeration' or 'guided'", o.measure_order)
