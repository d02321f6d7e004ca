"""Shared test setup: every test session gets its own cache directory (zoo models, support tables,
cost DB), so tests never read what an earlier run or the user left in ~/.cache/collage.

Set COLLAGE_TEST_CACHE to reuse a cache between local runs (the zoo's bert-base takes a while to build).

`make test` runs the tests on two pytest-xdist workers (``-n 2 --dist loadgroup --no-loadscope-reorder``:
work handed out in collection order, which the hook below sets): most of the suite's time
is tunes timing things for a fixed wall time, which two can do at once. Each worker is its own process with
its own cache directory (under COLLAGE_TEST_CACHE: a folder per worker), so its measurement lock (``collage.cost_models.measurer.machine_lock``, a file in
the cache) never makes one worker's tune wait for the other's; the tests of a module that share a
module-scoped fixture (a tune, a Ray cluster) run on one worker, where the fixture is made once.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

_cache = os.environ.get("COLLAGE_TEST_CACHE")
if _cache and os.environ.get("PYTEST_XDIST_WORKER"):
    _cache = os.path.join(_cache, os.environ["PYTEST_XDIST_WORKER"])  # each worker its own (see below)
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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups off the marks
def pytest_collection_modifyitems(config, items):
    """On xdist workers: tests that use a module-scoped fixture go to one worker together (``--dist
    loadgroup``), so the fixture (a tune of 35 s, a Ray cluster) is made once, not once per worker; and the slow
    tier goes first (its tests run 1-3 min each: started last, one of them would run alone at the end while
    the other worker idles; the short tests after them even out the finish)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d.scope == "module" for fixturedefs in defs for d in fixturedefs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise in file order
