"""The tuning job: graph -> candidates -> measured costs -> DP -> (refine) -> verify -> artifact.

``tune()`` composes the layers; it owns no algorithm of its own beyond the verification rule:
the stitched plan is measured end to end against every single backend running the whole model,
interleaved in the same run, and if the plan is not faster than the best single backend, the plan
becomes that backend ("never worse"). Numerics are checked against the ONNX Runtime fp32 reference;
a plan that exceeds the tolerance fails naming the partition that diverges.

The job is :class:`TuneJob`, a sequence of named steps over one :class:`collage.tuner.options.TuneOptions`
(see :meth:`TuneJob.run`). Precision is a strategy the steps call at fixed points
(:mod:`collage.tuner.precision.strategy`: a no-op without an accuracy budget). The search step with its
measured partition charges (``calibrate_partition_charges``, ``search_checked``) lives in
:mod:`collage.tuner.search_step`. Pipeline modules are imported inside the steps, so that importing this
module (``collage.tune``) stays cheap.
"""
from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.errors import BackendUnavailable, CollageError, UnsupportedError
from collage.graph.ir import Graph
from collage.plan import Note, NoteKind, Plan, kind_of
from collage.report.coverage import (estimates_line, load_line, measured_line, measurement_coverage, refinement,
                                     refinement_line)
from collage.tuner.arguments import check_sources
from collage.tuner.clock import Deadline
from collage.tuner.options import DEFAULT_BACKENDS, DEFAULT_TOLERANCE, TuneOptions
from collage.tuner.verify import check_numerics, measure_interleaved, stale_costs
from collage.util import parse_duration, say

if TYPE_CHECKING:
    import onnx

    from collage.measure.accuracy import Budget
    from collage.measure.db import CostDB
    from collage.search.candidates import Candidate, Limits

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_BACKENDS", "DEFAULT_TOLERANCE", "SLOW_BASELINE_FACTOR", "TuneJob", "TuneOptions", "TuneResult",
           "load_model_graph", "parse_budget", "resolve_backends", "tune"]

#: the share of the estimated time of the steps after measuring that is kept for them (collage.tuner.clock)
RESERVE_SHARE = 0.6

#: single backends slower than this factor x the fastest (by their measured whole-model cost) are not
#: re-run in the interleaved verification
SLOW_BASELINE_FACTOR = 5.0


@dataclass
class TuneResult:
    out_dir: Path
    plan: Plan
    plan_ms: float
    baselines: dict[str, float]
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def best_single(self) -> tuple[str, float]:
        """(backend, ms) of the fastest single backend on the whole model (``to_dict()`` has it as a dict)."""
        name = min(self.baselines, key=self.baselines.__getitem__)
        return name, self.baselines[name]

    # the other keys of ``to_dict()`` (collage.tuner.result), as attributes
    @property
    def artifact(self) -> str:
        return str(self.out_dir)

    @property
    def model(self) -> str | None:
        return self.to_dict()["model"]

    @property
    def target(self) -> str | None:
        return self.to_dict()["target"]

    @property
    def backends(self) -> list[str]:
        return self.to_dict()["backends"]

    @property
    def predicted_ms(self) -> float | None:
        return self.to_dict()["predicted_ms"]

    @property
    def speedup(self) -> float | None:
        """Best single backend ms / plan ms (None when no baseline ran)."""
        return self.to_dict()["speedup"]

    @property
    def coverage(self) -> dict[str, Any] | None:
        return self.to_dict()["coverage"]

    @property
    def numerics(self) -> dict[str, Any] | None:
        return self.to_dict()["numerics"]

    @property
    def notes(self) -> list[str]:
        return self.to_dict()["notes"]

    @property
    def partitions(self) -> Any:
        """The pandas DataFrame of partitions that ``collage report`` shows (collage.report.render.partition_table)."""
        from collage.report.render import partition_table
        return partition_table(self.out_dir)

    def to_dict(self) -> dict[str, Any]:
        """The ``collage tune --json`` object (keys in collage.tuner.result)."""
        from collage.tuner.result import tune_summary
        return tune_summary(self)

    def to_json(self, **kw: Any) -> str:
        import json
        return json.dumps(self.to_dict(), **kw)


def parse_budget(text: str | None) -> float | None:
    """Seconds in a budget text (:func:`collage.util.parse_duration`); None/'' -> None (no budget)."""
    return parse_duration(text) if text else None


def tune(model: str | os.PathLike | onnx.ModelProto, out_dir: str | os.PathLike, *, target: str = "cpu",
         backends: Sequence[str] = DEFAULT_BACKENDS, budget: str | float | None = None,
         db: str | os.PathLike | CostDB | None = None, refine_trials: int = 0,
         shapes: Mapping[str, Sequence[int]] | Sequence[Mapping[str, Sequence[int]]] | None = None,
         limits: Limits | None = None, archive: bool = False,
         tolerance: Mapping[str, float] | None = None, accuracy: str | Budget | None = None,
         calibration: str | os.PathLike | None = None, progress: bool = True, seed: int = 0, cluster: Any = None,
         budget_s: float | None = None, backend_options: Mapping[str, Mapping[str, Any]] | None = None,
         tvm_budget: str | float | None = None, measure_order: str = "enumeration") -> TuneResult:
    """Tune ``model`` (an ONNX path, ``zoo:NAME`` or ModelProto) for ``target`` over ``backends`` and write
    the artifact to ``out_dir``.

    ``budget``: the wall-clock limit of the whole tune (loading, baselines, measuring, search, verification and
    export; :mod:`collage.tuner.clock`; one too small for the baselines is an OptionError), a duration (``"30s"``, ``"10m"``, ``"1h30m"``) or seconds
    (``budget_s=`` is the older spelling, in seconds). The other keywords are :class:`TuneOptions`' fields
    (documented there). ``backend_options``: constructor options per backend (``{"tvm": {"tuning":
    "metaschedule", "trials": 64}}``); ``tvm_budget``: a duration of MetaSchedule tuning spent on the candidates
    where TVM can change the plan (:mod:`collage.tuner.tvm_budget`); ``measure_order="guided"``: under a budget,
    measure first what can change the plan (:mod:`collage.tuner.guided`). ``shapes``: sizes for the inputs'
    symbolic dimensions, ``{"x": [1, 3, 48, 160]}``; a list of such dicts tunes each size set (the budget split
    evenly) into one multi-size artifact that picks the plan by the size it is called with (and runs any other
    size untuned on the original model): the result is then a :class:`collage.tuner.sizes.MultiSizeResult`.
    ``shapes`` (one size set) and ``backend_options`` also take the command line's texts (``"x=1,3,224,224"``,
    ``["tvm.trials=64"]``). A keyword of the wrong kind is an OptionTypeError (a TypeError), one out of range an
    OptionError (a ValueError), both before any work (:mod:`collage.tuner.arguments`). Callable any number of
    times in one process. The exported attempts, refinement trials and verification copies go to a scratch folder
    (1-2 GB for a large model) that is removed when the tune ends, however it ends; the artifact in ``out_dir`` and
    the cost DB stay.
    """
    check_sources(model, out_dir)
    sets = None
    if isinstance(shapes, Sequence) and not isinstance(shapes, (str, bytes)):  # size sets (collage.tuner.sizes)
        from collage.tuner.sizes import size_sets

        sets = size_sets(shapes)
        shapes = sets[0] if len(sets) == 1 else None
    options = TuneOptions.build(target=target, backends=backends, budget=budget, budget_s=budget_s, db=db,
                                refine_trials=refine_trials, shapes=shapes, limits=limits, archive=archive,
                                tolerance=tolerance, accuracy=accuracy, calibration=calibration,
                                progress=progress, seed=seed, cluster=cluster, backend_options=backend_options,
                                tvm_budget=tvm_budget, measure_order=measure_order)
    if sets is not None and len(sets) > 1:  # one artifact for several input sizes
        from collage.tuner.sizes import run_tune_sizes

        return run_tune_sizes(model, out_dir, options, sets, run_tune)  # type: ignore[return-value]
    return run_tune(model, out_dir, options)


def run_tune(model: str | os.PathLike | onnx.ModelProto, out_dir: str | os.PathLike,
             options: TuneOptions) -> TuneResult:
    """``tune`` with its options already built. The output location is checked first (not after an hour of
    measuring); an interrupted replacement of an artifact there is finished or undone
    (:func:`collage.tuner.outdir.check_output_location`)."""
    from collage.tuner.outdir import check_output_location

    out = check_output_location(out_dir, archive=options.archive)  # before any work
    with tempfile.TemporaryDirectory(prefix="collage-tune-", ignore_cleanup_errors=True) as tmp:
        return TuneJob(model, options, Path(tmp)).run(out)


def load_model_graph(model: str | os.PathLike | Any, shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """A path, 'zoo:NAME' or ModelProto -> validated Graph."""
    if isinstance(model, (str, os.PathLike)):
        from collage import zoo
        model = zoo.resolve(os.fspath(model))
    graph = Graph.load(model, shapes=shapes)
    graph.validate()
    return graph


def resolve_backends(names: Sequence[str], target: str = "cpu",
                     options: Mapping[str, Mapping[str, Any]] | None = None) -> list:
    """Backend instances (``options[name]`` their constructor options), each available on ``target``; an option a
    backend does not take is a CollageError naming the backend and the option."""
    from collage.backends import check_options, get_backend

    backends = []
    for name in names:
        opts = dict((options or {}).get(name, {}))
        check_options(name, opts)
        try:
            b = get_backend(name, **opts)
        except (TypeError, ValueError) as e:
            raise CollageError(f"backend {name!r}: bad options {opts}: {e}") from e
        reason = b.available()
        if reason:
            raise BackendUnavailable(f"backend {name!r} is not available: {reason}")
        if b.device != target:
            raise CollageError(f"backend {name!r} runs on {b.device!r}, not on target {target!r}")
        backends.append(b)
    return backends


def failed_everywhere(graph: Graph, cands: Sequence[Candidate], raw: Mapping[Any, Any]) -> str | None:
    """The message for a node that every candidate measured on it failed on (no plan can cover it), naming the
    node and one of the failures; None when each node has a cost or an unmeasured candidate."""
    covered, tried = 0, 0
    for c in cands:
        cost = raw.get((c.nodes, c.backend))
        mask = graph.mask(c.nodes)
        covered |= mask if cost is None or cost.ok else 0
        tried |= mask if cost is not None and not cost.ok else 0
    lost = tried & ~covered
    if not lost:
        return None
    i = (lost & -lost).bit_length() - 1
    c = next(c for c in cands if i in c.nodes and not raw[(c.nodes, c.backend)].ok)
    return (f"{graph.name}: every measurement of {graph.node_label(i)} failed, so no plan can run it; on {c.backend} "
            f"(nodes {list(c.nodes)}): {raw[(c.nodes, c.backend)].error}")


def measuring_order(cands: Sequence[Candidate], n: int, coarse: set[tuple[tuple[int, ...], str]]) -> list[Candidate]:
    """Candidates in measuring order, so that a budget cut still leaves covers: whole models; then the coarse
    ranges (few, and the pieces a mix that beats one backend end to end is made of): each cut's prefix and
    suffix together, the latest cut first (long prefixes: "all but the tail"), then the segments; then
    single nodes; then the rest, smallest first."""
    def key(c: Candidate) -> tuple:
        if len(c.nodes) == n:
            return (0, 0, 0, c.nodes, c.backend)
        if (c.nodes, c.backend) in coarse:
            cut = c.nodes[-1] + 1 if c.nodes[0] == 0 else c.nodes[0] if c.nodes[-1] == n - 1 else None
            return (1, 0, -cut, c.nodes, c.backend) if cut is not None else (1, 1, len(c.nodes), c.nodes, c.backend)
        return (2 if len(c.nodes) == 1 else 3, 0, len(c.nodes), c.nodes, c.backend)

    return sorted(cands, key=key)


def furthest_over_price(plan: Plan, part_ms: Sequence[float] | None) -> str:
    """A note's tail naming the partition whose time inside the plan's runs exceeded its price the most ("" when
    there are no such times, or every partition ran within its price)."""
    if not part_ms or len(part_ms) != len(plan.partitions) or len(plan.partitions) < 2:
        return ""
    over = [(ms - p.cost_ms, k) for k, (p, ms) in enumerate(zip(plan.partitions, part_ms)) if p.cost_ms is not None]
    if not over or max(over)[0] <= 0:
        return ""
    excess, k = max(over)
    p = plan.partitions[k]
    return (f" (in those runs partition {k} on {p.backend}, {len(p.nodes)} node(s), took {part_ms[k]:.3f} ms, "
            f"{excess:.3f} ms over its price of {p.cost_ms:.3f} ms: the most over of the {len(part_ms)})")


def plan_summary(plan: Plan, searched_for: Plan | None = None, best_single_ms: float | None = None) -> dict[str, Any]:
    """report.json's form of a searched plan: each partition's backend, node ids and cost, and the prediction.
    With ``searched_for`` (the same plan as the search priced it before the plan ran in its attempts; the
    plan itself is then priced as it ran there), that plan's costs (``searched_cost_ms``) and prediction
    (``searched_for_ms``) too. ``best_single_ms``: the best single backend priced alike (timed in the same
    rounds as the plan's prediction, or level x worker cost beside a plan priced from its parts), so the
    predicted gain is ``best_single_ms / predicted_ms``. The tune adds the verification's measurement of the
    plan, ``measured_ms``, the best single backend in the same rounds, ``best_single_measured_ms``, and each
    partition's call in the plan, ``in_plan_ms``."""
    summary = {"partitions": [{"backend": p.backend, "nodes": list(p.nodes), "cost_ms": p.cost_ms}
                              for p in plan.partitions],
               "predicted_ms": plan.predicted_ms}
    if best_single_ms is not None:
        summary["best_single_ms"] = best_single_ms
    if searched_for is not None and len(searched_for.partitions) == len(plan.partitions):
        for row, p in zip(summary["partitions"], searched_for.partitions):
            row["searched_cost_ms"] = p.cost_ms
        summary["searched_for_ms"] = searched_for.predicted_ms
    return summary


@dataclass
class Measured:
    """What the measuring step found: the DB's answer, the candidates with a cost, the count of failures."""

    raw: Any
    costs: dict[Any, float]
    failures: int

    def whole(self, n: int, backend: str) -> float | None:
        """The whole model's measured median on ``backend``, or None."""
        cost = self.raw.get((tuple(range(n)), backend))
        return cost.median_ms if cost is not None and cost.ok else None


@dataclass
class Baselines:
    """Single backends on the whole model: compiled (re-run in every interleaved round) or from the DB."""

    singles: dict[str, Any]
    from_db: dict[str, float]
    whole_ms: dict[str, float]
    best_single_ms: float
    #: seconds one artifact of the model takes to compile (the whole models' measured compile time; the tune's
    #: budget plans its later steps with it)
    compile_s: float = 1.0


@dataclass
class Verified:
    """A plan measured end to end beside the baselines: its artifact (None when not exported) and numbers."""

    plan: Plan
    plan_ms: float
    artifact: Any
    timings: dict[str, float]
    baselines: dict[str, float]
    #: a plan of several partitions: each partition's median call inside the plan's timed runs (ms, in order;
    #: the calls of every round pooled)
    part_ms: list[float] | None = None


class TuneJob:
    """One tuning run; :meth:`run` is the sequence of steps, each a method below (state: attributes)."""

    def __init__(self, model: str | os.PathLike | onnx.ModelProto, options: TuneOptions, work: Path) -> None:
        self.options, self.work = options, work
        self.t_start = time.monotonic()
        self.t_wall = time.time()  # a cost the DB holds from before this is an earlier run's
        self.clock = Deadline(options.budget_s)  # --budget: the whole tune's wall clock (from the command's start)
        self.transition_s = 0.0
        self.whole_s = 0.0
        self.charges: dict[str, Any] = {}  # backend -> search_step.PartitionCharge, set by the search step
        self.searched_for: Plan | None = None  # set by the search: its plan as priced before it ran in its attempts
        self.graph = load_model_graph(model, options.shapes)
        self.backend_options = options.all_backend_options()
        self.backends = resolve_backends(list(options.backends), options.target, self.backend_options)
        self.names = [b.name for b in self.backends]
        from collage.measure.connect import get_db
        from collage.graph.inputs import random_inputs
        from collage.tuner.precision.strategy import precision_strategy

        self.feeds = random_inputs(self.graph, seed=options.seed)  # an input none are drawn for: before the DB is made
        self.db = get_db(options.db)  # a bad model, backend or cost DB is refused before any progress line
        if isinstance(options.cluster, str) and options.cluster != "local":  # and a --cluster nothing answers at
            from collage.measure.executor import check_reachable, ray_address

            check_reachable(ray_address(options.cluster))
        if self.clock.budgeted:
            self.check_budget()  # a budget too small is refused before any progress line too
        self.say("%s: %d nodes; %s", self.graph.name, len(self.graph), load_line(self.graph.folding.as_dict()))
        self.precision = precision_strategy(self.graph, self.backends, options, self.db)
        for name, opts in self.precision.backend_options.items():  # e.g. the int8 variants' calibrated ranges
            self.backend_options.setdefault(name, {}).update(opts)

    def say(self, msg: str, *args: object) -> None:
        say(self.options.progress, msg, *args, logger=log)

    def run(self, out_dir: Path) -> TuneResult:
        """The steps: supports -> candidates -> measured costs -> baselines -> search -> verify -> refine ->
        never worse -> numerics -> artifact."""
        clock, say = self.clock, self.say
        clock.phases["loading"] = clock.spent()  # with the command line's start-up (collage.tuner.clock)
        if clock.budgeted:
            say("time: loading %.1f s of %.0f s", clock.phases["loading"], clock.total_s)
        with clock.phase("support checks", say):
            supports = self.check_supports()
        with clock.phase("candidates", say):
            cands, counts = self.candidates(supports)
        with clock.phase("measuring", say):
            measured = self.measure(cands)
        self.precision.work = self.work
        with clock.phase("baselines", say):
            base = self.baselines(supports, measured)
        with clock.phase("search", say):
            plan, charged, search_info = self.search(measured, base)
        with clock.phase("verification", say):
            verified = self.verify(plan, measured, base, search_info["searched_plan"])
        with clock.phase("refinement", say):
            verified = self.refine(verified, charged, base)
            verified = self.never_worse(verified, measured)
        with clock.phase("numerics", say):
            artifact = verified.artifact or self.load(self.export(verified.plan, self.work / "final"))
            numerics = self.numerics(verified.plan, artifact)
        with clock.phase("export", say):
            report = self.report(verified, numerics, artifact, counts=counts, measured=measured,
                                 n_cands=len(cands), **search_info)
            return self.write(out_dir, verified, artifact, report)

    def check_budget(self) -> None:
        """Under --budget: a budget too small for loading and every backend's whole model (the baselines) is
        refused before any measuring, naming an estimate of the least that works (collage.tuner.clock); one
        under the estimated least of a whole tune is warned about (the steps after measuring then overrun it)."""
        from collage.errors import OptionError
        from collage.tuner.clock import baselines_s, least_budget_s

        graph, total = self.graph, self.clock.total_s or 0.0
        gflops, weight_mb = self.model_size()
        loading = time.monotonic() - self.t_start  # this tune's own loading (not the interpreter's start)
        least = loading + baselines_s(gflops, weight_mb, len(self.names))
        if total < least:
            raise OptionError(f"--budget {total:g}s is too small for {graph.name} on {len(self.names)} backend(s): "
                              f"loading and every backend's whole model (the baselines) need about {math.ceil(least)} s "
                              f"(an estimate from its {gflops:.2f} GFLOPs and {weight_mb:.0f} MB of weights); give "
                              f"--budget {math.ceil(least)}s or more")
        whole = least_budget_s(gflops, weight_mb, len(self.names), self.clock.spent())
        if total < whole:
            log.warning("--budget %gs: %s's whole tune needs about %d s (an estimate: the baselines, one verification "
                        "round and the export); it may end past the budget", total, graph.name, math.ceil(whole))

    # ------------------------------------------------------------------ steps
    def check_supports(self) -> dict[str, dict[int, bool]]:
        """1. What each backend takes; every node must be taken by one of them."""
        graph = self.graph
        supports = {b.name: b.supports_all(graph) for b in self.backends}
        orphans = [i for i in range(len(graph)) if not any(supports[n][i] for n in self.names)]
        if orphans:
            labels = ", ".join(graph.node_label(i) for i in orphans[:5])
            raise UnsupportedError(f"no backend among {self.names} takes {labels}"
                                   + (f" (and {len(orphans) - 5} more)" if len(orphans) > 5 else "")
                                   + "; add a backend that does (onnxruntime runs every standard op)")
        return supports

    def candidates(self, supports: Mapping[str, Mapping[int, bool]]) -> tuple[list[Candidate], dict[str, int]]:
        """2. Candidates (enumerated + coarse ranges) in measuring order; the precision strategy's prescreen."""
        from collage.search.candidates import (
            Limits,
            candidate_counts,
            enumerate_candidates,
        )
        from collage.search.ranges import range_candidates

        limits = self.options.limits or Limits()
        cands = enumerate_candidates(self.graph, supports, limits)
        known = {(c.nodes, c.backend) for c in cands}
        ranged = ([c for c in range_candidates(self.graph, supports) if (c.nodes, c.backend) not in known]
                  if limits.ranges else [])
        cands = measuring_order(cands + ranged, len(self.graph), {(c.nodes, c.backend) for c in ranged})
        counts = candidate_counts(cands)
        self.say("candidates: %s (%d of them coarse ranges)", ", ".join(f"{k} {v}" for k, v in counts.items()),
                 len(ranged))
        # lower-precision ranges over the accuracy budget at the model's outputs are not worth timing
        return self.precision.prescreen(cands), counts

    def measure(self, cands: Sequence[Candidate]) -> Measured:
        """3. Measured costs (cached in the DB), within what is left of the budget once the later steps are
        reserved for, every backend's whole model first (:meth:`measure_whole_first`). With a TVM tuning budget,
        the vendor candidates first (those on the nodes of a TVM candidate small enough to tune before the rest,
        within half the budget), then TVM tuning where it can change the plan (3b), then the tuned TVM
        candidates; the other TVM candidates are not measured (untuned, they cannot win)."""
        from collage.measure.schedule import measure_candidates

        budget_s = self.options.budget_s
        self.tvm_run = None
        self.guided = None

        def measure(items: Sequence[tuple[tuple[int, ...], str]], within_s: float | None) -> Any:
            # the whole model on each backend alone (measure_whole_first) counts backends, not candidates
            whole = bool(items) and all(len(nodes) == len(self.graph) for nodes, _ in items)
            label = {"what": "the whole model on each backend", "unit": "backend(s)"} if whole else {}
            return measure_candidates(self.graph, items, db=self.db, budget_s=within_s, progress=self.options.progress,
                                      executor=self.options.cluster, backend_options=self.backend_options, **label)

        if self.options.measure_order == "guided" and self.options.tvm_budget_s is None and not self.precision.low:
            raw = self.measure_guided(cands)
        elif self.options.tvm_budget_s is not None:
            from collage.tuner.tvm_budget import vendor_first

            small = vendor_first(cands)  # what the ranking needs: first, within half the budget
            if small:
                left = self.budget_left()
                measure(small, None if left is None else left / 2)
            first = measure([(c.nodes, c.backend) for c in cands if c.backend != "tvm"], self.budget_left())
            tuned = self.tune_tvm([c for c in cands if c.backend == "tvm"], first)
            cands = [c for c in cands if c.backend != "tvm" or c in tuned]
        if self.guided is None:
            raw = self.measure_whole_first(measure, cands)
        self.coverage = measurement_coverage(raw, [(c.nodes, c.backend) for c in cands], budget_s)
        if self.guided is not None:
            self.coverage["estimates"] = self.guided.report()
        self.say("%s", measured_line(self.coverage))
        if self.guided is not None:
            self.say("%s", estimates_line(self.coverage["estimates"]))
        if budget_s is not None and self.coverage["distinct"] and not self.coverage["with_cost"]:
            raise CollageError(f"the {budget_s:.0f} s budget ran out before any candidate was measured (loading and "
                               f"setting up took {time.monotonic() - self.t_start:.0f} s of it); give a longer --budget")
        costs: dict[Any, float] = {}
        failures = 0
        for c in cands:
            cost = raw.get((c.nodes, c.backend))
            if cost is None:
                continue
            if cost.ok:
                costs[c] = cost.median_ms
            else:
                failures += 1
        failed = failed_everywhere(self.graph, cands, raw)
        if failed:
            raise CollageError(failed)
        return Measured(raw, costs, failures)

    def measure_whole_first(self, measure: Callable[..., Any], cands: Sequence[Candidate]) -> Any:
        """Every backend's whole model first, unbudgeted but inside the tune's clock (the baselines, the partition
        charges' levels and a whole-model plan's prediction need its worker cost: a budget that setting up or the
        precision prescreen used up would otherwise leave a plan with nothing to predict it from; on a slow
        machine the whole models of a BERT-sized model took 90 of a 240 s budget, leaving 27 s for the pieces a
        mix is made of), then the switch costs where they fit (:meth:`measure_switches`), then all candidates
        within what is left for them (:meth:`budget_left`). TVM's whole model is left to the budget (untuned it
        cannot win; under a TVM tuning budget it would tune every workload)."""
        n = len(self.graph)
        whole = [(c.nodes, c.backend) for c in cands if len(c.nodes) == n and c.backend != "tvm"]
        t0 = time.monotonic()
        first = measure(whole, None) if whole and self.options.budget_s is not None else None
        self.whole_s = time.monotonic() - t0
        if first is not None:
            self.say("time: whole models %.1f s of %.0f s", self.whole_s, self.clock.total_s)
            self.measure_switches(first)
        raw = measure([(c.nodes, c.backend) for c in cands], self.budget_left(first))
        if first is not None and getattr(first, "measured", 0):
            raw.measured += first.measured  # measured now, not reused: the second call found them in the DB
            raw.reused -= first.measured
        return raw

    def budget_left(self, whole: Mapping[Any, Any] | None = None) -> float | None:
        """Seconds left for measuring candidates (None: no budget): what is left of the whole tune's clock
        (``--budget``: loading, the whole models, the switch costs and a TVM tuning budget's time are spent from
        it) less the reserve for the steps after measuring (:meth:`reserve_s`; ``whole``: the whole models'
        measured costs)."""
        left = self.clock.left()
        if left is None:
            return None
        # a candidate started before the cut runs to its end (a resnet50 range: seconds): one compile less; under
        # a second is none (the local executor measures a first candidate before it looks at the clock)
        avail = left - self.reserve_s(whole, left) - (self.compile_s(whole) if whole else 0.0)
        return avail if avail >= 1.0 else 0.0

    def whole_costs_ms(self, whole: Mapping[Any, Any] | None) -> list[float]:
        """The fp32 backends' measured whole-model ms in ``whole`` (a measure_candidates result)."""
        low = self.precision.low
        return [c.median_ms for (nodes, b), c in (whole or {}).items() if c.ok and b not in low]

    def reserve_s(self, whole: Mapping[Any, Any] | None, left: float) -> float:
        """Seconds kept for the steps after measuring (collage.tuner.clock.after_measuring_s): with full rounds
        and attempts where that is at most half of ``left``, else with one attempt and 3 rounds (those steps
        then cut their rounds to what is left). A compile is the whole models' measured time each, or an
        estimate from the model's size."""
        from collage.tuner.clock import after_measuring_s

        whole_ms = self.whole_costs_ms(whole)
        if whole_ms and self.whole_s > 0:
            compile_s = self.compile_s(whole)
        else:
            gflops, weight_mb = self.model_size()
            compile_s, whole_ms = 1.0 + 0.1 * weight_mb, [1e3 * gflops / 5.0] * len(self.names)
        full = after_measuring_s(compile_s, whole_ms, backends=len(self.names))
        if full > left / 2:
            full = after_measuring_s(compile_s, whole_ms, backends=len(self.names), attempts=1, rounds=3)
        # the estimate came out about twice what those steps took in squeezenet and mobilenetv2 tunes under 30 s
        # and 1 m budgets (each step then cuts its rounds to what is left): results/budget/tune-time.md
        return RESERVE_SHARE * full

    def compile_s(self, whole: Mapping[Any, Any]) -> float:
        """Seconds to compile one artifact of the model: the whole models' mean measured compile, plus 0.2 s
        of export (else the whole models' measuring time each, its worker's start-up included)."""
        times = [c.compile_s for c in whole.values() if c.ok and c.compile_s]
        return sum(times) / len(times) + 0.2 if times else self.whole_s / max(1, len(whole))

    def model_size(self) -> tuple[float, float]:
        """(GFLOPs, MB of weights) of the model (collage.graph.stats' FLOPs estimate)."""
        import numpy as np

        from collage.graph.stats import node_flops

        graph = self.graph
        gflops = sum(node_flops(graph, i) for i in range(len(graph))) / 1e9
        weight_mb = sum(int(np.prod(t.dims, dtype=np.int64)) * 4 for t in graph.initializers.values()) / 1e6
        return gflops, weight_mb

    def measure_switches(self, whole: Mapping[Any, Any]) -> None:
        """Under --budget, right after the whole models: the switch costs on the model's own pieces
        (collage.measure.transitions.model_transition_model, stored in the DB for the baselines step), where
        their estimated time fits half of what is left for the candidates; else the baselines step prices the
        switches from what the DB holds (a squeezenet tune on a fresh DB spent 34 s of a 30 s budget here)."""
        from collage.measure.transitions import MODEL_PIECES, model_transition_model

        fp32 = {b: c.median_ms for (nodes, b), c in whole.items() if c.ok and b not in self.precision.low}
        if len(fp32) < 2:
            return
        compile_s = self.compile_s(whole)
        estimate = 4 * compile_s + 4 * 2.0 * len(fp32) + MODEL_PIECES * 0.5
        left = self.budget_left(whole) or 0.0
        if estimate > left / 2:
            self.say("time: switch costs not measured (about %.0f s; %.0f s left for measuring): the DB's are used",
                     estimate, left)
            return
        t0 = time.monotonic()
        model_transition_model(self.graph, self.names, self.db, whole_ms=fp32, slow_factor=SLOW_BASELINE_FACTOR,
                               backend_options=self.backend_options)
        self.say("time: switch costs %.1f s of %.0f s", time.monotonic() - t0, self.clock.total_s)

    def measure_guided(self, cands: Sequence[Candidate]) -> Any:
        """3a. Under a budget: measure what can change the plan first, the learned cost model pricing the rest
        while it guides (collage.tuner.guided); every cost the later search uses is measured."""
        from collage.measure.executor import get_executor
        from collage.measure.schedule import measure_candidates
        from collage.measure.transitions import transition_model
        from collage.search import solve
        from collage.tuner.guided import GuidedMeasuring

        t0 = time.monotonic()
        left = self.budget_left()
        pairs = len(self.names) * (len(self.names) - 1) // 2
        # a missing pair's small-piece fit takes 5-15 s (35 s on a loaded 2-core machine): measured where about
        # 15 s a pair fits half of what is left for measuring, else those switches cost 0 (a warning says so)
        transition = transition_model(self.names, self.db, measure_missing=left is None or 15.0 * pairs <= left / 2,
                                      backend_options=self.backend_options)
        self.transition_s = time.monotonic() - t0
        runner = get_executor(self.options.cluster)  # one set of workers for every round

        def measure(batch: Sequence[Candidate], left: float | None) -> Any:
            return measure_candidates(self.graph, [(c.nodes, c.backend) for c in batch], db=self.db,
                                      budget_s=left, progress=False, executor=runner,
                                      backend_options=self.backend_options)

        from collage.tuner.clock import baselines_s

        # at least what the whole models take (estimated): the baselines need them, even past the budget
        deadline = time.monotonic() + max(self.budget_left() or 0.0, baselines_s(*self.model_size(), len(self.names)))
        self.say("guided measuring: %d candidates, %.0f s left of the budget", len(cands), deadline - time.monotonic())
        try:
            self.guided = GuidedMeasuring(self.graph, cands, self.backends, self.db, measure=measure,
                                          search=lambda costs: solve(self.graph, costs, transition),
                                          deadline=deadline, say=self.say, seed=self.options.seed)
            return self.guided.run()
        finally:
            if runner is not self.options.cluster:
                runner.close()

    def tune_tvm(self, tvm_cands: Sequence[Candidate], vendor_raw: Any) -> set[Candidate]:
        """3b. The TVM tuning budget (collage.tuner.tvm_budget): rank the TVM candidates by their vendor cost over
        a roofline estimate, tune them in that order into the shared tuning database; the candidates to measure."""
        from collage.measure.db import key_for
        from collage.tuner.tvm_budget import machine_peak, rank, tune_within_budget

        tvm = next(b for b in self.backends if b.name == "tvm")
        vendor_costs = {k: c.median_ms for k, c in vendor_raw.items() if c.ok}
        ranked = rank(self.graph, tvm_cands, vendor_costs, machine_peak())
        self.say("tvm tuning: %d candidate(s) ranked, budget %.0f s, %d trials per workload, database %s",
                 len(ranked), self.options.tvm_budget_s, tvm.trials, tvm.tuning_db)

        def already_costed(c: Candidate) -> bool:
            return any(cost.ok for cost in self.db.get_many([key_for(tvm, self.graph.fingerprint(c.nodes))]).values())

        self.tvm_run = tune_within_budget(self.graph, tvm, ranked, float(self.options.tvm_budget_s or 0.0),
                                          already_costed=already_costed, say=self.say)
        self.say("tvm tuning: %s; %d new workload(s), %d new trials, %.1f s", self.tvm_run.stopped,
                 self.tvm_run.new_workloads, self.tvm_run.new_trials, self.tvm_run.spent_s)
        # identical blocks share a fingerprint (and their tuning): every TVM candidate of a tuned fingerprint
        fps = {self.graph.fingerprint(c.nodes) for c in self.tvm_run.selected}
        return {c for c in tvm_cands if self.graph.fingerprint(c.nodes) in fps}

    def baselines(self, supports: Mapping[str, Mapping[int, bool]], measured: Measured) -> Baselines:
        """4. The single backends' whole-model baselines: every plan is judged against them. A backend whose
        whole-model cost is already known to be far behind (untuned TVM: 30-600x) is not re-run in the
        interleaved rounds; its measured cost from the DB stands as its baseline. Lower precision is no
        baseline (it is not fp32-faithful), nor does it make the fp32 baselines "slow"."""
        n, low = len(self.graph), self.precision.low
        whole_ms = {b.name: ms for b in self.backends if (ms := measured.whole(n, b.name)) is not None}
        fastest = min((v for k, v in whole_ms.items() if k not in low), default=None)
        # the switch between runtimes priced on this model's own pieces, per direction (fp32 backends near the
        # fastest); the other pairs by the small-piece fit, measured only for them (about 5 s a pair)
        from collage.measure.transitions import model_transition_model, transition_model

        fp32_whole = {k: v for k, v in whole_ms.items() if k not in low and all(supports[k].values())}
        if self.clock.budgeted:  # measured in the measuring step where they fitted (measure_switches)
            self.transition = transition_model(self.names, self.db, measure_missing=False,
                                               backend_options=self.backend_options,
                                               graph_fingerprint=self.graph.fingerprint(range(n)))
        elif len(fp32_whole) > 1:
            self.transition = model_transition_model(self.graph, self.names, self.db, whole_ms=fp32_whole,
                                                     slow_factor=SLOW_BASELINE_FACTOR,
                                                     backend_options=self.backend_options)
        else:
            self.transition = transition_model(self.names, self.db, backend_options=self.backend_options)
        singles, from_db = {}, {}
        for b in self.backends:
            if not all(supports[b.name].values()) or b.name in low:
                continue
            if b.name == "tvm" and self.options.tvm_budget_s is not None and b.name not in whole_ms:
                continue  # the whole model on TVM would tune every workload: no baseline within the TVM budget
            failed = measured.raw.get((tuple(range(n)), b.name))
            if failed is not None and not failed.ok:  # it takes every node, yet failed on the whole model
                self.say("%s: no baseline: the whole model failed on it when measured (%s); its pieces stay "
                         "candidates", b.name, failed.error)
                continue
            if fastest is not None and whole_ms.get(b.name, 0.0) > SLOW_BASELINE_FACTOR * fastest:
                from_db[b.name] = whole_ms[b.name]
                continue
            singles[b.name] = b.compile(self.graph.model)
        from collage.tuner.clock import WARMUP_S, round_s

        rounds = self.clock.rounds(3, round_s([whole_ms.get(k, 0.0) for k in singles]),
                                   WARMUP_S * len(singles), share=0.1)
        first = measure_interleaved({k: (lambda c=c: c.run(self.feeds)) for k, c in singles.items()}, rounds=rounds)
        whole = {k: c for k, c in measured.raw.items() if len(k[0]) == n and c.ok}
        return Baselines(singles, from_db, whole_ms, min(first.values(), default=float("inf")),
                         self.compile_s(whole) if whole else 1.0)

    def search(self, measured: Measured, base: Baselines) -> tuple[Plan, dict[Any, float], dict[str, Any]]:
        """5. Search with measured partition charges (level, cost per cut), corrected where the stitched plan says so."""
        from collage.tuner.search_step import (
            calibrate_partition_charges,
            fill_boundaries,
            search_checked,
            whole_if_one_backend,
        )

        graph, prec, opts = self.graph, self.precision, self.options
        if self.charges_fit(base):
            self.charges = calibrate_partition_charges(graph, measured.costs, self.transition, self.names,
                                                       self.feeds, self.work,
                                                       whole_costs={b: measured.whole(len(graph), b)
                                                                    for b in self.names},
                                                       target=opts.target, progress=opts.progress,
                                                       backend_options=self.backend_options, db=self.db,
                                                       rounds=self.rounds_for(base, share=0.25, artifacts=2))
        else:
            from collage.tuner.search_step import PartitionCharge

            self.say("time: partition charges not measured (%.0f s left of the budget): each piece priced as timed alone",
                     self.clock.left() or 0.0)
            self.charges = {b: PartitionCharge() for b in self.names}
        calibrated = {b: c.to_dict() for b, c in self.charges.items()}

        searched: list[Plan] = []
        states: dict[tuple, Any] = {}  # what each plan's search left for the report (precision rounds, notes)

        def do_search(charged: Mapping[Any, float]) -> Plan:
            plan = whole_if_one_backend(graph, prec.search(charged, self.transition), charged, prec)
            searched.append(fill_boundaries(graph, plan))
            states[plan.parts()] = prec.search_state()
            return searched[-1]

        t0 = time.perf_counter()
        plan, charged, attempts, searched_for, single_ms = search_checked(
            graph, measured.costs, self.charges, do_search, self.feeds, self.work, base.best_single_ms,
            target=opts.target, progress=opts.progress, backend_options=self.backend_options,
            singles={name: (lambda c=c: c.run(self.feeds)) for name, c in base.singles.items()},
            attempts=self.attempts_for(base), rounds=self.rounds_for(base, share=0.2))
        self.searched_for = searched_for or plan
        prec.restore_search(states[plan.parts()])  # the kept plan may be an earlier attempt's
        if single_ms is None:
            # a plan priced from its parts (or no single backend timed beside it: none covers the model alone):
            # the single backends priced alike, level x their worker cost
            single_ms = min((ms for b in [*base.singles, *base.from_db]
                             if (ms := self.whole_prediction(measured, b)) is not None), default=None)
        # what the cost DB's contents alone give: the first attempt, over the candidate costs with the stored
        # partition charges (nothing of this run's end-to-end timings), so two tunes on the same DB
        # contents derive the same plan. Under an accuracy budget the search also rests on errors of stitched
        # plans measured in the run, so there is none.
        from_db = None if prec.low else searched[0]
        search_s = time.perf_counter() - t0
        self.say("search: %s (%d attempt(s), %.2f s)", plan.describe(), attempts, search_s)
        return plan, charged, {"charges": calibrated, "attempts": attempts, "search_s": search_s,
                               "searched_plan": plan_summary(plan, self.searched_for, single_ms),
                               "cost_db_plan": None if from_db is None else plan_summary(from_db)}

    def verify(self, plan: Plan, measured: Measured, base: Baselines, searched: dict[str, Any]) -> Verified:
        """6. The stitched plan vs each single backend, interleaved, same run. A lower-precision backend on
        the whole model, within the accuracy budget on its own, runs too: a competitor for the plan (not an
        fp32 baseline), so a faster within-budget bf16 plan is never lost. ``searched`` (report.json's
        ``searched_plan``, whichever plan the later steps keep) gets the plan's measurement, the best single
        backend's beside it (what its measured gain is against) and each partition's call in those runs."""
        from collage.runtime.artifact import PartitionTimes

        artifact = self.load(self.export(plan, self.work / "plan"))
        # a plan of one backend on the whole model is that baseline: timed once, under the baseline's name
        same = plan.partitions[0].backend if len(plan.partitions) == 1 else None
        same = same if same in base.singles else None
        clock = PartitionTimes(artifact, self.feeds)  # a plan run that keeps its partitions' call times
        runners: dict[str, Any] = {} if same else {"plan": clock}
        runners.update({name: (lambda c=c: c.run(self.feeds)) for name, c in base.singles.items()})
        alts = self.precision.whole_model_alternatives(plan)
        runners.update({f"whole:{name}": (lambda c=c: c.run(self.feeds)) for name, c in alts.items()})
        rounds = self.rounds_for(base, share=0.8, artifacts=0)  # the last timed step: numerics and export are short
        self.say("verifying: %s vs %s, interleaved, %d round(s)%s", f"the plan ({same} alone)" if same else "plan",
                 ", ".join([n for n in [*base.singles, *alts] if n != same]) or "nothing", rounds,
                 f", {self.clock.left():.0f} s left of the budget" if self.clock.budgeted else "")
        timings = measure_interleaved(runners, rounds=rounds, warmed=clock.clear)  # the warm-up calls are not kept
        plan_ms = timings[same] if same else timings.pop("plan")
        alt_ms = {name: timings.pop(f"whole:{name}") for name in alts}
        part_ms = clock.medians() if clock.runs and len(plan.partitions) > 1 else None
        baselines = {**timings, **base.from_db}
        searched.update(measured_ms=plan_ms, best_single_measured_ms=min(baselines.values(), default=None))
        for row, ms in zip(searched["partitions"], part_ms or []):
            row["in_plan_ms"] = ms
        verified = Verified(plan, plan_ms, artifact, timings, baselines, part_ms)
        if alt_ms and min(alt_ms.values()) < plan_ms:
            verified = self.take_whole_model_alternative(verified, alt_ms, measured)
        self.note_baselines(verified, base, measured)
        return verified

    def rounds_for(self, base: Baselines, share: float, artifacts: int = 1) -> int:
        """Interleaved rounds (at most VERIFY_ROUNDS) of a plan beside the baselines that fit ``share`` of what is
        left of the budget after compiling ``artifacts`` per backend (a compile: the whole models' measured
        time each)."""
        from collage.tuner.clock import WARMUP_S, round_s
        from collage.tuner.verify import VERIFY_ROUNDS

        singles = list(base.whole_ms.values())
        per = round_s(singles) + round_s([max(singles, default=0.0)])
        compile_s = base.compile_s
        fixed = artifacts * len(self.names) * compile_s + WARMUP_S * (1 + len(singles))
        return self.clock.rounds(VERIFY_ROUNDS, per, fixed, share)

    def charges_fit(self, base: Baselines) -> bool:
        """Whether the partition charges' two artifacts a backend, warmed up and timed, fit what is left of the
        budget once the verification, numerics and export are kept for (always without a budget)."""
        left = self.clock.left()
        if left is None:
            return True
        from collage.tuner.clock import WARMUP_S, round_s

        compile_s = base.compile_s
        timed = 2 * round_s([max(base.whole_ms.values(), default=0.0)])
        need = len(self.names) * (2 * compile_s + 2 * WARMUP_S + timed)
        return need <= left - (3 * compile_s + 2.0)

    def attempts_for(self, base: Baselines) -> int:
        """The search's plan attempts (at most 3) whose artifact and rounds fit half of what is left."""
        left = self.clock.left()
        if left is None:
            return 3
        from collage.tuner.clock import round_s

        singles = list(base.whole_ms.values())
        one = base.compile_s + 3 * (round_s(singles) + round_s(singles[:1]))
        return max(1, min(3, int((left - (3 * base.compile_s + 2.0)) / max(one, 1e-3))))

    def whole_prediction(self, measured: Measured, name: str) -> float | None:
        """The predicted ms of ``name`` on the whole model: its measured cost at that backend's level."""
        from collage.tuner.search_step import PartitionCharge

        ms = measured.whole(len(self.graph), name)
        return None if ms is None else self.charges.get(name, PartitionCharge()).level * ms

    def take_whole_model_alternative(self, verified: Verified, alt_ms: Mapping[str, float],
                                     measured: Measured) -> Verified:
        """6b. A lower-precision whole model measured faster than the searched plan becomes the plan."""
        from collage.tuner.search_step import fill_boundaries

        name = min(alt_ms, key=alt_ms.__getitem__)
        note = (f"precision: {name} on the whole model (within the accuracy budget on its own) measured "
                f"{alt_ms[name]:.3f} ms, faster than the searched plan ({verified.plan_ms:.3f} ms); the plan is "
                f"{name} on the whole model")
        self.say(note)
        plan = fill_boundaries(self.graph, Plan.single(name, len(self.graph), self.whole_prediction(measured, name)))
        plan.notes.extend(self.precision.use_whole_model(name, note))
        artifact = self.load(self.export(plan, self.work / "plan-whole"))
        return Verified(plan, alt_ms[name], artifact, verified.timings, verified.baselines)

    def note_baselines(self, verified: Verified, base: Baselines, measured: Measured) -> None:
        """6c. Notes on the baselines: a stale cost DB, baselines taken from the DB."""
        # against the verification's numbers (warmest); only costs an earlier run stored: this run's own
        # worker timings differ from the verification's by the machine's level, not by staleness
        earlier = {b: c.created for b in base.whole_ms
                   if (c := measured.raw.get((tuple(range(len(self.graph))), b))) is not None
                   and c.created < self.t_wall}
        stale = stale_costs({b: ms for b, ms in base.whole_ms.items() if b in earlier}, verified.timings, earlier)
        if stale:
            log.warning("%s", stale)
            verified.plan.notes.append(Note(NoteKind.BASELINES, stale))
        if base.from_db:
            verified.plan.notes.append(Note(
                NoteKind.BASELINES, "baselines of " + ", ".join(f"{k} ({v:.1f} ms)" for k, v in base.from_db.items())
                + f" are their cost-DB whole-model medians: more than {SLOW_BASELINE_FACTOR}x behind, not re-run "
                "interleaved"))

    def refine(self, verified: Verified, charged: Mapping[Any, float], base: Baselines) -> Verified:
        """7. Optional: measured Optuna trials around the plan; a faster plan is measured against the
        baselines again."""
        trials, plan = self.options.refine_trials, verified.plan
        self.coverage["refinement"] = refinement(trials)
        if trials > 0 and self.precision.is_low(plan):
            plan.notes.append(Note(NoteKind.REFINEMENT, "refinement skipped: it does not measure errors, and the "
                                   "plan holds lower-precision partitions"))
            self.coverage["refinement"] = refinement(trials, 0, plan.notes[-1])
            return verified
        if trials > 0 and len(plan.partitions) < 2:
            plan.notes.append(Note(NoteKind.REFINEMENT, "refinement skipped: the plan is one backend on the whole "
                                   "model; refinement moves nodes between the partitions of a mixed plan"))
            self.coverage["refinement"] = refinement(trials, 0, plan.notes[-1])
            return verified
        if trials <= 0:
            return verified
        fit = self.trials_for(base, trials)
        if fit < trials:
            plan.notes.append(Note(NoteKind.REFINEMENT, f"refinement cut by the budget: {fit} of {trials} trial(s) "
                                   "fitted what was left"))
            self.say("%s", plan.notes[-1])
            if fit == 0:
                self.coverage["refinement"] = refinement(trials, 0, plan.notes[-1])
                return verified
            trials = fit
        from collage.search.refine import RefineOptions, refine
        from collage.tuner.search_step import fill_boundaries

        n = len(self.graph)
        # the study lives in the cost DB (SQLite or PostgreSQL), so an interrupted refinement resumes
        storage = self.db.study_storage()
        res = refine(self.graph, plan, charged, self.evaluate, options=RefineOptions(storage,
                     study_name=f"refine-{self.graph.fingerprint(range(n))}-{'-'.join(self.names)}", n_trials=trials))
        self.coverage["refinement"] = refinement(trials, res.new_trials,
                                                 f"the study in the cost DB already holds {res.trials} finished trial(s)")
        if res.plan is plan or res.measured_ms >= verified.plan_ms:
            return verified
        plan = fill_boundaries(self.graph, res.plan)
        plan.notes.append(Note(NoteKind.REFINED, f"refined by {res.trials} measured trials: {verified.plan_ms:.3f} -> "
                               f"{res.measured_ms:.3f} ms"))
        artifact = self.load(self.export(plan, self.work / "refined"))
        timings = measure_interleaved({"plan": lambda: artifact.run(self.feeds),
                                       **{k: (lambda c=c: c.run(self.feeds)) for k, c in base.singles.items()}})
        plan_ms = timings.pop("plan")
        return Verified(plan, plan_ms, artifact, timings, {**timings, **base.from_db})

    def trials_for(self, base: Baselines, trials: int) -> int:
        """Refinement trials (at most ``trials``) that fit half of what is left of the budget, each an artifact
        and 3 rounds, with the re-verification of a faster plan kept (``trials`` without a budget)."""
        left = self.clock.left()
        if left is None:
            return trials
        from collage.tuner.clock import round_s

        compile_s = base.compile_s
        one = compile_s + 3 * round_s([max(base.whole_ms.values(), default=0.0)])
        return max(0, min(trials, int((left / 2 - compile_s) / max(one, 1e-3))))

    def evaluate(self, plan: Plan) -> float:
        """A refinement trial: ``plan`` exported, loaded and measured (3 rounds)."""
        from collage.tuner.search_step import fill_boundaries

        a = self.load(self.export(fill_boundaries(self.graph, plan), Path(tempfile.mkdtemp(dir=self.work)) / "p"))
        return measure_interleaved({"p": lambda: a.run(self.feeds)}, rounds=3)["p"]

    def never_worse(self, verified: Verified, measured: Measured) -> Verified:
        """8. If the plan is not faster than the best single backend, the plan is that backend."""
        from collage.tuner.search_step import fill_boundaries

        plan, plan_ms, baselines = verified.plan, verified.plan_ms, verified.baselines
        if len(plan.partitions) == 1 and plan.partitions[0].backend in verified.timings:
            # the plan is one backend on the whole model: the same configuration as that baseline, so one
            # number stands for both (two samples of it would only show the noise as a "speedup")
            plan_ms = baselines[plan.partitions[0].backend]
        if not baselines:
            return Verified(plan, plan_ms, verified.artifact, verified.timings, baselines)
        best, best_ms = min(baselines.items(), key=lambda kv: kv[1])
        already_best = len(plan.partitions) == 1 and plan.partitions[0].backend == best
        if already_best or plan_ms < best_ms:
            return Verified(plan, plan_ms, verified.artifact, verified.timings, baselines)
        what = ("the mixed plan" if len({p.backend for p in plan.partitions}) > 1
                else f"the searched plan ({plan.partitions[0].backend} in {len(plan.partitions)} partition(s))")
        note = (f"never worse: {what} measured {plan_ms:.3f} ms end to end, not faster than "
                f"{best} alone ({best_ms:.3f} ms); the plan is {best} on the whole model"
                # priced as the search priced it before it ran (part_ms: the searched plan was verified)
                + furthest_over_price(self.searched_for or plan, verified.part_ms))
        self.say(note)
        kept = [x for x in plan.notes if kind_of(x) != NoteKind.REFINED]  # facts of the run, not of the mix
        single = fill_boundaries(self.graph, Plan.single(best, len(self.graph), self.whole_prediction(measured, best)))
        single.notes.extend(kept + [Note(NoteKind.NEVER_WORSE, note)])
        return Verified(single, best_ms, None, verified.timings, baselines)

    def numerics(self, plan: Plan, artifact: Any) -> dict[str, Any] | None:
        """9. Outputs vs the ONNX Runtime fp32 reference (fp32 plans), then the precision strategy's check
        (the end-to-end error vs the accuracy budget on the calibration inputs)."""
        fp32 = None if self.precision.is_low(plan) else check_numerics(self.graph, plan, artifact, self.feeds,
                                                                        dict(self.options.tolerance),
                                                                        self.backend_options)
        return self.precision.check(plan, artifact, fp32)

    def report(self, verified: Verified, numerics: dict[str, Any] | None, artifact: Any, *, counts: dict[str, int],
               measured: Measured, n_cands: int, charges: Any, attempts: int,
               search_s: float, searched_plan: dict[str, Any], cost_db_plan: dict[str, Any] | None) -> dict[str, Any]:
        """10. report.json's content."""
        raw, plan = measured.raw, verified.plan
        report = {
            "model": self.graph.name, "source": self.graph.source, "target": self.options.target,
            "backends": self.names, "baselines": verified.baselines, "plan_ms": verified.plan_ms,
            "predicted_ms": plan.predicted_ms, "numerics": numerics, "notes": list(plan.notes),
            "candidates": counts, "partition_charges": charges, "search_attempts": attempts,
            "searched_plan": searched_plan, "cost_db_plan": cost_db_plan,
            "measurements": {"candidates": n_cands, "with_cost": len(measured.costs),
                             "failed_candidates": measured.failures,
                             "distinct_keys": getattr(raw, "distinct", None), "reused": getattr(raw, "reused", None),
                             "measured_now": getattr(raw, "measured", None),
                             "unmeasured": getattr(raw, "unmeasured", None),
                             "measure_s": getattr(raw, "elapsed_s", None)},
            "coverage": self.coverage,
            # each partition of the final plan timed alone in a worker: what the report shows where it has no
            # measurement of the partition inside the plan (collage.report.render.measured_ms)
            "alone_ms": [c.median_ms if (c := raw.get((p.nodes, p.backend))) is not None and c.ok else None
                         for p in plan.partitions],
            "search_s": search_s,
            "tune_s": time.monotonic() - self.t_start,
            "load": self.graph.folding.as_dict(),
            # --budget: the whole tune's clock and each step's seconds (the export's own is not in it yet)
            "time": self.clock.report(),
        }
        self.say("%s", refinement_line(self.coverage))
        if getattr(self, "tvm_run", None) is not None:
            from collage.tuner.tvm_budget import tvm_tuning_report

            report["tvm_tuning"] = tvm_tuning_report(self.tvm_run, self.graph, plan, raw,
                                                     [n for n in self.names if n != "tvm"])
        precision = self.precision.report(plan)
        if precision is not None:
            report["precision"] = precision
        if hasattr(artifact, "boundary_overhead"):
            try:
                report["boundary_overhead_ms"] = artifact.boundary_overhead(self.feeds)
            except Exception as e:  # report-only figure; never fail a tune for it
                log.warning("could not measure boundary overhead: %s", e)
        return report

    def write(self, out_dir: Path, verified: Verified, artifact: Any, report: dict[str, Any]) -> TuneResult:
        """11. The artifact in ``out_dir``, reusing exactly the partitions that were verified (no recompilation)."""
        from collage.tuner.export import export

        compiled = {p.index: p.compiled for p in artifact.partitions}
        graphs = artifact.graph_report() if hasattr(artifact, "graph_report") else None
        if graphs is not None:  # a device-resident (GPU) artifact: its CUDA-graph segments, what splits them
            report["cuda_graph"] = graphs
        self.say("exporting the artifact to %s (%d partition(s))%s", out_dir, len(verified.plan.partitions),
                 f", {self.clock.left():.0f} s left of the budget" if self.clock.budgeted else "")
        final = export(self.graph, verified.plan, out_dir, target=self.options.target, report=report,
                       archive=self.options.archive, compiled=compiled, backend_options=self.backend_options)
        self.say("wrote %s: plan %.3f ms vs %s", final, verified.plan_ms,
                 ", ".join(f"{k} {v:.3f} ms" for k, v in verified.baselines.items()))
        return TuneResult(Path(final), verified.plan, verified.plan_ms, verified.baselines, report)

    # ------------------------------------------------------------------ helpers
    def export(self, plan: Plan, path: Path) -> Path:
        from collage.tuner.export import export

        return export(self.graph, plan, path, target=self.options.target, backend_options=self.backend_options)

    @staticmethod
    def load(path: Path) -> Any:
        from collage.runtime.artifact import load

        return load(path)
