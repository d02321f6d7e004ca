"""Precision as a searched dimension: lower-precision partitions under a user's accuracy budget.

A lower-precision *backend variant* (``openvino-bf16``: OpenVINO's CPU plugin with
``INFERENCE_PRECISION_HINT`` bf16; ``openvino-fp16``; the int8 QDQ variants ``onnxruntime-int8``,
``openvino-int8``, ``openvino-int8-bf16`` of :mod:`collage.backends.qdq`, whose activation ranges
:func:`prepare_int8` calibrates once per model and calibration set, or reuses from the
cost DB) is a backend like any other: its own registry
name, version and cost keys, its candidates measured on the normal measuring path. What it adds is an
error, so it is only used under an accuracy budget (``--accuracy cos=0.999,rel=0.01``, see
``collage.measure.accuracy``); without one, naming such a backend is refused: plans stay
fp32-faithful.

Before any latency is measured (:meth:`PrecisionTuner.prescreen`, called by ``tune``), the
lower-precision prefixes and suffixes between the graph's narrow cuts get their error at the model's
outputs (``collage.tuner.precision.output_errors``: the rest of the model run in fp32), by bisection; those over the
budget are not timed, and the longest within it, with their fp32 complements, are timed first (else the
measuring budget can run out before them on a heavy model).

The budgeted search (:meth:`PrecisionTuner.search`, a Lagrangian loop over the exact DP with each
round's plan stitched and its end-to-end error measured, falling back to fp32) lives in
:mod:`collage.tuner.precision.budgeted`; the backend variants in :mod:`collage.backends.openvino.lowp`. Here: the
tuner's setup, the prescreen, artifacts' end-to-end errors, the whole-model alternatives for tune's
verification, the final check and report.json's "precision" section.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from collage.backends import qdq
from collage.measure.accuracy import (Budget, Calibration, ErrorMeasure, ErrorStore, WeightHashes,
                                          load_calibration, measure_errors, parse_accuracy, reference_runs, run_error)
from collage.util import cache_dir
from collage.errors import CollageError
from collage.plan import Note, NoteKind, Plan, kind_of
from collage.backends.openvino.lowp import (VARIANTS, OpenVINOBF16Backend, OpenVINOFP16Backend,
                                        cpu_bf16_reason, native_support, precision_of)
from collage.tuner.precision.output_errors import OutputErrors, screen_ranges
from collage.tuner.precision.budgeted import BudgetedSearch, PrecisionOutcome, Round

log = logging.getLogger(__name__)

__all__ = ["VARIANTS", "OpenVINOBF16Backend", "OpenVINOFP16Backend", "PrecisionOutcome", "PrecisionSettings",
           "PrecisionTuner", "Round", "check_backends",
           "cpu_bf16_reason", "native_support", "precision_of"]  # the backend variants live in precision_backends


def check_backends(backends: Sequence[Any], budget: Budget | None) -> list[str]:
    """Names of the lower-precision backends among ``backends``; CollageError if any is named without a budget."""
    low = [b.name for b in backends if precision_of(b) != "fp32"]
    if low and budget is None:
        raise CollageError(
            f"backend(s) {', '.join(low)} compute in lower precision and change the model's outputs; collage "
            "keeps plans fp32-faithful unless you give an accuracy budget: add e.g. --accuracy cos=0.999,rel=0.01 "
            "(and --calibration inputs.npz with representative inputs), or drop them from --backends")
    if budget is not None and len(low) == len(backends):
        raise CollageError(f"--backends {', '.join(low)} are all lower precision: add an fp32 backend "
                           "(e.g. onnxruntime) so that a plan within the accuracy budget always exists")
    return low


def _say(progress: bool, msg: str, *args: object) -> None:
    log.info(msg, *args)
    if progress:
        print("collage: " + (msg % args if args else msg), file=sys.stderr, flush=True)


def whole_model_outcome(outcome: PrecisionOutcome, note: str) -> PrecisionOutcome:
    """The outcome once the tune chose a lower-precision whole model over the searched plan: no fp32
    fallback, and its own note in place of the search's precision notes."""
    notes = [x for x in outcome.notes if kind_of(x) != NoteKind.PRECISION] + [Note(NoteKind.PRECISION, note)]
    return replace(outcome, fallback=False, notes=tuple(notes))


def prepare_int8(graph: Any, calib: Calibration, db: Any, int8: Sequence[Any],
                 backend_options: dict[str, dict[str, Any]], progress: bool,
                 method: str = qdq.DEFAULT_METHOD) -> dict[str, Any] | None:
    """The int8 variants' activation ranges of this model on the calibration set (report "int8"; None without
    an int8 variant): from the cost DB's SQLite file (``ErrorStore.get_ranges``) when known, else calibrated now
    (one fp32 run over the samples) and stored; written to a file that the int8 backends quantize every
    candidate with (their ``ranges`` option, added to ``backend_options``, which the job passes wherever it
    builds them by name)."""
    if not int8:
        return None
    ops = sorted({b.ops for b in int8})
    if len(ops) > 1:
        raise CollageError(f"the int8 variants {[b.name for b in int8]} quantize different op sets {ops}; "
                           "give them the same 'ops' option")
    n = len(graph)
    model = hashlib.sha256(f"{graph.fingerprint(range(n))}-{WeightHashes(graph)(range(n))}"
                           .encode()).hexdigest()[:20]
    data = f"{calib.digest}-{method}-{qdq.RECIPE}-{ops[0]}"
    store = ErrorStore(db)
    t0 = time.monotonic()
    doc = store.get_ranges(model, data)
    runs = 0
    if doc is None:
        ranges = qdq.calibrate(graph.model, calib.samples, method, ops[0])
        runs = 1
        doc = {"ranges": {k: [lo, hi] for k, (lo, hi) in ranges.items()}, "method": method, "ops": ops[0],
               "samples": len(calib.samples), "random": calib.random}
        store.put_ranges(model, data, doc)
    path = qdq.save_ranges({k: (v[0], v[1]) for k, v in doc["ranges"].items()},
                           cache_dir() / "int8-ranges" / f"{model}-{data}.json",
                           {k: v for k, v in doc.items() if k != "ranges"})
    for b in int8:
        b.ranges = str(path)
        backend_options.setdefault(b.name, {})["ranges"] = str(path)  # workers, exports: by name
        if "weight_bits" not in backend_options[b.name]:  # 7 where the int8 kernels are AVX2's (qdq.WEIGHT_BITS)
            b.weight_bits = qdq.tuned_weight_bits(b)
            backend_options[b.name].update(qdq.weight_option(b.weight_bits))  # workers and the artifact: 7 only
    _say(progress, "precision: int8 ranges of %d tensors %s (%s, %d %s calibration sample(s))", len(doc["ranges"]),
         "reused from the cost DB" if runs == 0 else "calibrated", method, len(calib.samples),
         "random" if calib.random else "given")
    return {"method": method, "ops": ops[0], "weight_bits": {b.name: b.weight_bits for b in int8},
            "tensors": len(doc["ranges"]), "calibration_runs": runs,
            "reused": runs == 0, "seconds": round(time.monotonic() - t0, 3), "file": str(path),
            "calibration": calib.to_dict()}


@dataclass(frozen=True)
class PrecisionSettings:
    """What the precision part of a tune is set up with (``PrecisionTuner.setup``): the accuracy budget (a text
    such as ``"cos=0.999,rel=0.01"``, a Budget, or None: fp32 only), the calibration inputs (.npz; None: seeded
    random ones), the cost DB, the target, the tune's scratch folder, progress lines, the tune's budget (errors
    are measured for at most half of it, 30 s at least) and the backends' constructor options."""

    accuracy: str | Budget | None = None
    calibration: str | Path | None = None
    seed: int = 0
    db: Any = None
    target: str = "cpu"
    work: Path | None = None
    progress: bool = True
    budget_s: float | None = None
    backend_options: Mapping[str, Mapping[str, Any]] | None = None


@dataclass
class PrecisionTuner(BudgetedSearch):
    """The precision part of one tuning job (module docstring); ``tune`` calls setup, search (inherited from
    :class:`collage.tuner.precision.budgeted.BudgetedSearch`), check, report. What one search found travels
    with its plan (:class:`collage.tuner.precision.budgeted.PrecisionOutcome`); the tuner keeps only what holds
    for the whole tune (the setup's notes, the int8 ranges, the measured errors, caches)."""

    graph: Any
    budget: Budget
    calib: Calibration
    backends: dict[str, Any]
    low: set[str]
    db: Any = None
    target: str = "cpu"
    work: Path | None = None
    progress: bool = True
    #: seconds for measuring candidates' errors (most time saved first); None: all of them
    error_budget_s: float | None = None
    errors: dict[Any, ErrorMeasure] = field(default_factory=dict)
    #: what holds for every plan: the setup's notes (random calibration inputs)
    notes: list[str] = field(default_factory=list)
    #: int8 ranges of this model and calibration set (report "int8"): method, tensors, calibration runs, reused
    int8: dict[str, Any] | None = None
    #: constructor options per backend name (tune's backend_options), for the plans this tuner exports
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def setup(cls, graph: Any, backends: Sequence[Any], settings: PrecisionSettings) -> PrecisionTuner | None:
        """None when no budget is given (refusing lower-precision backends then), else a tuner."""
        accuracy = settings.accuracy
        budget = accuracy if isinstance(accuracy, Budget) or accuracy is None else parse_accuracy(accuracy)
        low = check_backends(backends, budget)
        if budget is None:
            if settings.calibration is not None:
                log.warning("--calibration is only used with --accuracy; ignored")
            return None
        if not low:
            log.warning("--accuracy %s given, but no lower-precision backend among %s: the plan is fp32 "
                        "(add e.g. openvino-bf16 to --backends)", budget.describe(), [b.name for b in backends])
        calib = load_calibration(graph, settings.calibration, seed=settings.seed)
        options = {k: dict(v) for k, v in (settings.backend_options or {}).items()}
        by_name = {b.name: b for b in backends}
        int8 = prepare_int8(graph, calib, settings.db, [b for name, b in by_name.items() if name in low
                                                        and hasattr(b, "quantized")], options, settings.progress)
        notes = [] if not calib.random else [Note(NoteKind.ACCURACY, f"accuracy judged on {len(calib.samples)} "
                                                  "seeded random input sample(s), not on representative data: pass "
                                                  "--calibration inputs.npz")]
        return cls(graph, budget, calib, by_name, set(low), settings.db, settings.target, settings.work,
                   settings.progress, None if settings.budget_s is None else max(30.0, 0.5 * settings.budget_s),
                   notes=notes, int8=int8, backend_options=options)

    def int8_backends(self) -> list[Any]:
        return [b for name, b in self.backends.items() if name in self.low and hasattr(b, "quantized")]

    def _say(self, msg: str, *args: object) -> None:
        _say(self.progress, msg, *args)

    # ------------------------------------------------------------------ end-to-end error
    @cached_property
    def _reference(self) -> list[dict[str, np.ndarray]]:
        return reference_runs(self.graph, self.calib)

    def reference(self) -> list[dict[str, np.ndarray]]:
        return self._reference

    def artifact_error(self, artifact: Any) -> ErrorMeasure:
        """A loaded artifact's outputs vs the fp32 reference on every calibration sample."""
        return run_error(artifact.run, self.calib, self.reference(), self.graph.outputs)

    def end_to_end(self, plan: Plan, tag: str) -> ErrorMeasure:
        """Stitch ``plan`` into an artifact (the real runtime path), run it, compare with the reference."""
        from collage.tuner.export import export
        from collage.runtime.artifact import load

        work = self.work or Path(tempfile.mkdtemp(prefix="collage-precision-"))
        where = export(self.graph, plan, work / f"precision-{tag}", target=self.target,
                       backend_options=self.backend_options)
        try:
            return self.artifact_error(load(where))
        finally:  # a round's artifact is only measured (BERT-base writes ~0.4 GB a round)
            shutil.rmtree(where, ignore_errors=True)

    # ------------------------------------------------------------------ range errors, before latencies
    @cached_property
    def _output_errors(self) -> OutputErrors:
        return OutputErrors(self.graph, self.backends, self.calib, self.db)

    def output_errors(self) -> OutputErrors:
        return self._output_errors

    def prescreen(self, cands: Sequence[Any]) -> list[Any]:
        """tune's measuring order, lower-precision ranges judged at the model's outputs before any latency
        (``collage.tuner.precision.output_errors.screen_ranges``): prefixes and suffixes over the budget dropped (on the
        heavy models the measuring budget then goes to ranges that can be used); the longest ones within it
        and their fp32 complements moved right after the whole models; otherwise the order is kept."""
        t0 = time.monotonic()
        n = len(self.graph)
        int8 = {b.name for b in self.int8_backends()}
        if int8:  # an int8 candidate without a Conv/MatMul/Gemm only adds QDQ pairs: not timed
            kept = [c for c in cands if c.backend not in int8
                    or qdq.has_quantizable_op(self.graph.op(i).op_type for i in c.nodes)]
            if len(kept) < len(cands):
                self._say("precision: %d int8 candidates without a Conv/MatMul/Gemm not timed", len(cands) - len(kept))
            cands = kept
        screen = screen_ranges(self.output_errors(), self.budget, cands, self.low, budget_s=self.error_budget_s,
                               progress=self.progress)
        self.errors.update(screen.errors)
        if screen.errors:
            self._say("precision: %d lower-precision prefixes/suffixes measured at the model's outputs first (%.0f s): "
                      "%d over the accuracy budget (or longer than one that is), not timed; %d timed first",
                      len(screen.errors), time.monotonic() - t0, len(screen.dropped), len(screen.first))
        first = [c for c in dict.fromkeys(screen.first) if c not in screen.dropped]
        whole = [c for c in cands if len(c.nodes) == n]
        taken = set(first) | set(whole) | screen.dropped
        return whole + first + [c for c in cands if c not in taken]

    # ------------------------------------------------------------------ verification and report
    def whole_model_within_budget(self) -> list[Any]:
        """Lower-precision whole-model candidates whose measured error (= end to end) is within budget, finite."""
        n = len(self.graph)
        return [c for c, e in self.errors.items()
                if len(c.nodes) == n and c.backend in self.low and e.finite and self.budget.allows(e)]

    def whole_model_alternatives(self, plan: Plan) -> dict[str, Any]:
        """Compiled whole models of the lower-precision backends within budget on their own, unless that is ``plan``."""
        n = len(self.graph)
        out = {}
        for c in self.whole_model_within_budget():
            if (len(plan.partitions) == 1 and plan.partitions[0].backend == c.backend
                    and len(plan.partitions[0].nodes) == n):
                continue
            try:
                out[c.backend] = self.backends[c.backend].compile(self.graph.model)
            except CollageError as e:
                log.warning("%s cannot compile the whole model again: %s", c.backend, e)
        return out

    def use_whole_model(self, outcome: PrecisionOutcome, backend: str, note: str) -> PrecisionOutcome:
        """tune chose ``backend`` on the whole model over the searched plan: the outcome that now holds (its
        notes: those of the plan)."""
        return whole_model_outcome(outcome, note)

    def is_low(self, plan: Plan) -> bool:
        return any(p.backend in self.low for p in plan.partitions)

    def check(self, plan: Plan, artifact: Any, fp32_numerics: dict[str, Any] | None,
              outcome: PrecisionOutcome) -> tuple[dict[str, Any], PrecisionOutcome]:
        """Numerics of the final artifact against the budget (report "numerics"), and the outcome with that
        end-to-end error.

        A plan with lower-precision partitions over budget raises CollageError; for an fp32 plan
        (``fp32_numerics``: tune's tolerance check, already passed) the budget figures are only added.
        """
        err = self.artifact_error(artifact)
        outcome = replace(outcome, final_error=err)
        ok = self.budget.allows(err)
        figures = {"rel": err.rel, "cos": err.cos, "finite": err.finite, "budget": self.budget.describe(),
                   "within_budget": ok}
        if fp32_numerics is not None:
            return {**fp32_numerics, **figures}, outcome
        if not ok:
            raise CollageError(f"the final plan's outputs are over the accuracy budget ({self.budget.describe()}): "
                               f"{err.describe()}; re-run with a looser --accuracy or without lower-precision backends")
        worst = 0.0
        per: dict[str, Any] = {name: dict(err.per_tensor.get(name, {})) for name in self.graph.outputs}
        got = artifact.run(dict(self.calib.samples[0]))
        ref = self.reference()[0]
        for name in self.graph.outputs:
            d = float(np.max(np.abs(np.asarray(got[name], np.float64) - ref[name]))) if ref[name].size else 0.0
            per[name]["max_abs_err"] = d
            worst = max(worst, d)
        return {"max_abs_err": worst, "tolerance": {"accuracy": self.budget.describe()}, "ok": ok,
                "per_output": per, **figures}, outcome

    def report(self, plan: Plan, outcome: PrecisionOutcome) -> dict[str, Any]:
        """report.json "precision": budget, calibration, per-partition precision and error, end to end, rounds."""
        from collage.search.candidates import Candidate

        cands = [Candidate(p.nodes, p.backend) for p in plan.partitions]
        missing = [c for c in cands if c not in self.errors and c.backend in self.backends]
        if missing:
            self.errors.update(measure_errors(self.graph, missing, self.backends, self.calib, self.db))
        parts = []
        for k, c in enumerate(cands):
            e = self.errors.get(c)
            parts.append({"index": k, "backend": c.backend, "precision": precision_of(self.backends.get(c.backend)),
                          "rel": None if e is None else e.rel, "cos": None if e is None else e.cos,
                          "finite": None if e is None else e.finite,
                          "budget_share": None if e is None else self.budget.score(e)})
        e2e = outcome.final_error
        return {"budget": self.budget.to_dict(), "budget_text": self.budget.describe(),
                "calibration": self.calib.to_dict(), "low_precision_backends": sorted(self.low),
                "int8": self.int8,
                "partitions": parts,
                "end_to_end": None if e2e is None else {"rel": e2e.rel, "cos": e2e.cos, "finite": e2e.finite,
                                                        "within_budget": self.budget.allows(e2e)},
                "rounds": [r.to_dict() for r in outcome.rounds], "fallback_fp32": outcome.fallback,
                "errors_measured": len(self.errors), "notes": list(outcome.notes)}


