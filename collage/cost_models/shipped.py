"""The shipped cost model: what a fresh cost DB starts from, so guided measuring is warm on its first tune.

``collage/cost_models/shipped/<machine class>.json`` holds, per backend variant (backend name and options; the
runtime version and the machine left out), the additive lines of ``collage.cost_models.learned`` fitted on the
project's own measurements of zoo models (``benchmarks/train_shipped_model.py``), with the residuals' 10/50/90%
quantiles as the range. Plain JSON (numbers and names): loaded without pickle and without XGBoost.

A machine class is the CPU's widest matrix/vector extension: ``amx``, ``avx512`` or ``avx2``
(:func:`machine_class`). A machine of a class with no file uses the nearest one that has (the files say which
machine they were trained on), and every estimate is scaled by the **probe** (:func:`probe_ms`): a fixed small
workload timed at the tune's start, whose reference time on the training machine is in the file. The guided
measuring (``collage.tuner.guided``) refines that scale with each measurement the tune takes
(:meth:`ShippedCosts.refine`) and uses the DB's own learned model once the DB holds enough rows of a variant.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from collage.cost_models.learned import QUANTILES, Estimate, LinePlusTrees, Variant, parts_predict
from collage.util import cpu_class

#: where the shipped files live (package data)
SHIPPED_DIR = Path(__file__).with_name("shipped")
#: machine classes, widest first; a class with no file falls back to the nearest in this order
CLASSES = ("amx", "avx512", "avx2")
#: the probe: elementwise fp32 work (numpy's ufuncs: one thread, whatever BLAS threads or the environment say) on
#: ``PROBE_SIZE`` values, ``PROBE_ITERS`` passes, the best of ``PROBE_REPEATS`` timings (a BLAS matmul was
#: tried first: its thread pool made it 100x apart between two processes on one loaded machine)
PROBE_SIZE, PROBE_ITERS, PROBE_REPEATS = 1 << 18, 6, 9


def machine_class(flags: Iterable[str] | None = None) -> str:
    """``amx``, ``avx512`` or ``avx2`` from the CPU flags (``/proc/cpuinfo``'s; ``avx2`` when unknown): the widest
    extension of :func:`collage.util.cpu_class`."""
    return cpu_class(flags).split("-")[0] or "avx2"


def probe_ms() -> float:
    """Milliseconds of a fixed small fp32 workload (elementwise arithmetic and a transcendental, one thread), the
    best of a few repeats: a few tens of milliseconds in all."""
    a = np.random.default_rng(0).standard_normal(PROBE_SIZE).astype(np.float32)
    best = math.inf
    for _ in range(PROBE_REPEATS):
        t0 = time.perf_counter()
        x = a
        for _ in range(PROBE_ITERS):
            x = np.tanh(x * np.float32(1.0001) + np.float32(0.1))
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def variant_name(v: Variant) -> str:
    """The shipped file's key of a variant: backend and options (not the version or machine)."""
    return f"{v.backend}|{v.options}"


def line_to_dict(part: LinePlusTrees) -> dict[str, Any]:
    return {"columns": list(part.columns), "weights": [float(w) for w in part.weights],
            "spread": [float(s) for s in part.spread]}


def line_from_dict(d: Mapping[str, Any]) -> LinePlusTrees:
    return LinePlusTrees(list(d["columns"]), np.asarray(d["weights"], dtype=np.float64),
                         spread=np.asarray(d["spread"], dtype=np.float64))


@dataclass
class ShippedCosts:
    """A shipped file's lines per variant name, scaled by ``scale`` (this machine's probe over the training
    machine's) and by each backend's correction learned from this tune's measurements (:meth:`refine`)."""

    meta: dict[str, Any]
    lines: dict[str, list[LinePlusTrees]]
    scale: float = 1.0
    probe_ms: float | None = None
    correction: dict[str, float] = field(default_factory=dict)  # by backend name: measured / predicted (geo mean)
    refined_rows: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> ShippedCosts:
        data = json.loads(Path(path).read_text())
        return cls(dict(data["meta"]), {k: [line_from_dict(p) for p in parts]
                                        for k, parts in data["variants"].items()})

    def parts(self, v: Variant) -> list[LinePlusTrees] | None:
        """``v``'s lines: its backend and options, else its backend under other options (another thread count on
        another machine), else None."""
        exact = self.lines.get(variant_name(v))
        if exact is not None:
            return exact
        return next((p for name, p in sorted(self.lines.items()) if name.split("|", 1)[0] == v.backend), None)

    def covers(self, v: Variant) -> bool:
        return self.parts(v) is not None

    def calibrate(self, probe: float) -> None:
        """Scale by this machine's probe time over the training machine's."""
        ref = float(self.meta.get("probe_ms") or 0.0)
        self.probe_ms = probe
        self.scale = probe / ref if ref > 0 and probe > 0 else 1.0

    def raw(self, v: Variant, features: Sequence[Mapping[str, float]]) -> np.ndarray | None:
        """``(n, 3)`` ms before any scaling, or None when the variant is not shipped."""
        parts = self.parts(v)
        if not parts or not features:
            return None
        return parts_predict(parts, features)

    def estimate(self, v: Variant, features: Sequence[Mapping[str, float]]) -> list[Estimate] | None:
        ms = self.raw(v, features)
        if ms is None:
            return None
        f = self.scale * self.correction.get(v.backend, 1.0)
        return [Estimate(lo, mid, hi) for lo, mid, hi in (ms * f).tolist()]

    def refine(self, v: Variant, features: Sequence[Mapping[str, float]], measured: Sequence[float]) -> None:
        """The backend's correction: the geometric mean of measured over the probe-scaled middle estimate of
        this tune's measurements of ``v``."""
        ms = self.raw(v, features)
        if ms is None:
            return
        mid = ms[:, QUANTILES.index(0.5)] * self.scale
        ratios = np.log(np.asarray(measured, dtype=np.float64)) - np.log(np.maximum(mid, 1e-9))
        self.correction[v.backend] = float(np.exp(np.mean(ratios)))
        self.refined_rows[v.backend] = len(measured)

    def report(self) -> dict[str, Any]:
        """report.json's ``coverage.estimates.shipped``."""
        return {"machine_class": self.meta.get("machine_class"), "trained_on": self.meta.get("cpu"),
                "this_class": machine_class(), "probe_ms": self.probe_ms,
                "reference_probe_ms": self.meta.get("probe_ms"), "scale": self.scale,
                "correction": dict(self.correction), "refined_rows": dict(self.refined_rows)}


def shipped_path(cls: str | None = None) -> Path | None:
    """The file for machine class ``cls`` (None: this machine's), else the nearest class that has one."""
    want = cls or machine_class()
    order = sorted(CLASSES, key=lambda c: abs(CLASSES.index(c) - CLASSES.index(want)))
    for c in order:
        p = SHIPPED_DIR / f"{c}.json"
        if p.is_file():
            return p
    return None


def load_shipped(probe: bool = True) -> ShippedCosts | None:
    """This machine's shipped model, probed (``probe``) and scaled; None when no file ships."""
    path = shipped_path()
    if path is None:
        return None
    model = ShippedCosts.load(path)
    if probe:
        model.calibrate(probe_ms())
    return model
