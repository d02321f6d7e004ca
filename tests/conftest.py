"""Shared test setup: every test session gets its own cache directory (zoo models, support tables,
cost DB), so tests never read what an earlier run or the user left in ~/.cache/collage.

Set COLLAGE_TEST_CACHE to reuse a cache between local runs (the zoo's bert-base takes a while to build).
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

_cache = os.environ.get("COLLAGE_TEST_CACHE")
if not _cache:
    _cache = tempfile.mkdtemp(prefix="collage-test-cache-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)  # the zoo's big models weigh ~1.8 GB
os.environ["COLLAGE_CACHE"] = _cache


@pytest.fixture(scope="session")
def cache_dir() -> str:
    return _cache


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the session (tests.servers.PostgresServer); ``postgres.fresh_url()`` per test."""
    from tests.servers import PostgresServer

    server = PostgresServer()
    yield server
    server.stop()
