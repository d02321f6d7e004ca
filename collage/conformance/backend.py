"""collage behind ONNX's backend API (``onnx.backend.base.Backend``), through the path users deploy.

    from collage.conformance.backend import CollageBackend
    rep = CollageBackend.prepare(model, "CPU", plan="mixed")     # or plan="onnxruntime", "openvino", "tvm"
    outputs = rep.run([x])                                       # a list, in the model's output order

``prepare`` builds a :class:`collage.plan.Plan` by hand (no measuring, no search), exports it with
:func:`collage.tuner.export.export` into a temporary artifact directory and loads that with
:func:`collage.load`: what runs is exactly what a deployed artifact runs (manifest, checksums, each
backend's ``save``/``load``, the runtime's hand-over between partitions).

Plans:

* a backend name: the whole model is one partition on that backend;
* ``"mixed"`` (or ``"mixed:A,B,..."``, default ``onnxruntime,openvino``): node ``i`` (in topological
  order) goes to backend ``i mod len(backends)`` when that backend supports it, else to the next one that
  does; runs of consecutive nodes on one backend become one partition. Contiguous ranges of a topological
  order are convex, and alternating backends put a boundary between almost every pair of nodes, so every
  boundary kind (A -> B, B -> A, graph input/output, a tensor read by several later partitions) is run.

A model collage cannot take is refused with a :class:`collage.errors.CollageError`
(``UnsupportedError``/``ModelError`` naming the op, dtype or feature). :func:`conformance_backend` wraps
it for ``onnx.backend.test.BackendTest``, which counts a refusal as a skipped test (``unittest.SkipTest``
carrying the error's class and message); ``tests/backends/test_onnx_conformance.py`` and
``benchmarks/onnx_conformance.py`` run ONNX's own suite through it.
"""
from __future__ import annotations

import logging
import tempfile
import unittest
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from collage.errors import CollageError, UnsupportedError

log = logging.getLogger(__name__)

MIXED_DEFAULT = ("onnxruntime", "openvino")


def parse_plan(plan: str) -> tuple[str, tuple[str, ...]]:
    """``("single", (name,))`` or ``("mixed", (names...))`` for a plan spec."""
    if plan == "mixed":
        return "mixed", MIXED_DEFAULT
    if plan.startswith("mixed:"):
        names = tuple(n.strip() for n in plan[len("mixed:"):].split(",") if n.strip())
        if len(names) < 2:
            raise CollageError(f"plan {plan!r}: a mixed plan needs at least two backends")
        return "mixed", names
    return "single", (plan,)


def build_plan(graph: Any, plan: str, backends: dict[str, Any]) -> Any:
    """The :class:`collage.plan.Plan` for ``plan`` over ``graph`` (see the module docstring)."""
    from collage.plan import Partition, Plan

    kind, names = parse_plan(plan)
    n = len(graph)
    if kind == "single":
        return Plan([Partition(tuple(range(n)), names[0])], notes=[f"onnx_backend: whole model on {names[0]}"])
    reasons = {name: backends[name].support_reasons(graph, range(n)) for name in names}
    owner: list[str] = []
    for i in range(n):
        order = [names[(i + k) % len(names)] for k in range(len(names))]
        chosen = next((b for b in order if reasons[b][i] is None), None)
        if chosen is None:
            why = "; ".join(f"{b}: {reasons[b][i]}" for b in names)
            raise UnsupportedError(f"no backend of plan {plan!r} takes {graph.node_label(i)} ({why})")
        owner.append(chosen)
    parts: list[Partition] = []
    start = 0
    for i in range(1, n + 1):
        if i == n or owner[i] != owner[start]:
            parts.append(Partition(tuple(range(start, i)), owner[start]))
            start = i
    return Plan(parts, notes=[f"onnx_backend: mixed plan over {', '.join(names)}"])


class CollageRep(BackendRep):
    """A prepared model: a loaded artifact, run with positional inputs."""

    def __init__(self, artifact: Any, input_names: list[str], output_names: list[str], workdir: Any) -> None:
        self.artifact = artifact
        self.input_names = input_names
        self.output_names = output_names
        self._workdir = workdir  # the artifact's directory lives as long as this object

    @property
    def backends(self) -> list[str]:
        return self.artifact.backends

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:  # noqa: ARG002 - the API's signature
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise CollageError(f"expected {len(self.input_names)} input(s) {self.input_names}, got {len(inputs)}")
            feeds = dict(zip(self.input_names, inputs))
        out = self.artifact.run(feeds)
        return tuple(out[name] for name in self.output_names)


class CollageBackend(Backend):
    """``onnx.backend.base.Backend`` for collage (see the module docstring). CPU only."""

    #: default plan of ``prepare`` (subclasses from :func:`conformance_backend` set their own)
    plan = "onnxruntime"

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:  # noqa: ARG003
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", plan: str | None = None,
                backend_options: dict[str, dict] | None = None, **kwargs: Any) -> CollageRep:  # noqa: ARG003
        from collage.backends import get_backend
        from collage.errors import BackendUnavailable, ModelError
        from collage.graph.ir import Graph
        from collage.runtime.artifact import load
        from collage.tuner.export import export

        if not cls.supports_device(device):
            raise BackendUnavailable(f"collage.conformance.backend runs on CPU only, not {device!r}")
        plan = plan or cls.plan
        if isinstance(model, (bytes, str)):
            model = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        try:
            onnx.checker.check_model(model)
        except Exception as e:  # noqa: BLE001 - the checker's verdict, on one line
            raise ModelError(f"{model.graph.name or '<model>'}: ONNX checker: {str(e).strip().splitlines()[0]}") \
                from None
        if not model.graph.node:
            raise ModelError(f"{model.graph.name or '<model>'}: the graph has no node (collage runs nodes)")
        options = dict(backend_options or {})
        _, names = parse_plan(plan)
        backends = {}
        for name in names:
            b = get_backend(name, **options.get(name, {}))
            reason = b.available()
            if reason:
                raise BackendUnavailable(f"backend {name!r} is not available here: {reason}")
            backends[name] = b
        graph = Graph(model, source=model.graph.name or "<model>")
        the_plan = build_plan(graph, plan, backends)
        workdir = tempfile.TemporaryDirectory(prefix="collage-onnx-backend-")
        try:
            out = export(graph, the_plan, f"{workdir.name}/artifact", backend_options=options)
            # NaN and infinity pass: ONNX's suite checks the outputs itself (IsNaN, IsInf, Max with NaN...); the
            # deploy path's refusal of non-finite inputs would only turn those checks into skips
            artifact = load(out, allow_nonfinite=True)
        except BaseException:
            workdir.cleanup()
            raise
        return CollageRep(artifact, list(graph.inputs), list(graph.outputs), workdir)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Sequence | None = None,
                 **kwargs: Any) -> tuple:
        raise unittest.SkipTest("collage runs models, not single NodeProtos (use a one-node model)")


#: refusal classes: a clean "cannot take this" answer (counted as skipped)
def _refusal(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def conformance_backend(plan: str, **options: Any) -> type[CollageBackend]:
    """A ``CollageBackend`` for ``onnx.backend.test.BackendTest`` running ``plan``: a CollageError (a clean
    refusal, from prepare or run) becomes ``unittest.SkipTest`` with the error's class and message."""

    class _Rep(BackendRep):
        def __init__(self, rep: CollageRep) -> None:
            self.rep = rep

        def run(self, inputs: Any, **kwargs: Any) -> tuple:
            try:
                return self.rep.run(inputs, **kwargs)
            except CollageError as e:
                raise unittest.SkipTest(_refusal(e)) from e

    class Conformance(CollageBackend):
        @classmethod
        def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> Any:
            kwargs = {k: v for k, v in kwargs.items() if k not in ("rtol", "atol")}
            try:
                return _Rep(CollageBackend.prepare(model, device, plan=plan, backend_options=options or None,
                                                   **kwargs))
            except CollageError as e:
                raise unittest.SkipTest(_refusal(e)) from e

    Conformance.plan = plan
    Conformance.__name__ = Conformance.__qualname__ = f"CollageConformance_{plan.replace(':', '_').replace(',', '_')}"
    return Conformance


__all__ = ["CollageBackend", "CollageRep", "build_plan", "conformance_backend", "parse_plan"]


# ---------------------------------------------------------------------- running ONNX's backend test suite
#: categories of ``onnx.backend.test.BackendTest`` run (RealModel holds only the shipped "light" models)
CATEGORIES = ("NodeModel", "SimpleModel", "PyTorchConvertedModel", "PyTorchOperatorModel", "RealModel")


def conformance_cases(plan: str, pattern: str | None = None, *, categories: Sequence[str] = CATEGORIES,
                      exclusions: bool = True, **options: Any) -> tuple[list[tuple[str, str, unittest.TestCase]],
                                                                          dict[str, str]]:
    """``([(category, test name, test), ...], {excluded test name: reason})`` of ONNX's suite for ``plan``
    (the ``_cpu`` variants only; ``pattern`` a regex on the test name)."""
    import re
    import warnings

    import onnx.backend.test

    from collage.conformance.exclusions import excluded as excluded_reason

    with warnings.catch_warnings():  # the node cases' generators divide by zero on purpose
        warnings.simplefilter("ignore")
        suite = onnx.backend.test.BackendTest(conformance_backend(plan, **options), __name__)
    loader = unittest.TestLoader()
    cases, excluded = [], {}
    for category in categories:
        cls = suite.test_cases.get(f"OnnxBackend{category}Test")
        if cls is None:
            continue
        for name in loader.getTestCaseNames(cls):
            if not name.endswith("_cpu") or (pattern and not re.search(pattern, name)):
                continue
            reason = excluded_reason(name, parse_plan(plan)[1]) if exclusions else None
            if reason is not None:
                excluded[name] = reason
                continue
            cases.append((category, name, cls(name)))
    return cases, excluded


class _Outcome(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcome = ("pass", "")

    def addSkip(self, test: Any, reason: str) -> None:  # noqa: N802 - unittest's API
        self.outcome = ("refused", reason)

    def addFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self.outcome = ("wrong", _one(err[1]))

    def addError(self, test: Any, err: Any) -> None:  # noqa: N802
        self.outcome = ("error", f"{err[0].__name__}: {_one(err[1])}")

    def addExpectedFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self.outcome = ("wrong", _one(err[1]))


def _one(e: Any, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_case(test: unittest.TestCase) -> tuple[str, str]:
    """Run one suite case: ``("pass" | "refused" | "wrong" | "error", detail)``. ``wrong``: outputs differ
    from ONNX's expected ones; ``error``: an exception that is not a CollageError (a bug, not a refusal)."""
    result = _Outcome()
    test.run(result)
    return result.outcome
