"""``collage bench``: the tuned plan against every single backend, per model (collage.tuner.bench)."""
from __future__ import annotations

import argparse
import shlex
import sys

from collage.commands.tune import add_candidate_arguments, limits_from
from collage.tuner.bench import bench
from collage.util import duration_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", required=True, help="comma-separated: zoo:NAME or paths")
    p.add_argument("--backends", default="onnxruntime,openvino", help="comma-separated backend names")
    p.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.OPTION=VALUE",
                   help="a constructor option of one backend, repeatable, as for collage tune (e.g. "
                        "onnxruntime.shared_pool=false onnxruntime.wait=stop); every model's tune uses it")
    p.add_argument("--target", default="cpu", choices=["cpu", "cuda"], help="device the plans run on")
    p.add_argument("--db", default=None, help="cost database: a path, sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
                                              "(default ~/.cache/collage/costs.sqlite)")
    p.add_argument("--budget", default=None, type=duration_arg, help="measuring budget per model, e.g. 5m")
    add_candidate_arguments(p)
    p.add_argument("--cluster", default=None, metavar="ray://HOST:PORT",
                   help="measure the candidates on a Ray cluster's measurement nodes: ray://HOST:PORT, HOST:PORT, "
                        "or 'auto' ($RAY_ADDRESS); with --db postgresql://... shared by all (docs/CLUSTER.md)")
    p.add_argument("--out", default="results/bench", help="folder for <date>-<target>.md/.csv")
    p.add_argument("--artifacts", default=None, help="keep each model's artifact under this folder")


def run(args: argparse.Namespace) -> int:
    from collage.backends import parse_backend_options

    rows = bench([m.strip() for m in args.models.split(",") if m.strip()],
                 backends=[b.strip() for b in args.backends.split(",") if b.strip()], target=args.target,
                 db=args.db, budget_s=args.budget, limits=limits_from(args), out_dir=args.out,
                 artifacts_dir=args.artifacts, cluster=args.cluster,
                 backend_options=parse_backend_options(args.backend_option), progress=not args.quiet,
                 command="collage bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    failed = [r for r in rows if "error" in r]
    for r in failed:
        print(f"{r['model']}: {r['error']}", file=sys.stderr)
    return 1 if failed and len(failed) == len(rows) else 0
