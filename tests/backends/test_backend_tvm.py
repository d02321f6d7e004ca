"""The TVM backend: numerics against ONNX Runtime, the fast call path, save/load in a fresh process,
unsupported ops, a worker that aborts, and MetaSchedule's database reuse.

Models stay tiny: untuned TVM code is naive loops and each compile takes about a second.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.helpers import model_feeds, ort_reference
from collage.backends.tvm.backend import TVMBackend
from collage.backends.tvm.worker import ABORT_ENV, WorkerTimeout, worker
from collage.errors import CollageError, CompileError, ModelError, UnsupportedError
from collage.graph.ir import Graph

RTOL, ATOL = 1e-4, 1e-5
F = T.FLOAT

_reason = TVMBackend().available()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"TVM unavailable: {_reason}")


@pytest.fixture(scope="module")
def backend() -> TVMBackend:
    return TVMBackend()


def _model(nodes, inputs, outputs, inits=(), name="case") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _w(*shape, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 0.2).astype(np.float32)


def _conv_relu(seed: int = 0, c: int = 4, hw: int = 8) -> onnx.ModelProto:
    n = helper.make_node
    return _model([n("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                   n("Relu", ["c"], ["y"], name="relu")],
                  [("x", F, [1, c, hw, hw])], [("y", F, [1, 8, hw, hw])],
                  [("W", _w(8, c, 3, 3, seed=seed)), ("B", _w(8, seed=seed + 1))], name="conv_relu")


def _cases() -> dict[str, onnx.ModelProto]:
    n = helper.make_node
    return {
        "conv_relu": _conv_relu(),
        "matmul_gelu": _model(  # MatMul + exact GELU through Erf
            [n("MatMul", ["x", "W"], ["m"]), n("Div", ["m", "sqrt2"], ["d"]), n("Erf", ["d"], ["e"]),
             n("Add", ["e", "one"], ["p"]), n("Mul", ["m", "p"], ["q"]), n("Mul", ["q", "half"], ["y"])],
            [("x", F, [1, 4, 16])], [("y", F, [1, 4, 24])],
            [("W", _w(16, 24)), ("sqrt2", np.array(np.sqrt(2), np.float32)), ("one", np.array(1, np.float32)),
             ("half", np.array(0.5, np.float32))]),
        "two_outputs": _model([n("Add", ["a", "b"], ["s"]), n("Relu", ["s"], ["r"])],
                              [("a", F, [2, 8]), ("b", F, [2, 8])], [("s", F, [2, 8]), ("r", F, [2, 8])]),
        "gather_int64": _model([n("Gather", ["E", "ids"], ["y"], axis=0)], [("ids", T.INT64, [1, 5])],
                               [("y", F, [1, 5, 6])], [("E", _w(10, 6))]),
        "constants_only": _model([n("Add", ["a", "b"], ["y"])], [], [("y", F, [3])],
                                 [("a", _w(3)), ("b", _w(3, seed=1))]),
        "softmax_ln": _model(
            [n("Softmax", ["x"], ["s"], axis=-1), n("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1)],
            [("x", F, [2, 4, 16])], [("y", F, [2, 4, 16])], [("g", _w(16) + 1), ("b", _w(16, seed=3))]),
    }


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    return model_feeds(model, seed, int_high=10)


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return ort_reference(model, feeds)


def _assert_close(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        np.testing.assert_allclose(got[k], v, rtol=RTOL, atol=ATOL, err_msg=k)


# ---------------------------------------------------------------------- identity
def test_version_names_tvm_target_and_tuning(backend):
    import tvm

    version = backend.version()
    assert tvm.__version__ in version and "untuned" in version
    assert backend.mcpu != "native" and f"llvm-{backend.mcpu or 'generic'}" in version
    tuned = TVMBackend(tuning="metaschedule", trials=8)
    assert "metaschedule-8" in tuned.version() and tuned.version() != version
    assert tuned.options["trials"] == 8 and backend.options["tuning"] == "none"


def test_bad_options_are_refused():
    with pytest.raises(CollageError, match="tuning mode"):
        TVMBackend(tuning="autotvm")
    with pytest.raises(CollageError, match="trials"):
        TVMBackend(tuning="metaschedule", trials=0)


# ---------------------------------------------------------------------- numerics and call path
@pytest.mark.parametrize("case", sorted(_cases()))
def test_matches_onnxruntime(backend, case):
    model = _cases()[case]
    feeds = _feeds(model)
    compiled = backend.compile(model)
    assert compiled.input_names == list(feeds) and compiled.reuses_outputs is False
    _assert_close(compiled.run(feeds), _reference(model, feeds))


def test_outputs_survive_the_next_call(backend):
    n = helper.make_node
    # Reshape can be a view of the input buffer that the next call overwrites: it must come back copied
    model = _model([n("Reshape", ["x", "shape"], ["r"]), n("Relu", ["x"], ["y"])], [("x", F, [2, 6])],
                   [("r", F, [3, 4]), ("y", F, [2, 6])], [("shape", np.array([3, 4], np.int64))])
    compiled = backend.compile(model)
    first_feeds, second_feeds = _feeds(model, 1), _feeds(model, 2)
    first = compiled.run(first_feeds)
    kept = {k: v.copy() for k, v in first.items()}
    compiled.run(second_feeds)
    for k in kept:
        np.testing.assert_array_equal(first[k], kept[k], err_msg=f"{k} was overwritten by the next call")
    _assert_close(first, _reference(model, first_feeds))


def test_bad_feeds_name_the_tensor(backend):
    compiled = backend.compile(_conv_relu())
    with pytest.raises(ModelError, match="'x'"):
        compiled.run({})
    with pytest.raises(ModelError, match="'x'"):
        compiled.run({"x": np.zeros((1, 4, 8, 9), np.float32)})
    with pytest.raises(ModelError, match="'x'"):
        compiled.run({"x": np.zeros((1, 4, 8, 8), np.float64)})


def test_in_process_compile_matches():
    model = _cases()["two_outputs"]
    feeds = _feeds(model)
    _assert_close(TVMBackend(isolate=False).compile(model).run(feeds), _reference(model, feeds))


# ---------------------------------------------------------------------- save / load
_LOADER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    from collage.backends.tvm.backend import TVMBackend
    d = Path(sys.argv[1])
    compiled = TVMBackend().load(d / "part", json.loads((d / "entry.json").read_text()))
    np.savez(d / "out.npz", **compiled.run(dict(np.load(d / "feeds.npz"))))
""")


def test_save_load_in_fresh_process(backend, tmp_path):
    model = _cases()["two_outputs"]
    feeds = _feeds(model)
    compiled = backend.compile(model)
    want = {k: v.copy() for k, v in compiled.run(feeds).items()}
    entry = compiled.save(tmp_path / "part")
    assert sorted(entry["files"]) == sorted(p.name for p in (tmp_path / "part").iterdir())
    meta = json.loads((tmp_path / "part" / "tvm_io.json").read_text())
    assert [t["name"] for t in meta["outputs"]] == ["s", "r"] and meta["inputs"][0]["shape"] == [2, 8]
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = dict(np.load(tmp_path / "out.npz"))
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_load_of_a_missing_library_names_the_file(backend, tmp_path):
    compiled = backend.compile(_cases()["two_outputs"])
    entry = compiled.save(tmp_path)
    (tmp_path / "tvm_lib.so").unlink()
    with pytest.raises(CollageError, match="tvm_lib.so"):
        backend.load(tmp_path, entry)


# ---------------------------------------------------------------------- unsupported ops
def test_unsupported_op_is_refused_with_op_and_node(backend):
    n = helper.make_node
    model = _model([n("Relu", ["x"], ["t"], name="front"), n("Celu", ["t"], ["y"], name="odd_celu")],
                   [("x", F, [2, 4])], [("y", F, [2, 4])])
    graph = Graph.load(model)
    assert backend.supports_all(graph) == {0: True, 1: False}
    assert "Celu" in backend.support_reason(graph, 1)
    with pytest.raises(UnsupportedError) as info:
        backend.compile(model)
    assert "Celu" in str(info.value) and "odd_celu" in str(info.value)


# ---------------------------------------------------------------------- a worker that aborts
def test_worker_abort_gives_compile_error_and_false(monkeypatch):
    backend = TVMBackend()
    model = _conv_relu()
    backend.compile(model)  # the worker is up
    starts = worker().starts
    monkeypatch.setenv(ABORT_ENV, "Conv")
    with pytest.raises(CompileError, match="died .*SIGABRT"):
        backend.compile(model)
    assert backend._check_supported(Graph.load(model).extract([0])) is not None  # crashes again: a "no"
    monkeypatch.delenv(ABORT_ENV)
    feeds = _feeds(model)  # the next request gets a fresh worker, and this process is alive
    _assert_close(backend.compile(model).run(feeds), _reference(model, feeds))
    assert worker().starts >= starts + 2


def test_worker_that_does_not_answer_in_time_is_killed(tmp_path, monkeypatch):
    graph = Graph.load(_conv_relu())
    model = graph.extract([0])
    with pytest.raises(WorkerTimeout, match="killed"):  # a slow answer is no refusal
        TVMBackend(check_timeout_s=0.001)._check_supported(model)
    assert TVMBackend()._check_supported(model) is None  # a fresh worker answers
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path))  # support_reasons: "no" for now, and not remembered
    slow = TVMBackend(check_timeout_s=0.001)
    assert "WorkerTimeout" in slow.support_reasons(graph, [0])[0]
    path = slow.support_cache_path()
    assert graph.fingerprint([0]) not in (json.loads(path.read_text()) if path.exists() else {})


# ---------------------------------------------------------------------- MetaSchedule
def _db_lines(db) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted(db.glob("database_*.json"))}


@pytest.mark.slow
def test_metaschedule_second_compile_reuses_the_database(tmp_path):
    db = tmp_path / "tvm-db"
    backend = TVMBackend(tuning="metaschedule", trials=4, tuning_db=db, seed=0)
    model = _conv_relu(seed=0)
    start = time.perf_counter()
    first = backend.compile(model)
    first_s = time.perf_counter() - start
    assert first.tuning["tuned"] == first.tuning["workloads"] >= 1 and first.tuning["reused"] == 0
    lines = _db_lines(db)
    assert lines["database_workload.json"] == first.tuning["workloads"] and lines["database_tuning_record.json"] >= 1
    feeds = _feeds(model)
    _assert_close(first.run(feeds), _reference(model, feeds))

    # the same block with other weights, from a fresh backend instance: nothing is tuned again
    other = _conv_relu(seed=7)
    start = time.perf_counter()
    second = TVMBackend(tuning="metaschedule", trials=4, tuning_db=db).compile(other)
    second_s = time.perf_counter() - start
    assert second.tuning["tuned"] == 0 and second.tuning["reused"] == first.tuning["workloads"]
    assert _db_lines(db) == lines
    assert second_s < first_s / 2, (first_s, second_s)
    _assert_close(second.run(feeds), _reference(other, feeds))
    # fewer trials than already spent: nothing to tune either
    assert TVMBackend(tuning="metaschedule", trials=2, tuning_db=db).compile(model).tuning["tuned"] == 0
    assert json.loads((db / "collage-tuned.json").read_text()) and _db_lines(db) == lines
