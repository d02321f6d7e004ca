"""The cost database: conformance suite (parametrised over implementations), get_db variants, claims,
schema version, and "a fingerprint measured once is never measured again" on real repeated blocks."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from collage.measure.db import (SCHEMA_VERSION, Cost, CostDB, CostKey, SQLiteCostDB, canonical_json,
                                    default_owner, key_for)
from collage.measure.connect import get_db
from collage.errors import CollageError


def _key(fp: str = "abc", backend: str = "onnxruntime") -> CostKey:
    return CostKey(fp, backend, "1.0-fp32", "cpu", canonical_json({"threads": 2, "precision": "fp32"}), "x86|cpu|2c")


IMPLS = ["postgresql", "sqlite"]


@pytest.fixture(params=IMPLS)
def db(request, tmp_path) -> CostDB:
    """Each implementation of the contract: a SQLite file, a fresh database on a real PostgreSQL server."""
    if request.param == "sqlite":
        store = SQLiteCostDB(tmp_path / "costs.sqlite")
    else:
        store = get_db(request.getfixturevalue("postgres").fresh_url())
    yield store
    store.close()


def test_round_trip(db):
    k = _key()
    assert db.get(k) is None and k not in db
    c = Cost.from_key(k, median_ms=1.25, p10_ms=1.0, p90_ms=1.5, samples=40, compile_s=0.3)
    db.put(c)
    got = db.get(k)
    assert got == c and got.ok and got.key == k
    failed = Cost.from_key(_key("def"), error="worker crashed (SIGABRT) during compile")
    db.put(failed)
    got = db.get(failed.key)
    assert not got.ok and got.error.startswith("worker crashed") and got.median_ms is None
    assert {x.fingerprint for x in db.all()} == {"abc", "def"}
    assert set(db.get_many([k, failed.key, _key("zzz")])) == {k, failed.key}
    # replace on purpose
    db.put(Cost.from_key(k, median_ms=2.0, samples=3))
    assert db.get(k).median_ms == 2.0 and len(db.all()) == 2


def test_key_parts_all_matter(db):
    k = _key()
    db.put(Cost.from_key(k, median_ms=1.0, samples=1))
    for i in range(len(k)):
        other = CostKey(*(v + "!" if j == i else v for j, v in enumerate(k)))
        assert db.get(other) is None, f"key field {k._fields[i]} is ignored"


def test_transitions(db):
    assert db.get_transition("onnxruntime", "openvino", "{}", "m") is None
    db.put_transition("onnxruntime", "openvino", 0.05, 1e-7, "{}", "m")
    db.put_transition("onnxruntime", "openvino", 0.5, 1e-6, '{"spin":true}', "m")
    t = db.get_transition("onnxruntime", "openvino", "{}", "m")
    assert (t.fixed_ms, t.per_byte_ms) == (0.05, 1e-7)
    assert t.ms(1_000_000) == pytest.approx(0.15)
    assert db.get_transition("openvino", "onnxruntime", "{}", "m") is None  # ordered
    assert len(db.all_transitions()) == 2


def test_claims(db):
    k = _key()
    assert db.claim(k, "a", ttl_s=60)
    assert not db.claim(k, "b", ttl_s=60)
    assert db.claim(k, "a", ttl_s=60)  # re-claim by the owner
    db.release(k, "b")  # not b's: no effect
    assert not db.claim(k, "b", ttl_s=60)
    db.release(k, "a")
    assert db.claim(k, "b", ttl_s=0.2)
    time.sleep(0.3)
    assert db.claim(k, "a", ttl_s=60), "an expired claim must be taken over"


def test_claim_of_dead_process_is_stale(db):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    host = default_owner().split(":")[0]
    k = _key()
    assert db.claim(k, f"{host}:{p.pid}:1", ttl_s=3600)
    assert db.claim(k, default_owner()), "a claim whose owner process is gone must not block"
    assert not db.claim(k, f"otherhost:{p.pid}:1")


def test_threads_share_one_instance(db):
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(25):
                db.put(Cost.from_key(_key(f"t{t}-{i}"), median_ms=float(i), samples=1))
                assert db.get(_key(f"t{t}-{i}")).median_ms == float(i)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(db.all()) == 100


def test_features_store(db):
    """Features by (fingerprint, kind): all or some of a kind, replaced on put, other kinds apart."""
    assert db.get_features("cand-v1") == {}
    db.put_features("cand-v1", {"abc": {"nodes": 2.0, "op:Conv": 1.0}, "def": {"nodes": 1.0}})
    db.put_features("cand-v0", {"abc": {"nodes": 99.0}})
    assert db.get_features("cand-v1") == {"abc": {"nodes": 2.0, "op:Conv": 1.0}, "def": {"nodes": 1.0}}
    assert db.get_features("cand-v1", ["def", "zzz"]) == {"def": {"nodes": 1.0}}
    db.put_features("cand-v1", {"def": {"nodes": 3.0}})
    assert db.get_features("cand-v1", ["def"]) == {"def": {"nodes": 3.0}}
    assert db.get_features("cand-v0") == {"abc": {"nodes": 99.0}}
    db.put_features("cand-v1", {})


def test_schema_version(db):
    assert db.schema_version() == SCHEMA_VERSION


def test_claims_listed(db):
    k = _key()
    assert db.claims() == []
    db.claim(k, "a", ttl_s=60)
    (c,) = db.claims()
    assert c.key == k and c.owner == "a" and c.expires > time.time() + 30
    db.release(k, "a")
    assert db.claims() == []


def _claim_race(url: str, key: CostKey, n: int) -> int:
    """Processes claim one key at once through their own connections; how many got it."""
    code = ("import sys; from collage.measure.connect import get_db; from collage.measure.db import CostKey; "
            f"db = get_db({url!r}); k = CostKey(*{tuple(key)!r}); "
            "sys.stdin.readline(); print(int(db.claim(k, f'racer-{sys.argv[1]}', ttl_s=60)))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for i in range(n)]
    time.sleep(3.0)  # all connected and waiting
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    return sum(int(p.communicate(timeout=60)[0].strip()) for p in procs)


def test_claims_race_between_processes(db, tmp_path):
    url = str(db.path) if isinstance(db, SQLiteCostDB) else db.url
    assert _claim_race(url, _key("race"), 4) == 1, "exactly one of the processes claiming at once gets the key"


def test_errors_store(db):
    from collage.measure.accuracy import ErrorMeasure, ErrorStore

    k = _key()
    assert db.get_error(k, "d1") is None and db.error_count() == 0
    err = ErrorMeasure(rel=0.01, cos=0.999, finite=True, per_tensor={"y": {"rel": 0.01, "cos": 0.999, "finite": True}})
    store = ErrorStore(db)
    store.put(k, "d1", err)
    store.put(k, "d2", ErrorMeasure(rel=float("inf"), cos=float("nan"), finite=False))
    assert db.error_count() == 2
    got = ErrorStore(db).get(k, "d1")  # a new store: read from the database, not its memory
    assert got.rel == 0.01 and got.cos == 0.999 and got.finite and got.per_tensor["y"]["cos"] == 0.999
    assert not ErrorStore(db).get(k, "d2").finite
    assert ErrorStore(db).get(_key("other"), "d1") is None


def test_study_storage_holds_an_optuna_study(db):
    optuna = pytest.importorskip("optuna")
    url = db.study_storage()
    assert url
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=url, study_name="s", load_if_exists=True)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    again = optuna.load_study(storage=url, study_name="s")
    assert len(again.trials) == 2
    db.put(Cost.from_key(_key(), median_ms=1.0, samples=1))  # the costs live beside the study
    assert db.get(_key()).median_ms == 1.0


def test_sqlite_schema_version_and_wal(tmp_path):
    path = tmp_path / "c.sqlite"
    db = SQLiteCostDB(path)
    db.put(Cost.from_key(_key(), median_ms=1.0, samples=1))
    assert db.schema_version() == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {f"costs_v{SCHEMA_VERSION}", f"transitions_v{SCHEMA_VERSION}", f"claims_v{SCHEMA_VERSION}"} <= tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    # committed immediately: a second instance (another process would be the same) sees it
    assert SQLiteCostDB(path).get(_key()).median_ms == 1.0


def test_sqlite_put_is_visible_to_another_process(tmp_path):
    path = tmp_path / "c.sqlite"
    code = ("from collage.measure.db import *; import sys\n"
            f"db = SQLiteCostDB({str(path)!r})\n"
            "db.put(Cost.from_key(CostKey('p', 'b', 'v', 'cpu', '{}', 'm'), median_ms=3.0, samples=2))\n"
            "import os; os._exit(0)\n")  # no close, no cleanup: like a kill right after put
    subprocess.run([sys.executable, "-c", code], check=True)
    assert SQLiteCostDB(path).get(CostKey("p", "b", "v", "cpu", "{}", "m")).median_ms == 3.0


def test_a_second_instance_keeps_the_first_ones_wal_alive(tmp_path):
    """A second SQLiteCostDB on the same file in one process (collage bench opens one per model) must not drop the
    first one's locks (a Python open()/close() of the file does): another process that opens the DB read-write and
    closes it (a backup, `sqlite3 costs.sqlite .backup`) would then delete the -wal under the open connection, its
    later writes would go to the deleted file, and every new connection would get "disk I/O error"."""
    path = tmp_path / "c.sqlite"
    first = SQLiteCostDB(path)
    first.put(Cost.from_key(_key("a"), median_ms=1.0, samples=1))
    SQLiteCostDB(path)  # its open-time checks, while `first` holds its connection
    code = (f"import sqlite3; c = sqlite3.connect({str(path)!r}); c.execute('SELECT COUNT(*) FROM sqlite_master')"
            ".fetchall(); c.close()")
    subprocess.run([sys.executable, "-c", code], check=True)
    first.put(Cost.from_key(_key("b"), median_ms=2.0, samples=1))
    code = ("from collage.measure.db import *\n"
            f"db = SQLiteCostDB({str(path)!r})\n"
            "print(sorted(c.fingerprint for c in db.all()))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "['a', 'b']"


def test_get_db_variants(tmp_path, monkeypatch):
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path / "cache"))
    default = get_db(None)
    assert isinstance(default, SQLiteCostDB) and default.path == tmp_path / "cache" / "costs.sqlite"
    assert get_db(default) is default
    assert get_db(str(tmp_path / "plain.sqlite")).path == tmp_path / "plain.sqlite"
    assert get_db(tmp_path / "p2.sqlite").path == tmp_path / "p2.sqlite"
    assert get_db(f"sqlite:///{tmp_path}/abs.sqlite").path.resolve() == (tmp_path / "abs.sqlite").resolve()
    monkeypatch.chdir(tmp_path)
    rel = get_db("sqlite:///rel.sqlite")
    rel.put(Cost.from_key(_key(), median_ms=1.0, samples=1))
    assert (tmp_path / "rel.sqlite").exists()
    with pytest.raises(CollageError, match="unknown scheme"):
        get_db("mysql://host/db")
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CollageError, match="not-a-db.sqlite"):
        get_db(str(bad))


def test_get_db_postgresql(postgres):
    from collage.measure.postgres import PostgresCostDB

    url = postgres.fresh_url()
    db = get_db(url)
    assert isinstance(db, PostgresCostDB) and db.url == url
    assert db.study_storage().startswith("postgresql+psycopg://")
    db.put(Cost.from_key(_key(), median_ms=1.5, samples=2))
    other = get_db(url.replace("postgresql://", "postgres://"))  # a second client sees it at once
    assert other.get(_key()).median_ms == 1.5
    other.close()
    with pytest.raises(CollageError, match="cannot connect"):
        get_db(f"postgresql://collage:secret@127.0.0.1:{postgres.port}/no_such_db")
    try:
        get_db(f"postgresql://collage:secret@127.0.0.1:{postgres.port}/no_such_db")
    except CollageError as e:
        assert "secret" not in str(e), "the password must not appear in messages"


def test_key_for_uses_backend_identity():
    pytest.importorskip("onnxruntime")
    from collage.backends import get_backend
    from collage.util import machine_id

    b = get_backend("onnxruntime")
    k = key_for(b, "fp")
    assert k.backend == "onnxruntime" and k.version == b.version() and k.device == "cpu"
    assert k.options == canonical_json(b.options) and k.machine == machine_id()
    assert key_for(get_backend("onnxruntime", threads=1), "fp") != k


def _ort_or_skip():
    from collage.backends import unavailable_reason

    why = unavailable_reason("onnxruntime")
    if why:
        pytest.skip(f"onnxruntime backend unavailable: {why}")


@pytest.mark.parametrize("model", ["tiny-resnet", "tiny-bert"])
def test_repeated_blocks_measured_once(model, tmp_path):
    _ort_or_skip()
    from collage import zoo
    from collage.measure.schedule import measure_candidates

    g = zoo.load_graph(f"zoo:{model}")
    items = [((i,), "onnxruntime") for i in range(len(g))]
    fps = {g.fingerprint([i]) for i in range(len(g))}
    assert len(fps) < len(g), f"{model} should repeat blocks"
    db = SQLiteCostDB(tmp_path / "c.sqlite")
    res = measure_candidates(g, items, db=db, cap_s=0.02, progress=False)
    assert res.distinct == len(fps) and res.measured == len(fps) and len(res) == len(g)
    assert len(db.all()) == len(fps)
    assert res.failed == 0, res.failures
    res2 = measure_candidates(g, items, db=db, cap_s=0.02, progress=False)
    assert res2.measured == 0 and res2.reused == len(fps) and len(db.all()) == len(fps)
