"""What every step of one tune reads and none changes (:class:`JobContext`), and how it is opened
(:func:`open_context`): the model, the options, the backends, the inputs, the cost DB, the precision strategy,
the tune's clock and scratch folder.

Opening refuses what can be refused before any measuring, before any progress line: a bad model, backend,
backend option or cost DB, a ``--cluster`` nothing answers at, a budget too small for the baselines
(:func:`check_budget`).
"""
from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.errors import BackendUnavailable, CollageError
from collage.graph.ir import Graph
from collage.report.coverage import load_line
from collage.tuner.clock import Deadline
from collage.util import say

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from collage.measure.db import CostDB
    from collage.plan import Plan
    from collage.tuner.options import TuneOptions
    from collage.tuner.precision.strategy import PrecisionStrategy

#: the logger of the tune's progress lines and warnings, whichever step says them (``collage -v`` shows its name)
JOB_LOGGER = "collage.tuner.job"
log = logging.getLogger(JOB_LOGGER)


@dataclass(frozen=True)
class JobContext:
    """One tune's fixed inputs. ``clock``: the whole tune's wall clock (``--budget``; each step's seconds are
    added to it as the steps end). ``backend_options``: every backend's constructor options, the precision
    strategy's (int8 ranges) merged in. ``t_start``: the tune's start (time.monotonic); ``t_wall``: the same
    in time.time (a cost the DB holds from before it is an earlier run's)."""

    graph: Graph
    options: TuneOptions
    work: Path
    clock: Deadline
    backends: list[Any]
    names: list[str]
    backend_options: dict[str, dict[str, Any]]
    feeds: dict[str, np.ndarray]
    db: CostDB
    precision: PrecisionStrategy
    t_start: float
    t_wall: float

    def say(self, msg: str, *args: object) -> None:
        say(self.options.progress, msg, *args, logger=log)

    def export(self, plan: Plan, path: Path) -> Path:
        """``plan`` as an artifact at ``path`` (a scratch copy: no report)."""
        from collage.tuner.export import export

        return export(self.graph, plan, path, target=self.options.target, backend_options=self.backend_options)

    @staticmethod
    def load(path: Path) -> Any:
        from collage.runtime.artifact import load

        return load(path)

    def model_size(self) -> tuple[float, float]:
        """(GFLOPs, MB of weights) of the model (collage.graph.stats' FLOPs estimate)."""
        return model_size(self.graph)


def model_size(graph: Graph) -> tuple[float, float]:
    """(GFLOPs, MB of weights) of ``graph`` (collage.graph.stats' FLOPs estimate)."""
    from collage.graph.stats import node_flops

    gflops = sum(node_flops(graph, i) for i in range(len(graph))) / 1e9
    weight_mb = sum(graph.tensor(name).nbytes for name in graph.initializers) / 1e6  # int8 weights: a byte each
    return gflops, weight_mb


def open_context(model: str | os.PathLike | onnx.ModelProto, options: TuneOptions, work: Path) -> JobContext:
    """The context of a tune of ``model`` (module docstring: what is refused here)."""
    from collage.graph.inputs import random_inputs
    from collage.measure.connect import get_db
    from collage.tuner.precision.strategy import precision_strategy

    t_start, t_wall = time.monotonic(), time.time()
    clock = Deadline(options.budget_s)  # --budget: the whole tune's wall clock (from the command's start)
    graph = load_model_graph(model, options.shapes)
    backend_options = options.all_backend_options()
    backends = resolve_backends(list(options.backends), options.target, backend_options)
    names = [b.name for b in backends]
    feeds = random_inputs(graph, seed=options.seed)  # an input none are drawn for: before the DB is made
    db = get_db(options.db)  # a bad model, backend or cost DB is refused before any progress line
    if isinstance(options.cluster, str) and options.cluster != "local":  # and a --cluster nothing answers at
        from collage.measure.executor import check_reachable, ray_address

        check_reachable(ray_address(options.cluster))
    if clock.budgeted:
        check_budget(graph, len(names), clock, t_start)  # a budget too small is refused before any progress line too
    say(options.progress, "%s: %d nodes; %s", graph.name, len(graph), load_line(graph.folding.as_dict()), logger=log)
    precision = precision_strategy(graph, backends, options, db, work)
    for name, opts in precision.backend_options.items():  # e.g. the int8 variants' calibrated ranges
        backend_options.setdefault(name, {}).update(opts)
    return JobContext(graph, options, work, clock, backends, names, backend_options, feeds, db, precision,
                      t_start, t_wall)


def check_budget(graph: Graph, backends: int, clock: Deadline, t_start: float) -> None:
    """Under --budget: a budget too small for loading and every backend's whole model (the baselines) is
    refused before any measuring, naming an estimate of the least that works (collage.tuner.clock); one
    under the estimated least of a whole tune is warned about (the steps after measuring then overrun it)."""
    from collage.errors import OptionError
    from collage.tuner.clock import baselines_s, least_budget_s

    total = clock.total_s or 0.0
    gflops, weight_mb = model_size(graph)
    loading = time.monotonic() - t_start  # this tune's own loading (not the interpreter's start)
    least = loading + baselines_s(gflops, weight_mb, backends)
    if total < least:
        raise OptionError(f"--budget {total:g}s is too small for {graph.name} on {backends} backend(s): "
                          f"loading and every backend's whole model (the baselines) need about {math.ceil(least)} s "
                          f"(an estimate from its {gflops:.2f} GFLOPs and {weight_mb:.0f} MB of weights); give "
                          f"--budget {math.ceil(least)}s or more")
    whole = least_budget_s(gflops, weight_mb, backends, clock.spent())
    if total < whole:
        log.warning("--budget %gs: %s's whole tune needs about %d s (an estimate: the baselines, one verification "
                    "round and the export); it may end past the budget", total, graph.name, math.ceil(whole))


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
