"""The cost database on PostgreSQL: the ``CostDB`` contract (collage.measure.db) for a measurement cluster.

    db = get_db("postgresql://collage@dbhost:5432/collage")     # or PostgresCostDB(url)

Every machine of a cluster (and every tuner) shares one database, so that what one machine measured
is never measured again by another. The tables are those of ``SQLiteCostDB`` with the same names
(``costs_v1``, ``transitions_v1``, ``claims_v1``, ``errors_v1``, ``features_v1``, ``collage_meta``), created on first
use under an advisory lock (two processes opening a fresh database at once do not race).

* Every write is its own transaction, committed on return (autocommit connection): a process killed
  right after ``put`` returns has lost nothing.
* **Claims** take a row lock: ``INSERT ... ON CONFLICT DO NOTHING`` creates a free claim at once; a
  claim row that exists is read ``FOR UPDATE`` and taken over only when it is the caller's, expired or
  held by a dead process of this host. Two drivers claiming one key at the same instant: exactly one
  gets it. Expiry uses the **database server's clock** (``clock_timestamp()``), so machines whose clocks
  disagree still agree on when a claim expires.
* One connection per thread (and per process: a forked child opens its own).
* A database that holds tables of collage's names but is not a collage cost DB (no ``collage_meta`` table, or a
  ``costs_v1`` without collage's columns) is refused before anything is written to it, as ``SQLiteCostDB``
  refuses a foreign file; the ``kind`` and ``file`` columns (``ADDED_COST_COLUMNS``) are added to a collage
  ``costs_v1`` made before them. Every error of the server or of libpq (whose messages span lines) is a
  ``CollageError`` of one line naming the database.
* ``study_storage()`` is the same database as a SQLAlchemy URL (``postgresql+psycopg://...``): Optuna's
  tables (``studies``, ``trials``, ...) live beside collage's.

Driver: psycopg 3 (the ``cluster`` extra), used directly rather than through SQLAlchemy: the contract is a
dozen statements whose PostgreSQL forms (``ON CONFLICT``, ``FOR UPDATE``, advisory locks) have to be
written per dialect anyway, and psycopg is the driver SQLAlchemy would load underneath.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from collage.measure.db import (ADDED_COST_COLUMNS, COST_COLUMNS, KEY_COLUMNS, SCHEMA_VERSION, Claim, Cost, CostDB,
                                    CostKey, Transition, canonical_json, error_columns, owner_dead)
from collage.extras import require
from collage.errors import CollageError

#: the database server's clock, in seconds since the epoch
_NOW = "extract(epoch from clock_timestamp())"
_SCHEMA_LOCK = 0x636F6C6C61676531  # pg_advisory_xact_lock key while creating the tables ("collage1")


def _psycopg() -> Any:
    return require("psycopg", "a postgresql:// cost database", "pip install 'psycopg[binary]'")


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def one_line(error: BaseException) -> str:
    """The text of a psycopg/libpq error on one line: libpq ends many messages with an indented hint on a line of
    its own ("Connection refused" + "Is the server running on that host ..."); its lines are joined with "; "."""
    return "; ".join(" ".join(line.split()) for line in str(error).splitlines() if line.strip()) or type(error).__name__


class PostgresCostDB(CostDB):
    """``CostDB`` on a PostgreSQL database named by a ``postgresql://`` URL (module docstring)."""

    def __init__(self, url: str, *, connect_timeout_s: float = 10.0) -> None:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
            raise CollageError(f"cost database {redact(url)!r}: not a postgresql:// URL")
        self.url = f"postgresql://{rest}"
        self.connect_timeout_s = connect_timeout_s
        self._local = threading.local()
        self._init_schema()

    # connection per thread (and per process)
    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or getattr(self._local, "pid", None) != os.getpid():
            psycopg = _psycopg()
            try:
                conn = psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout_s)))
            except psycopg.Error as e:
                raise CollageError(f"cost database {redact(self.url)}: cannot connect ({one_line(e)}); is the "
                                   "server running and the URL's user, host, port and database right?") from e
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        conn = self._conn()
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    def _one(self, sql: str, params: Iterable[Any] = ()) -> tuple | None:
        with self._conn().cursor() as cur:
            cur.execute(sql, tuple(params))
            return cur.fetchone()

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._conn().cursor() as cur:
            cur.execute(sql, tuple(params))
            return cur.fetchall()

    def _exec(self, sql: str, params: Iterable[Any] = ()) -> None:
        with self._conn().cursor() as cur:
            cur.execute(sql, tuple(params))

    def _init_schema(self) -> None:
        key = ", ".join(f"{c} TEXT NOT NULL" for c in KEY_COLUMNS)
        pk = ", ".join(KEY_COLUMNS)
        psycopg = _psycopg()
        try:
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                self._check_ours(cur)
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.costs_table} ({key}, median_ms DOUBLE PRECISION,
                    p10_ms DOUBLE PRECISION, p90_ms DOUBLE PRECISION, samples INTEGER NOT NULL,
                    compile_s DOUBLE PRECISION, error TEXT, created DOUBLE PRECISION NOT NULL, kind TEXT, file TEXT,
                    PRIMARY KEY ({pk}))""")
                for column in ADDED_COST_COLUMNS:  # a table made before the column was
                    cur.execute(f"ALTER TABLE {self.costs_table} ADD COLUMN IF NOT EXISTS {column} TEXT")
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.transitions_table} (src TEXT NOT NULL,
                    dst TEXT NOT NULL, settings TEXT NOT NULL, machine TEXT NOT NULL,
                    fixed_ms DOUBLE PRECISION NOT NULL, per_byte_ms DOUBLE PRECISION NOT NULL,
                    created DOUBLE PRECISION NOT NULL,
                    PRIMARY KEY (src, dst, settings, machine))""")
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.claims_table} ({key}, owner TEXT NOT NULL,
                    expires DOUBLE PRECISION NOT NULL, PRIMARY KEY ({pk}))""")
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.errors_table} ({key}, data TEXT NOT NULL,
                    rel DOUBLE PRECISION, cos DOUBLE PRECISION, finite BOOLEAN NOT NULL, detail TEXT,
                    created DOUBLE PRECISION, PRIMARY KEY ({pk}, data))""")
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.ranges_table} (model TEXT NOT NULL, data TEXT NOT NULL,
                    ranges TEXT NOT NULL, created DOUBLE PRECISION, PRIMARY KEY (model, data))""")
                cur.execute(f"""CREATE TABLE IF NOT EXISTS {self.features_table} (fingerprint TEXT NOT NULL,
                    kind TEXT NOT NULL, features TEXT NOT NULL, created DOUBLE PRECISION,
                    PRIMARY KEY (fingerprint, kind))""")
                cur.execute("CREATE TABLE IF NOT EXISTS collage_meta (name TEXT PRIMARY KEY, value TEXT)")
                cur.execute("INSERT INTO collage_meta VALUES ('created_by', 'collage') ON CONFLICT DO NOTHING")
                cur.execute("INSERT INTO collage_meta VALUES ('schema_version', %s) "
                            "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value", (str(SCHEMA_VERSION),))
        except psycopg.Error as e:
            raise CollageError(f"cost database {redact(self.url)}: cannot create collage's tables ({one_line(e)}); "
                               "the user needs CREATE on the database's public schema") from e

    def _check_ours(self, cur: Any) -> None:
        """Refuse a database whose tables of collage's names are someone else's (module docstring)."""
        ours = [self.costs_table, self.transitions_table, self.claims_table, self.errors_table, self.ranges_table,
                self.features_table, "collage_meta"]
        cur.execute("SELECT table_name, column_name FROM information_schema.columns WHERE "
                    "table_schema = current_schema() AND table_name = ANY(%s)", (ours,))
        columns: dict[str, set[str]] = {}
        for table, column in cur.fetchall():
            columns.setdefault(table, set()).add(column)
        if not columns:
            return
        base = set(COST_COLUMNS) - set(ADDED_COST_COLUMNS)
        if "collage_meta" not in columns:
            found = sorted(columns)[:5]
        elif self.costs_table in columns and not base <= columns[self.costs_table]:
            found = [f"{self.costs_table} with columns {sorted(columns[self.costs_table])[:8]}"]
        else:
            return
        raise CollageError(f"cost database {redact(self.url)}: a PostgreSQL database of something else (tables "
                           f"{', '.join(found)}), not a collage cost DB; collage adds nothing to it: pass --db with "
                           "another database")

    # costs -----------------------------------------------------------------
    def get(self, key: CostKey) -> Cost | None:
        where = " AND ".join(f"{c}=%s" for c in KEY_COLUMNS)
        row = self._one(f"SELECT {', '.join(COST_COLUMNS)} FROM {self.costs_table} WHERE {where}", key)
        return Cost(*row) if row else None

    def get_many(self, keys: Iterable[CostKey]) -> dict[CostKey, Cost]:
        groups: dict[tuple, list[str]] = {}
        for k in {CostKey(*k) for k in keys}:
            groups.setdefault(tuple(k[1:]), []).append(k.fingerprint)
        out: dict[CostKey, Cost] = {}
        for rest, fps in groups.items():
            rows = self._rows(f"SELECT {', '.join(COST_COLUMNS)} FROM {self.costs_table} WHERE backend=%s AND "
                              "version=%s AND device=%s AND options=%s AND machine=%s AND fingerprint = ANY(%s)",
                              (*rest, fps))
            for row in rows:
                c = Cost(*row)
                out[c.key] = c
        return out

    def put(self, cost: Cost) -> None:
        marks = ",".join(["%s"] * len(COST_COLUMNS))
        updates = ", ".join(f"{c}=EXCLUDED.{c}" for c in COST_COLUMNS if c not in KEY_COLUMNS)
        self._exec(f"INSERT INTO {self.costs_table} ({', '.join(COST_COLUMNS)}) VALUES ({marks}) "
                   f"ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {updates}",
                   [getattr(cost, c) for c in COST_COLUMNS])

    def all(self) -> list[Cost]:
        return [Cost(*r) for r in self._rows(f"SELECT {', '.join(COST_COLUMNS)} FROM {self.costs_table}")]

    def schema_version(self) -> int:
        row = self._one("SELECT value FROM collage_meta WHERE name='schema_version'")
        return int(row[0])

    # transitions -------------------------------------------------------------
    def put_transition(self, src: str, dst: str, fixed_ms: float, per_byte_ms: float,
                       settings: str, machine: str) -> None:
        self._exec(f"INSERT INTO {self.transitions_table} VALUES (%s,%s,%s,%s,%s,%s,%s) "
                   "ON CONFLICT (src, dst, settings, machine) DO UPDATE SET fixed_ms=EXCLUDED.fixed_ms, "
                   "per_byte_ms=EXCLUDED.per_byte_ms, created=EXCLUDED.created",
                   (src, dst, settings, machine, float(fixed_ms), float(per_byte_ms), time.time()))

    def get_transition(self, src: str, dst: str, settings: str, machine: str) -> Transition | None:
        row = self._one(f"SELECT src, dst, fixed_ms, per_byte_ms, settings, machine, created FROM "
                        f"{self.transitions_table} WHERE src=%s AND dst=%s AND settings=%s AND machine=%s",
                        (src, dst, settings, machine))
        return Transition(*row) if row else None

    def all_transitions(self) -> list[Transition]:
        rows = self._rows(f"SELECT src, dst, fixed_ms, per_byte_ms, settings, machine, created FROM "
                          f"{self.transitions_table}")
        return [Transition(*r) for r in rows]

    # claims ----------------------------------------------------------------
    def claim(self, key: CostKey, owner: str, ttl_s: float = 600.0) -> bool:
        where = " AND ".join(f"{c}=%s" for c in KEY_COLUMNS)
        for _ in range(5):  # a claim released between our INSERT and SELECT: try again
            with self._tx() as cur:
                cur.execute(f"INSERT INTO {self.claims_table} VALUES ({','.join(['%s'] * 7)}, {_NOW} + %s) "
                            "ON CONFLICT DO NOTHING RETURNING owner", (*key, owner, float(ttl_s)))
                if cur.fetchone() is not None:
                    return True
                cur.execute(f"SELECT owner, expires, {_NOW} FROM {self.claims_table} WHERE {where} FOR UPDATE", key)
                row = cur.fetchone()
                if row is None:
                    continue
                held_by, expires, now = row
                if held_by != owner and expires > now and not owner_dead(held_by):
                    return False
                cur.execute(f"UPDATE {self.claims_table} SET owner=%s, expires={_NOW} + %s WHERE {where}",
                            (owner, float(ttl_s), *key))
                return True
        return False

    def release(self, key: CostKey, owner: str) -> None:
        where = " AND ".join(f"{c}=%s" for c in KEY_COLUMNS)
        self._exec(f"DELETE FROM {self.claims_table} WHERE {where} AND owner=%s", (*key, owner))

    def claims(self) -> list[Claim]:
        rows = self._rows(f"SELECT {', '.join(KEY_COLUMNS)}, owner, expires FROM {self.claims_table}")
        return [Claim(CostKey(*r[:6]), r[6], r[7]) for r in rows]

    # errors of lower-precision candidates ----------------------------------
    def get_error(self, key: CostKey, data: str) -> dict[str, Any] | None:
        where = " AND ".join(f"{c}=%s" for c in KEY_COLUMNS)
        row = self._one(f"SELECT detail FROM {self.errors_table} WHERE {where} AND data=%s", (*key, data))
        return json.loads(row[0]) if row else None

    def put_error(self, key: CostKey, data: str, record: Mapping[str, Any]) -> None:
        rel, cos, finite = error_columns(record)
        cols = ", ".join(KEY_COLUMNS)
        self._exec(f"INSERT INTO {self.errors_table} VALUES ({','.join(['%s'] * 12)}) ON CONFLICT ({cols}, data) "
                   "DO UPDATE SET rel=EXCLUDED.rel, cos=EXCLUDED.cos, finite=EXCLUDED.finite, "
                   "detail=EXCLUDED.detail, created=EXCLUDED.created",
                   (*key, data, rel, cos, finite, json.dumps(dict(record)), time.time()))

    def error_count(self) -> int:
        return int(self._one(f"SELECT COUNT(*) FROM {self.errors_table}")[0])

    def get_ranges(self, model: str, data: str) -> dict[str, Any] | None:
        row = self._one(f"SELECT ranges FROM {self.ranges_table} WHERE model=%s AND data=%s", (model, data))
        return json.loads(row[0]) if row else None

    def put_ranges(self, model: str, data: str, doc: Mapping[str, Any]) -> None:
        self._exec(f"INSERT INTO {self.ranges_table} VALUES (%s,%s,%s,%s) ON CONFLICT (model, data) "
                   "DO UPDATE SET ranges=EXCLUDED.ranges, created=EXCLUDED.created",
                   (model, data, json.dumps(dict(doc)), time.time()))

    def put_features(self, kind: str, rows: Mapping[str, Mapping[str, float]]) -> None:
        now = time.time()
        values = [(fp, kind, canonical_json(dict(f)), now) for fp, f in rows.items()]
        if not values:
            return
        with self._tx() as cur:
            cur.executemany(f"INSERT INTO {self.features_table} VALUES (%s,%s,%s,%s) ON CONFLICT (fingerprint, kind) "
                            "DO UPDATE SET features=EXCLUDED.features, created=EXCLUDED.created", values)

    def get_features(self, kind: str, fingerprints: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
        sql = f"SELECT fingerprint, features FROM {self.features_table} WHERE kind=%s"
        rows = (self._rows(sql, (kind,)) if fingerprints is None
                else self._rows(f"{sql} AND fingerprint = ANY(%s)", (kind, sorted(set(fingerprints)))))
        return {fp: json.loads(text) for fp, text in rows}

    def study_storage(self) -> str | None:
        return "postgresql+psycopg://" + self.url.partition("://")[2]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None

    def __repr__(self) -> str:
        return f"PostgresCostDB({redact(self.url)!r})"


def _clear_db_errors(method: Any) -> Any:
    """A psycopg error in the middle of a job (the server restarted, a table changed under it) becomes a
    CollageError of one line naming the database."""
    import functools

    @functools.wraps(method)
    def wrapper(self: PostgresCostDB, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except CollageError:
            raise
        except Exception as e:
            if not isinstance(e, _psycopg().Error):
                raise
            raise CollageError(f"cost database {redact(self.url)}: {one_line(e)}") from e
    return wrapper


for _name in ("get", "get_many", "put", "all", "put_transition", "get_transition", "all_transitions", "claim",
              "release", "claims", "get_error", "put_error", "error_count", "get_ranges", "put_ranges",
              "put_features", "get_features", "schema_version"):
    setattr(PostgresCostDB, _name, _clear_db_errors(getattr(PostgresCostDB, _name)))
