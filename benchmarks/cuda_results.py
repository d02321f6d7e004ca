"""The GPU check's plans and its results page (benchmarks/gpu_check.sh runs it; docs/GPU.md).

    python benchmarks/cuda_results.py plan ART_DIR... --tag fp32 --out DEST/plans.jsonl
    python benchmarks/cuda_results.py lowp --model resnet50 --backends torch,torch-bf16 --accuracy cos=0.999,rel=0.01 \\
        --budget 20 --work DEST/lowp --out DEST/plans.jsonl
    python benchmarks/cuda_results.py merge --plans DEST/plans.jsonl --anchors DEST/anchors.csv --bench DEST/bench \\
        --out results

``plan`` times each tuned artifact as it deploys on a GPU: device-resident (``Artifact.run_tensors`` on inputs already
on the device), CUDA-graph replayed where it can be, CUDA events, median of ``--repeat``; with the plan's backends,
the search's prediction and where the graph splits. ``lowp`` tunes one zoo model over GPU backends and their
lower-precision variants under an accuracy budget, then does what ``plan`` does. ``merge`` writes
``<date>-cuda.md`` and ``.csv`` under ``--out``: the plans beside the torch anchors of the same run
(benchmarks/torch_anchors.py), the goal of issue 41 checked per model, and ``collage bench``'s own table.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def plan_row(art_dir: Path, tag: str, repeat: int) -> dict[str, Any]:
    """One artifact timed device-resident with CUDA events (module docstring), as a row."""
    import torch

    from collage.backends.cuda_timing import event_times_ms
    from collage.runtime.artifact import load

    art = load(art_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    feeds = {k: torch.from_numpy(v).to(device) for k, v in art.random_inputs(0).items()}
    samples = event_times_ms(lambda: art.run_tensors(feeds), repeat=repeat, warmup=5)
    ms = float(np.median([s.ms for s in samples]))
    report = json.loads((art_dir / "report.json").read_text()) if (art_dir / "report.json").is_file() else {}
    graphs = art.graph_report() or {}
    return {"model": str(art.manifest["model"].get("name") or art_dir.name), "tag": tag,
            "plan_backends": "+".join(dict.fromkeys(p.backend for p in art.partitions)),
            "partitions": len(art.partitions), "device_ms": round(ms, 4),
            "predicted_ms": report.get("predicted_ms"), "verified_ms": report.get("plan_ms"),
            "graph": "whole" if graphs.get("whole_plan") else f"{len(graphs.get('captured', []))} segment(s)",
            "graph_splits": "; ".join(f"{s['partition']} {s['backend']}: {s['reason']}"
                                      for s in graphs.get("splits", [])),
            "error": json.dumps((report.get("precision") or {}).get("end_to_end"))}


def lowp_row(args: argparse.Namespace) -> dict[str, Any]:
    """Tune ``args.model`` under the accuracy budget, then time its artifact (``plan_row``)."""
    from collage.tuner.job import tune

    out = Path(args.work) / args.model
    tune(f"zoo:{args.model}", out, target="cuda", backends=args.backends.split(","), accuracy=args.accuracy,
         budget_s=args.budget, progress=False)
    return {**plan_row(out, args.accuracy, args.repeat), "model": args.model}


def append(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def read_anchors(path: Path) -> dict[tuple[str, str], float]:
    """(model, anchor) -> ms from torch_anchors.py's CSV (rows with an error left out)."""
    if not path.is_file():
        return {}
    with open(path) as f:
        return {(r["model"], r["anchor"]): float(r["ms"]) for r in csv.DictReader(f) if r["ms"] and not r["error"]}


def goal_lines(plans: list[dict[str, Any]], anchors: dict[tuple[str, str], float]) -> list[str]:
    """Issue 41's goal per model: fp32 plan within 5% of CUDA-graph fp32 torch; the budgeted plan >= 3x over eager
    fp32; a mix chosen somewhere, predicted within 10%."""
    lines = ["| model | fp32 plan ms | graph_fp32 ms | within 5% | low-precision plan ms | eager_fp32 ms | speedup | "
             "mix | predicted / measured |", "|---|---:|---:|---|---:|---:|---:|---|---:|"]
    for model in dict.fromkeys(p["model"] for p in plans):
        fp32 = next((p for p in plans if p["model"] == model and p["tag"] == "fp32"), None)
        low = next((p for p in plans if p["model"] == model and p["tag"] != "fp32"), None)
        graph, eager = anchors.get((model, "graph_fp32")), anchors.get((model, "eager_fp32"))
        within = fp32 is not None and graph is not None and fp32["device_ms"] <= 1.05 * graph
        speed = eager / low["device_ms"] if low and eager else None
        mixes = [p for p in (fp32, low) if p and "+" in p["plan_backends"]]
        pred = [p["predicted_ms"] / p["verified_ms"] for p in mixes if p.get("predicted_ms") and p.get("verified_ms")]
        lines.append(f"| {model} | {fp32['device_ms'] if fp32 else '-'} | {graph or '-'} | {'yes' if within else 'no'} "
                     f"| {low['device_ms'] if low else '-'} | {eager or '-'} | {f'{speed:.2f}x' if speed else '-'} | "
                     f"{', '.join(p['plan_backends'] for p in mixes) or 'none'} | "
                     f"{', '.join(f'{x:.2f}' for x in pred) or '-'} |")
    return lines


def merge(args: argparse.Namespace) -> Path:
    """Write ``<date>-cuda.md`` / ``.csv`` under ``args.out`` (module docstring)."""
    plans = [json.loads(x) for x in Path(args.plans).read_text().splitlines() if x.strip()] \
        if Path(args.plans).is_file() else []
    anchors = read_anchors(Path(args.anchors))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{dt.date.today().isoformat()}-cuda"
    cols = sorted({k for p in plans for k in p}, key=lambda k: list(plans[0]).index(k) if k in plans[0] else 99)
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", *cols])
        w.writerows([["plan", *[p.get(c) for c in cols]] for p in plans])
        w.writerows([["anchor", m, a, None, None, ms] for (m, a), ms in anchors.items()])
    from collage.backends.cuda_timing import gpu_name
    from collage.util import source_commit

    md = [f"# GPU check: collage's plans beside native torch ({dt.date.today().isoformat()})", "",
          f"benchmarks/gpu_check.sh, one run on {gpu_name(0)}, collage at commit {source_commit()}. Plans: "
          "device-resident, CUDA-graph replayed where they can be, CUDA events (benchmarks/cuda_results.py). Anchors: "
          "benchmarks/torch_anchors.py in the same run.", "",
          "## Goal (issue 41)", "", *goal_lines(plans, anchors), "", "## Plans", "", *table(plans, cols), ""]
    if Path(args.anchors).with_suffix(".md").is_file():
        md += ["## Torch anchors", "", Path(args.anchors).with_suffix(".md").read_text(), ""]
    for bench_md in sorted(Path(args.bench).glob("*.md")) if args.bench else []:
        md += ["## collage bench --target cuda", "", bench_md.read_text().split("\n", 1)[-1], ""]
    stem.with_suffix(".md").write_text("\n".join(md))
    return stem


def table(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    head = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return head + ["| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |" for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("plan")
    a.add_argument("artifacts", nargs="+")
    a.add_argument("--tag", default="fp32")
    b = sub.add_parser("lowp")
    b.add_argument("--model", required=True)
    b.add_argument("--backends", required=True)
    b.add_argument("--accuracy", default="cos=0.999,rel=0.01")
    b.add_argument("--budget", type=float, default=20.0, help="measuring budget, seconds")
    b.add_argument("--work", required=True)
    for q in (a, b):
        q.add_argument("--repeat", type=int, default=50)
        q.add_argument("--out", required=True, help="JSON lines file the row is appended to")
    m = sub.add_parser("merge")
    m.add_argument("--plans", required=True)
    m.add_argument("--anchors", required=True, help="torch_anchors.py's CSV")
    m.add_argument("--bench", default=None, help="collage bench's --out folder")
    m.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.cmd == "plan":
        for d in args.artifacts:
            append(Path(args.out), plan_row(Path(d), args.tag, args.repeat))
    elif args.cmd == "lowp":
        append(Path(args.out), lowp_row(args))
    else:
        print(f"wrote {merge(args)}.md and .csv", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
