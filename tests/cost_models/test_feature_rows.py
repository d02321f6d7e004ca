"""FeatureRows: the learned and shipped models read one dense matrix of the feature dicts, made once, instead of
walking the dicts for every column set at every retrain (issue 40: a large graph's guided setup). The matrices are
exactly what the dict walks gave (reference walks below, as the code was before)."""
from __future__ import annotations

import numpy as np

from collage.cost_models.features import FeatureRows, feature_matrix
from collage.cost_models.learned import _tree_x


def _rows(n: int = 200, seed: int = 0) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    names = ["nodes", "flops", "in_bytes", "out_bytes", "weight_bytes", "act_bytes", "op:Conv", "flops:Conv",
             "op:Relu", "flops:Relu", "bytes:Relu", "op:MatMul.aa", "flops:MatMul.aa"]
    rows = []
    for _ in range(n):  # sparse rows, some values negative (clamped to 0), some keys missing ("nodes" too)
        keep = rng.random(len(names)) < 0.6
        rows.append({k: float(rng.choice([-1.0, 1.0], p=[0.1, 0.9]) * rng.integers(0, 10**6))
                     for k, on in zip(names, keep) if on})
    return rows


def _walk(rows, columns, log=True):  # feature_matrix as a walk over the dicts
    x = np.zeros((len(rows), len(columns)))
    for r, row in enumerate(rows):
        for k, c in enumerate(columns):
            x[r, k] = max(0.0, float(row.get(c, 0.0)))
    return np.log1p(x) if log else x


def _tree_walk(rows, columns):  # _tree_x as a walk over the dicts
    x = np.zeros((len(rows), len(columns)))
    for r, f in enumerate(rows):
        g = {k: max(0.0, v) for k, v in f.items()}
        flops, nodes = g.get("flops", 0.0), max(1.0, g.get("nodes", 1.0))
        moved = sum(g.get(k, 0.0) for k in ("in_bytes", "out_bytes", "weight_bytes", "act_bytes")) + 1.0
        for k, c in enumerate(columns):
            x[r, k] = (g.get("flops:" + c[6:], 0.0) / (flops + 1.0) if c.startswith("share:") else
                       g.get("op:" + c[8:], 0.0) / nodes if c.startswith("opshare:") else
                       np.log1p(flops / moved) if c == "intensity" else
                       np.log1p(flops / nodes) if c == "flops_per_node" else np.log1p(g.get(c, 0.0)))
    return x


def test_the_matrices_are_the_dict_walks():
    rows = _rows()
    columns = ["flops", "op:Conv", "bytes:Relu", "not a feature", "nodes"]
    for given in (rows, FeatureRows(rows)):
        assert np.array_equal(feature_matrix(given, columns), _walk(rows, columns))
        assert np.array_equal(feature_matrix(given, columns, log=False), _walk(rows, columns, log=False))
    trees = ["nodes", "flops", "intensity", "flops_per_node", "share:Conv", "share:Gemm", "opshare:Relu",
             "opshare:MatMul.aa", "weight_bytes"]
    assert np.allclose(_tree_x(FeatureRows(rows), trees), _tree_walk(rows, trees), rtol=1e-15, atol=0)


def test_rows_are_a_sequence_and_their_columns_fresh_arrays():
    rows = _rows(5)
    fr = FeatureRows(rows)
    assert len(fr) == 5 and list(fr) == rows and fr[2] is rows[2]
    a = fr.columns(["flops"])
    a[:] = -7.0  # a caller writing into what it got does not change the next answer
    assert np.array_equal(fr.columns(["flops"]), _walk(rows, ["flops"], log=False))
