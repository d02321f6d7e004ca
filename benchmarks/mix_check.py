"""A tune's searched plan measured again, in a fresh process, against the single backends: ``python -m
benchmarks.mix_check``.

    python -m benchmarks.mix_check ART/bert-base ART/zfnet512 --backend-option onnxruntime.shared_pool=false \
        --backend-option onnxruntime.wait=stop --backend-option onnxruntime.spin_us=0 -o results/bench/mix-check.md

For each tune output folder (its report.json): the plan the search chose (``searched_plan``: before the
never-worse rule replaced a mix by a single backend) is exported with the given backend options, and run
interleaved with each backend on the whole model (same options; ``benchmarks._common.interleaved``: a
shuffled order each round), ``--rounds`` rounds of ``--calls`` calls each, the median of the round medians;
one process per folder, so nothing an earlier model made (ONNX Runtime's process-wide pool) is there. The
table puts the search's prediction beside the measurement.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import header, interleaved, md_table, write_report


def measure(folder: str, options: dict, rounds: int, calls: int) -> dict:
    from collage import zoo
    from collage.backends import get_backend
    from collage.graph.inputs import random_inputs
    from collage.graph.ir import Graph
    from collage.runtime.artifact import PartitionTimes, load
    from collage.search.cover import to_plan
    from collage.tuner.export import export
    from collage.tuner.stitching import fill_boundaries

    report = json.loads((Path(folder) / "report.json").read_text())
    source = report["source"]
    graph = Graph.load(source) if source and Path(source).is_file() else zoo.load_graph(f"zoo:{report['model']}")
    searched = report["searched_plan"]
    parts = [(tuple(p["nodes"]), p["backend"]) for p in searched["partitions"]]
    table = {nodes: {b: p["cost_ms"]} for (nodes, b), p in zip(parts, searched["partitions"])}
    plan = fill_boundaries(graph, to_plan(graph, parts, table, None))
    feeds = random_inputs(graph, seed=0)
    with tempfile.TemporaryDirectory(prefix="collage-mix-") as tmp:
        art = load(export(graph, plan, Path(tmp) / "plan", backend_options=options))
        clock = PartitionTimes(art, feeds)  # a plan call that keeps each partition's call inside it
        runners = {"plan": clock}
        for b in report["backends"]:
            c = get_backend(b, **options.get(b, {})).compile(graph.model)
            runners[b] = lambda c=c: c.run(feeds)
        samples = interleaved(runners, rounds, report["model"], calls=calls)  # ms, round by round
    # per runner: the median of its per-round medians
    ms = {k: statistics.median(statistics.median(v[r * calls:(r + 1) * calls]) for r in range(rounds))
          for k, v in samples.items()}
    return {"model": report["model"], "partitions": [(b, len(n)) for n, b in parts],
            "predicted_ms": searched["predicted_ms"], "ms": ms,
            "part_predicted_ms": [p["cost_ms"] for p in searched["partitions"]],
            "part_ms": clock.medians(skip=len(clock.runs) - rounds * calls)}  # the warm-up calls left out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="tune output folders (with report.json)")
    ap.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.OPTION=VALUE")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # worker mode: one folder, JSON on stdout
    ap.add_argument("-o", "--output", type=Path, default=Path("results/bench/mix-check.md"))
    args = ap.parse_args(argv)
    from collage.backends import parse_backend_options

    options = parse_backend_options(args.backend_option)
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, options, args.rounds, args.calls)), flush=True)
        return 0
    rows, parts = [], []
    for folder in args.folders:
        cmd = [sys.executable, "-m", "benchmarks.mix_check", folder, "--one", folder, "--rounds", str(args.rounds),
               "--calls", str(args.calls)] + [x for o in args.backend_option for x in ("--backend-option", o)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            print(f"{folder}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
            continue
        r = json.loads(line[-1][7:])
        singles = {k: v for k, v in r["ms"].items() if k != "plan"}
        best = min(singles, key=singles.get)
        rows.append([r["model"], " + ".join(f"{b} {n}" for b, n in r["partitions"]), f"{r['predicted_ms']:.2f}",
                     f"{r['ms']['plan']:.2f}", f"{r['ms']['plan'] / r['predicted_ms'] - 1:+.0%}",
                     ", ".join(f"{k} {v:.2f}" for k, v in singles.items()), f"{singles[best] / r['ms']['plan']:.3f}x"])
        parts.append((r["model"], r["partitions"], r["part_predicted_ms"], r["part_ms"]))
        print(rows[-1], file=sys.stderr, flush=True)
    command = "python -m benchmarks.mix_check " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = header("Searched plans measured again in a fresh process", command,
                   __doc__.split("\n\n")[2].replace("\n", " "))
    lines += md_table(["model", "searched plan (nodes)", "predicted ms", "plan ms", "plan vs prediction",
                       "whole model ms", "best single / plan"], rows)
    lines += ["",
              "Per partition: the search's cost (as charged) and the median of its call inside the plan's runs, ms:",
              ""]
    prow = [[m, k, b, n, "-" if pred is None else f"{pred:.3f}", f"{got:.3f}",
             "-" if not pred else f"{got / pred - 1:+.0%}"]
            for m, ps, preds, gots in parts for k, ((b, n), pred, got) in enumerate(zip(ps, preds, gots))]
    lines += md_table(["model", "partition", "backend", "nodes", "predicted ms", "in the plan ms", "vs prediction"],
                      prow)
    write_report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
