"""``collage report OUT``: what runs where in a tuned artifact, and why (collage.report.render)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collage.report.render import partition_table, render_html, render_markdown
from collage.runtime.manifest import MANIFEST, read_manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", help="artifact directory written by `collage tune`")
    parser.add_argument("--format", choices=("md", "html", "csv"), default="md",
                        help="md: print Markdown (default); csv: print the partition table; html: only write "
                             "report.html. report.html is written in every case")


def run(args: argparse.Namespace) -> int:
    root = Path(args.artifact)
    if not (root / MANIFEST).is_file():
        read_manifest(root)  # raises the precise error
    page = render_html(root)
    if args.format == "md":
        print(render_markdown(root))
    elif args.format == "csv":
        print(partition_table(root).to_csv(index=False), end="")
    print(f"wrote {page}", file=sys.stdout if args.format == "html" else sys.stderr)
    return 0
