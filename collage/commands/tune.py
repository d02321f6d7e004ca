"""``collage tune MODEL -o OUT``: the tuning job (collage.tuner.job) from the command line."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from collage.report.coverage import load_line, measured_line
from collage.report.rounds import rounds_line
from collage.tuner.job import DEFAULT_BACKENDS, DEFAULT_TOLERANCE, tune
from collage.tuner.sizes import MultiSizeResult, describe, parse_size_sets
from collage.util import count_arg, duration_arg

if TYPE_CHECKING:
    from collage.search.candidates import Limits


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX file or zoo:NAME")
    p.add_argument("-o", "--output", required=True, help="artifact directory to write")
    p.add_argument("--target", default="cpu", choices=["cpu", "cuda"],
                   help="device the artifact runs on; only backends of that device are tried")
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS), help="comma-separated backend names")
    p.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.OPTION=VALUE",
                   help="a constructor option of one backend, repeatable: tvm.tuning=metaschedule tvm.trials=64 "
                        "openvino.threads=2 (values read as int, float, true/false, else text); used wherever the "
                        "backend is built, part of its cost key, recorded in the artifact")
    p.add_argument("--tvm-budget", default=None, type=duration_arg,
                   help="MetaSchedule tuning time for TVM inside the tune (e.g. 10m), spent on the candidates whose "
                        "vendor cost is farthest above a roofline estimate; implies tvm.tuning=metaschedule; the "
                        "tuning database is shared across candidates and tunes (report.json: tvm_tuning)")
    p.add_argument("--budget", default=None, type=duration_arg, help="wall-clock limit of the whole tune: 90, 30s, "
                                                                     "10m, 1h30m, 1.5h (default: none, measure every "
                        "candidate); loading, the baselines (every backend's whole model), measuring, search, "
                        "verification and export all count, the tune ends within about 10%% of it, each step's "
                        "share said on the terminal; a budget too small for the baselines is refused, naming an "
                        "estimate of the least that works; what it cuts is said on the terminal and in the report; "
                        "with several size sets (--shape) split evenly over them")
    p.add_argument("--measure-order", default="auto", choices=["auto", "enumeration", "guided"],
                   help="under --budget, what is measured first: 'guided' (the default under a budget, 'auto'): a "
                        "cost model learned from the cost DB (on a fresh DB the shipped one, scaled to this machine "
                        "by a short probe) prices the rest and the measuring goes to the candidates that can change "
                        "the plan (report: coverage.estimates); or 'enumeration': the candidates in enumeration order")
    p.add_argument("--db", default=None, help="cost database: a path, sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
                                              "(default ~/.cache/collage/costs.sqlite)")
    p.add_argument("--cluster", default=None, metavar="ray://HOST:PORT",
                   help="measure the candidates on a Ray cluster's measurement nodes: ray://HOST:PORT, HOST:PORT, "
                        "or 'auto' ($RAY_ADDRESS); with --db postgresql://... shared by all (docs/CLUSTER.md)")
    p.add_argument("--refine-trials", type=count_arg(0), default=0, help="measured Optuna trials around the DP plan")
    add_candidate_arguments(p)
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="fix a symbolic input: NAME=D1,D2,... A dimension in braces is a set of sizes, "
                        "x=1,3,48,{160,320,640}: the model is tuned for each size set (several braces, or several "
                        "inputs with several shapes, make the cross product; --shape given again for the same input "
                        "lists more of its shapes) and OUTPUT is one artifact that runs the plan tuned for the size "
                        "it is called with, any other size untuned on the original model (a warning says so once "
                        "per size); `collage run OUTPUT --random` runs the first size set")
    p.add_argument("--archive", action="store_true", help="also write OUTPUT.tar.gz")
    p.add_argument("--atol", type=float, default=DEFAULT_TOLERANCE["atol"],
                   help="absolute tolerance of the artifact's outputs vs the ONNX Runtime fp32 reference")
    p.add_argument("--rtol", type=float, default=DEFAULT_TOLERANCE["rtol"],
                   help="relative tolerance of the artifact's outputs vs the ONNX Runtime fp32 reference")
    p.add_argument("--accuracy", default=None,
                   help="accuracy budget that allows lower-precision backends (e.g. openvino-bf16): "
                        "'cos=0.999,rel=0.01' = min cosine similarity, max error / output range, per output")
    p.add_argument("--calibration", default=None, metavar="INPUTS.npz",
                   help="inputs the accuracy budget is judged on (default: seeded random inputs, with a warning)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on stdout (keys: README, collage.tuner.result)")


def add_candidate_arguments(p: argparse.ArgumentParser) -> None:
    """--max-nodes and --no-ranges (``collage tune`` and ``collage bench``); :func:`limits_from` reads them."""
    p.add_argument("--max-nodes", type=count_arg(1), default=None, help="largest candidate subgraph, in nodes")
    p.add_argument("--no-ranges", action="store_true",
                   help="leave out the coarse range candidates (the segments, prefixes and suffixes between the "
                        "graph's narrow cuts that --max-nodes and the one-heavy-op rule would not give): only the "
                        "enumerated subgraphs, single nodes and each backend's whole model are measured")


def limits_from(args: argparse.Namespace) -> Limits | None:
    """The candidate limits --max-nodes and --no-ranges ask for; None: the tuner's defaults."""
    from collage.search.candidates import Limits

    asked: dict[str, Any] = {}
    if args.max_nodes is not None:
        asked["max_nodes"] = args.max_nodes
    if args.no_ranges:
        asked["ranges"] = False
    return Limits(**asked) if asked else None


def run(args: argparse.Namespace) -> int:
    from collage.backends import parse_backend_options
    from collage.tuner.clock import counting_from, process_start

    limits = limits_from(args)
    with counting_from(process_start()):  # --budget counts from the command's start (importing the runtimes too)
        res = tune(args.model, args.output, target=args.target,
                   backends=[b.strip() for b in args.backends.split(",") if b.strip()],
                   budget=args.budget, db=args.db, refine_trials=args.refine_trials,
                   shapes=parse_size_sets(args.shape), limits=limits, archive=args.archive,
                   tolerance={"atol": args.atol, "rtol": args.rtol},
                   accuracy=args.accuracy, calibration=args.calibration, progress=not args.quiet,
                   cluster=args.cluster, backend_options=parse_backend_options(args.backend_option),
                   tvm_budget=args.tvm_budget, measure_order=args.measure_order)
    if args.json:
        print(res.to_json(indent=2))
        return 0
    if isinstance(res, MultiSizeResult):
        for sizes, one in zip(res.sizes, res.results):
            print_result(one, heading=describe(sizes))
        print(f"artifact: {res.out_dir} ({len(res.sizes)} size sets; other sizes run untuned)   "
              f"(collage report {res.out_dir})")
        return 0
    print_result(res)
    print(f"artifact: {res.out_dir}   (collage report {res.out_dir})")
    return 0


def print_result(res: Any, heading: str | None = None) -> None:
    """The plan, its measurement beside the best single backend, and the measuring coverage of one tune."""
    if heading:
        print(f"size set {heading}:")
    best, best_ms = res.best_single if res.baselines else ("-", float("nan"))
    parts = res.plan.partitions
    print(f"plan: {len(parts)} partition(s): " + ", ".join(f"{p.backend} ({len(p.nodes)} nodes)" for p in parts))
    print(f"measured end to end: plan {res.plan_ms:.3f} ms; best single backend {best} {best_ms:.3f} ms "
          f"({best_ms / res.plan_ms:.2f}x)")
    steady = rounds_line(res.report)
    if steady:
        print(steady)
    coverage = res.report.get("coverage")
    if coverage:
        print(measured_line(coverage))
    if res.report.get("load"):
        print(load_line(res.report["load"]))
