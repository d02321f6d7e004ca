"""``collage measure MODEL``: measure a model's candidates into the cost database.

    collage measure zoo:resnet50 --backends onnxruntime,openvino --budget 10m
    collage measure model.onnx --db sqlite:////data/costs.sqlite --shape input=1,3,224,224
    collage measure zoo:bert-base --cluster ray://head:10001 --db postgresql://collage@dbhost/collage

What is measured (``--what``): ``candidates`` (default) enumerates the candidates the tuner would
(``collage.search.candidates``: convex connected node sets each backend supports); ``nodes`` measures
every single node each backend supports plus the whole model on each backend that takes all of it.
A fingerprint already in the database is reused, never measured again; the job stops at ``--budget``
keeping what it finished, and a rerun picks up where it stopped.
"""
from __future__ import annotations

import argparse
import logging

from collage.errors import CollageError
from collage.util import count_arg, duration_arg

log = logging.getLogger(__name__)

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="ONNX file or zoo:NAME")
    parser.add_argument("--backends", default="onnxruntime,openvino",
                        help="comma-separated backend names (default: onnxruntime,openvino)")
    parser.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.OPTION=VALUE",
                        help="a constructor option of one backend, repeatable (tvm.tuning=metaschedule tvm.trials=64); "
                             "part of the cost key, as in collage tune")
    parser.add_argument("--db", default=None, help="cost database: a path, sqlite:///URL or "
                                                   "postgresql://USER@HOST:PORT/DB "
                        "(default: <cache>/costs.sqlite)")
    parser.add_argument("--cluster", default=None, metavar="ray://HOST:PORT",
                   help="measure the candidates on a Ray cluster's measurement nodes: ray://HOST:PORT, HOST:PORT, "
                        "or 'auto' ($RAY_ADDRESS); with --db postgresql://... shared by all (docs/CLUSTER.md)")
    parser.add_argument("--budget", default=None, type=duration_arg, help="stop starting new measurements after this "
                                                                          "long "
                        "(90s, 10m, 1h); finished work is kept")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                        help="fix a symbolic input shape (repeatable)")
    parser.add_argument("--what", choices=("candidates", "nodes"), default="candidates",
                        help="candidates (what the tuner enumerates) or nodes (each node + the whole model)")
    parser.add_argument("--max-nodes", type=count_arg(1), default=None, help="largest candidate, in nodes (--what "
                                                                             "candidates)")
    parser.add_argument("--cap", default="2s", type=duration_arg, help="timing cap per candidate (default 2s)")
    parser.add_argument("--timeout", default="120s", type=duration_arg, help="kill a compile+measure that takes longer "
                                                                             "(default 120s)")
    parser.add_argument("--retry-failed", action="store_true", help="measure again keys stored as failed")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (same as --quiet)")


def _items(graph, names: list[str], what: str, max_nodes: int | None,
           options: dict | None = None) -> list[tuple[tuple[int, ...], str]]:
    from collage.backends import get_backend, unavailable_reason

    options = options or {}
    supports: dict[str, dict[int, bool]] = {}
    for name in names:
        why = unavailable_reason(name, **options.get(name, {}))
        if why:
            raise CollageError(f"backend {name!r} cannot run here: {why} (drop it from --backends)")
        supports[name] = get_backend(name, **options.get(name, {})).supports_all(graph)
    if what == "candidates":
        from collage.search.candidates import Limits, enumerate_candidates

        limits = Limits() if max_nodes is None else Limits(max_nodes=max_nodes)
        return [(c.nodes, c.backend) for c in enumerate_candidates(graph, supports, limits)]
    items: list[tuple[tuple[int, ...], str]] = []
    everything = tuple(range(len(graph)))
    for name in names:
        table = supports[name]
        items.extend(((i,), name) for i in everything if table.get(i))
        if all(table.get(i) for i in everything) and len(everything) > 1:
            items.append((everything, name))
        skipped = [i for i in everything if not table.get(i)]
        if skipped:
            log.info("%s does not take %d nodes (e.g. %s)", name, len(skipped), graph.node_label(skipped[0]))
    return items


def run(args: argparse.Namespace) -> int:
    from collage.measure.connect import get_db
    from collage.measure.schedule import MeasureOptions, measure_candidates
    from collage.graph.ir import parse_shapes

    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not names:
        raise CollageError("--backends names no backend")
    from collage.backends import check_options, parse_backend_options

    options = parse_backend_options(args.backend_option)
    stray = sorted(set(options) - set(names))
    if stray:
        raise CollageError(f"backend options for {', '.join(stray)}, which is not among --backends ({args.backends})")
    for name, opts in options.items():
        check_options(name, opts)

    from collage.tuner.job import load_model_graph

    graph = load_model_graph(args.model, parse_shapes(args.shape))  # the ONNX checker too, as `tune` does
    db = get_db(args.db)
    items = _items(graph, names, args.what, args.max_nodes, options)
    result = measure_candidates(graph, items, MeasureOptions(
        db=db, budget_s=args.budget, progress=not (args.no_progress or args.quiet), timeout_s=args.timeout or 120.0,
        cap_s=args.cap or 2.0, retry_failed=args.retry_failed, executor=args.cluster, backend_options=options))
    per_backend: dict[str, list[int]] = {}
    for (_, bname), cost in result.items():
        row = per_backend.setdefault(bname, [0, 0])
        row[0 if cost.ok else 1] += 1
    print(f"{graph.summary()} -> {db}")
    print(f"candidates: {result.candidates}   distinct fingerprints: {result.distinct}")
    print(f"measured now: {result.measured}   reused from the DB: {result.reused}   failed now: {result.failed}"
          f"   left unmeasured (budget): {result.unmeasured}   time: {result.elapsed_s:.1f} s")
    for bname in names:
        ok, bad = per_backend.get(bname, [0, 0])
        print(f"  {bname:<14} candidates with a cost: {ok}   failed: {bad}")
    if args.cluster:
        print("measured on: " + ", ".join(f"{k} {v}" for k, v in sorted(result.where.items())))
    for key, err in list(result.failures.items())[:10]:
        print(f"  failed: {key.backend} {key.fingerprint}: {err}")
    return 0
