"""``collage inspect MODEL``: what a model is made of, before anything is measured (collage.graph.stats)."""
from __future__ import annotations

import argparse
import importlib
import json

from collage.errors import CollageError
from collage.graph.ir import parse_shapes
from collage.graph.stats import format_inspection, inspect_graph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="an .onnx file, or zoo:NAME (see `collage zoo list`)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                        help="fix the shape of input NAME (repeatable); needed for symbolic dims")
    parser.add_argument("--support", action="store_true", help="per op type, which backends take it")
    parser.add_argument("--backends", default=None, metavar="A,B,...",
                        help="backends for --support (default: every backend collage knows)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (keys: README; with --support a 'support' list of rows: "
                             "op, count and per backend yes / no / taken/count / unavailable)")


def run(args: argparse.Namespace) -> int:
    from collage import zoo

    graph = zoo.load_graph(args.model, shapes=parse_shapes(args.shape))
    graph.validate()  # a malformed model is named here, as `tune` names it, not met as a KeyError further on
    if args.json:
        data = inspect_graph(graph).to_dict()
        if args.support:
            from collage.backends import support_table
            names = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
            data["support"] = support_table(graph, names)[1]
        print(json.dumps(data, indent=2))
        return 0
    print(format_inspection(inspect_graph(graph)))
    if args.support:
        try:
            backends = importlib.import_module("collage.backends")
            support_report = backends.support_report
        except (ImportError, AttributeError) as e:
            raise CollageError(f"--support needs collage.backends.support_report, which this build lacks ({e}); "
                               "run without --support") from e
        names = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
        print()
        print(support_report(graph, names))
    return 0
