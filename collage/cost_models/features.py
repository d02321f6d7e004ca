"""What a candidate subgraph is, as numbers, before it runs: the learned cost model's inputs.

``candidate_features(graph, nodes)`` is a flat ``{name: number}`` dict computed from the graph alone
(``collage.graph.stats.node_flops`` for FLOPs), a function of the candidate's structural fingerprint
(op types, attributes, shapes, dtypes, wiring), so it is stored once per fingerprint in the cost DB
(``CostDB.put_features`` under ``FEATURES_KIND``) beside the costs measured under that fingerprint:

* ``nodes``, ``depth`` (nodes on the longest path inside), ``inputs``, ``outputs`` (boundary tensors);
* ``flops``, ``mac_flops`` (``collage.graph.stats.MAC_OPS``), ``in_bytes``, ``out_bytes`` (boundary tensors),
  ``weight_bytes`` (initializers read), ``act_bytes`` (every tensor produced inside);
* per op class (``op_class``: the op type, with a grouped Conv as ``Conv.g`` and a MatMul of two activations
  as ``MatMul.aa``: the same FLOPs run at very different rates there) ``op:CLASS`` (count), ``flops:CLASS``
  (its FLOPs) and ``bytes:CLASS`` (activation bytes its nodes read and write: what a memory-bound op costs);
* ``non_fp32``: nodes whose first output is not float32 (int64 shape arithmetic, bool masks, fp16).

Why stored, not recomputed at training time: the model is trained on every measurement in the DB, of
every model ever tuned into it, and the DB keeps costs by fingerprint without the models they came from.
Features stored with the fingerprint when a tune first sees it make every later tune's training set
complete without the source models at hand. ``FEATURES_KIND`` changes when the features do (older rows
are then ignored, never misread; ``cand-v2``: op classes and ``bytes:CLASS``; ``cand-v3``: the FLOPs of
integer and QLinear convolutions and matrix products and of recurrences counted as multiply-accumulates).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from collage.errors import ModelError

if TYPE_CHECKING:
    from collage.graph.ir import Graph

#: the version of ``candidate_features``: rows stored under another kind are not read
FEATURES_KIND = "cand-v3"


class NodeFacts:
    """Per-node numbers of one graph, computed once and summed over many candidates."""

    def __init__(self, graph: Graph) -> None:
        from collage.graph.stats import MAC_OPS, node_flops

        self.graph = graph
        n = len(graph)
        self.op = [op_class(graph, i) for i in range(n)]
        self.flops = [float(node_flops(graph, i)) for i in range(n)]
        self.out_bytes = [float(sum(_nbytes(graph, t) for t in graph.op(i).output if t)) for i in range(n)]
        self.in_bytes = [float(sum(_nbytes(graph, t) for t in set(graph.reads(i)) if t not in graph.initializers))
                         for i in range(n)]
        self.weights = [[t for t in graph.reads(i) if t in graph.initializers] for i in range(n)]
        self.fp32 = [_first_dtype(graph, i) == "float32" for i in range(n)]
        self.preds = [sorted(graph.dag.predecessors(i)) for i in range(n)]
        # what a candidate's loop adds per node, made once (71,694 node sets of inception_v2 walk these)
        self.keys = [(f"op:{op}", f"flops:{op}", f"bytes:{op}") for op in self.op]
        self.moved = [self.in_bytes[i] + self.out_bytes[i] for i in range(n)]
        self.mac = [op.split(".")[0] in MAC_OPS for op in self.op]


def op_class(graph: Graph, i: int) -> str:
    """Node ``i``'s op type, refined where one type runs at two very different rates: a grouped Conv
    (depthwise: memory-bound) is ``Conv.g``, a MatMul of two activations (attention's scores and context:
    batched, no packed weight) is ``MatMul.aa``."""
    node = graph.op(i)
    op = node.op_type
    if op == "Conv" and any(a.name == "group" and a.i > 1 for a in node.attribute):
        return "Conv.g"
    if op == "MatMul" and not any(t in graph.initializers for t in node.input):
        return "MatMul.aa"
    return op


def _nbytes(graph: Graph, t: str) -> int:
    try:
        return graph.tensor(t).nbytes
    except ModelError:  # an output nothing reads may have no shape (Dropout's mask)
        return 0


def _first_dtype(graph: Graph, i: int) -> str:
    outs = [t for t in graph.op(i).output if t]
    try:
        return str(graph.tensor(outs[0]).dtype) if outs else "float32"
    except ModelError:
        return "float32"


def candidate_features(graph: Graph, nodes: Sequence[int], facts: NodeFacts | None = None) -> dict[str, float]:
    """The features of ``nodes`` of ``graph`` (module docstring); ``facts``: ``NodeFacts(graph)`` to reuse."""
    facts = facts or NodeFacts(graph)
    ids = sorted(set(nodes))
    inside = set(ids)
    entering, leaving = graph.boundary(ids)
    f: dict[str, float] = {"nodes": float(len(ids)), "inputs": float(len(entering)), "outputs": float(len(leaving)),
                           "in_bytes": float(sum(_nbytes(graph, t) for t in entering)),
                           "out_bytes": float(sum(_nbytes(graph, t) for t in leaving))}
    flops = mac = act = 0.0
    weights: set[str] = set()
    longest: dict[int, int] = {}
    non_fp32 = 0
    for i in ids:
        k_op, k_flops, k_bytes = facts.keys[i]
        f[k_op] = f.get(k_op, 0.0) + 1.0
        f[k_flops] = f.get(k_flops, 0.0) + facts.flops[i]
        f[k_bytes] = f.get(k_bytes, 0.0) + facts.moved[i]
        flops += facts.flops[i]
        mac += facts.flops[i] if facts.mac[i] else 0.0
        act += facts.out_bytes[i]
        weights.update(facts.weights[i])
        non_fp32 += not facts.fp32[i]
        longest[i] = 1 + max((longest[j] for j in facts.preds[i] if j in inside), default=0)
    f.update(flops=flops, mac_flops=mac, act_bytes=act, depth=float(max(longest.values())),
             weight_bytes=float(sum(graph.tensor(t).nbytes for t in weights)), non_fp32=float(non_fp32))
    return f


def features_by_fingerprint(graph: Graph, node_sets: Iterable[Sequence[int]],
                            fingerprints: Mapping[tuple[int, ...], str]) -> dict[str, dict[str, float]]:
    """``{fingerprint: features}`` of ``node_sets`` (one computation per distinct fingerprint)."""
    facts = NodeFacts(graph)
    out: dict[str, dict[str, float]] = {}
    for nodes in node_sets:
        fp = fingerprints[tuple(nodes)]
        if fp not in out:
            out[fp] = candidate_features(graph, nodes, facts)
    return out


class FeatureRows(Sequence[Mapping[str, float]]):
    """Feature dicts (a sequence of them, as every model reads) and, made once, one dense matrix over every name
    they hold (raw values, negatives 0): a model selects its columns from it instead of walking the dicts again.
    A guided tune prices the same candidates at each retrain (inception_v2: 143,388, 1.4 s a walk)."""

    def __init__(self, rows: Iterable[Mapping[str, float]]) -> None:
        self.rows = list(rows)
        self._matrix: np.ndarray | None = None
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        return self.rows[i]

    def __iter__(self) -> Iterator[Mapping[str, float]]:
        return iter(self.rows)

    def matrix(self) -> tuple[np.ndarray, dict[str, int]]:
        """The dense matrix and its column of each name."""
        if self._matrix is None:
            index: dict[str, int] = {}
            for row in self.rows:
                for name in row:
                    index.setdefault(name, len(index))
            x = np.zeros((len(self.rows), len(index)), dtype=np.float64)
            for r, row in enumerate(self.rows):
                for name, v in row.items():
                    x[r, index[name]] = v
            self._matrix, self._index = np.fmax(x, 0.0), index
        return self._matrix, self._index

    def columns(self, names: Sequence[str]) -> np.ndarray:
        """``(len(self), len(names))``: each name's column, zeros for a name no row holds (a fresh array)."""
        x, index = self.matrix()
        out = np.zeros((len(self.rows), len(names)), dtype=np.float64)
        for k, name in enumerate(names):
            j = index.get(name)
            if j is not None:
                out[:, k] = x[:, j]
        return out


def feature_rows(rows: Sequence[Mapping[str, float]]) -> FeatureRows:
    """``rows`` as :class:`FeatureRows` (themselves when they are)."""
    return rows if isinstance(rows, FeatureRows) else FeatureRows(rows)


def feature_matrix(rows: Sequence[Mapping[str, float]], columns: Sequence[str], log: bool = True) -> np.ndarray:
    """``rows`` as a dense float matrix over ``columns`` (missing: 0; negatives: 0), each value ``log1p``'d
    unless ``log=False``: sizes span orders of magnitude, and latency follows them multiplicatively."""
    x = feature_rows(rows).columns(columns)
    return np.log1p(x) if log else x
