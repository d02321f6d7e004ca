"""How well the learned cost model predicts a model it has never seen: leave-one-model-out over a cost DB.

    python -m benchmarks.cost_model --db DB             # -> results/budget/cost-model.md (results/budget/README.md
    makes DB)
    python -m benchmarks.cost_model --db DB --models tiny-resnet squeezenet --out /tmp/cm.md
    python -m benchmarks.cost_model --db DB --retune tiny-resnet                # + the warm re-tune line
    python -m benchmarks.cost_model --db DB --retune resnet50 --max-nodes 6 --retune-only   # that line alone

Which model a measured row belongs to is not in the DB (costs are keyed by fingerprint): each zoo model
(``--models``, default every zoo model already built) is enumerated as the tuner enumerates it (default
``Limits``, coarse ranges; every node taken as supported, a superset), its candidates fingerprinted, and the
model is *present* when the DB holds measured rows of at least ``MIN_PRESENT`` of them. Features come from
the DB's features table where stored, else are computed from the graph (a DB measured before features
were stored). For each present model: train on every row whose fingerprint is not one of this model's
(identical blocks of other models leave too: the model is new), predict this model's measured rows, per
backend variant. Absolute percentage error ``|predicted - measured| / measured``, median and p90 per
backend over all held-out predictions, and per model; the share of measurements inside the predicted
10-90% range.

``--retune MODEL``: a warm re-tune of MODEL against a copy of the DB (every candidate already measured,
``--budget 2m``): tuned once, then again, the second timed end to end: the bench line "a warm re-tune takes
<= 10 s" (the first tune also stores what only a tune measures, such as the per-partition overhead).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import header, md_table, write_report
from collage import zoo
from collage.measure.connect import get_db
from collage.cost_models.features import FEATURES_KIND, features_by_fingerprint
from collage.cost_models.learned import LearnedCosts, ape, variant_of
from collage.search.candidates import Limits, enumerate_candidates
from collage.search.ranges import range_candidates

log = logging.getLogger(__name__)

#: a model with fewer measured rows in the DB is not present
MIN_PRESENT = 10


def model_fingerprints(name: str) -> dict[str, dict[str, float]]:
    """``{fingerprint: features}`` of every candidate the tuner would enumerate for zoo model ``name``."""
    graph = zoo.load_graph(f"zoo:{name}")
    every = {"any": {i: True for i in range(len(graph))}}
    sets = {c.nodes for c in enumerate_candidates(graph, every, Limits())}
    sets |= {c.nodes for c in range_candidates(graph, every)}
    fps = {nodes: graph.fingerprint(nodes) for nodes in sets}
    return features_by_fingerprint(graph, sorted(sets), fps)


def leave_one_out(db, models: list[str]) -> tuple[dict, dict, dict]:
    """Per present model: its held-out predictions ``[(backend, predicted, low, high, measured)]``."""
    costs = [c for c in db.all() if c.ok and c.median_ms and c.median_ms > 0]
    measured_fps = {c.fingerprint for c in costs}
    stored = db.get_features(FEATURES_KIND)
    members: dict[str, set[str]] = {}
    features: dict[str, dict[str, float]] = dict(stored)
    for name in models:
        t0 = time.perf_counter()
        feats = model_fingerprints(name)
        mine = set(feats) & measured_fps
        print(f"{name}: {len(feats)} candidate fingerprints, {len(mine)} measured in the DB "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        if len(mine) >= MIN_PRESENT:
            members[name] = mine
            for fp in mine:
                features.setdefault(fp, feats[fp])
    out: dict[str, list] = {}
    fit_s: dict[str, float] = {}
    for name, mine in members.items():
        t0 = time.perf_counter()
        learned = LearnedCosts.train(db, exclude=mine, features=features)
        fit_s[name] = time.perf_counter() - t0
        rows = [c for c in costs if c.fingerprint in mine]
        by_variant: dict = {}
        for c in rows:
            by_variant.setdefault(variant_of(c.key), []).append(c)
        preds = []
        for v, cs in by_variant.items():
            est = learned.estimate(v, [features[c.fingerprint] for c in cs])
            if est is None:
                continue
            preds += [(v.backend, e.mid_ms, e.low_ms, e.high_ms, float(c.median_ms)) for e, c in zip(est, cs)]
        out[name] = preds
        print(f"{name}: {len(preds)} of {len(rows)} rows predicted; training {fit_s[name]:.1f} s", file=sys.stderr)
    return out, fit_s, {n: len(m) for n, m in members.items()}


def summary_rows(preds: list) -> list[list[object]]:
    rows = []
    for backend in sorted({p[0] for p in preds}):
        mine = [p for p in preds if p[0] == backend]
        e = ape([p[1] for p in mine], [p[4] for p in mine])
        inside = np.mean([p[2] <= p[4] <= p[3] for p in mine])
        rows.append([backend, len(mine), f"{np.median(e):.1f}%", f"{np.quantile(e, 0.9):.1f}%", f"{100 * inside:.0f}%"])
    return rows


def retune_line(db_path: str, model: str, max_nodes: int | None = None) -> str:
    """A warm re-tune of ``model`` on a copy of the DB, timed (the DB must hold all its candidates, for the
    same ``max_nodes``)."""
    import collage

    limits = None if max_nodes is None else Limits(max_nodes=max_nodes)
    with tempfile.TemporaryDirectory(prefix="collage-retune-") as tmp:
        copy = Path(tmp) / "costs.sqlite"
        shutil.copy(db_path, copy)
        times = []
        for k in range(2):  # the first tune on the DB, then the re-tune (what the first stored is reused)
            t0 = time.monotonic()
            res = collage.tune(f"zoo:{model}", Path(tmp) / f"out{k}", budget="2m", db=copy, progress=False,
                               limits=limits)
            times.append(time.monotonic() - t0)
    took = times[-1]
    cov = res.report.get("coverage") or {}
    flag = "" if max_nodes is None else f" --max-nodes {max_nodes}"
    return (f"warm re-tune of {model} (`--budget 2m{flag}`, a copy of the DB, tuned once before: {times[0]:.1f} s): "
            f"{took:.1f} s end to end; "
            f"{cov.get('reused', 0)} of {cov.get('distinct', 0)} distinct candidates from the DB, "
            f"{cov.get('measured_now', 0)} measured now; goal <= 10 s: {'met' if took <= 10 else 'NOT met'}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="the cost DB (path or URL)")
    ap.add_argument("--models", nargs="*", help="zoo models (default: every zoo model already built)")
    ap.add_argument("--retune", metavar="MODEL", help="also time a warm re-tune of this zoo model")
    ap.add_argument("--retune-db", help="the DB the re-tune copies (default --db); it must hold every candidate")
    ap.add_argument("--max-nodes", type=int, help="the re-tune's Limits.max_nodes (default: the tuner's)")
    ap.add_argument("--retune-only", action="store_true",
                    help="only the re-tune: its section (with this command) replaces the one in --out")
    ap.add_argument("--out", default="results/budget/cost-model.md")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.cost_model " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.retune_only:
        if not args.retune:
            ap.error("--retune-only needs --retune MODEL")
        out = Path(args.out)
        old = out.read_text().split("\n## Warm re-tune")[0].rstrip("\n") if out.exists() else ""
        section = ["## Warm re-tune", "", f"Command: `{command}`", "",
                   retune_line(args.retune_db or args.db, args.retune, args.max_nodes), ""]
        out.write_text((old + "\n\n" if old else "") + "\n".join(section))
        print("\n".join(section))
        return
    models = args.models or [n for n in zoo.names() if zoo.is_built(n)]
    db = get_db(args.db)
    preds, fit_s, present = leave_one_out(db, models)
    pooled = [p for ps in preds.values() for p in ps]
    lines = header("Learned cost model: leave-one-model-out", command,
                   "Train on every other model's measurements in the DB (same backend variant; identical blocks of "
                   "the held-out model left out too), predict the held-out model's measured candidates. Error = "
                   "|predicted median - measured median| / measured. In range: measured within the predicted "
                   "10-90% quantiles. Goal (issue 20): median <= 15% per backend.")
    counts: dict[str, int] = {}
    for c in db.all():
        if c.ok and c.median_ms and c.median_ms > 0:
            counts[c.key.backend] = counts.get(c.key.backend, 0) + 1
    lines += [f"DB: `{args.db}`: {', '.join(f'{n} measured rows on {b}' for b, n in sorted(counts.items()))}; "
              f"models present (measured candidate fingerprints): "
              + ", ".join(f"{n} ({k})" for n, k in present.items()) + "; held-out predictions: "
              + ", ".join(f"{len([p for p in pooled if p[0] == b])} on {b}" for b in sorted(counts)) + ".", ""]
    lines += ["## Per backend (all held-out predictions)", ""]
    lines += md_table(["backend", "predictions", "median error", "p90 error", "in range"], summary_rows(pooled))
    lines += ["## Per held-out model", ""]
    rows = []
    for name, ps in preds.items():
        for r in summary_rows(ps):
            rows.append([name, present[name]] + r + [f"{fit_s[name]:.1f} s"])
    lines += md_table(["model", "measured fingerprints", "backend", "predictions", "median error", "p90 error",
                       "in range", "training"], rows)
    absent = [n for n in models if n not in present]
    if absent:
        lines += [f"Not in the DB (fewer than {MIN_PRESENT} measured candidates): {', '.join(absent)}.", ""]
    if args.retune:
        lines += ["## Warm re-tune", "", retune_line(args.retune_db or args.db, args.retune, args.max_nodes), ""]
    write_report(args.out, lines)


if __name__ == "__main__":
    main()
