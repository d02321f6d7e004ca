"""ONNX's own backend test suite (``onnx.backend.test.BackendTest``) through ``collage.conformance.backend``: each
model exported as an artifact and run with ``collage.load`` (the deploy path), for the plans onnxruntime,
openvino and mixed (node ranges alternating onnxruntime / openvino).

Every case must end as a pass or a clean refusal (a CollageError, counted as skipped): a wrong result
("wrong") or an exception that is not a CollageError ("error") fails the test. Exclusions (random ops,
tolerance artefacts of the tests themselves) are data with a reason: collage/conformance/exclusions.py.

Fast tier: ONNX's simple and pytorch-operator models plus every 16th node case (about 180 cases per plan).
Slow tier: every case but the shipped "light" real models (about 1,990 per plan), which take most of the
time (13 of mixed's 38 min on the loaded machine): benchmarks/onnx_conformance.py runs the whole suite, light
models included, and writes results/backends/onnx-conformance.md. The mixed plan there leaves out the one-node cases:
one node is one partition, on the backend the onnxruntime or openvino plan runs it on.
"""
from __future__ import annotations

import pytest

from collage.backends import unavailable_reason
from collage.conformance.backend import conformance_cases, parse_plan, run_case

PLANS = ["onnxruntime", "openvino", "mixed"]
FAST_CATEGORIES = ("SimpleModel", "PyTorchOperatorModel")


def _need(plan: str) -> None:
    for name in parse_plan(plan)[1]:
        reason = unavailable_reason(name)
        if reason is not None:
            pytest.skip(f"{name}: {reason}")


def _run(plan: str, cases) -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {"wrong": [], "error": []}
    passed = 0
    for _, name, test in cases:
        outcome, detail = run_case(test)
        if outcome in bad:
            bad[outcome].append(f"{name}: {detail}")
        passed += outcome == "pass"
    assert passed > 0, f"{plan}: no case passed at all"
    return bad


def _assert_clean(plan: str, bad: dict[str, list[str]]) -> None:
    lines = [f"{kind} {line}" for kind, items in bad.items() for line in items]
    assert not lines, f"{plan}: {len(lines)} case(s) neither passed nor were refused cleanly:\n" + "\n".join(lines)


@pytest.mark.parametrize("plan", PLANS)
def test_onnx_suite_fast_subset(plan):
    _need(plan)
    models, _ = conformance_cases(plan, categories=FAST_CATEGORIES)
    nodes, _ = conformance_cases(plan, categories=("NodeModel",))
    cases = models + nodes[::16]
    _assert_clean(plan, _run(plan, cases))


#: every category but RealModel (the light models: in the benchmark, not in CI)
SLOW_CATEGORIES = ("NodeModel", "SimpleModel", "PyTorchConvertedModel", "PyTorchOperatorModel")


def _one_node_cases() -> set[str]:
    """ONNX's node cases whose model is one node: on the mixed plan that node goes to ONNX Runtime, or to OpenVINO
    where ONNX Runtime refuses it, so the case is the onnxruntime or the openvino plan's same case again."""
    from onnx.backend.test.loader import load_model_tests

    return {f"{t.name}_cpu" for t in load_model_tests(kind="node")
            if t.model is not None and len(t.model.graph.node) == 1}


@pytest.mark.slow
@pytest.mark.parametrize("plan", PLANS)
def test_onnx_suite_without_light_models(plan):
    _need(plan)
    cases, _ = conformance_cases(plan, categories=SLOW_CATEGORIES)
    if plan == "mixed":  # 1,462 of the 1,884 node cases repeat a single backend's (about 2 of mixed's 3.4 min)
        one = _one_node_cases()
        cases = [c for c in cases if c[1] not in one]
    _assert_clean(plan, _run(plan, cases))


def test_mixed_plan_alternates_and_crosses_every_boundary_kind():
    """The mixed plan of a 4-node chain puts consecutive nodes on alternating backends."""
    _need("mixed")
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper

    from collage.conformance.backend import CollageBackend

    nodes = [helper.make_node(op, [src], [dst], name=dst) for op, src, dst in
             [("Relu", "x", "a"), ("Neg", "a", "b"), ("Abs", "b", "c"), ("Sigmoid", "c", "y")]]
    model = helper.make_model(helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3]), helper.make_tensor_value_info("b", T.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 17)])
    rep = CollageBackend.prepare(model, "CPU", plan="mixed")
    assert [p.backend for p in rep.artifact.partitions] == ["onnxruntime", "openvino", "onnxruntime", "openvino"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    y, b = rep.run([x])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.abs(-np.maximum(x, 0)))), rtol=1e-6)
    np.testing.assert_array_equal(b, -np.maximum(x, 0))
