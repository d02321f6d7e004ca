"""What one tuning job is asked to do: :class:`TuneOptions` (plain data, validated once).

``collage.tune(model, out_dir, **keywords)`` builds one with :meth:`TuneOptions.build` (which reads the
``budget`` as a duration, and still takes the older ``budget_s=`` seconds; ``tune(model, out_dir, options,
**keywords)`` takes one and overrides its fields with :meth:`TuneOptions.with_keywords`; the keywords' kinds are checked
by
:mod:`collage.tuner.arguments`, which also reads the command line's texts for shapes and backend options); the job's
steps (:mod:`collage.tuner.job`) read it and never change it.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collage.errors import CollageError, OptionError, OptionTypeError
from collage.tuner import arguments
from collage.tuner.arguments import check_types, require

if TYPE_CHECKING:
    from collage.measure.accuracy import Budget
    from collage.measure.db import CostDB
    from collage.search.candidates import Limits

DEFAULT_BACKENDS = ("onnxruntime", "openvino")
#: artifact outputs vs the ORT fp32 whole-model reference
DEFAULT_TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
#: orders in which candidates are measured under a budget (TuneOptions.measure_order); "auto": guided under a
#: budget (where the tune extra's XGBoost and SciPy are installed), else enumeration
MEASURE_ORDERS = ("auto", "enumeration", "guided")


#: the keywords ``tune`` takes (and :meth:`TuneOptions.build`): the fields, with ``budget`` and ``tvm_budget``
#: durations for ``budget_s`` and ``tvm_budget_s`` (``budget_s`` still taken, in seconds)
TUNE_KEYWORDS = frozenset({"target", "backends", "budget", "budget_s", "db", "refine_trials", "shapes", "limits",
                           "archive", "tolerance", "seed", "progress", "accuracy", "calibration", "cluster",
                           "backend_options", "tvm_budget", "measure_order"})


@dataclass(frozen=True)
class TuneOptions:
    """One tuning job's settings.

    target: the device every backend must run on ("cpu" | "cuda"). backends: registry names, in order.
    budget_s: wall-clock seconds of the whole tune (collage.tuner.clock; None: measure every candidate).
    db: the cost database (None: the default file; a path, a ``sqlite:///`` or ``postgresql://`` URL, or a
    CostDB). refine_trials: measured
    Optuna trials around the DP's plan (0: none). shapes: fixed sizes for symbolic input dimensions.
    limits: the candidate enumeration's limits (None: ``Limits()``). archive: also write OUT.tar.gz.
    tolerance: ``atol``/``rtol`` of the artifact's outputs against the ONNX Runtime fp32 reference.
    seed: of the random inputs (verification, calibration without --calibration). progress: one line per
    step on stderr. accuracy: the accuracy budget that lets lower-precision backends in (e.g.
    ``"cos=0.999,rel=0.01"``; None: fp32 only). calibration: the inputs (.npz) that budget is judged on.
    cluster: where candidates are measured (collage.measure.executor.get_executor): None for this machine,
    ``"auto"`` or ``"ray://HOST:PORT"``. backend_options: constructor options per backend name (``{"tvm":
    {"tuning": "metaschedule", "trials": 64}}``), used wherever the backend is built (measurement workers,
    baselines, export) and part of its cost key. tvm_budget_s: seconds of MetaSchedule tuning inside the tune,
    spent on the candidates where TVM can change the plan (collage.tuner.tvm_budget; None: no such step).
    measure_order: under a budget, which candidates are measured first: ``"enumeration"`` (the candidates in
    the order they are enumerated) or ``"guided"`` (collage.tuner.guided: the learned cost model, or on a fresh
    cost DB the shipped one, prices what is not measured yet and the measuring goes to the candidates that can
    change the plan); ``"auto"`` (the default): guided under a budget, enumeration without one
    (:meth:`order`).
    """

    target: str = "cpu"
    backends: tuple[str, ...] = DEFAULT_BACKENDS
    budget_s: float | None = None
    db: str | os.PathLike | CostDB | None = None
    refine_trials: int = 0
    shapes: Mapping[str, Sequence[int]] | None = None
    limits: Limits | None = None
    archive: bool = False
    tolerance: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    seed: int = 0
    progress: bool = True
    accuracy: str | Budget | None = None
    calibration: str | os.PathLike | None = None
    cluster: Any = None
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tvm_budget_s: float | None = None
    measure_order: str = "auto"

    def __post_init__(self) -> None:
        check_types(self)
        if not self.backends:
            raise OptionError("tune: no backend named (backends=...)")
        if self.budget_s is not None and not (math.isfinite(self.budget_s) and self.budget_s >= 0):
            raise OptionError(f"tune: budget must be a finite number of seconds >= 0, not {self.budget_s!r}")
        if self.refine_trials < 0:
            raise OptionError(f"tune: refine_trials must be >= 0, not {self.refine_trials}")
        if self.tvm_budget_s is not None and not (math.isfinite(self.tvm_budget_s) and self.tvm_budget_s >= 0):
            raise OptionError(f"tune: tvm_budget must be a finite number of seconds >= 0, not {self.tvm_budget_s!r}")
        if self.tvm_budget_s is not None and "tvm" not in self.backends:
            raise CollageError("tune: a TVM tuning budget (--tvm-budget) needs tvm among the backends")
        stray = sorted(set(self.backend_options) - set(self.backends))
        if stray:
            raise CollageError(f"tune: backend options for {', '.join(stray)}, which is not among the backends "
                             f"({', '.join(self.backends)})")
        if self.measure_order not in MEASURE_ORDERS:
            raise OptionError(f"tune: measure_order must be one of {', '.join(MEASURE_ORDERS)}, not "
                               f"{self.measure_order!r}")
        if self.measure_order == "guided" and self.budget_s is None:
            raise CollageError("tune: guided measuring (--measure-order guided) needs a measuring budget (--budget); "
                               "without one every candidate is measured")
        unknown = set(self.tolerance) - {"atol", "rtol"}
        if unknown:
            raise OptionError(f"tune: tolerance takes atol and rtol, not {sorted(unknown)}")
        for name, value in self.tolerance.items():  # nan passes no comparison; inf, any error
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise OptionError(f"tune: tolerance {name} must be a finite number >= 0, not {value!r}")

    def order(self) -> str:
        """The measuring order in force: ``measure_order``, ``"auto"`` resolved (guided under a budget where the
        learned model's libraries are installed, else enumeration)."""
        if self.measure_order != "auto":
            return self.measure_order
        if self.budget_s is None:
            return "enumeration"
        import importlib.util
        ok = all(importlib.util.find_spec(m) is not None for m in ("xgboost", "scipy"))
        return "guided" if ok else "enumeration"

    @classmethod
    def build(cls, *, budget: str | float | None = None, budget_s: float | None = None,
              backends: Sequence[str] = DEFAULT_BACKENDS, tolerance: Mapping[str, float] | None = None,
              backend_options: Mapping[str, Mapping[str, Any]] | None = None, tvm_budget: str | float | None = None,
              **options: object) -> TuneOptions:
        """Options from ``tune``'s keywords: ``budget`` is a duration ("30s", "10m", "1h30m", or seconds),
        ``budget_s`` the older spelling in seconds (give one of the two)."""
        if budget is not None and budget_s is not None:
            raise OptionTypeError("tune: give budget= or budget_s=, not both")
        require(isinstance(backends, (str, list, tuple)), "backends", "a backend name or a list of them", backends)
        require(tolerance is None or isinstance(tolerance, Mapping), "tolerance", "{'atol': ..., 'rtol': ...}",
                tolerance)
        names = (backends,) if isinstance(backends, str) else tuple(backends)
        if "shapes" in options:
            options["shapes"] = arguments.shapes(options["shapes"])
        return cls(budget_s=arguments.duration("budget", budget) if budget is not None else
                   arguments.seconds("budget_s", budget_s), backends=names,
                   tolerance={**DEFAULT_TOLERANCE, **(tolerance or {})},
                   backend_options=arguments.backend_options(backend_options),
                   tvm_budget_s=arguments.duration("tvm_budget", tvm_budget), **options)  # type: ignore[arg-type]

    def with_keywords(self, **keywords: Any) -> TuneOptions:
        """These options with ``tune``'s ``keywords`` in place of their fields (read as :meth:`build` reads
        them)."""
        base: dict[str, Any] = {f: getattr(self, f) for f in self.__dataclass_fields__}
        base["tvm_budget"] = base.pop("tvm_budget_s")
        if "budget" in keywords:
            base.pop("budget_s")
        return TuneOptions.build(**{**base, **keywords})

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor options of backend ``name`` in this job (a TVM tuning budget implies MetaSchedule)."""
        opts = dict(self.backend_options.get(name, {}))
        if name == "tvm" and self.tvm_budget_s is not None:
            if opts.setdefault("tuning", "metaschedule") != "metaschedule":
                raise CollageError(f"tune: a TVM tuning budget needs tvm.tuning=metaschedule, not {opts['tuning']!r}")
        return opts

    def all_backend_options(self) -> dict[str, dict[str, Any]]:
        """``options_for`` of every backend that has any."""
        return {n: o for n in self.backends if (o := self.options_for(n))}
