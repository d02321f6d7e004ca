"""Errors of lower-precision range candidates at the model's outputs (for :mod:`collage.tuner.precision.tuner`).

``collage.measure.accuracy.measure_errors`` gives a candidate's *own* error: fed the reference tensors, its
outputs vs the reference, on the tensors that leave it. The accuracy budget is on the model's outputs, and an
intermediate tensor's error is a poor predictor of it: a prefix within the budget on its own can be well over it
at the model's output (results/precision/precision-cuts-shufflenet.md). A search that trusts the own error picks those
pieces, fails the end-to-end check and tightens one coarse piece per round until its rounds run out.

So a *range* candidate (a contiguous id range ``[a, b)`` between the graph's narrow cuts,
:mod:`collage.search.ranges`, or the whole model) gets its error where the budget is judged: its
outputs are fed through the rest of the model ``[b, n)`` in fp32 (ONNX Runtime, the reference
backend; every other tensor the rest reads comes from the reference run) and the model's outputs are
compared with the reference. That is the plan's end-to-end error when this range is its only
lower-precision partition; several of them still compound, which the search's end-to-end check catches.

Costs one compile of the range in its backend, plus one ONNX Runtime session of the rest per distinct
``b`` (kept while consecutive candidates share it), and a run of both per calibration sample. Stored in
the errors table like the own errors, ``data`` naming the span, the whole model's weights and ``-out``.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.measure.accuracy import (Budget, Calibration, ErrorMeasure, ErrorStore, WeightHashes, compare,
                                          reference_runs)
from collage.errors import CollageError

if TYPE_CHECKING:
    from collage.graph.ir import Graph
    from collage.search.candidates import Candidate

log = logging.getLogger(__name__)


def range_bounds(graph: Graph) -> frozenset[int]:
    """The positions range candidates start and end at: 0, the narrow cuts, ``len(graph)``."""
    from collage.search.ranges import narrow_cuts

    return frozenset({0, *narrow_cuts(graph), len(graph)})


def span_of(nodes: Sequence[int], bounds: frozenset[int]) -> tuple[int, int] | None:
    """``(a, b)`` when ``nodes`` is the contiguous range ``[a, b)`` with both ends in ``bounds``, else None."""
    if not nodes:
        return None
    a, b = nodes[0], nodes[-1] + 1
    if b - a != len(nodes) or a not in bounds or b not in bounds:
        return None
    return a, b


class OutputErrors:
    """Output errors of range candidates of one graph and calibration (module docstring); cached in ``db``."""

    def __init__(self, graph: Graph, backends: Mapping[str, Any], calib: Calibration, db: Any = None) -> None:
        self.graph, self.backends, self.calib = graph, backends, calib
        self.bounds = range_bounds(graph)
        self.store = ErrorStore(db)
        self._rest: dict[int, Any] = {}  # {b: ONNX Runtime session of [b, n)}: one at a time

    def close(self) -> None:
        """Drop the kept session of the rest of the model (vgg19's holds ~0.5 GB of weights)."""
        self._rest.clear()

    @cached_property
    def _data(self) -> str:
        """The whole model's structure and weights: the rest of the model is part of the error."""
        n = len(self.graph)
        h = hashlib.sha256(f"{self.graph.fingerprint(range(n))}-{WeightHashes(self.graph)(range(n))}".encode())
        return h.hexdigest()[:16]

    @cached_property
    def _refs(self) -> list[dict[str, np.ndarray]]:
        """The fp32 reference runs, with the tensors at every narrow cut."""
        graph, n = self.graph, len(self.graph)
        needed: set[str] = set()
        for x in sorted(self.bounds):
            if 0 < x < n:
                needed.update(graph.boundary(range(x))[1])
                needed.update(graph.boundary(range(x, n))[0])
        return reference_runs(graph, self.calib, sorted(needed))

    def _rest_of(self, b: int, ort: Any) -> Any:
        """The ONNX Runtime session of ``[b, n)``, kept until another one is asked for."""
        if b not in self._rest:
            self._rest.clear()
            self._rest[b] = ort.compile(self.graph.extract(range(b, len(self.graph))))
        return self._rest[b]

    def span(self, c: Candidate) -> tuple[int, int] | None:
        return span_of(c.nodes, self.bounds)

    def _data_key(self, a: int, b: int) -> str:
        return f"{self.calib.digest}-{self._data}-{a}:{b}-out"

    def cached(self, cands: Sequence[Candidate]) -> dict[Candidate, ErrorMeasure]:
        from collage.measure.db import key_for

        out = {}
        for c in cands:
            s = self.span(c)
            if s is None:
                continue
            got = self.store.get(key_for(self.backends[c.backend], self.graph.fingerprint(c.nodes)), self._data_key(*s))
            if got is not None:
                out[c] = got
        return out

    def measure(self, cands: Sequence[Candidate], *, budget_s: float | None = None,
                progress: bool = False) -> dict[Candidate, ErrorMeasure]:
        """The output error of each range candidate among ``cands`` (others are skipped), in the order given,
        until ``budget_s`` seconds have passed; known ones come from the store. A candidate that fails to
        compile or run is left out (logged)."""
        from collage.backends import reference_backend
        from collage.measure.db import key_for
        from collage.progress import track

        graph, n = self.graph, len(self.graph)
        out = self.cached(cands)
        todo = [c for c in dict.fromkeys(cands) if c not in out and self.span(c) is not None]
        if not todo:
            return out
        t0 = time.monotonic()
        refs = self._refs
        ort = reference_backend()
        for k, c in enumerate(track(todo, f"output errors {graph.name}", "cand", enabled=progress,
                                    deadline=None if budget_s is None else t0 + budget_s)):
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                log.warning("output errors: %.0f s spent, %d of %d range candidates left unmeasured",
                            budget_s, len(todo) - k, len(todo))
                break
            a, b = self.span(c)
            ins, _ = graph.boundary(c.nodes)
            try:
                compiled = self.backends[c.backend].compile(graph.extract(c.nodes))
                rest = self._rest_of(b, ort) if b < n else None
                rest_ins = graph.boundary(range(b, n))[0] if rest is not None else []
                err = ErrorMeasure()
                for ref in refs:
                    env = {k2: np.array(v, copy=True) for k2, v in compiled.run({t: ref[t] for t in ins}).items()}
                    if rest is not None:
                        env.update(rest.run({t: env[t] if t in env else ref[t] for t in rest_ins}))
                    compare({t: env.get(t, ref[t]) for t in graph.outputs}, ref, graph.outputs, err)
            except CollageError as e:
                log.warning("cannot measure the output error of %s: %s", c, e)
                continue
            self.store.put(key_for(self.backends[c.backend], graph.fingerprint(c.nodes)), self._data_key(a, b), err)
            out[c] = err
        return out


#: Within-budget lower-precision prefixes (suffixes) per backend moved to the front of the measuring order,
#: longest first, each with the fp32 suffixes (prefixes) that complete it
PROMOTE = 4


@dataclass
class Screen:
    """``screen_ranges``' answer: candidates not worth timing, the errors measured, candidates to time first."""

    dropped: set[Candidate] = field(default_factory=set)
    errors: dict[Candidate, ErrorMeasure] = field(default_factory=dict)
    first: list[Candidate] = field(default_factory=list)


def screen_ranges(out: OutputErrors, budget: Budget, cands: Sequence[Candidate], low: set[str], *,
                  budget_s: float | None = None, progress: bool = False) -> Screen:
    """The lower-precision prefixes and suffixes among ``cands`` not worth timing: those over ``budget`` at the
    model's outputs, found by bisection (error grows with how much of the model runs in lower precision:
    a prefix longer than one over budget is taken to be over too; likewise suffixes), so a backend with
    ``k`` cuts costs about ``2 log2 k`` measurements, not ``3k``. Nothing is dropped for a backend whose
    whole model is within budget. At most ``budget_s`` seconds. Segments are left alone (the search
    measures those it would use). ``first``: the ``PROMOTE`` longest prefixes and suffixes within budget
    per backend, each followed by its fp32 complements (suffix for a prefix, prefix for a suffix): "all but
    the sensitive tail in lower precision" is timed before the measuring budget runs out."""
    n = len(out.graph)
    t0 = time.monotonic()
    res = Screen()
    errs, dropped = res.errors, res.dropped
    fp32 = {}
    for c in cands:
        if c.backend not in low and out.span(c) is not None:
            fp32.setdefault(out.span(c), []).append(c)

    def over(c: Candidate) -> bool | None:
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            return None
        got = out.measure([c], progress=False)
        errs.update(got)
        return None if c not in got else not budget.allows(got[c])

    for backend in sorted(low):
        mine = {out.span(c): c for c in cands if c.backend == backend and out.span(c) is not None}
        whole = mine.get((0, n))
        if whole is not None and over(whole) is not True:
            continue  # within budget (or unknown): every range may be
        for family in ([mine[s] for s in sorted(s for s in mine if s[0] == 0 and s[1] < n)],  # prefixes, shortest first
                       # suffixes
                       [mine[s] for s in sorted((s for s in mine if s[1] == n and s[0] > 0), reverse=True)]):
            lo, hi, known = -1, len(family), False  # family[:lo+1] within, family[hi:] over (when known)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                verdict = over(family[mid])
                if verdict is None:
                    break
                if verdict:
                    hi, known = mid, True
                else:
                    lo = mid
            if known:
                dropped.update(family[hi:])
                for c in reversed(family[max(0, hi - PROMOTE):hi]):  # within budget (measured or below one that is)
                    a, b = out.span(c)
                    res.first += [c, *fp32.get((b, n) if a == 0 else (0, a), [])]
    out.close()
    return res
