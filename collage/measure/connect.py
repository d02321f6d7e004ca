"""Which cost database a name means: ``get_db(None | path | sqlite:///URL | postgresql://URL | CostDB)``.

The contract and the SQLite store are :mod:`collage.measure.db`, the PostgreSQL store
:mod:`collage.measure.postgres`; this module only chooses between them (so neither imports the other).
"""
from __future__ import annotations

import os
from pathlib import Path

from collage.measure.db import CostDB, SQLiteCostDB
from collage.errors import CollageError
from collage.util import cache_dir

#: URL schemes ``get_db`` hands to ``PostgresCostDB``.
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def default_db_path() -> Path:
    return cache_dir() / "costs.sqlite"


def get_db(db: None | str | os.PathLike | CostDB = None) -> CostDB:
    """The cost database named by ``db``: None (default file), ``sqlite:///path``, a path, or an instance."""
    if isinstance(db, CostDB):
        return db
    if db is None:
        return SQLiteCostDB(default_db_path())
    text = os.fspath(db)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme in POSTGRES_SCHEMES:
            from collage.measure.postgres import PostgresCostDB

            return PostgresCostDB(text)
        if scheme != "sqlite":
            raise CollageError(f"cost database {text!r}: unknown scheme {scheme!r}; use "
                               "sqlite:///path/to/costs.sqlite, a plain file path or postgresql://user@host:port/dbname")
        # SQLAlchemy/Optuna convention: sqlite:///rel.sqlite is relative, sqlite:////abs/costs.sqlite absolute
        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise CollageError(f"cost database {text!r}: no file path after sqlite:///")
        return SQLiteCostDB(path)
    return SQLiteCostDB(text)
