"""Does a shipped cost model carry to this machine? This machine's measurements against three starts.

    PYTHONPATH=. python -m benchmarks.shipped_transfer DB.sqlite [DB.sqlite ...] --models tiny-resnet squeezenet ...
        # -> results/budget/shipped-transfer.md

A fresh cost DB starts from ``collage/cost_models/shipped/<machine class>.json`` (``collage.cost_models.shipped``);
a machine of a class with no file takes the nearest class's, scaled by the probe (this machine's probe time over
the file's). For every measured candidate of ``--models`` in the DBs (this machine's; never written), per model
held out, the median absolute percentage error of:

- **this class, held out**: this machine's class's lines, fitted (as ``benchmarks.train_shipped_model`` fits them)
  on the other models' rows only: what a shipped file of this class predicts for a model it has not seen;
- **other class, probe-scaled**: the file of ``--other`` (default: the nearest other class that ships one) scaled
  by the probe, as a tune on this machine would start without this class's file;
- **other class, refined scale**: the same file with the one scale per backend and model that
  ``ShippedCosts.refine`` would take from all of this model's rows (the geometric mean of measured over predicted):
  an oracle, as if the tune had measured every row before predicting them.

The probe's scale against the refined one says whether the probe measures what the backends' speed does. The other
class's file is not held out: it was fitted on its own machine's measurements of (today) the same zoo models, so
its columns flatter it. The pooled medians count each (variant, candidate) once: tiny-bert and tiny-bert-masked
share most candidates, which the per-model rows both list.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks._common import header, md_table, write_report
from benchmarks.cost_model import model_fingerprints
from benchmarks.train_shipped_model import collect, fit
from collage.cost_models.learned import QUANTILES, Variant
from collage.cost_models.shipped import (CLASSES, SHIPPED_DIR, ShippedCosts, line_from_dict, machine_class,
                                         probe_ms)

MID = QUANTILES.index(0.5)


def other_class_file(mine: str) -> Path:
    """The nearest class other than ``mine`` that ships a file."""
    for c in sorted((c for c in CLASSES if c != mine), key=lambda c: abs(CLASSES.index(c) - CLASSES.index(mine))):
        if (SHIPPED_DIR / f"{c}.json").is_file():
            return SHIPPED_DIR / f"{c}.json"
    raise SystemExit(f"no shipped file of a class other than {mine}")


def ape(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(pred - measured) / measured


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--other", default=None, help="the other class's shipped file (default: the nearest class's)")
    ap.add_argument("--out", default="results/budget/shipped-transfer.md")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.shipped_transfer " + " ".join(argv if argv is not None else sys.argv[1:])
    mine = machine_class()
    other_path = Path(args.other) if args.other else other_class_file(mine)
    other = ShippedCosts.load(other_path)
    probe = min(probe_ms() for _ in range(3))
    other.calibrate(probe)

    rows = collect(args.dbs)  # {(variant name, fingerprint): [ms]}
    seen_fps = {fp for _, fp in rows}
    members: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.models:
        feats = model_fingerprints(name)
        members[name] = {fp: f for fp, f in feats.items() if fp in seen_fps}
    every_feat = {fp: f for m in members.values() for fp, f in m.items()}

    table, scales = [], []
    pooled: dict[tuple[str, str], tuple[float, float, float]] = {}
    for held in args.models:
        held_fps = set(members[held])
        train = {k: v for k, v in rows.items() if k[1] in every_feat and k[1] not in held_fps}
        lines, _ = fit(train, every_feat)
        by_variant: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
        fps: dict[str, list[str]] = defaultdict(list)
        for (vname, fp), ms in sorted(rows.items()):
            if fp in held_fps:
                by_variant[vname][0].append(members[held][fp])
                by_variant[vname][1].append(float(np.median(ms)))
                fps[vname].append(fp)
        for vname, (feats, ms) in sorted(by_variant.items()):
            if vname not in lines:
                continue
            backend, options = vname.split("|", 1)
            measured = np.asarray(ms)
            v = Variant(backend, "", "cpu", options, "")
            here = ShippedCosts({}, {vname: [line_from_dict(p) for p in lines[vname]]}).raw(v, feats)
            raw = other.raw(v, feats)
            if here is None or raw is None:
                continue
            e_here = ape(here[:, MID], measured)
            e_probe = ape(raw[:, MID] * other.scale, measured)
            best = float(np.exp(np.mean(np.log(measured) - np.log(np.maximum(raw[:, MID], 1e-9)))))  # as refine
            e_best = ape(raw[:, MID] * best, measured)
            for fp, a, b, c in zip(fps[vname], e_here, e_probe, e_best):
                pooled.setdefault((vname, fp), (a, b, c))  # a candidate two models share counts once
            scales.append(best)
            table.append([held, backend, len(ms), f"{np.median(e_here):.0%}", f"{np.median(e_probe):.0%}",
                          f"{np.median(e_best):.0%}", f"{best:.2f}"])
        print(f"{held}: done", file=sys.stderr)

    if not scales:
        raise SystemExit("no measured candidate of --models in the DBs for a variant both files cover")
    here_e, probe_e, best_e = (np.array(col) for col in zip(*pooled.values()))
    ref = other.meta.get("probe_ms")
    notes = (f"This machine's class: **{mine}**. The other class's file: `{other_path.name}` (trained on "
             f"{other.meta.get('cpu')}, probe {ref if ref is None else f'{ref:.2f}'} ms there); the probe here "
             f"{probe:.2f} ms, so its scale is **{other.scale:.2f}**, where the refined scale per model and backend "
             f"ranges {min(scales):.2f}-{max(scales):.2f} (median {np.median(scales):.2f}). Median absolute "
             f"percentage error over the {len(pooled)} distinct (variant, candidate) rows: this class held out "
             f"{np.median(here_e):.0%}, the other class probe-scaled {np.median(probe_e):.0%}, the other class at the "
             f"refined scale {np.median(best_e):.0%} (not held out: that file was fitted on these models, measured on "
             f"its machine). DBs: {', '.join(Path(p).name for p in args.dbs)}.")
    body = md_table(["held-out model", "backend", "rows", "this class, held out", "other class, probe-scaled",
                     "other class, refined scale", "refined scale"], table)
    write_report(args.out, header("Shipped cost model: this class's file against the nearest class's, scaled",
                                  command, notes) + ["## Per held-out model and backend (median APE)", ""] + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
