"""The tuning job: graph -> candidates -> measured costs -> DP -> (refine) -> verify -> artifact.

``tune()`` composes the layers; it owns no algorithm of its own beyond the verification rule:
the stitched plan is measured end to end against every single backend running the whole model,
interleaved in the same run, and if the plan is not faster than the best single backend, the plan
becomes that backend ("never worse"). Numerics are checked against the ONNX Runtime fp32 reference;
a plan that exceeds the tolerance fails naming the partition that diverges.

The job is :class:`TuneJob`, which only sequences the steps (:mod:`collage.tuner.steps`): each a function of
the tune's fixed context (:class:`collage.tuner.context.JobContext`, opened once) and the records the steps
before it returned (:mod:`collage.tuner.records`), returning its own record. The report is assembled from the
records at the end (:func:`collage.tuner.assemble.assemble_report`). Precision is a strategy the steps call at
fixed points (:class:`collage.tuner.precision.strategy.PrecisionStrategy`: a no-op without an accuracy budget).
Pipeline modules are imported inside the run, so that importing this module (``collage.tune``) stays cheap.
"""
from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.errors import OptionTypeError
from collage.tuner.arguments import check_sources
from collage.tuner.context import load_model_graph, resolve_backends
from collage.tuner.options import DEFAULT_BACKENDS, DEFAULT_TOLERANCE, TUNE_KEYWORDS, TuneOptions
from collage.tuner.result import TuneResult
from collage.util import parse_duration

if TYPE_CHECKING:
    import onnx

    from collage.tuner.context import JobContext
    from collage.tuner.outdir import OutputLocation
    from collage.tuner.sizes import MultiSizeResult

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_BACKENDS", "DEFAULT_TOLERANCE", "TuneJob", "TuneOptions", "TuneResult", "load_model_graph",
           "parse_budget", "resolve_backends", "run_tune", "tune"]


def parse_budget(text: str | None) -> float | None:
    """Seconds in a budget text (:func:`collage.util.parse_duration`); None/'' -> None (no budget)."""
    return parse_duration(text) if text else None


def tune(model: str | os.PathLike | onnx.ModelProto, out_dir: str | os.PathLike, options: TuneOptions | None = None,
         **keywords: Any) -> TuneResult | MultiSizeResult:
    """Tune ``model`` (an ONNX path, ``zoo:NAME`` or ModelProto) and write the artifact to ``out_dir``.

    ``options``: a :class:`TuneOptions` (its fields documented there); ``keywords`` override it (or, without it,
    the defaults): ``target``, ``backends``, ``budget``, ``db``, ``refine_trials``, ``shapes``, ``limits``,
    ``archive``, ``tolerance``, ``accuracy``, ``calibration``, ``progress``, ``seed``, ``cluster``, ``budget_s``,
    ``backend_options``, ``tvm_budget``, ``measure_order`` (``TUNE_KEYWORDS``; another one is an
    OptionTypeError naming it). ``budget``: the wall-clock limit of the whole tune (:mod:`collage.tuner.clock`;
    one too small for the baselines is an OptionError), a duration (``"30s"``, ``"10m"``, ``"1h30m"``) or seconds
    (``budget_s=`` is the older spelling, in seconds). ``tvm_budget``: a duration of MetaSchedule tuning spent on
    the candidates where TVM can change the plan (:mod:`collage.tuner.tvm_budget`). ``shapes``: sizes for the
    inputs' symbolic dimensions, ``{"x": [1, 3, 48, 160]}``; a list of such dicts tunes each size set (the budget
    split evenly) into one multi-size artifact that picks the plan by the size it is called with (and runs any
    other size untuned on the original model): the result is then a :class:`collage.tuner.sizes.MultiSizeResult`.
    ``shapes`` (one size set) and ``backend_options`` also take the command line's texts (``"x=1,3,224,224"``,
    ``["tvm.trials=64"]``). A keyword of the wrong kind is an OptionTypeError (a TypeError), one out of range an
    OptionError (a ValueError), both before any work (:mod:`collage.tuner.arguments`). Callable any number of
    times in one process. The exported attempts, refinement trials and verification copies go to a scratch folder
    that is removed when the tune ends, however it ends; the artifact in ``out_dir`` and the cost DB stay.
    """
    check_sources(model, out_dir)
    unknown = sorted(set(keywords) - TUNE_KEYWORDS)
    if unknown:
        raise OptionTypeError(f"tune() got an unexpected keyword argument {unknown[0]!r} (it takes "
                              f"{', '.join(sorted(TUNE_KEYWORDS))})")
    if options is not None and not isinstance(options, TuneOptions):
        raise OptionTypeError(f"tune: options takes a TuneOptions, not {type(options).__name__}")
    sets = None
    shapes = keywords.get("shapes")
    if isinstance(shapes, Sequence) and not isinstance(shapes, (str, bytes)):  # size sets (collage.tuner.sizes)
        from collage.tuner.sizes import size_sets

        sets = size_sets(shapes)
        keywords["shapes"] = sets[0] if len(sets) == 1 else None
    options = options.with_keywords(**keywords) if options is not None else TuneOptions.build(**keywords)
    if sets is not None and len(sets) > 1:  # one artifact for several input sizes
        from collage.tuner.sizes import run_tune_sizes

        return run_tune_sizes(model, out_dir, options, sets, run_tune)
    return run_tune(model, out_dir, options)


def run_tune(model: str | os.PathLike | onnx.ModelProto, out_dir: str | os.PathLike,
             options: TuneOptions) -> TuneResult:
    """``tune`` with its options already built. The output location is checked first (not after an hour of
    measuring), and that check is what the export writes by; an interrupted replacement of an artifact there
    is finished or undone (:func:`collage.tuner.outdir.inspect_output`)."""
    from collage.tuner.outdir import inspect_output

    out = inspect_output(out_dir, archive=options.archive)  # before any work
    with tempfile.TemporaryDirectory(prefix="collage-tune-", ignore_cleanup_errors=True) as tmp:
        return TuneJob(model, options, Path(tmp)).run(out)


class TuneJob:
    """One tuning run: its context is opened in ``__init__`` (what can be refused is refused there, before any
    progress line but the model's); :meth:`run` sequences the steps, each timed on the tune's clock."""

    def __init__(self, model: str | os.PathLike | onnx.ModelProto, options: TuneOptions, work: Path) -> None:
        from collage.tuner.context import open_context

        self.ctx: JobContext = open_context(model, options, work)

    def run(self, out: OutputLocation) -> TuneResult:
        """The steps: supports -> candidates -> measured costs -> baselines -> search -> verify -> refine ->
        never worse -> numerics -> report -> artifact; other processes' load sampled meanwhile."""
        from collage.measure.contention import ContentionSampler

        ctx = self.ctx
        clock = ctx.clock
        clock.phases["loading"] = clock.spent()  # with the command line's start-up (collage.tuner.clock)
        if clock.budgeted:
            ctx.say("time: loading %.1f s of %.0f s", clock.phases["loading"], clock.total_s)
        clock.others = ContentionSampler().start()  # other processes' load while the steps measure
        try:
            return self.steps(out)
        finally:
            clock.others.stop()

    def steps(self, out: OutputLocation) -> TuneResult:
        """The steps in order, each a phase of the clock; the machine-busy warning before the artifact is written."""
        from collage.report.coverage import busy_line, refinement_line
        from collage.tuner.assemble import assemble_report, coverage
        from collage.tuner.records import TuneRecords
        from collage.tuner.steps import baselines, candidates, finish, measure, refine, search, verify

        ctx = self.ctx
        clock, say = ctx.clock, ctx.say
        with clock.phase("support checks", say):
            supports = candidates.check_supports(ctx)
        with clock.phase("candidates", say):
            found = candidates.candidates(ctx, supports)
        with clock.phase("measuring", say):
            measured = measure.measure(ctx, found)
        with clock.phase("baselines", say):
            base = baselines.baselines(ctx, supports, measured)
        with clock.phase("search", say):
            searched = search.search(ctx, measured, base)
        with clock.phase("verification", say):
            verified = verify.verify(ctx, searched, measured, base)
        with clock.phase("refinement", say):
            refined = refine.refine(ctx, verified, searched, base)
            final = verify.never_worse(ctx, refined.verified, searched, measured)
        with clock.phase("numerics", say):
            final, checked = finish.numerics(ctx, final, searched, measured)
        with clock.phase("export", say):
            records = TuneRecords(found, measured, searched, refined, final, checked)
            say("%s", refinement_line(coverage(records)))
            report = assemble_report(ctx, records, finish.boundary_overhead(ctx, checked.artifact, final.plan_ms),
                                     finish.cuda_graph(checked.artifact))
            busy = busy_line(report["time"].get("others"))
            if busy is not None:
                log.warning("%s", busy)
            return finish.write(ctx, out, final, checked.artifact, report)
