"""Shared test setup: every test session gets its own cache directory (zoo models, support tables,
cost DB), so tests never read what an earlier run or the user left in ~/.cache/collage.

Set COLLAGE_TEST_CACHE to reuse a cache between local runs (the zoo's bert-base takes a while to build).

`make test` runs the tests on two pytest-xdist workers (``-n 2 --dist loadfile --no-loadscope-reorder``): most
of the suite's time is tunes timing things for a fixed wall time, which two can do at once. Each worker is its
own process with its own cache directory (under COLLAGE_TEST_CACHE: a folder per worker), so its measurement
lock (``collage.measure.measurer.machine_lock``, a file in the cache) never makes one worker's tune wait
for the other's. A test file is one unit of work (its module-scoped fixtures, a tune or a Ray cluster, are
made once), handed out in collection order, which the hook below sets: files with slow tests first.
(``--dist loadgroup`` would spread a file's tests over both workers, but its groups are lost with pytest 9.2:
xdist 3.8 tags a grouped test by rewriting ``item._nodeid``, which pytest 9.2 no longer reads.)
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

_cache = os.environ.get("COLLAGE_TEST_CACHE")
if _cache and os.environ.get("PYTEST_XDIST_WORKER"):
    _cache = os.path.join(_cache, os.environ["PYTEST_XDIST_WORKER"])  # each worker its own (the module doc says why)
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


def pytest_collection_modifyitems(config, items):
    """On xdist workers the slow tier goes first, so the files holding it are handed out first (a 9-minute
    file started last would run alone at the end while the other worker idles; the short files after them
    even out the finish). pytest then regroups each module's tests around their fixtures as usual."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise in file order
