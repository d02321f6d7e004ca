"""Measured numerical error of lower-precision candidates, against the ONNX Runtime fp32 reference.

An *accuracy budget* (``Budget``, parsed from ``"cos=0.999,rel=0.01"``) bounds two figures per output
tensor: the cosine similarity with the reference (at least ``min_cos``) and the largest absolute
difference divided by the reference's range, ``max|got - ref| / (max(ref) - min(ref))`` (at most
``max_rel``). An output with a NaN or inf where the reference is finite has infinite error.

A candidate's error (``ErrorMeasure``) is measured on the *calibration inputs*: the whole model runs
once on ONNX Runtime fp32 with every intermediate tensor exposed; the candidate (its subgraph compiled
by its lower-precision backend) is fed the reference tensors that enter it, and each tensor that
leaves it is compared with the reference. So the error is the candidate's own, not what it inherits.

Errors are stored in the cost DB (``CostDB.put_error``, table ``errors_v1``), keyed like costs (``CostKey``)
plus ``data``: a hash of the calibration inputs and of the partition's weights (a cost fingerprint
holds weight shapes, not values, and the error depends on the values). A second tune with the same
calibration inputs measures nothing again.
"""
from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.errors import CollageError

if TYPE_CHECKING:
    from collage.backends.base import Backend
    from collage.measure.db import CostDB, CostKey
    from collage.graph.ir import Graph
    from collage.search.candidates import Candidate

log = logging.getLogger(__name__)

#: at most this many calibration samples are used (each costs a reference run and a run per candidate)
MAX_SAMPLES = 8


# ---------------------------------------------------------------------- budget
@dataclass(frozen=True)
class Budget:
    """Minimum cosine similarity and maximum range-relative error, per output tensor (None: unbounded)."""

    min_cos: float | None = None
    max_rel: float | None = None

    def score(self, err: ErrorMeasure) -> float:
        """How much of the budget ``err`` uses: <= 1 within budget, inf for NaN/inf outputs."""
        if not err.finite:
            return math.inf
        s = 0.0
        if self.max_rel is not None:
            s = max(s, err.rel / self.max_rel if self.max_rel > 0 else (0.0 if err.rel == 0 else math.inf))
        if self.min_cos is not None:
            room = 1.0 - self.min_cos
            miss = max(0.0, 1.0 - err.cos)
            s = max(s, miss / room if room > 0 else (0.0 if miss == 0 else math.inf))
        return s

    def allows(self, err: ErrorMeasure) -> bool:
        return self.score(err) <= 1.0

    def describe(self) -> str:
        parts = []
        if self.min_cos is not None:
            parts.append(f"cos>={self.min_cos:g}")
        if self.max_rel is not None:
            parts.append(f"rel<={self.max_rel:g}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"min_cos": self.min_cos, "max_rel": self.max_rel}


def parse_accuracy(text: str | None) -> Budget | None:
    """``"cos=0.999,rel=0.01"`` -> Budget; None or '' -> None. Either key may be left out."""
    if text is None or not str(text).strip():
        return None
    values: dict[str, float] = {}
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, val = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("cos", "rel"):
            raise CollageError(f"bad accuracy budget item {item!r} in {text!r}: use cos=MIN_COSINE and/or "
                               "rel=MAX_ERROR_OVER_RANGE, e.g. --accuracy cos=0.999,rel=0.01")
        if key in values:
            raise CollageError(f"accuracy budget {text!r} gives {key} twice")
        try:
            v = float(val)
        except ValueError:
            raise CollageError(f"accuracy budget {text!r}: {key}={val!r} is not a number") from None
        if not math.isfinite(v):
            raise CollageError(f"accuracy budget {text!r}: {key} must be finite")
        if key == "cos" and not -1.0 <= v <= 1.0:
            raise CollageError(f"accuracy budget {text!r}: cos must lie in [-1, 1] (e.g. 0.999)")
        if key == "rel" and v < 0:
            raise CollageError(f"accuracy budget {text!r}: rel must be >= 0 (e.g. 0.01)")
        values[key] = v
    if not values:
        raise CollageError(f"accuracy budget {text!r} is empty: use e.g. cos=0.999,rel=0.01")
    return Budget(values.get("cos"), values.get("rel"))


# ---------------------------------------------------------------------- error figures
@dataclass
class ErrorMeasure:
    """Worst range-relative error and worst cosine similarity over tensors and samples."""

    rel: float = 0.0
    cos: float = 1.0
    finite: bool = True
    per_tensor: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, name: str, got: np.ndarray, ref: np.ndarray) -> None:
        rel, cos, finite = tensor_error(got, ref)
        prev = self.per_tensor.get(name)
        if prev is not None:
            rel, cos, finite = max(rel, prev["rel"]), min(cos, prev["cos"]), finite and prev["finite"]
        self.per_tensor[name] = {"rel": rel, "cos": cos, "finite": finite}
        self.rel, self.cos, self.finite = max(self.rel, rel), min(self.cos, cos), self.finite and finite

    def to_dict(self) -> dict[str, Any]:
        return {"rel": _json_num(self.rel), "cos": _json_num(self.cos), "finite": self.finite,
                "per_tensor": {k: {kk: _json_num(vv) if isinstance(vv, float) else vv for kk, vv in v.items()}
                               for k, v in self.per_tensor.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ErrorMeasure:
        return cls(_num_back(d["rel"]), _num_back(d["cos"]), bool(d["finite"]),
                   {k: {kk: _num_back(vv) if kk != "finite" else vv for kk, vv in v.items()}
                    for k, v in (d.get("per_tensor") or {}).items()})

    def describe(self) -> str:
        if not self.finite:
            return "NaN/inf outputs"
        return f"rel {self.rel:.3g}, cos {self.cos:.6f}"


def _json_num(v: float) -> float | str:
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def _num_back(v: Any) -> float:
    return float(v)


def tensor_error(got: np.ndarray, ref: np.ndarray) -> tuple[float, float, bool]:
    """(max|got-ref| / range(ref), cosine(got, ref), finite) of one tensor; NaN/inf -> (inf, -inf, False)."""
    g = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    if g.shape != r.shape:
        raise CollageError(f"output has {g.size} elements, the reference {r.size}")
    if g.size == 0:
        return 0.0, 1.0, True
    ref_ok = np.isfinite(r)
    if not np.all(np.isfinite(g[ref_ok])) or np.any(np.isfinite(g[~ref_ok])):
        return math.inf, -math.inf, False
    g, r = g[ref_ok], r[ref_ok]
    if g.size == 0:
        return 0.0, 1.0, True
    diff = float(np.max(np.abs(g - r)))
    span = float(np.max(r) - np.min(r))
    scale = span if span > 0 else float(np.max(np.abs(r)))
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
    ng, nr = float(np.linalg.norm(g)), float(np.linalg.norm(r))
    if ng == 0 and nr == 0:
        cos = 1.0
    elif ng == 0 or nr == 0:
        cos = 0.0
    else:
        cos = float(np.dot(g, r) / (ng * nr))
    return rel, min(1.0, cos), True


def compare(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], names: Iterable[str],
            into: ErrorMeasure | None = None) -> ErrorMeasure:
    err = into or ErrorMeasure()
    for t in names:
        err.add(t, got[t], ref[t])
    return err


def run_error(run: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]], calib: Calibration,
              refs: Sequence[Mapping[str, np.ndarray]], outputs: Iterable[str]) -> ErrorMeasure:
    """A whole-model runner's outputs (copied: a backend may reuse its buffers) vs the reference runs
    (``reference_runs``), over every calibration sample."""
    outputs, err = list(outputs), ErrorMeasure()
    for feeds, ref in zip(calib.samples, refs):
        compare({k: np.array(v, copy=True) for k, v in run(dict(feeds)).items()}, ref, outputs, err)
    return err


# ---------------------------------------------------------------------- calibration inputs
@dataclass
class Calibration:
    """Input samples (each a feed dict), their hash, where they came from."""

    samples: list[dict[str, np.ndarray]]
    digest: str
    source: str
    random: bool

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "samples": len(self.samples), "hash": self.digest, "random": self.random}


def _digest(samples: Sequence[Mapping[str, np.ndarray]]) -> str:
    h = hashlib.sha256()
    for s in samples:
        for k in sorted(s):
            a = np.asarray(s[k], order="C")
            h.update(repr((k, a.dtype.str, a.shape)).encode())
            h.update(a.tobytes())
    return h.hexdigest()[:24]


def load_calibration(graph: Graph, path: str | Path | None = None, *, seed: int = 0,
                     max_samples: int = MAX_SAMPLES) -> Calibration:
    """Calibration samples from ``path`` (.npz: one array per graph input, with the input's shape, or
    with one extra leading axis of samples), else seeded random inputs (a warning says so)."""
    if path is None:
        from collage.graph.inputs import random_inputs

        samples = [random_inputs(graph, seed=seed + k) for k in range(2)]
        log.warning("no --calibration inputs: the accuracy budget is judged on %d seeded random input "
                    "sample(s), which may not represent real data; pass --calibration inputs.npz", len(samples))
        return Calibration(samples, _digest(samples), f"random (collage.graph.inputs.random_inputs, seed {seed})", True)
    path = Path(path)
    try:
        data = dict(np.load(path, allow_pickle=False))
    except FileNotFoundError:
        raise CollageError(f"calibration file {path} does not exist") from None
    except (OSError, ValueError) as e:
        raise CollageError(f"calibration file {path}: cannot read it as .npz ({e}); write it with "
                           "numpy.savez(path, INPUT_NAME=array, ...)") from None
    missing = [n for n in graph.inputs if n not in data]
    if missing:
        raise CollageError(f"calibration file {path} lacks input(s) {missing}; it has {sorted(data)} "
                           f"(the model's inputs are {list(graph.inputs)})")
    count = None
    for name in graph.inputs:
        info, arr = graph.tensor(name), data[name]
        if tuple(arr.shape) == tuple(info.shape):
            n = 1
        elif arr.ndim == len(info.shape) + 1 and tuple(arr.shape[1:]) == tuple(info.shape):
            n = arr.shape[0]
        else:
            raise CollageError(f"calibration file {path}: input {name!r} has shape {tuple(arr.shape)}; expected "
                               f"{tuple(info.shape)} or (samples, {', '.join(map(str, info.shape))})")
        if count is not None and n != count:
            raise CollageError(f"calibration file {path}: inputs hold different numbers of samples ({count} vs {n})")
        count = n
    count = count or 1
    if count > max_samples:
        log.warning("calibration file %s holds %d samples; using the first %d", path, count, max_samples)
    samples = []
    for k in range(min(count, max_samples)):
        feed = {}
        for name in graph.inputs:
            info, arr = graph.tensor(name), data[name]
            a = arr if tuple(arr.shape) == tuple(info.shape) else arr[k]
            feed[name] = np.asarray(a, dtype=info.dtype, order="C")
        samples.append(feed)
    return Calibration(samples, _digest(samples), str(path), False)


def reference_runs(graph: Graph, calib: Calibration, tensors: Sequence[str] = ()) -> list[dict[str, np.ndarray]]:
    """ONNX Runtime fp32 runs of the whole model on each sample, with ``tensors`` exposed too (plus inputs)."""
    from collage.backends import reference_backend

    extra = [t for t in dict.fromkeys(tensors) if t not in graph.inputs and t not in graph.initializers]
    model = graph.with_outputs(extra) if extra else graph.model
    compiled = reference_backend().compile(model)
    out = []
    for feeds in calib.samples:
        res = {k: np.array(v, copy=True) for k, v in compiled.run(dict(feeds)).items()}
        res.update(feeds)
        out.append(res)
    return out


# ---------------------------------------------------------------------- the store
class ErrorStore:
    """Measured errors, kept in the cost DB (``CostDB.put_error``: SQLite or PostgreSQL); in memory without one."""

    def __init__(self, db: CostDB | None = None) -> None:
        self._mem: dict[tuple, dict[str, Any]] = {}
        self.db = db

    def get(self, key: CostKey, data: str) -> ErrorMeasure | None:
        k = (*key, data)
        if k in self._mem:
            return ErrorMeasure.from_dict(self._mem[k])
        if self.db is None:
            return None
        record = self.db.get_error(key, data)
        return ErrorMeasure.from_dict(record) if record is not None else None

    def put(self, key: CostKey, data: str, err: ErrorMeasure) -> None:
        d = err.to_dict()
        self._mem[(*key, data)] = d
        if self.db is not None:
            self.db.put_error(key, data, d)

    # int8 ranges (collage.backends.qdq): calibrated once per model and calibration set, next to the errors
    def get_ranges(self, model: str, data: str) -> dict[str, Any] | None:
        """The stored ranges document of ``model`` (structure + weights hash) on calibration ``data`` (digest and
        method), or None."""
        k = ("ranges", model, data)
        if k in self._mem:
            return self._mem[k]
        return None if self.db is None else self.db.get_ranges(model, data)

    def put_ranges(self, model: str, data: str, doc: Mapping[str, Any]) -> None:
        self._mem[("ranges", model, data)] = dict(doc)
        if self.db is not None:
            self.db.put_ranges(model, data, doc)

    def count(self) -> int:
        return len([k for k in self._mem if k[0] != "ranges"]) if self.db is None else self.db.error_count()


class WeightHashes:
    """Hash of the weights a node set reads (values, which cost fingerprints leave out)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._by_name: dict[str, str] = {}

    def __call__(self, nodes: Sequence[int]) -> str:
        h = hashlib.sha256()
        for name in sorted({t for i in nodes for t in self.graph.reads(i) if t in self.graph.initializers}):
            if name not in self._by_name:
                from onnx import numpy_helper

                arr = np.asarray(numpy_helper.to_array(self.graph.initializers[name]), order="C")
                self._by_name[name] = hashlib.sha256(arr.tobytes()).hexdigest()[:16]
            h.update(f"{name}:{self._by_name[name]};".encode())
        return h.hexdigest()[:16]


# ---------------------------------------------------------------------- measuring
def measure_errors(graph: Graph, cands: Sequence[Candidate], backends: Mapping[str, Backend], calib: Calibration,
                   db: CostDB | None = None, *, progress: bool = False,
                   budget_s: float | None = None) -> dict[Candidate, ErrorMeasure]:
    """The error of each candidate's outputs vs the fp32 reference, fed the reference inputs (module docstring).

    Reused from the store when known; a candidate that fails to compile or run is left out (logged).
    With ``budget_s``, candidates are measured in the order given until that many seconds have passed;
    the rest are left out (their count is logged): pass the most promising first.
    """
    from collage.measure.db import key_for
    from collage.progress import track

    store = ErrorStore(db)
    weights = WeightHashes(graph)
    out: dict[Candidate, ErrorMeasure] = {}
    todo: list[tuple[Candidate, Any, str]] = []
    for c in cands:
        key = key_for(backends[c.backend], graph.fingerprint(c.nodes))
        data = f"{calib.digest}-{weights(c.nodes)}"
        got = store.get(key, data)
        if got is not None:
            out[c] = got
        else:
            todo.append((c, key, data))
    if not todo:
        return out
    needed = sorted({t for c, _, _ in todo for t in (lambda b: b[0] + b[1])(graph.boundary(c.nodes))})
    t0 = time.monotonic()
    refs = reference_runs(graph, calib, needed)
    for k, (c, key, data) in enumerate(track(todo, f"errors {graph.name}", "cand", enabled=progress,
                                             deadline=None if budget_s is None else t0 + budget_s)):
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            log.warning("error budget of %.0f s spent: %d of %d lower-precision candidates left unmeasured "
                        "(not used)", budget_s, len(todo) - k, len(todo))
            break
        ins, outs = graph.boundary(c.nodes)
        try:
            compiled = backends[c.backend].compile(graph.extract(c.nodes))
            err = ErrorMeasure()
            for ref in refs:
                got = compiled.run({t: ref[t] for t in ins})
                compare(got, ref, outs, err)
        except CollageError as e:
            log.warning("cannot measure the error of %s: %s", c, e)
            continue
        store.put(key, data, err)
        out[c] = err
    return out
