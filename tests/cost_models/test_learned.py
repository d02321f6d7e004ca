"""The learned cost model: it learns per-op costs, extrapolates by size, has honest ranges, trains per
variant from the DB's stored features, and the features of real candidates are what the graph says."""
from __future__ import annotations

import numpy as np
import pytest

from collage.measure.db import Cost, CostKey, SQLiteCostDB, canonical_json
from collage.cost_models.features import FEATURES_KIND, NodeFacts, candidate_features
from collage.cost_models.learned import (MIN_ROWS, LearnedCosts, VariantModel, Variant, error_summary, training_rows,
                                         variant_of)

pytest.importorskip("xgboost")

#: ms per GFLOP of each op type on the synthetic machine, and a fixed per-call overhead
RATE = {"Conv": 1.0, "MatMul": 3.0, "Relu": 40.0, "Add": 25.0}
OVERHEAD_MS = 0.05


def synthetic(n: int, rng: np.random.Generator, scale: float = 1.0) -> tuple[list[dict], np.ndarray]:
    """Candidates of 1-4 ops with random FLOPs; true cost = overhead + sum(rate x GFLOPs), noise 5%."""
    feats, ms = [], []
    for _ in range(n):
        f: dict[str, float] = {"nodes": 0.0, "flops": 0.0, "mac_flops": 0.0, "in_bytes": 0.0, "out_bytes": 0.0}
        cost = OVERHEAD_MS
        for _ in range(int(rng.integers(1, 5))):
            op = str(rng.choice(list(RATE)))
            flops = float(10 ** rng.uniform(5, 8)) * scale
            f["nodes"] += 1
            f[f"op:{op}"] = f.get(f"op:{op}", 0.0) + 1
            f[f"flops:{op}"] = f.get(f"flops:{op}", 0.0) + flops
            f["flops"] += flops
            f["mac_flops"] += flops if op in ("Conv", "MatMul") else 0.0
            f["out_bytes"] += flops / 10
            cost += RATE[op] * flops / 1e9
        feats.append(f)
        ms.append(cost * float(rng.lognormal(0.0, 0.05)))
    return feats, np.array(ms)


def test_learns_per_op_costs():
    """Held-out candidates within 15% (median): the same FLOPs cost 3x more as MatMul than as Conv, so a model
    that only sees sizes cannot pass (checked: a line over sizes alone, without per-op-class columns or trees,
    misses by far more)."""
    rng = np.random.default_rng(0)
    train_f, train_ms = synthetic(600, rng)
    test_f, test_ms = synthetic(200, rng)
    model = VariantModel.fit(train_f, train_ms)
    pred = model.predict(test_f)
    err = error_summary(pred[:, 1], test_ms, pred[:, 0], pred[:, 2])
    assert err["median_ape"] < 15.0, err
    assert 0.5 <= err["in_range"] <= 0.98, err  # the 10-90% range holds most, not all, held-out costs
    assert model.fit_s < 10.0
    line_only = VariantModel.fit(train_f, train_ms, trees=False, per_op=False).predict(test_f)
    assert error_summary(line_only[:, 1], test_ms)["median_ape"] > 1.5 * err["median_ape"]


def test_extrapolates_to_bigger_candidates():
    """Candidates 10x bigger than the trained ones: the ridge line carries the size (trees alone would cap it at
    the biggest trained costs)."""
    rng = np.random.default_rng(1)
    train_f, train_ms = synthetic(600, rng)
    big_f, big_ms = synthetic(100, rng, scale=10.0)
    pred = VariantModel.fit(train_f, train_ms).predict(big_f)
    assert error_summary(pred[:, 1], big_ms)["median_ape"] < 35.0
    assert 0.7 < np.median(pred[:, 1]) / np.median(big_ms) < 1.4


@pytest.mark.parametrize("per_op", [False, True])
def test_a_class_rare_in_training_does_not_blow_up(per_op):
    """An op class seen in a handful of tiny training rows (where the per-call overhead is all of their cost) and
    then in big candidates: its rate is not fitted from those rows and multiplied up (a per-op column needs
    OP_MIN_ROWS rows; the trees' corrections are bounded by what training saw)."""
    rng = np.random.default_rng(4)
    train_f, train_ms = synthetic(600, rng)
    for k in range(5):  # Reshape of a few bytes: the cost is the call
        flops = 100.0 * (k + 1)
        train_f.append({"nodes": 1.0, "flops": flops, "mac_flops": 0.0, "in_bytes": 0.0, "out_bytes": flops / 10,
                        "op:Reshape": 1.0, "flops:Reshape": flops, "bytes:Reshape": flops / 10})
        train_ms = np.append(train_ms, OVERHEAD_MS * 1.5)
    big = [{"nodes": 1.0, "flops": 1e7, "mac_flops": 0.0, "in_bytes": 0.0, "out_bytes": 1e6, "op:Reshape": 1.0,
            "flops:Reshape": 1e7, "bytes:Reshape": 1e6}]
    true_ms = OVERHEAD_MS + 25.0 * 1e7 / 1e9  # a memory-bound op at an elementwise op's rate
    pred = VariantModel.fit(train_f, train_ms, per_op=per_op).predict(big)
    # an unknown rate: within 10x either way (a rate fitted on the five tiny rows gives ~2300x)
    assert 1 / 10 < pred[0, 1] / true_ms < 10, (pred, true_ms)


def test_few_rows_line_only_and_none_below_min():
    rng = np.random.default_rng(2)
    f, ms = synthetic(MIN_ROWS + 2, rng)
    model = VariantModel.fit(f, ms)
    assert model.booster is None
    out = model.predict(f)
    assert out.shape == (len(f), 3) and np.all(out[:, 0] <= out[:, 1]) and np.all(out[:, 1] <= out[:, 2])


def _key(fp: str, backend: str, machine: str = "m1") -> CostKey:
    return CostKey(fp, backend, "1.0", "cpu", canonical_json({}), machine)


def test_trains_per_variant_from_the_db(tmp_path):
    """Rows of a variant train that variant only; rows without features, failures and excluded fingerprints
    are left out; a variant with too few rows has no model."""
    db = SQLiteCostDB(tmp_path / "c.sqlite")
    rng = np.random.default_rng(3)
    feats, ms = synthetic(80, rng)
    db.put_features(FEATURES_KIND, {f"fp{i}": f for i, f in enumerate(feats)})
    for i, v in enumerate(ms):
        db.put(Cost.from_key(_key(f"fp{i}", "fast"), median_ms=float(v), samples=10))
        db.put(Cost.from_key(_key(f"fp{i}", "slow"), median_ms=float(v) * 10, samples=10))
    db.put(Cost.from_key(_key("nofeatures", "fast"), median_ms=1.0, samples=10))
    db.put(Cost.from_key(_key("fp0", "fast", machine="m2"), error="crashed"))
    for i in range(3):
        db.put(Cost.from_key(_key(f"fp{i}", "rare"), median_ms=1.0, samples=10))
    rows = training_rows(db)
    assert len(rows[variant_of(_key("x", "fast"))][1]) == 80
    assert Variant("fast", "1.0", "cpu", "{}", "m2") not in rows
    held = training_rows(db, exclude=["fp0", "fp1"])
    assert len(held[variant_of(_key("x", "slow"))][1]) == 78
    learned = LearnedCosts.train(db)
    assert set(v.backend for v in learned.models) == {"fast", "slow"}
    fast = learned.estimate(variant_of(_key("x", "fast")), feats[:20])
    slow = learned.estimate(variant_of(_key("x", "slow")), feats[:20])
    ratio = np.median([s.mid_ms / f.mid_ms for s, f in zip(slow, fast)])
    assert 7.0 < ratio < 14.0
    assert learned.estimate(variant_of(_key("x", "rare")), feats[:1]) is None


def test_features_of_a_real_candidate():
    from collage.graph.ir import Graph
    from collage.zoo import resolve

    g = Graph.load(resolve("zoo:tiny-resnet"))
    facts = NodeFacts(g)
    conv = next(i for i in range(len(g)) if g.op_type(i) == "Conv")
    one = candidate_features(g, [conv], facts)
    assert one["nodes"] == 1 and one["op:Conv"] == 1 and one["flops"] == one["flops:Conv"] > 0
    assert one["weight_bytes"] > 0 and one["in_bytes"] > 0 and one["out_bytes"] > 0 and one["depth"] == 1
    whole = candidate_features(g, range(len(g)), facts)
    assert whole["nodes"] == len(g) and whole["flops"] > one["flops"] and whole["depth"] > 1
