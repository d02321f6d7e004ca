"""A learned cost model: what an unmeasured candidate would cost on a backend variant, with a range.

One model per **backend variant**: the cost key without its fingerprint (backend, version, device,
options, machine), so a prediction is only ever made from measurements of the same runtime build, in
the same configuration, on the same machine. It is trained on every successful measurement in the
cost DB under that variant whose fingerprint has stored features (``collage.cost_models.features``):
all models ever tuned into the DB, not only the one at hand.

The model has two parts:

* an **additive line** in milliseconds: a per-call constant + non-negative weights on the node count, the
  boundary, weight and activation bytes, the FLOPs and multiply-accumulate FLOPs (and, in one of the two
  parts, per op class of at least ``OP_MIN_ROWS`` training rows: its FLOPs and bytes), fitted by
  non-negative least squares on the *relative* error. That is how latency is made: a call's fixed
  overhead plus work at some rate per kind of work, so a small candidate is never priced below the per-call
  floor and a big one grows linearly with its work, whatever sizes training saw. It replaced a ridge line over
  log sizes (one power law: no floor, so candidates of a few microseconds came out ~100x too cheap, and
  exponents fitted on a narrow range multiplied up on bigger candidates: 93% median error, p90 in the
  thousands of percent, leave-one-model-out on a 3-model DB);
* **gradient-boosted trees** (XGBoost, ``reg:quantileerror``) on the line's log residual, over log sizes,
  arithmetic intensity, FLOPs per node and each op class's share of the FLOPs and of the nodes: per-class
  efficiency, fusion, what the line misses. They correct the line by factors seen in training (a tree
  predicts constants), so they cannot blow up on a candidate unlike any trained one. One booster fits the
  three quantiles ``QUANTILES`` at once; ``Estimate.low_ms`` / ``high_ms`` are the 10% / 90% quantiles, the
  uncertainty the guided measuring (``collage.tuner.guided``) is optimistic with.

Two such parts, a line over sizes alone and a line with per-op-class rates, each with its trees; the model's
quantiles are the geometric mean of theirs (``PER_OP``).

With fewer than ``TREE_MIN_ROWS`` rows the line alone is used, its range the residuals' empirical
quantiles; with fewer than ``MIN_ROWS``, the variant has no model (its unmeasured candidates are not
priced). Training is seconds for tens of thousands of rows (one thread: measurements may be running).
XGBoost and SciPy (the line's NNLS) come with the ``tune`` extra. Accuracy on models the DB has never
seen: ``benchmarks/cost_model.py`` -> ``results/budget/cost-model.md``.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from collage.cost_models.features import FEATURES_KIND, feature_matrix, feature_rows
from collage.extras import require
from collage.errors import CollageError

if TYPE_CHECKING:
    from collage.measure.db import CostDB, CostKey

log = logging.getLogger(__name__)

#: the quantiles predicted: low, middle, high
QUANTILES = (0.1, 0.5, 0.9)
#: a variant with fewer usable rows has no model
MIN_ROWS = 8
#: below this many rows the additive line alone predicts (trees on a handful of rows only memorise)
TREE_MIN_ROWS = 30
#: the size columns of the additive line (besides the per-call constant and the per-op-class columns)
LINE_COLUMNS = ("nodes", "in_bytes", "out_bytes", "weight_bytes", "act_bytes", "flops", "mac_flops")
#: per-op-class columns of the additive line: FLOPs and bytes moved of each op class (features.op_class)
OP_GROUPS = ("flops:", "bytes:")
#: boosting rounds, tree depth, learning rate of the residual trees (200 rounds: 100 underfit; leave-one-model-out
#: on two DBs, 100/200/300 rounds: medians 13.7/13.3/13.1% and 16.3/14.9/14.5% (union DB, ORT/OV), 15.1/13.9/13.3%
#: and 14.3/14.1/13.7% (bench DB), the 10-90% ranges narrower with each step: results/budget/cost-model.md)
ROUNDS, DEPTH, ETA = 200, 3, 0.05
#: per op class, the trees see its share of the FLOPs ("share") and of the nodes ("opshare")
TREE_SHARES = ("share", "opshare")
#: ridge penalty of the additive line, on columns scaled to their median nonzero value, per row
RIDGE = 1e-3
#: the parts of a variant's model by default (VariantModel.fit's per_op): "both", a line over sizes alone and a
#: line with per-op-class columns, each with its trees, their quantiles averaged in log space. Either alone won
#: on some DBs and lost on others; the mean was within a point of the better one on each (results/budget/cost-model.md)
PER_OP: bool | str = "both"
#: a per-op-class column enters the line only with this many training rows holding that op class
OP_MIN_ROWS = 30


class Variant(NamedTuple):
    """A cost key without its fingerprint: one backend build, configuration and machine."""

    backend: str
    version: str
    device: str
    options: str
    machine: str


def variant_of(key: CostKey) -> Variant:
    return Variant(key.backend, key.version, key.device, key.options, key.machine)


class Estimate(NamedTuple):
    """A predicted cost: the 10%, 50% and 90% quantiles (ms)."""

    low_ms: float
    mid_ms: float
    high_ms: float


def _xgboost() -> Any:
    return require("xgboost", "the learned cost model", "pip install xgboost-cpu")


@dataclass
class LinePlusTrees:
    """One additive line (with or without per-op-class columns) and the trees on its residual."""

    columns: list[str]  # the additive line's columns: "1", LINE_COLUMNS, per-op-class columns
    weights: np.ndarray  # ms per unit of each column (>= 0)
    tree_columns: list[str] = field(default_factory=list)
    booster: Any = None  # xgboost.Booster on the line's log residual, or None (line only)
    spread: np.ndarray = field(default_factory=lambda: np.zeros(len(QUANTILES)))  # residual quantiles (line only)

    @classmethod
    def fit(cls, features: Sequence[Mapping[str, float]], y: np.ndarray, *, seed: int, trees: bool,
            per_op: bool) -> LinePlusTrees:
        features = feature_rows(features)
        groups = OP_GROUPS if per_op else ()
        counts: dict[str, int] = {}
        for row in features:
            for c, v in row.items():
                if v > 0 and c.startswith(groups):
                    counts[c] = counts.get(c, 0) + 1
        columns = ["1", *LINE_COLUMNS] + sorted(c for c, n in counts.items() if n >= OP_MIN_ROWS)
        x = _dense(features, columns)
        weights = _fit_line(x, y)
        base = np.maximum(x @ weights, _TINY)
        part = cls(columns, weights)
        if trees and len(y) >= TREE_MIN_ROWS:
            xgb = _xgboost()
            ops = sorted({c.split(":", 1)[1] for row in features for c in row if c.startswith("flops:")})
            part.tree_columns = _TREE_BASE + [f"{k}:{o}" for k in TREE_SHARES for o in ops]
            dtrain = xgb.DMatrix(_tree_x(features, part.tree_columns), label=np.log(y),
                                 base_margin=np.repeat(np.log(base)[:, None], len(QUANTILES), axis=1))
            params = {"objective": "reg:quantileerror", "quantile_alpha": np.array(QUANTILES), "tree_method": "hist",
                      "max_depth": DEPTH, "eta": ETA, "min_child_weight": 5, "subsample": 0.8, "lambda": 5.0,
                      "nthread": 1, "seed": seed, "verbosity": 0}
            part.booster = xgb.train(params, dtrain, num_boost_round=ROUNDS)
        else:
            part.spread = np.quantile(np.log(y) - np.log(base), QUANTILES)
        return part

    def line(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        """The additive line's ms (no residual correction)."""
        return np.maximum(_dense(features, self.columns) @ self.weights, _TINY)

    def log_predict(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        base = np.log(self.line(features))
        if self.booster is None:
            return base[:, None] + self.spread[None, :]
        xgb = _xgboost()
        d = xgb.DMatrix(_tree_x(features, self.tree_columns),
                        base_margin=np.repeat(base[:, None], len(QUANTILES), axis=1))
        return np.asarray(self.booster.predict(d)).reshape(len(features), len(QUANTILES))


@dataclass
class VariantModel:
    """One variant's fitted model (module docstring): the geometric mean of its parts' quantiles. ``predict``
    returns ms."""

    parts: list[LinePlusTrees]
    rows: int = 0
    fit_s: float = 0.0

    @property
    def booster(self) -> Any:
        """A part's trees, or None when every part is a line alone (too few rows, or ``trees=False``)."""
        return next((p.booster for p in self.parts if p.booster is not None), None)

    @classmethod
    def fit(cls, features: Sequence[Mapping[str, float]], ms: Sequence[float], *, seed: int = 0,
            trees: bool = True, per_op: bool | None = None) -> VariantModel:
        """``per_op``: True, one part with per-op-class columns in its line; False, one part whose line is over
        sizes only (its trees still see each class's share); None: ``PER_OP`` (``"both"``: the two parts)."""
        t0 = time.perf_counter()
        y = np.asarray(ms, dtype=np.float64)
        if len(y) < MIN_ROWS:
            raise CollageError(f"the learned cost model needs at least {MIN_ROWS} measured rows, got {len(y)}")
        features = feature_rows(features)  # one matrix for every part
        which = PER_OP if per_op is None else per_op
        kinds = (False, True) if which == "both" else (bool(which),)
        parts = [LinePlusTrees.fit(features, y, seed=seed, trees=trees, per_op=k) for k in kinds]
        return cls(parts, rows=len(y), fit_s=time.perf_counter() - t0)

    def predict(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        """``(len(features), 3)`` ms: low, middle, high (sorted per row)."""
        if not features:
            return np.zeros((0, len(QUANTILES)))
        return parts_predict(self.parts, features)


def parts_predict(parts: Sequence[LinePlusTrees], features: Sequence[Mapping[str, float]]) -> np.ndarray:
    """``(len(features), 3)`` ms of ``parts`` together: the mean of their log quantiles, sorted per row (a
    variant's model here, a shipped file's lines in ``collage.cost_models.shipped``)."""
    features = feature_rows(features)  # one matrix for every part
    logs = np.mean([p.log_predict(features) for p in parts], axis=0)
    return np.asarray(np.exp(np.sort(logs, axis=1)))


#: no prediction below this (ms): the line may be all zero weights for a candidate of unseen op classes
_TINY = 1e-6
#: the trees' size columns (log1p'd), besides intensity, FLOPs per node and per-op-class shares
_TREE_BASE = ["nodes", "depth", "inputs", "outputs", "in_bytes", "out_bytes", "weight_bytes", "act_bytes", "flops",
              "mac_flops", "non_fp32", "intensity", "flops_per_node"]


def _dense(features: Sequence[Mapping[str, float]], columns: Sequence[str]) -> np.ndarray:
    """The raw (not log'd) values of ``columns``; ``"1"`` is the constant."""
    x = feature_matrix(features, columns, log=False)
    index = {c: k for k, c in enumerate(columns)}
    if "1" in index:
        x[:, index["1"]] = 1.0
    return x


def _fit_line(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative weights minimising the squared *relative* error of ``x @ w`` against ``y`` plus a small ridge
    (columns scaled to their median nonzero value first, so one penalty fits every unit)."""
    from scipy.optimize import nnls

    scale = np.array([np.median(col[col > 0]) if np.any(col > 0) else 1.0 for col in x.T])
    a = x / scale / y[:, None]
    k = a.shape[1]
    a = np.vstack([a, np.sqrt(RIDGE * len(y)) * np.eye(k)])
    b = np.concatenate([np.ones(len(y)), np.zeros(k)])
    q, r = np.linalg.qr(a)  # |a w - b| = |r w - q'b| + const: the same NNLS on k rows instead of thousands
    w, _ = nnls(r, q.T @ b, maxiter=max(1000, 50 * k))
    return w / scale


def _tree_x(features: Sequence[Mapping[str, float]], columns: Sequence[str]) -> np.ndarray:
    """The residual trees' inputs: log sizes, and what sizes cannot say: arithmetic intensity, FLOPs per node,
    each op class's share of the FLOPs and of the nodes."""
    rows = feature_rows(features)
    raw, index = rows.matrix()
    zero = np.zeros(len(rows))

    def col(name: str) -> np.ndarray:
        j = index.get(name)
        return zero if j is None else raw[:, j]

    flops = col("flops")
    nodes = np.maximum(1.0, col("nodes"))
    moved = col("in_bytes") + col("out_bytes") + col("weight_bytes") + col("act_bytes") + 1.0
    x = np.zeros((len(rows), len(columns)), dtype=np.float64)
    for k, c in enumerate(columns):
        if c.startswith("share:"):
            x[:, k] = col("flops:" + c[6:]) / (flops + 1.0)
        elif c.startswith("opshare:"):
            x[:, k] = col("op:" + c[8:]) / nodes
        elif c == "intensity":
            x[:, k] = np.log1p(flops / moved)
        elif c == "flops_per_node":
            x[:, k] = np.log1p(flops / nodes)
        else:
            x[:, k] = np.log1p(col(c))
    return x


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
        return [Estimate(lo, mid, hi) for lo, mid, hi in model.predict(features).tolist()]

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
    usable = []
    for c in db.all():
        if not c.ok or c.median_ms is None or c.median_ms <= 0 or c.fingerprint in skip:
            continue
        v = variant_of(c.key)
        if wanted is None or v in wanted:
            usable.append((c, v))
    # the features of what was measured only: a guided tune stores every candidate's (143,388 of inception_v2)
    # and retrains on the few it measured so far
    feats = db.get_features(kind, {c.fingerprint for c, _ in usable}) if features is None else features
    out: dict[Variant, tuple[list[Mapping[str, float]], list[float]]] = {}
    for c, v in usable:
        f = feats.get(c.fingerprint)
        if f is None:
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
