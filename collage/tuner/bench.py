"""`collage bench`: the tuned plan against every single backend, per model, written to results/bench/.

For each model the tuning job runs in full (measured candidates, DP, verification); its
verification already measures the stitched plan and each single backend running the whole model,
interleaved in one run. This module collects those numbers into results/bench/<date>-<target>.md and .csv
with ratios (best single backend ms / plan ms: above 1 means the plan is faster).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.tuner.options import TuneOptions

log = logging.getLogger(__name__)


def bench(models: Sequence[str], *, out_dir: str | Path = "results/bench", artifacts_dir: str | Path | None = None,
          command: str = "", **options: Any) -> list[dict[str, Any]]:
    """Tune each of ``models`` (``options``: ``tune``'s keywords, one set for every model: backends, target, db,
    budget or budget_s, limits, cluster, progress, backend_options, ...) and write the rows to
    ``out_dir``/<date>-<target>.md and .csv (``command``: the line written above the tables); each artifact to
    ``artifacts_dir``/<model> (None: a scratch folder, removed at the end)."""
    from collage.tuner.job import resolve_backends
    from collage.tuner.options import TuneOptions

    # what can be refused is refused before the first tune: the models, the backends and their options, the
    # artifact folders
    names = model_names(models)
    tune_options = TuneOptions.build(**options)
    resolve_backends(tune_options.backends, tune_options.target, tune_options.all_backend_options())
    if artifacts_dir:  # each model's artifact folder, as its tune will check it (a folder of the user's is refused)
        from collage.tuner.outdir import check_output_location

        for name in names.values():
            check_output_location(Path(artifacts_dir) / name)
    stem = results_stem(out_dir, tune_options.target)
    if tune_options.progress:
        print(f"collage bench: {len(names)} model(s); results to {stem}.md and .csv", file=sys.stderr, flush=True)
    with contextlib.ExitStack() as stack:
        if artifacts_dir:
            art_root = Path(artifacts_dir)
        else:  # nobody asked for the artifacts: gone with the bench
            art_root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="collage-bench-",
                                                                            ignore_cleanup_errors=True)))
        return _tune_each(names, art_root, stem, tune_options, command)


def model_names(models: Sequence[str]) -> dict[str, str]:
    """Each model spec under the name its row and artifact folder take (``zoo:NAME``: NAME; a path: the file's
    stem, numbered where two share one); ModelError naming a spec that is no zoo model, no readable and valid
    model file, or given twice."""
    from collage.errors import ModelError
    from collage.tuner.job import load_model_graph
    from collage.zoo import cached_path

    if not models:
        raise ModelError("bench: no model named (--models zoo:NAME,path/to/model.onnx,...)")
    out: dict[str, str] = {}
    for spec in models:
        if spec in out:
            raise ModelError(f"bench: {spec} is named twice in --models")
        if spec.startswith("zoo:"):
            cached_path(spec[4:])  # a name the zoo does not have is refused (nothing is built here)
            name = spec[4:]
        else:
            load_model_graph(spec)  # read and checked as its tune will
            name = Path(spec).stem
        base, k = name, 2
        while name in out.values():
            name, k = f"{base}-{k}", k + 1
        out[spec] = name
    return out


def results_stem(out_dir: str | Path, target: str) -> Path:
    """results/bench/<date>-<target>, or <date>-<target>-2, -3, ...: a name whose .md and .csv do not exist yet
    (an earlier run's results are never overwritten)."""
    out = Path(out_dir)
    base = out / f"{_dt.date.today().isoformat()}-{target}"
    stem, k = base, 2
    while stem.with_suffix(".md").exists() or stem.with_suffix(".csv").exists():
        stem, k = base.with_name(f"{base.name}-{k}"), k + 1
    return stem


def _tune_each(names: Mapping[str, str], art_root: Path, stem: Path, options: TuneOptions,
               command: str) -> list[dict[str, Any]]:
    from collage.tuner.job import tune

    target, backends = options.target, options.backends
    rows: list[dict[str, Any]] = []
    for spec, name in names.items():
        try:
            res = tune(spec, art_root / name, options)
        except Exception as e:  # a model that fails is a row, not the end of the benchmark
            log.error("%s: %s", spec, e)
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            _write(rows, stem, target, command)
            continue
        best, best_ms = res.best_single if res.baselines else ("", math.nan)
        row: dict[str, Any] = {
            "model": name,
            "nodes": sum(len(p.nodes) for p in res.plan.partitions),
            "partitions": len(res.plan.partitions),
            "plan_backends": "+".join(res.plan.backends),
            "plan_ms": round(res.plan_ms, 3),
        }
        for b in backends:
            row[f"{b}_ms"] = round(res.baselines[b], 3) if b in res.baselines else None
        row.update({
            "best_single": best,
            "speedup_vs_best": round(best_ms / res.plan_ms, 3) if res.plan_ms else None,
            "predicted_ms": round(res.plan.predicted_ms, 3) if res.plan.predicted_ms else None,
            "predicted_over_measured": round(res.plan.predicted_ms / res.plan_ms, 3) if res.plan.predicted_ms else None,
            **searched_columns(res.report.get("searched_plan")),
            "rounds_ahead": rounds_ahead(res.report),
            "max_abs_err": res.report.get("numerics", {}).get("max_abs_err"),
            "tune_s": round(res.report.get("tune_s", 0.0), 1),
            "notes": " / ".join(res.plan.notes),
        })
        rows.append(row)
        _write(rows, stem, target, command)
        print(f"{name}: plan {row['plan_ms']} ms, best single {best} {best_ms:.3f} ms "
              f"({row['speedup_vs_best']}x)", file=sys.stderr, flush=True)
    return rows


def rounds_ahead(report: Mapping[str, Any]) -> str | None:
    """``"k/N"``: the verification's rounds the plan was faster than the best other single backend in
    (collage.report.rounds.lead); None where they are not recorded."""
    from collage.report.rounds import lead

    got = lead(report)
    return None if got is None else f"{got.wins}/{got.rounds}"


def searched_columns(searched: Mapping[str, Any] | None) -> dict[str, Any]:
    """The plan the search chose (before never-worse and any whole-model alternative; report.json's
    ``searched_plan``): its partitions and backends, what the search priced it at from its parts
    (``searched_for_ms``), its prediction (for a plan run in the search's attempts: as it ran there) and the
    verification's measurement of it; and its gain over the best single backend, predicted (against that
    backend priced alike: for a mix the search's attempts ran, timed in the same rounds; for the one
    backend the search went to after its mixes lost beside the single backends, the best of those; else
    level x its worker cost) and measured (in the verification's rounds). Each gain is a ratio of two figures taken the
    same way at the same time, so a machine whose level moves between the search and the verification
    moves both terms of each."""
    s = searched or {}
    parts = s.get("partitions") or []

    def ratio(a: str, b: str) -> float | None:
        return s[a] / s[b] if s.get(a) and s.get(b) else None

    def r3(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    predicted, measured = r3(s.get("predicted_ms")), r3(s.get("measured_ms"))
    gain, measured_gain = ratio("best_single_ms", "predicted_ms"), ratio("best_single_measured_ms", "measured_ms")
    return {
        "searched": f"{len(parts)}: {'+'.join(dict.fromkeys(p['backend'] for p in parts))}" if parts else None,
        "searched_for_ms": r3(s.get("searched_for_ms")) or predicted,
        "searched_predicted_ms": predicted,
        "searched_measured_ms": measured,
        "searched_predicted_over_measured": r3(ratio("predicted_ms", "measured_ms")),
        "searched_predicted_speedup": r3(gain),
        "searched_measured_speedup": r3(measured_gain),
        "searched_speedup_predicted_over_measured": r3(gain / measured_gain) if gain and measured_gain else None,
    }


def _write(rows: list[dict[str, Any]], stem: Path, target: str, command: str) -> Path:
    """(Re)write ``stem``.md and .csv (this run's: :func:`results_stem`) with the rows so far."""
    import pandas as pd

    from collage.version import __version__
    from collage.util import machine_id, markdown_table, source_commit

    stem.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(stem.with_suffix(".csv"), index=False)
    header = [
        f"# collage bench: tuned plan vs every single backend ({target})",
        "",
        f"Command: `{command}`" if command else "",
        "",
        f"Machine: {machine_id()}; collage {__version__} at commit {source_commit()}; "
        f"{_dt.datetime.now().isoformat(timespec='minutes')}.",
        "",
        "Every number is a median in ms measured in the same run: the stitched plan (the deployable artifact) and",
        "each backend running the whole model, interleaved. `speedup_vs_best` = best single backend / plan",
        "(above 1: the plan is faster). `predicted_ms` is the search's sum of measured parts and transitions.",
        "`searched` is the plan the search chose (partitions: backends) before the never-worse rule, with what",
        "the search priced it at from its parts (`searched_for_ms`), its prediction (a mixed plan the search's",
        "attempts ran: as it ran there) and its measurement in the same interleaved rounds as the baselines;",
        "`searched_predicted_speedup` is the best single backend priced alike (timed beside the plan in the",
        "search's attempts, or beside the closest mix where the search went to one backend after its mixes",
        "lost; for a plan they did not run, level x worker cost) over the prediction,",
        "`searched_measured_speedup` the same from the verification. `rounds_ahead`: the verification's",
        "interleaved rounds in which the plan was faster than the best other single backend (k of N; a split",
        "is a near tie: the machine's speed moved by more than the two differ).",
        "",
        "",
    ]
    stem.with_suffix(".md").write_text("\n".join(header) + markdown_table(rows))
    return stem
