"""A learned cost model: what an unmeasured candidate would cost on a backend variant, with a range.

One model per **backend variant**: the cost key without its fingerprint (backend, version, device,
options, machine), so a prediction is only ever made from measurements of the same runtime build, in
the same configuration, on the same machine. It is trained on every successful measurement in the
cost DB under that variant whose fingerprint has stored features (``collage.cost_models.features``):
all models ever tuned into the DB, not only the one at hand.

The model, in log-latency space (latency spans five orders of magnitude, and errors that matter are
ratios):

* a **ridge line** over the log sizes (FLOPs, multiply-accumulate FLOPs, boundary, weight and activation
  bytes, node count): the part that extrapolates to candidates bigger than any measured one, which trees
  cannot do;
* **gradient-boosted trees** (XGBoost, ``reg:quantileerror``) on the line's residual, over every feature
  (op-type counts and FLOPs too): per-op efficiency, per-call overhead, what the line misses. One
  booster fits the three quantiles ``QUANTILES`` at once; ``Estimate.low_ms`` / ``high_ms`` are the 10% /
  90% quantiles, the uncertainty the guided measuring (``collage.tuner.guided``) is optimistic with.

With fewer than ``TREE_MIN_ROWS`` rows the line alone is used, its range the residuals' empirical
quantiles; with fewer than ``MIN_ROWS``, the variant has no model (its unmeasured candidates are not
priced). Training is seconds for tens of thousands of rows (one thread: measurements may be running).
XGBoost comes with the ``tune`` extra (it is MetaSchedule's cost model in the ``tvm`` extra too).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from collage.cost_models.features import FEATURES_KIND, feature_matrix
from collage.errors import CollageError

if TYPE_CHECKING:
    from collage.cost_models.db import CostDB, CostKey

log = logging.getLogger(__name__)

#: the quantiles predicted: low, middle, high
QUANTILES = (0.1, 0.5, 0.9)
#: a variant with fewer usable rows has no model
MIN_ROWS = 8
#: below this many rows the ridge line alone predicts (trees on a handful of rows only memorise)
TREE_MIN_ROWS = 30
#: the size features the ridge line is fitted on (log1p'd)
LINE_COLUMNS = ("flops", "mac_flops", "in_bytes", "out_bytes", "weight_bytes", "act_bytes", "nodes")
#: boosting rounds, tree depth, learning rate
ROUNDS, DEPTH, ETA = 200, 4, 0.08
RIDGE = 1e-2


class Variant(NamedTuple):
    """A cost key without its fingerprint: one backend build, configuration and machine."""

    backend: str
    version: str
    device: str
    options: str
    machine: str


def variant_of(key: CostKey) -> Variant:
    return Variant(key.backend, key.version, key.device, key.options, key.machine)


@dataclass(frozen=True)
class Estimate:
    """A predicted cost: the 10%, 50% and 90% quantiles (ms)."""

    low_ms: float
    mid_ms: float
    high_ms: float


def _xgboost() -> Any:
    try:
        import xgboost
    except ImportError as e:
        raise CollageError("the learned cost model needs xgboost: pip install 'collage[tune]' "
                           "(or pip install xgboost-cpu)") from e
    return xgboost


@dataclass
class VariantModel:
    """One variant's fitted model (module docstring). ``predict`` returns ms."""

    columns: list[str]
    coef: np.ndarray  # ridge line: intercept first, then LINE_COLUMNS
    booster: Any = None  # xgboost.Booster on the line's residual, or None (line only)
    spread: np.ndarray = field(default_factory=lambda: np.zeros(len(QUANTILES)))  # residual quantiles (line only)
    rows: int = 0
    fit_s: float = 0.0

    @classmethod
    def fit(cls, features: Sequence[Mapping[str, float]], ms: Sequence[float], *, seed: int = 0,
            trees: bool = True) -> VariantModel:
        t0 = time.perf_counter()
        y = np.log(np.asarray(ms, dtype=np.float64))
        if len(y) < MIN_ROWS:
            raise CollageError(f"the learned cost model needs at least {MIN_ROWS} measured rows, got {len(y)}")
        columns = sorted({c for row in features for c in row})
        line_x = _line_x(features)
        a = line_x.T @ line_x + RIDGE * np.diag([0.0] + [1.0] * (line_x.shape[1] - 1))
        coef = np.linalg.solve(a, line_x.T @ y)
        base = line_x @ coef
        model = cls(columns, coef, rows=len(y))
        if trees and len(y) >= TREE_MIN_ROWS:
            xgb = _xgboost()
            dtrain = xgb.DMatrix(feature_matrix(features, columns), label=y,
                                 base_margin=np.repeat(base[:, None], len(QUANTILES), axis=1))
            params = {"objective": "reg:quantileerror", "quantile_alpha": np.array(QUANTILES), "tree_method": "hist",
                      "max_depth": DEPTH, "eta": ETA, "min_child_weight": 2, "subsample": 0.8, "nthread": 1,
                      "seed": seed, "verbosity": 0}
            model.booster = xgb.train(params, dtrain, num_boost_round=ROUNDS)
        else:
            model.spread = np.quantile(y - base, QUANTILES)
        model.fit_s = time.perf_counter() - t0
        return model

    def predict(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        """``(len(features), 3)`` ms: low, middle, high (sorted per row)."""
        if not features:
            return np.zeros((0, len(QUANTILES)))
        base = _line_x(features) @ self.coef
        if self.booster is None:
            logs = base[:, None] + self.spread[None, :]
        else:
            xgb = _xgboost()
            d = xgb.DMatrix(feature_matrix(features, self.columns),
                            base_margin=np.repeat(base[:, None], len(QUANTILES), axis=1))
            logs = np.asarray(self.booster.predict(d)).reshape(len(features), len(QUANTILES))
        return np.exp(np.sort(logs, axis=1))


def _line_x(features: Sequence[Mapping[str, float]]) -> np.ndarray:
    x = feature_matrix(features, LINE_COLUMNS)
    return np.hstack([np.ones((len(features), 1)), x])


@dataclass
class LearnedCosts:
    """Models per variant, trained from a cost DB (``train``); ``estimate`` prices candidates by features."""

    models: dict[Variant, VariantModel]
    kind: str = FEATURES_KIND

    @classmethod
    def train(cls, db: CostDB, variants: Iterable[Variant] | None = None, *, kind: str = FEATURES_KIND,
              exclude: Iterable[str] = (), seed: int = 0,
              features: Mapping[str, Mapping[str, float]] | None = None) -> LearnedCosts:
        """A model for each of ``variants`` (None: every variant in the DB) with at least ``MIN_ROWS`` usable
        rows; ``exclude``: fingerprints left out of training (a held-out model); ``features``: by fingerprint,
        instead of the DB's (a DB measured before features were stored)."""
        data = training_rows(db, variants, kind=kind, exclude=exclude, features=features)
        models = {}
        for v, (feats, ms) in data.items():
            if len(ms) >= MIN_ROWS:
                models[v] = VariantModel.fit(feats, ms, seed=seed)
                log.debug("learned cost model %s: %d rows, %.2f s", v.backend, len(ms), models[v].fit_s)
        return cls(models, kind)

    def estimate(self, variant: Variant, features: Sequence[Mapping[str, float]]) -> list[Estimate] | None:
        """Estimates of ``features`` on ``variant``, or None when the variant has no model."""
        model = self.models.get(variant)
        if model is None:
            return None
        return [Estimate(float(lo), float(mid), float(hi)) for lo, mid, hi in model.predict(features)]

    def rows(self) -> dict[str, int]:
        """Training rows per backend name (for reports)."""
        out: dict[str, int] = {}
        for v, m in self.models.items():
            out[v.backend] = out.get(v.backend, 0) + m.rows
        return out


def training_rows(db: CostDB, variants: Iterable[Variant] | None = None, *, kind: str = FEATURES_KIND,
                  exclude: Iterable[str] = (), features: Mapping[str, Mapping[str, float]] | None = None
                  ) -> dict[Variant, tuple[list[Mapping[str, float]], list[float]]]:
    """Per variant: the features and measured medians of every successful cost in ``db`` with features (the
    DB's, or ``features`` by fingerprint)."""
    wanted = None if variants is None else set(variants)
    skip = set(exclude)
    feats = db.get_features(kind) if features is None else features
    out: dict[Variant, tuple[list[Mapping[str, float]], list[float]]] = {}
    for c in db.all():
        if not c.ok or c.median_ms is None or c.median_ms <= 0 or c.fingerprint in skip:
            continue
        f = feats.get(c.fingerprint)
        v = variant_of(c.key)
        if f is None or (wanted is not None and v not in wanted):
            continue
        rows = out.setdefault(v, ([], []))
        rows[0].append(f)
        rows[1].append(float(c.median_ms))
    return out


def ape(predicted: Sequence[float], measured: Sequence[float]) -> np.ndarray:
    """Absolute percentage errors ``|predicted - measured| / measured * 100``."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    return np.abs(p - m) / m * 100.0


def error_summary(predicted: Sequence[float], measured: Sequence[float], low: Sequence[float] | None = None,
                  high: Sequence[float] | None = None) -> dict[str, Any]:
    """``{"n", "median_ape", "p90_ape", "in_range"}`` of predictions against measurements (``in_range``:
    the share measured within [low, high], when given)."""
    if not len(measured):
        return {"n": 0, "median_ape": None, "p90_ape": None, "in_range": None}
    e = ape(predicted, measured)
    out: dict[str, Any] = {"n": int(len(e)), "median_ape": float(np.median(e)), "p90_ape": float(np.quantile(e, 0.9)),
                           "in_range": None}
    if low is not None and high is not None:
        m = np.asarray(measured)
        out["in_range"] = float(np.mean((np.asarray(low) <= m) & (m <= np.asarray(high))))
    return out
