"""Backend.support_reasons caches definite refusals only: a transient failure of the check (out of memory,
an OS error, a timeout, a runtime error that is no refusal) must not become a permanent "unsupported"."""
from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from collage.backends.base import Backend
from collage.errors import UnsupportedError
from collage.graph.ir import Graph


def _two_ops() -> Graph:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Neg", ["y"], ["z"], name="neg")]
    return Graph.load(helper.make_model(helper.make_graph(nodes, "g", [x], [z]),
                                        opset_imports=[helper.make_opsetid("", 17)]))


class _Flaky(Backend):
    """Relu: raises ``error`` on the first check, then takes it. Neg: refused with UnsupportedError."""

    name = "flaky-test"

    def __init__(self, error: BaseException, version: str) -> None:
        self.error, self._version, self.calls = error, version, []

    def version(self) -> str:
        return self._version

    def available(self) -> str | None:
        return None

    def _check_supported(self, model):
        op = model.graph.node[0].op_type
        self.calls.append(op)
        if op == "Neg":
            raise UnsupportedError("Neg: no kernel")
        if self.calls.count("Relu") == 1:
            raise self.error
        return None

    def compile(self, model):
        raise NotImplementedError

    def load(self, directory, entry):
        raise NotImplementedError


@pytest.mark.parametrize("error", [MemoryError("out of memory"), OSError(28, "No space left on device"),
                                   TimeoutError("worker did not answer"), RuntimeError("device busy")],
                         ids=lambda e: type(e).__name__)
def test_transient_failure_is_not_cached(error, tmp_path, monkeypatch):
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))
    graph = _two_ops()
    b = _Flaky(error, f"v-{type(error).__name__}")
    first = b.support_reasons(graph, [0, 1])
    assert first[0] is not None and type(error).__name__ in first[0]  # "no" for this call, with the error
    assert "UnsupportedError: Neg: no kernel" in first[1]
    on_disk = json.loads(b.support_cache_path().read_text())
    assert list(on_disk.values()) == ["UnsupportedError: Neg: no kernel"]  # the refusal only
    assert "checked again" in first[0]
    # the next call (this backend, or a fresh one reading the file) asks again and gets the real answer
    assert b.support_reasons(graph, [0, 1])[0] is None
    fresh = _Flaky(error, b.version())
    assert fresh.supports_all(graph) == {0: True, 1: False}
    assert fresh.calls == []  # both answers now come from the cache
