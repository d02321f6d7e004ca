"""Train the shipped cost model (collage.cost_models.shipped) from cost DBs of this project's measurements.

    PYTHONPATH=. python -m benchmarks.train_shipped_model DB.sqlite [DB.sqlite ...] [--models resnet50 ...]

Reads the DBs (never writes them: copy them first if another process may use them), takes every successful cost
whose fingerprint is a candidate of a zoo model (features computed as ``benchmarks/cost_model.py`` does: the DBs
measured before features were stored), one median per fingerprint and variant, and fits per backend variant
(backend + options) the learned model's additive lines without trees. Writes
``collage/cost_models/shipped/<machine class>.json`` with its metadata: machine class and CPU, the models and
row counts it was trained on, the collage commit, and the probe's time on this machine.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from collage import zoo
from collage.cost_models.learned import MIN_ROWS, LinePlusTrees, variant_of
from collage.cost_models.shipped import SHIPPED_DIR, line_to_dict, machine_class, probe_ms, variant_name
from collage.measure.db import SQLiteCostDB
from collage.util import cpu_flags, machine_id


def collect(paths: list[str]) -> dict[tuple[str, str], list[float]]:
    """``{(variant name, fingerprint): [median ms, ...]}`` over every DB."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p in paths:
        db = SQLiteCostDB(p)
        for c in db.all():
            if c.ok and c.median_ms is not None and c.median_ms > 0:
                out[(variant_name(variant_of(c.key)), c.fingerprint)].append(float(c.median_ms))
    return out


def fit(rows: dict[tuple[str, str], list[float]], feats: dict[str, dict[str, float]]) -> tuple[dict, dict]:
    """Lines per variant name (both parts: sizes only, with per-op-class columns) and their row counts."""
    by_variant: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for (name, fp), ms in sorted(rows.items()):
        if fp in feats:
            by_variant[name][0].append(feats[fp])
            by_variant[name][1].append(float(np.median(ms)))
    lines, counts = {}, {}
    for name, (f, ms) in sorted(by_variant.items()):
        if len(ms) < MIN_ROWS:
            continue
        y = np.asarray(ms)
        lines[name] = [line_to_dict(LinePlusTrees.fit(f, y, seed=0, trees=False, per_op=k)) for k in (False, True)]
        counts[name] = len(ms)
    return lines, counts


def main(argv: list[str] | None = None) -> None:
    from benchmarks.cost_model import model_fingerprints

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--models", nargs="*", help="zoo models (default: every zoo model already built)")
    ap.add_argument("--out", default=None, help="output file (default collage/cost_models/shipped/<class>.json)")
    args = ap.parse_args(argv)
    rows = collect(args.dbs)
    fps_measured = {fp for _, fp in rows}
    feats: dict[str, dict[str, float]] = {}
    used: dict[str, int] = {}
    for name in args.models or [n for n in zoo.names() if zoo.is_built(n)]:
        mine = model_fingerprints(name)
        hit = fps_measured & set(mine)
        if hit:
            used[name] = len(hit)
            feats.update({fp: mine[fp] for fp in hit})
        print(f"{name}: {len(hit)} measured fingerprints")
    lines, counts = fit(rows, feats)
    cls = machine_class()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    flags = sorted(f for f in cpu_flags() or () if f.startswith(("avx", "amx")))
    meta: dict[str, Any] = {
        "machine_class": cls, "cpu": machine_id(), "cpu_flags": flags, "arch": platform.machine(),
        "probe_ms": min(probe_ms() for _ in range(3)), "collage_commit": commit,
        "models": used, "rows": counts, "dbs": [Path(p).name for p in args.dbs],
        "covered_classes": [cls],
        "note": f"trained on one {cls} machine only; a machine of a class with no file of its own uses the nearest "
                f"class's, scaled by the probe",
    }
    out = Path(args.out) if args.out else SHIPPED_DIR / f"{cls}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "variants": lines}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: {sum(counts.values())} rows, {len(lines)} variants, probe {meta['probe_ms']:.2f} ms")


if __name__ == "__main__":
    main()
