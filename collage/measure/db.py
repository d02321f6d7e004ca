"""The cost database: every measurement collage takes, kept so that nothing is measured twice.

Contract (``CostDB``), in the style of Optuna's storages:

* A **cost** (``Cost``) is one measurement of one candidate: its median latency of a full call, spread
  (p10/p90), sample count, compile time, or a failure with its error text. It is keyed by
  ``CostKey`` = (fingerprint, backend, backend version, device, options, machine): everything that can
  change the number. ``options`` is canonical JSON (``canonical_json``) of the backend's options.
* A **failure** (a cost with ``error``) says what it belongs to (``Cost.kind``), which decides who reuses it
  (``Cost.holds_for``): ``"structure"``, the backend cannot run this structure (an op or type it does not
  take), shared by every model with the fingerprint; ``"file"``, caused by this model (its weights, names,
  anything outside the fingerprint), reused only by the same model (``Cost.file``: its ``Graph.digest()``);
  ``"transient"``, the measurement was disturbed (a timeout, a worker killed under load), measured again when
  next asked. A failure of no kind was stored before failures had kinds (or by such a collage): measured again.
  Which kind an error is: ``collage.measure.measurer.failure_kind``.
* Costs are **immutable once written** in spirit: ``put`` of an existing key replaces the row (used
  only to re-measure on purpose). ``put`` commits immediately: a process killed right after ``put``
  returns has lost nothing.
* A **transition** row is the fitted cost of handing a tensor from backend ``src`` to ``dst``
  (``fixed_ms + per_byte_ms * nbytes``) under some hand-over ``settings`` (canonical JSON) on a
  ``machine``.
* A **claim** (``claim(key, owner, ttl_s)``) says "this owner is measuring this key now", so that two
  processes sharing one database never measure the same key at once. ``claim`` returns False while a
  live claim by another owner exists. A claim expires after ``ttl_s`` seconds, or at once when its
  owner is a process on this host that no longer exists (owners made by ``default_owner()`` carry
  host and pid). ``release(key, owner)`` drops it.
* An **error** row (``put_error``/``get_error``) is the measured numerical error of a lower-precision
  candidate (``collage.measure.accuracy.ErrorStore``): a JSON record keyed by ``CostKey`` plus
  ``data`` (a hash of the calibration inputs and the candidate's weights).
* A **ranges** document (``put_ranges``/``get_ranges``) holds the int8 activation ranges of a model
  calibrated once on a calibration set (keyed by model structure + weights, and calibration data + method).
* A **features** row (``put_features``/``get_features``) is what a candidate is before it runs
  (``collage.cost_models.features``): a JSON ``{name: number}`` keyed by (fingerprint, ``kind``), the kind
  naming the feature extractor's version. Costs are keyed by fingerprint without the model they came from;
  features stored by fingerprint let the learned cost model (``collage.cost_models.learned``) train on every
  measured row of every model. The table was added beside the others (``features_v1``): no existing table's
  layout or meaning changed, so the schema version stays and older DBs gain the table on first open.
* ``study_storage()`` is the URL of an Optuna storage inside the same database (the refinement study
  lives beside the costs, so an interrupted refinement resumes), or None for a store that has none.
* Methods raise ``CollageError`` subclasses only for unusable locations (``get_db``); reading a
  missing key returns ``None``.
* **Thread and process safety**: ``SQLiteCostDB`` may be shared by threads of one process (one
  connection per thread) and by any number of processes on one machine (SQLite WAL mode with a busy
  timeout; every write is its own transaction). It must not live on a network file system.
  ``PostgresCostDB`` (``collage.measure.postgres``) may be shared by threads, processes and machines
  (one connection per thread; claims take a row lock); it is the store of a measurement cluster.
* **Schema version**: table names carry ``SCHEMA_VERSION`` (``costs_v1``, ...) and the ``collage_meta``
  table records it, in every implementation. The ``kind`` and ``file`` columns were added to ``costs_v1``
  (``ADDED_COST_COLUMNS``, on first open, nullable): a row written before them, or by an older collage, reads
  with both None and keeps its meaning, and an older collage reads and writes the table as before (it names its
  columns), so the schema version stays and databases shared by both keep working.

``get_db(None | url | path | instance)`` hides the default: ``None`` is
``collage.util.cache_dir()/"costs.sqlite"``; ``"sqlite:///rel/path.sqlite"`` (relative),
``"sqlite:////abs/path.sqlite"`` (absolute, SQLAlchemy/Optuna convention) or a plain path name a file;
``"postgresql://user[:password]@host[:port]/dbname"`` a PostgreSQL database (the ``cluster`` extra); a
``CostDB`` instance is returned as is.
"""
from __future__ import annotations

import abc
import json
import math
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from collage.errors import CollageError
from collage.util import machine_id

if TYPE_CHECKING:
    from collage.backends.base import Backend

#: Bumped whenever a table's layout or a stored number's meaning changes; table names carry it.
SCHEMA_VERSION = 1

#: What a failed cost belongs to (``Cost.kind``; module docstring).
STRUCTURE = "structure"  # the backend cannot run this structure: every model with the fingerprint shares it
FILE = "file"  # caused by the model file, not its structure: reused only by the same model (``Cost.file``)
TRANSIENT = "transient"  # the measurement was disturbed (timeout, worker killed): measured again when next asked
FAILURE_KINDS = (STRUCTURE, FILE, TRANSIENT)


def canonical_json(value: Any) -> str:
    """Stable JSON text (sorted keys, no spaces) used for options and settings in keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class CostKey(NamedTuple):
    """Everything that can change a measured number."""

    fingerprint: str
    backend: str
    version: str
    device: str
    options: str  # canonical JSON
    machine: str


def key_for(backend: Backend, fingerprint: str) -> CostKey:
    """The key of ``fingerprint`` measured on ``backend`` on this machine."""
    return CostKey(fingerprint, backend.name, backend.version(), backend.device,
                   canonical_json(backend.options), machine_id())


def key_maker(backend: Backend) -> Callable[[str], CostKey]:
    """``key_for(backend, fingerprint)`` with the backend's part computed once: for the keys of every candidate of
    a large graph (its version and options JSON are the same for all)."""
    _, *rest = key_for(backend, "")
    return lambda fingerprint: CostKey(fingerprint, *rest)


@dataclass
class Cost:
    """One measurement (or failed attempt) of one candidate; see the module docstring."""

    fingerprint: str
    backend: str
    version: str
    device: str
    options: str
    machine: str
    median_ms: float | None
    p10_ms: float | None = None
    p90_ms: float | None = None
    samples: int = 0
    compile_s: float | None = None
    error: str | None = None
    created: float = field(default_factory=time.time)
    kind: str | None = None  # of a failure: one of FAILURE_KINDS (None: stored before failures had kinds)
    file: str | None = None  # of a "file" failure: the digest of the model it belongs to (Graph.digest())

    @property
    def ok(self) -> bool:
        return self.error is None and self.median_ms is not None

    def holds_for(self, file: str | Callable[[], str] | None) -> bool:
        """Whether this cost stands for the candidate of the model whose ``Graph.digest()`` is ``file`` (a callable
        is asked only for a "file" failure): a measurement and a structural failure hold for every model, a file
        failure for its own model only; a transient failure and one without a kind hold for none (measured again)."""
        if self.ok or self.kind == STRUCTURE:
            return True
        if self.kind == FILE:
            digest = file() if callable(file) else file
            return digest is not None and digest == self.file
        return False

    @property
    def key(self) -> CostKey:
        return CostKey(self.fingerprint, self.backend, self.version, self.device, self.options, self.machine)

    @classmethod
    def from_key(cls, key: CostKey, **fields: Any) -> Cost:
        fields.setdefault("median_ms", None)
        return cls(*key, **fields)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Transition:
    """A fitted transition cost ``fixed_ms + per_byte_ms * nbytes`` from ``src`` to ``dst``."""

    src: str
    dst: str
    fixed_ms: float
    per_byte_ms: float
    settings: str
    machine: str
    created: float = 0.0

    def ms(self, nbytes: int) -> float:
        return max(0.0, self.fixed_ms + self.per_byte_ms * nbytes)


def default_owner() -> str:
    """A claim owner naming this process: ``host:pid:thread``."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def owner_dead(owner: str) -> bool:
    """True when ``owner`` is a process on this host that no longer exists."""
    parts = owner.split(":")
    if len(parts) < 2 or parts[0] != socket.gethostname():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Claim(NamedTuple):
    """A claim row: ``owner`` measures ``key`` until ``expires`` (seconds since the epoch)."""

    key: CostKey
    owner: str
    expires: float


def error_columns(record: Mapping[str, Any]) -> tuple[float | None, float | None, bool]:
    """The queryable columns of an error record: rel, cos (None unless finite numbers), finite."""
    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
    return num(record.get("rel")), num(record.get("cos")), bool(record.get("finite", True))


class CostDB(abc.ABC):
    """Abstract cost database (contract in the module docstring)."""

    #: A URL ``get_db`` opens to this same database from another process or machine (None: there is none).
    url: str | None = None
    #: the tables, the same names in every store (a schema version in each name)
    costs_table = f"costs_v{SCHEMA_VERSION}"
    transitions_table = f"transitions_v{SCHEMA_VERSION}"
    claims_table = f"claims_v{SCHEMA_VERSION}"
    errors_table = f"errors_v{SCHEMA_VERSION}"
    ranges_table = f"int8_ranges_v{SCHEMA_VERSION}"
    features_table = f"features_v{SCHEMA_VERSION}"

    @abc.abstractmethod
    def get(self, key: CostKey) -> Cost | None:
        """The cost stored under ``key``, or None."""

    @abc.abstractmethod
    def put(self, cost: Cost) -> None:
        """Store ``cost`` under ``cost.key`` (replacing any row there); committed on return."""

    @abc.abstractmethod
    def all(self) -> list[Cost]:
        """Every stored cost."""

    @abc.abstractmethod
    def put_transition(self, src: str, dst: str, fixed_ms: float, per_byte_ms: float,
                       settings: str, machine: str) -> None:
        """Store a fitted transition (replacing one with the same src, dst, settings, machine)."""

    @abc.abstractmethod
    def get_transition(self, src: str, dst: str, settings: str, machine: str) -> Transition | None:
        """The stored transition, or None."""

    @abc.abstractmethod
    def all_transitions(self) -> list[Transition]:
        """Every stored transition."""

    @abc.abstractmethod
    def claim(self, key: CostKey, owner: str, ttl_s: float = 600.0) -> bool:
        """Claim ``key`` for ``owner``; False while another owner's live claim exists."""

    @abc.abstractmethod
    def release(self, key: CostKey, owner: str) -> None:
        """Drop ``owner``'s claim on ``key`` (no-op if it holds none)."""

    @abc.abstractmethod
    def claims(self) -> list[Claim]:
        """Every claim row (expired ones too): who is measuring what, for watching a job."""

    @abc.abstractmethod
    def get_error(self, key: CostKey, data: str) -> dict[str, Any] | None:
        """The error record stored under (``key``, ``data``), or None."""

    @abc.abstractmethod
    def put_error(self, key: CostKey, data: str, record: Mapping[str, Any]) -> None:
        """Store an error record (JSON-able; ``rel``, ``cos``, ``finite`` also kept as columns); committed on return."""

    @abc.abstractmethod
    def error_count(self) -> int:
        """How many error records are stored."""

    @abc.abstractmethod
    def get_ranges(self, model: str, data: str) -> dict[str, Any] | None:
        """The int8 activation ranges document of ``model`` calibrated on ``data`` (collage.backends.qdq), or None."""

    @abc.abstractmethod
    def put_ranges(self, model: str, data: str, doc: Mapping[str, Any]) -> None:
        """Store a ranges document (JSON-able), replacing any earlier one; committed on return."""

    @abc.abstractmethod
    def put_features(self, kind: str, rows: Mapping[str, Mapping[str, float]]) -> None:
        """Store ``{fingerprint: features}`` under ``kind`` (replacing rows there), in one transaction."""

    @abc.abstractmethod
    def get_features(self, kind: str, fingerprints: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
        """``{fingerprint: features}`` stored under ``kind`` (of ``fingerprints``, or all)."""

    @abc.abstractmethod
    def study_storage(self) -> str | None:
        """URL of an Optuna storage in this database (SQLAlchemy form), or None."""

    @abc.abstractmethod
    def schema_version(self) -> int:
        """The schema version recorded in the database."""

    # derived queries, written once on top of the primitives
    def get_many(self, keys: Iterable[CostKey]) -> dict[CostKey, Cost]:
        """The stored costs of ``keys`` (keys without one are absent)."""
        out: dict[CostKey, Cost] = {}
        for k in keys:
            c = self.get(k)
            if c is not None:
                out[k] = c
        return out

    def __contains__(self, key: CostKey) -> bool:
        return self.get(key) is not None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (connections); the object may not be used afterwards."""


KEY_COLUMNS = ("fingerprint", "backend", "version", "device", "options", "machine")
#: Columns added to the costs table after it was first made (module docstring, Schema version): TEXT, nullable.
ADDED_COST_COLUMNS = ("kind", "file")
COST_COLUMNS = (KEY_COLUMNS + ("median_ms", "p10_ms", "p90_ms", "samples", "compile_s", "error", "created")
                + ADDED_COST_COLUMNS)


class SQLiteCostDB(CostDB):
    """The default store: one SQLite file in WAL mode (see the module docstring for safety)."""

    def __init__(self, path: str | os.PathLike, *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path).expanduser()
        self.busy_timeout_s = busy_timeout_s
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CollageError(f"cost database {self.path}: cannot create its directory ({e})") from e
        self._local = threading.local()
        self._check_existing()
        self._init_schema()

    def _check_existing(self) -> None:
        """Before the first write: refuse a file that is not a collage DB, a damaged one (``PRAGMA quick_check``:
        writing to a damaged file can lose what it still holds) and a read-only one, naming the file."""
        path = self.path
        if path.exists() and not path.is_file():
            raise CollageError(f"cost database {path}: not a file; pass --db with a file path")
        # first, before SQLite fails to open it for the same reason (read-only files or folders, mounts too)
        for where in (path.parent, path):
            if where.exists() and not os.access(where, os.W_OK):
                raise CollageError(f"cost database {path}: {where} is read-only (SQLite needs to write the file and "
                                   "its -wal/-shm files beside it); make it writable or pass --db with a writable path")
        if not path.exists() or path.stat().st_size == 0:
            return
        # Read through SQLite only, never with open(): closing any other descriptor of the file drops every POSIX
        # lock this process holds on it, including those of an SQLiteCostDB already open on the same path (collage
        # bench opens one per model). Another process closing its connection then finds no other user, checkpoints
        # and deletes the -wal file under the open connection: its later writes are lost and every new connection
        # gets "disk I/O error". SQLite's own connections share the locks and keep such descriptors open.
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=self.busy_timeout_s)
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                check = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            if "file is not a database" in str(e):
                raise CollageError(f"cost database {path}: not an SQLite file (the file holds something else); "
                                   "pass --db with another path, or move the file away") from None
            raise CollageError(f"cost database {path}: damaged or unreadable SQLite file ({e}); collage does not "
                               "write to it. Move it away (collage starts a new one; its measurements are lost) or "
                               f"try to save them with `sqlite3 {path} .recover`") from None
        if check != ["ok"]:
            raise CollageError(f"cost database {path}: damaged (PRAGMA quick_check: {'; '.join(check)[:200]}); "
                               "collage does not write to a damaged DB. Move it away (collage starts a new one) or "
                               f"try to save its measurements with `sqlite3 {path} .recover > dump.sql`")
        if tables and "collage_meta" not in tables:
            raise CollageError(f"cost database {path}: an SQLite database of something else (tables "
                               f"{sorted(tables)[:5]}), not a collage cost DB; collage adds nothing to it: pass --db "
                               "with another path")

    # connection per thread (and per process: a forked child opens its own)
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            try:
                conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout_s, isolation_level=None)
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as e:
                raise CollageError(f"cost database {self.path}: cannot open it as SQLite ({e}); move the file "
                                   "away or pass another --db") from e
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _write(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(sql, params)
            conn.execute("COMMIT")
            return cur
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _init_schema(self) -> None:
        key = ", ".join(f"{c} TEXT NOT NULL" for c in KEY_COLUMNS)
        pk = ", ".join(KEY_COLUMNS)
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.costs_table} ({key},
                median_ms REAL, p10_ms REAL, p90_ms REAL, samples INTEGER NOT NULL, compile_s REAL,
                error TEXT, created REAL NOT NULL, kind TEXT, file TEXT, PRIMARY KEY ({pk}))""")
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({self.costs_table})")}
            for column in ADDED_COST_COLUMNS:  # a table made before the column was
                if column not in have:
                    conn.execute(f"ALTER TABLE {self.costs_table} ADD COLUMN {column} TEXT")
            conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.transitions_table} (src TEXT NOT NULL,
                dst TEXT NOT NULL, settings TEXT NOT NULL, machine TEXT NOT NULL, fixed_ms REAL NOT NULL,
                per_byte_ms REAL NOT NULL, created REAL NOT NULL, PRIMARY KEY (src, dst, settings, machine))""")
            conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.claims_table} ({key}, owner TEXT NOT NULL,
                expires REAL NOT NULL, PRIMARY KEY ({pk}))""")
            conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.errors_table} ({key}, data TEXT NOT NULL, rel REAL,
                cos REAL, finite INTEGER NOT NULL, detail TEXT, created REAL, PRIMARY KEY ({pk}, data))""")
            conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.ranges_table} (model TEXT NOT NULL, data TEXT NOT NULL,
                ranges TEXT NOT NULL, created REAL, PRIMARY KEY (model, data))""")
            conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.features_table} (fingerprint TEXT NOT NULL,
                kind TEXT NOT NULL, features TEXT NOT NULL, created REAL, PRIMARY KEY (fingerprint, kind))""")
            conn.execute("CREATE TABLE IF NOT EXISTS collage_meta (name TEXT PRIMARY KEY, value TEXT)")
            conn.execute("INSERT OR IGNORE INTO collage_meta VALUES ('created_by', 'collage')")
            conn.execute("INSERT OR REPLACE INTO collage_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if "readonly" in str(e) or "read-only" in str(e):
                raise CollageError(f"cost database {self.path}: read-only ({e}); make the file and its directory "
                                   "writable or pass --db with a writable path") from e
            raise CollageError(f"cost database {self.path}: not a usable SQLite file ({e}); "
                               "move it away or pass another --db") from e

    # costs -----------------------------------------------------------------
    def get(self, key: CostKey) -> Cost | None:
        where = " AND ".join(f"{c}=?" for c in KEY_COLUMNS)
        row = self._conn().execute(f"SELECT {', '.join(COST_COLUMNS)} FROM {self.costs_table} WHERE {where}",
                                   tuple(key)).fetchone()
        return Cost(*row) if row else None

    def get_many(self, keys: Iterable[CostKey]) -> dict[CostKey, Cost]:
        wanted = {CostKey(*k) for k in keys}
        out: dict[CostKey, Cost] = {}
        # group by everything but the fingerprint: one query per (backend, version, ...) combination
        groups: dict[tuple, list[str]] = {}
        for k in wanted:
            groups.setdefault(tuple(k[1:]), []).append(k.fingerprint)
        conn = self._conn()
        for rest, fps in groups.items():
            sql = (f"SELECT {', '.join(COST_COLUMNS)} FROM {self.costs_table} WHERE backend=? AND version=? AND "
                   "device=? AND options=? AND machine=?")
            for row in _rows_with_fingerprints(conn, sql, rest, fps):
                c = Cost(*row)
                out[c.key] = c
        return out

    def put(self, cost: Cost) -> None:
        marks = ",".join("?" * len(COST_COLUMNS))
        values = [getattr(cost, c) for c in COST_COLUMNS]
        self._write(f"INSERT OR REPLACE INTO {self.costs_table} ({', '.join(COST_COLUMNS)}) VALUES ({marks})", values)

    def all(self) -> list[Cost]:
        rows = self._conn().execute(f"SELECT {', '.join(COST_COLUMNS)} FROM {self.costs_table}").fetchall()
        return [Cost(*r) for r in rows]

    def schema_version(self) -> int:
        row = self._conn().execute("SELECT value FROM collage_meta WHERE name='schema_version'").fetchone()
        return int(row[0])

    # transitions -------------------------------------------------------------
    def put_transition(self, src: str, dst: str, fixed_ms: float, per_byte_ms: float,
                       settings: str, machine: str) -> None:
        self._write(f"INSERT OR REPLACE INTO {self.transitions_table} VALUES (?,?,?,?,?,?,?)",
                    (src, dst, settings, machine, float(fixed_ms), float(per_byte_ms), time.time()))

    def get_transition(self, src: str, dst: str, settings: str, machine: str) -> Transition | None:
        row = self._conn().execute(
            f"SELECT src, dst, fixed_ms, per_byte_ms, settings, machine, created FROM {self.transitions_table} "
            "WHERE src=? AND dst=? AND settings=? AND machine=?", (src, dst, settings, machine)).fetchone()
        return Transition(*row) if row else None

    def all_transitions(self) -> list[Transition]:
        rows = self._conn().execute(
            f"SELECT src, dst, fixed_ms, per_byte_ms, settings, machine, created "
            f"FROM {self.transitions_table}").fetchall()
        return [Transition(*r) for r in rows]

    # claims ----------------------------------------------------------------
    def claim(self, key: CostKey, owner: str, ttl_s: float = 600.0) -> bool:
        where = " AND ".join(f"{c}=?" for c in KEY_COLUMNS)
        conn = self._conn()
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(f"SELECT owner, expires FROM {self.claims_table} WHERE {where}", tuple(key)).fetchone()
            if row is not None and row[0] != owner and row[1] > now and not owner_dead(row[0]):
                conn.execute("COMMIT")
                return False
            conn.execute(f"INSERT OR REPLACE INTO {self.claims_table} VALUES ({','.join('?' * 8)})",
                         (*key, owner, now + ttl_s))
            conn.execute("COMMIT")
            return True
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def release(self, key: CostKey, owner: str) -> None:
        where = " AND ".join(f"{c}=?" for c in KEY_COLUMNS)
        self._write(f"DELETE FROM {self.claims_table} WHERE {where} AND owner=?", (*key, owner))

    def claims(self) -> list[Claim]:
        rows = self._conn().execute(
            f"SELECT {', '.join(KEY_COLUMNS)}, owner, expires FROM {self.claims_table}").fetchall()
        return [Claim(CostKey(*r[:6]), r[6], r[7]) for r in rows]

    # errors of lower-precision candidates ----------------------------------
    def get_error(self, key: CostKey, data: str) -> dict[str, Any] | None:
        where = " AND ".join(f"{c}=?" for c in KEY_COLUMNS)
        row = self._conn().execute(f"SELECT detail FROM {self.errors_table} WHERE {where} AND data=?",
                                   (*key, data)).fetchone()
        return json.loads(row[0]) if row else None

    def put_error(self, key: CostKey, data: str, record: Mapping[str, Any]) -> None:
        rel, cos, finite = error_columns(record)
        self._write(f"INSERT OR REPLACE INTO {self.errors_table} VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (*key, data, rel, cos, int(finite), json.dumps(dict(record)), time.time()))

    def error_count(self) -> int:
        return int(self._conn().execute(f"SELECT COUNT(*) FROM {self.errors_table}").fetchone()[0])

    def get_ranges(self, model: str, data: str) -> dict[str, Any] | None:
        row = self._conn().execute(f"SELECT ranges FROM {self.ranges_table} WHERE model=? AND data=?",
                                   (model, data)).fetchone()
        return json.loads(row[0]) if row else None

    def put_ranges(self, model: str, data: str, doc: Mapping[str, Any]) -> None:
        self._write(f"INSERT OR REPLACE INTO {self.ranges_table} VALUES (?,?,?,?)",
                    (model, data, json.dumps(dict(doc)), time.time()))

    # features of candidates (collage.cost_models.features) ----------------
    def put_features(self, kind: str, rows: Mapping[str, Mapping[str, float]]) -> None:
        now = time.time()
        values = [(fp, kind, canonical_json(dict(f)), now) for fp, f in rows.items()]
        if not values:
            return
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(f"INSERT OR REPLACE INTO {self.features_table} VALUES (?,?,?,?)", values)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def get_features(self, kind: str, fingerprints: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
        conn = self._conn()
        sql = f"SELECT fingerprint, features FROM {self.features_table} WHERE kind=?"
        if fingerprints is None:
            rows = conn.execute(sql, (kind,)).fetchall()
        else:
            rows = _rows_with_fingerprints(conn, sql, (kind,), sorted(set(fingerprints)))
        return {fp: json.loads(text) for fp, text in rows}

    def study_storage(self) -> str | None:
        return f"sqlite:///{self.path.resolve()}"

    @property
    def url(self) -> str:  # type: ignore[override]
        return f"sqlite:///{self.path.resolve()}"

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __repr__(self) -> str:
        return f"SQLiteCostDB({str(self.path)!r})"


def _rows_with_fingerprints(conn: sqlite3.Connection, sql: str, params: Sequence[Any],
                            fingerprints: Sequence[str], chunk: int = 500) -> list[tuple]:
    """The rows of ``sql`` (a SELECT ending in a WHERE clause) ``AND fingerprint IN (...)``, asked in chunks of
    ``chunk`` fingerprints (SQLite bounds the number of ``?`` parameters in one statement)."""
    rows: list[tuple] = []
    for i in range(0, len(fingerprints), chunk):
        part = fingerprints[i:i + chunk]
        rows += conn.execute(f"{sql} AND fingerprint IN ({','.join('?' * len(part))})", (*params, *part)).fetchall()
    return rows


def _clear_db_errors(method: Any) -> Any:
    """A sqlite3.DatabaseError in the middle of a job (a page damaged after the open-time check) becomes a
    CollageError naming the file and what to do."""
    import functools

    @functools.wraps(method)
    def wrapper(self: SQLiteCostDB, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            raise CollageError(f"cost database {self.path}: {e} (the file may be damaged: check it with "
                               f"`sqlite3 {self.path} 'PRAGMA quick_check'`; move it away to start a new one)") from e
    return wrapper


for _name in ("get", "get_many", "put", "all", "put_transition", "get_transition", "all_transitions", "claim",
              "release", "claims", "get_error", "put_error", "error_count", "get_ranges", "put_ranges",
              "put_features", "get_features", "schema_version"):
    setattr(SQLiteCostDB, _name, _clear_db_errors(getattr(SQLiteCostDB, _name)))
