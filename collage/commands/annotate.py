"""``collage annotate OUT -o model.annotated.onnx``: the original model with each node's backend, precision
and partition in its metadata (collage.report.annotate), for Netron or any ONNX tool."""
from __future__ import annotations

import argparse
import json

from collage.report.annotate import annotate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", help="artifact directory written by `collage tune`, or its .tar.gz")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.onnx", help="annotated model to write")
    parser.add_argument("--model", default=None, metavar="FILE.onnx",
                        help="the model the artifact was tuned from (default: the path its report records; "
                             "checked against the manifest's sha256)")
    parser.add_argument("--json", action="store_true", help="print the summary written into the model as JSON")


def run(args: argparse.Namespace) -> int:
    summary = annotate(args.artifact, args.output, args.model)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        nodes = summary["nodes"]
        print(f"wrote {args.output}: {nodes['annotated']} node(s) annotated with their backend, precision and "
              f"partition" + (f"; {nodes['folded']} folded constant(s)" if nodes["folded"] else "")
              + (f"; {nodes['dropped']} dead node(s)" if nodes["dropped"] else ""))
    return 0
