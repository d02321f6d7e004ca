"""Measured costs: isolated, crash-safe, noise-controlled measurement and a persistent cost database.

    db.py           Cost, CostKey, key_for, CostDB (contract), SQLiteCostDB
    connect.py      get_db: which store a name (path, sqlite:///, postgresql://) means
    postgres.py     PostgresCostDB: the contract on PostgreSQL (a cluster's shared DB; the ``cluster`` extra)
    executor.py     where windows run: LocalExecutor (worker processes here), RayExecutor (a Ray cluster)
    measurer.py     Measurer (one worker process), WindowSettings, Measurement, combine_rounds, machine_lock
    schedule.py     measure_candidates (rounds, dedup, DB reuse, budget, progress), MeasureOptions, CostTable
    worker.py       what runs inside the worker: inputs, compile, timing until the median is stable
    transitions.py  transition costs measured as real alternation between backends; transition_model
    accuracy.py     errors of lower-precision candidates against the fp32 reference; accuracy budgets
    contention.py   other processes' load while a tune measures (report.json's time.others)

Stands on collage.graph and collage.backends only (no search, tuner, zoo or runtime: import-linter);
the ``collage measure`` command is :mod:`collage.commands.measure`.

Names are imported lazily (``from collage.measure import get_db`` works without importing the
measurement machinery until it is used).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Cost": "db", "CostKey": "db", "CostDB": "db", "SQLiteCostDB": "db", "get_db": "connect", "key_for": "db",
    "PostgresCostDB": "postgres", "get_executor": "executor", "LocalExecutor": "executor", "RayExecutor": "executor",
    "Measurer": "measurer", "Measurement": "measurer", "WindowSettings": "measurer", "measure_candidates": "schedule",
    "MeasureOptions": "schedule", "CostTable": "schedule",
    "transition_model": "transitions", "measure_transition": "transitions",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"collage.measure.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'collage.measure' has no attribute {name!r}")
