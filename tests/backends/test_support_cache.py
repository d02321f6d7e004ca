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


def test_a_process_state_error_of_onnx_runtime_is_not_cached(tmp_path, monkeypatch):
    """The real ONNX Runtime backend in a process whose shared pool has another thread count: its support check
    fails for this process only (TransientError), and the node is not remembered as unsupported (it was:
    "this process already has a shared pool of 2 threads" cached for Relu, refusing it in every later tune)."""
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent("""
        import json, sys
        from onnx import TensorProto, helper
        from collage.backends import get_backend
        from collage.graph.ir import Graph

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
        g = Graph.load(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                                           "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]))
        two = get_backend("onnxruntime", threads=2)
        two.compile(g.model).run({"x": __import__("numpy").ones((2, 3), "float32")})  # makes the shared pool
        one = get_backend("onnxruntime", threads=1)
        print(json.dumps({"in_pool_process": one.supports_all(g)[0], "cache": str(one.support_cache_path())}))
    """)
    env = {**__import__("os").environ, "COLLAGE_CACHE": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    got = json.loads(first.stdout.strip().splitlines()[-1])
    assert got["in_pool_process"] is False  # could not tell in that process: not taken for this call
    cached = json.loads(open(got["cache"]).read()) if __import__("os").path.exists(got["cache"]) else {}
    assert not any(isinstance(v, str) and "shared pool" in v
                   for v in (cached.get("answers", cached) or {}).values()), cached
    # a fresh process with the same cache takes Relu
    fresh = child.replace('two.compile(g.model).run({"x": __import__("numpy").ones((2, 3), "float32")})', "pass")
    second = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, timeout=120, env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout.strip().splitlines()[-1])["in_pool_process"] is True


def test_a_change_to_the_refusal_rules_starts_a_new_support_cache(tmp_path, monkeypatch):
    """Answers cached under one version of collage's refusal rules are not read under another: OpenVINO's
    com.microsoft QLinearAveragePool, cached "supported" before it was found to wrap, kept passing the support
    check, so every candidate holding it was measured and failed at compile, one warning each."""
    import importlib
    import sys

    from collage.backends.base import rules_digest

    pkg = tmp_path / "rulespkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text(
        "from collage.backends.base import Backend\n"
        "REFUSED = {'Neg'}\n"
        "class Plugin(Backend):\n"
        "    name = 'rules-test'\n"
        "    def version(self): return 'v1'\n"
        "    def available(self): return None\n"
        "    def _check_supported(self, model):\n"
        "        op = model.graph.node[0].op_type\n"
        "        return f'{op}: refused' if op in REFUSED else None\n"
        "    def compile(self, model): raise NotImplementedError\n"
        "    def load(self, directory, entry): raise NotImplementedError\n")
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = importlib.import_module("rulespkg.plugin")
    graph = _two_ops()
    before = plugin.Plugin()
    assert before.supports_all(graph) == {0: True, 1: False}
    old_path = before.support_cache_path()
    (pkg / "plugin.py").write_text((pkg / "plugin.py").read_text().replace("REFUSED = {'Neg'}",
                                                                          "REFUSED = {'Neg', 'Relu'}"))
    rules_digest.cache_clear()
    sys.modules.pop("rulespkg.plugin")
    after = importlib.import_module("rulespkg.plugin").Plugin()
    assert after.version() == before.version() and after.support_cache_path() != old_path
    assert after.supports_all(graph) == {0: False, 1: False}   # the old file said Relu was taken
