"""What a failure stored in the cost DB belongs to (issue 37): the structure (shared by every model with the
fingerprint), the model file (reused by that model only) or the moment (a disturbed measurement, measured
again); node names that made ONNX Runtime refuse every candidate; old databases read as before; a PostgreSQL
database that is not collage's, and libpq's two-line messages, as one line and exit code 2."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from collage.measure.connect import get_db
from collage.measure.db import FILE, STRUCTURE, TRANSIENT, Cost, SQLiteCostDB, key_for
from collage.measure.schedule import measure_candidates
from collage.measure.measurer import failure_kind
from collage.measure.worker import resolve_backend
from collage.errors import CollageError
from collage.graph.ir import Graph
from tests.commands.test_bad_inputs import _assert_one_line, _cli
from tests.measure.test_measure import FAKE, chain_model
from tests.servers import free_port

ORT = "onnxruntime"


def _conv_chain(dup: bool, blocks: int = 2) -> onnx.ModelProto:
    """Conv+Relu blocks; ``dup``: every node is named "blk" (ONNX Runtime refuses such a model), else unique names."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k in range(blocks):
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1],
                                      name="blk" if dup else f"conv{k}"))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name="blk" if dup else f"relu{k}"))
        prev = f"r{k}"
    g = helper.make_graph(nodes, "dup" if dup else "uniq",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, 8, 16, 16])],
                          [helper.make_tensor_value_info(prev, T.FLOAT, [1, 8, 16, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _gather(top: int) -> Graph:
    """Gather of 80 indices (an initializer too large to enter the fingerprint) into a 10-row table: the indices
    reach ``top``; past 9 ONNX Runtime fails at run time. Every ``top`` gives the same fingerprint."""
    ids = numpy_helper.from_array(np.linspace(0, top, 80).astype(np.int64), "ids")
    g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["g"], axis=0, name="gather"),
                           helper.make_node("Relu", ["g"], ["y"], name="relu")], f"gather{top}",
                          [helper.make_tensor_value_info("table", T.FLOAT, [10, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [80, 4])], [ids])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return Graph.load(m)


# ---------------------------------------------------------------------- node names
def test_duplicate_node_names_are_made_unique_at_load():
    g = Graph.load(_conv_chain(dup=True))
    names = [g.op(i).name for i in range(len(g))]
    assert names == ["blk", "blk_2", "blk_3", "blk_4"]
    # the whole model and every piece of it runs on ONNX Runtime (it refused "two nodes with same node name")
    whole = resolve_backend(ORT).compile(g.extract(range(len(g))))
    assert whole.run({"x": np.ones((1, 8, 16, 16), np.float32)})
    assert g.fingerprint(range(len(g))) == Graph.load(_conv_chain(dup=False)).fingerprint(range(4))


@pytest.mark.slow
def test_tune_of_duplicate_names_does_not_poison_the_same_structure(tmp_path):
    """Issue 37: tuning a model whose nodes share a name stored "failed" for every ONNX Runtime candidate; the same
    structure with unique names then reused the failures (no ONNX Runtime baseline) and shipped OpenVINO."""
    onnx.save(_conv_chain(dup=True), str(tmp_path / "dup.onnx"))
    onnx.save(_conv_chain(dup=False), str(tmp_path / "uniq.onnx"))
    db = str(tmp_path / "costs.sqlite")
    first = _cli(tmp_path, ["tune", "dup.onnx", "-o", "out-dup", "--db", db, "--budget", "5"])
    second = _cli(tmp_path, ["tune", "uniq.onnx", "-o", "out-uniq", "--db", db, "--budget", "5"])
    assert "same node name" not in first.stderr + second.stderr, first.stderr
    assert second.returncode == 0, second.stderr
    assert "no baseline" not in second.stderr, second.stderr
    ort = [c for c in SQLiteCostDB(db).all() if c.backend == ORT]
    assert ort and all(c.ok for c in ort), [c.error for c in ort if not c.ok]
    assert first.returncode == 0, first.stderr


# ---------------------------------------------------------------------- kinds of failure
def test_failure_kinds_of_real_errors():
    assert failure_kind("timeout after 2 s during compile (worker killed)") == TRANSIENT
    assert failure_kind("worker crashed (SIGKILL) during run") == TRANSIENT
    assert failure_kind("worker crashed (SIGABRT) during compile; its last output: ...") == FILE
    assert failure_kind("UnsupportedError: openvino does not take op Foo") == STRUCTURE
    assert failure_kind("CompileError: onnxruntime failed to create a session for model 'dup_part' (6 nodes): Fail: "
                        "[ONNXRuntimeError] : 1 : FAIL : This is an invalid model. Error: two nodes with same node "
                        "name (blk).") == FILE


def test_file_failure_is_not_shared_with_another_model(tmp_path):
    bad, good = _gather(top=30), _gather(top=9)
    nodes = tuple(range(len(bad)))
    assert bad.fingerprint(nodes) == good.fingerprint(nodes)
    db = SQLiteCostDB(tmp_path / "c.sqlite")
    res = measure_candidates(bad, [(nodes, ORT)], db=db, cap_s=0.05, progress=False)
    failed = res[(nodes, ORT)]
    assert not failed.ok and "out of" in failed.error, failed
    again = measure_candidates(bad, [(nodes, ORT)], db=db, cap_s=0.05, progress=False)
    assert again.reused == 1 and again.measured == 0  # its own file: the failure holds
    other = measure_candidates(good, [(nodes, ORT)], db=db, cap_s=0.05, progress=False)
    assert other.reused == 0 and other.measured == 1, other.summary()
    assert other[(nodes, ORT)].ok, other[(nodes, ORT)].error
    assert failed.kind == FILE and failed.file == bad.digest()


def test_transient_failure_is_measured_again(tmp_path):
    """A compile slowed past the timeout (a loaded machine) is stored as transient and measured again next time
    (``delay_s`` is no part of the backend's key: both runs share it)."""
    g = Graph.load(chain_model(["Relu"]))
    item = ((0,), FAKE)
    db = SQLiteCostDB(tmp_path / "c.sqlite")
    slow = measure_candidates(g, [item], db=db, backend_options={FAKE: {"delay_s": 4.0}}, timeout_s=1, cap_s=0.05,
                              progress=False)
    assert not slow[item].ok and "timeout" in slow[item].error
    calm = measure_candidates(g, [item], db=db, timeout_s=30, cap_s=0.05, progress=False)
    assert calm.reused == 0 and calm.measured == 1 and calm[item].ok, calm[item].error
    assert db.get(calm[item].key).ok
    assert slow[item].kind == TRANSIENT


def test_structural_failure_is_shared_and_old_failures_are_measured_again(tmp_path):
    """A structural failure holds for every model with the fingerprint; a failure stored before failures had kinds
    (kind None: an older collage) could be any of them and is measured again."""
    g = Graph.load(chain_model(["Relu"]))
    item = ((0,), FAKE)
    key = key_for(resolve_backend(FAKE), g.fingerprint((0,)))
    db = SQLiteCostDB(tmp_path / "c.sqlite")
    db.put(Cost.from_key(key, error="UnsupportedError: no Relu here", kind=STRUCTURE))
    res = measure_candidates(g, [item], db=db, cap_s=0.05, progress=False)
    assert res.reused == 1 and res.measured == 0 and not res[item].ok
    db.put(Cost.from_key(key, error="CompileError: two nodes with same node name (blk)"))  # no kind
    res = measure_candidates(g, [item], db=db, cap_s=0.05, progress=False)
    assert res.reused == 0 and res.measured == 1 and res[item].ok, res[item].error


# ---------------------------------------------------------------------- old databases
_OLD_COSTS = """CREATE TABLE costs_v1 (fingerprint TEXT NOT NULL, backend TEXT NOT NULL, version TEXT NOT NULL,
    device TEXT NOT NULL, options TEXT NOT NULL, machine TEXT NOT NULL, median_ms {real}, p10_ms {real},
    p90_ms {real}, samples INTEGER NOT NULL, compile_s {real}, error TEXT, created {real} NOT NULL,
    PRIMARY KEY (fingerprint, backend, version, device, options, machine))"""
_OLD_ROWS = [("fa", "onnxruntime", "1", "cpu", "{}", "m", 1.5, 1.4, 1.6, 20, 0.1, None, 1.0),
             ("fb", "onnxruntime", "1", "cpu", "{}", "m", None, None, None, 0, None, "timeout after 9 s", 2.0)]
_OLD_INSERT = ("INSERT INTO costs_v1 (fingerprint, backend, version, device, options, machine, median_ms, p10_ms, "
               "p90_ms, samples, compile_s, error, created) VALUES ({marks})")


def _check_old_rows(db) -> None:
    rows = {c.fingerprint: c for c in db.all()}
    assert rows["fa"].ok and rows["fa"].median_ms == 1.5 and rows["fa"].kind is None
    assert rows["fb"].error == "timeout after 9 s" and rows["fb"].kind is None and rows["fb"].file is None
    assert not rows["fb"].holds_for("x") and rows["fa"].holds_for("x")
    db.put(Cost.from_key(rows["fb"].key, error="UnsupportedError: x", kind=STRUCTURE))
    assert db.get(rows["fb"].key).kind == STRUCTURE


def test_old_sqlite_db_gains_the_columns_and_reads_as_before(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(_OLD_COSTS.format(real="REAL"))
    conn.execute("CREATE TABLE collage_meta (name TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO collage_meta VALUES ('schema_version', '1')")
    conn.executemany(_OLD_INSERT.format(marks=",".join("?" * 13)), _OLD_ROWS)
    conn.commit()
    conn.close()
    db = SQLiteCostDB(path)
    _check_old_rows(db)
    db.close()
    # an older collage still writes its rows (it names its columns); they read with no kind
    conn = sqlite3.connect(path)
    conn.execute(_OLD_INSERT.format(marks=",".join("?" * 13)).replace("INSERT", "INSERT OR REPLACE"),
                 ("fb", *_OLD_ROWS[1][1:]))
    conn.commit()
    conn.close()
    fb = next(c for c in SQLiteCostDB(path).all() if c.fingerprint == "fb")
    assert fb.kind is None and fb.error == "timeout after 9 s"


def test_old_postgres_db_gains_the_columns_and_reads_as_before(postgres):
    import psycopg

    url = postgres.fresh_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_OLD_COSTS.format(real="DOUBLE PRECISION"))
        conn.execute("CREATE TABLE collage_meta (name TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO collage_meta VALUES ('schema_version', '1')")
        with conn.cursor() as cur:
            cur.executemany(_OLD_INSERT.format(marks=",".join(["%s"] * 13)), _OLD_ROWS)
    db = get_db(url)
    _check_old_rows(db)
    db.close()


# ---------------------------------------------------------------------- PostgreSQL messages, one line
@pytest.fixture
def small(tmp_path) -> Path:
    onnx.save(_conv_chain(dup=False, blocks=1), str(tmp_path / "small.onnx"))
    return tmp_path


def test_postgres_foreign_costs_table_one_line(postgres, small):
    import psycopg

    url = postgres.fresh_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE costs_v1 (id SERIAL PRIMARY KEY, amount NUMERIC, note TEXT)")
        conn.execute("INSERT INTO costs_v1 (amount, note) VALUES (12.5, 'rent')")
    proc = _cli(small, ["tune", "small.onnx", "-o", "o1", "--backends", ORT, "--db", url])
    _assert_one_line(proc, "tune", ["not a collage cost DB", "costs_v1"])
    with psycopg.connect(url, autocommit=True) as conn:  # nothing added to it
        tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = 'public'")}
        assert tables == {"costs_v1"}
        cols = {r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns "
                                           "WHERE table_name = 'costs_v1'")}
        assert cols == {"id", "amount", "note"}
    with pytest.raises(CollageError, match="not a collage cost DB"):
        get_db(url)


def test_postgres_connection_errors_one_line(postgres, small):
    refused = _cli(small, ["tune", "small.onnx", "-o", "o1", "--backends", ORT,
                           "--db", f"postgresql://collage:secret@127.0.0.1:{free_port()}/collage"])
    line = _assert_one_line(refused, "tune", ["cannot connect", "Connection refused", "Is the server running"])
    assert "secret" not in line
    missing = _cli(small, ["tune", "small.onnx", "-o", "o1", "--backends", ORT,
                           "--db", f"postgresql://collage@127.0.0.1:{postgres.port}/no_such_db"])
    _assert_one_line(missing, "tune", ["cannot connect", "no_such_db"])
