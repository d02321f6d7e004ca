"""MetaSchedule tuning for the TVM backend, with a tuning database shared by every compile.

:func:`tune` extracts the fused TIR workloads of a lowered relax module, tunes those the database
directory has not seen tuned (MetaSchedule's ``JSONDatabase``, which needs ``tvm.ir.save_json``: it
segfaults with apache-tvm-ffi 0.1.15.post2, hence the pin to 0.1.14.post1), and applies the
database with ``MetaScheduleApplyDatabase`` under the target. Candidates are built in this process
(see :func:`_in_process_builder`) and measured by MetaSchedule's LocalRunner (one at a time, its own
process). Runs in the TVM worker process (:mod:`collage.backends.tvm.worker`).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import time
from pathlib import Path

from collage.backends.tvm.options import BuildOptions

log = logging.getLogger(__name__)

@contextlib.contextmanager
def _locked(directory: Path):
    """Exclusive lock on a tuning database directory (processes tuning the same workload take turns)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".collage-lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_BUILDER_CLASS = None


def _in_process_builder():
    """A MetaSchedule builder that builds candidates in this process, one after another.

    LocalBuilder starts fresh worker processes for every batch, each importing tvm.s_tir.tensor_intrin
    (25-35 s here); this process has imported it already (TuneContext does), so building here is
    minutes faster per tuning run. A crash while building takes this worker down, which the caller
    survives (it runs in the TVM worker process).
    """
    global _BUILDER_CLASS
    if _BUILDER_CLASS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
        from tvm.s_tir.meta_schedule.builder.local_builder import (
            default_build,
            default_export,
        )

        @derived_object
        class InProcessBuilder(PyBuilder):
            def build(self, build_inputs):
                results = []
                for bi in build_inputs:
                    try:
                        results.append(BuilderResult(default_export(default_build(bi.mod, bi.target, None)), None))
                    except Exception as e:  # noqa: BLE001 - a failed candidate is a result, not an error
                        results.append(BuilderResult(None, f"{type(e).__name__}: {e}"))
                return results

        _BUILDER_CLASS = InProcessBuilder
    return _BUILDER_CLASS()


def _import_cpu_tensor_intrinsics() -> None:
    """Register only the x86 tensor intrinsics instead of importing all of ``tvm.s_tir.tensor_intrin``.

    TuneContext imports that package, whose CUDA, ROCm and Hexagon intrinsics take 30-60 s to parse
    here (the x86 ones, all an LLVM CPU target can use, 0.7 s). The package module is put in
    ``sys.modules`` without running its ``__init__``, so TuneContext's import finds it done.
    Only when :func:`tune` is called with ``cpu_intrinsics_only`` (the TVM worker process does; a process
    that may later want other targets' intrinsics, e.g. ``isolate=False`` callers, gets the whole package,
    slowly).
    """
    import importlib
    import importlib.util

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    module = importlib.util.module_from_spec(importlib.util.find_spec(name))
    sys.modules[name] = module
    tvm.s_tir.tensor_intrin = module
    importlib.import_module(name + ".x86")


def _cost_model() -> str:
    try:
        import xgboost  # noqa: F401
    except ImportError:
        log.warning("xgboost is not installed: MetaSchedule falls back to a random cost model (pip install "
                    "xgboost-cpu for the default XGBoost model, which finds good schedules in fewer trials)")
        return "random"
    return "xgb"


#: Which workloads collage finished tuning in a database directory, with the trials spent (JSON).
TUNED_FILE = "collage-tuned.json"


def _read_tuned(db_dir: Path) -> dict[str, int]:
    try:
        data = json.loads((db_dir / TUNED_FILE).read_text())
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def tune(mod, target, options: BuildOptions, *, cpu_intrinsics_only: bool = False):
    """Tune each TIR workload of ``mod`` the database has not seen tuned; return the scheduled module and stats.

    The database (``options.tuning_db``) is shared by every candidate and run. A workload counts as
    tuned once a tuning of it *finished* with at least ``options.trials`` trials (recorded in
    ``collage-tuned.json`` beside MetaSchedule's files; same structure whatever the weights): it is
    never tuned again. A tuning killed half-way, or one with fewer trials than now asked, is tuned
    (again), MetaSchedule starting from the best records already there. ``cpu_intrinsics_only``: register
    only the x86 tensor intrinsics in this process (see :func:`_import_cpu_tensor_intrinsics`).
    """
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import relax_integration as ri
    from tvm.s_tir.meta_schedule.utils import shash2hex

    if not options.tuning_db:
        raise ValueError("MetaSchedule tuning needs a tuning database directory (tuning_db)")
    db_dir = Path(options.tuning_db)
    start = time.perf_counter()
    tasks = ri.extract_tasks(mod, target)
    keys = [shash2hex(t.dispatched[0]) for t in tasks]
    with _locked(db_dir):
        database = ms.database.JSONDatabase(work_dir=str(db_dir))
        done = _read_tuned(db_dir)
        todo = [(t, k) for t, k in zip(tasks, keys) if done.get(k, 0) < options.trials]
        if todo:
            if cpu_intrinsics_only:
                _import_cpu_tensor_intrinsics()
            log.info("MetaSchedule: tuning %d of %d workloads, %d trials each", len(todo), len(tasks), options.trials)
            strategy = ms.search_strategy.EvolutionarySearch(population_size=max(64, min(512, 8 * options.trials)))
            contexts, weights = ri.extracted_tasks_to_tune_contexts(
                [t for t, _ in todo], work_dir=str(db_dir), strategy=strategy, num_threads=options.num_cores,
                seed=options.seed)
            ms.tune.tune_tasks(
                tasks=contexts, task_weights=weights, work_dir=str(db_dir),
                max_trials_global=options.trials * len(todo), max_trials_per_task=options.trials,
                num_trials_per_iter=min(64, options.trials), builder=_in_process_builder(),
                runner=ms.runner.LocalRunner(timeout_sec=options.runner_timeout_s), database=database,
                cost_model=_cost_model())
            done.update({k: max(done.get(k, 0), options.trials) for _, k in todo})
            tmp = db_dir / f".{TUNED_FILE}.tmp"
            tmp.write_text(json.dumps(done, indent=0, sort_keys=True))
            os.replace(tmp, db_dir / TUNED_FILE)
        tuned_s = time.perf_counter() - start
        with target, database:
            mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    stats = {"mode": "metaschedule", "workloads": len(tasks), "tuned": len(todo),
             "reused": len(tasks) - len(todo), "tuning_s": round(tuned_s, 3) if todo else 0.0,
             "trials": options.trials, "database": str(db_dir)}
    return mod, stats
