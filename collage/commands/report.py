"""``collage report OUT``: what runs where in a tuned artifact, and why (collage.report.render)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collage.report.render import partition_table, render_html, render_markdown, report_json
from collage.runtime.artifact import artifact_dir, is_archive, verify_files
from collage.runtime.manifest import read_manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", help="artifact directory written by `collage tune`, or its .tar.gz")
    parser.add_argument("--format", choices=("md", "html", "csv", "json"), default="md",
                        help="md: print Markdown; csv: print the partition table; json: print one JSON object "
                             "(keys: README); html: only write the page. The HTML page is written in every case: "
                             "OUT/report.html, or OUT.report.html beside a .tar.gz")
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")


def html_dest(artifact: Path) -> Path:
    """Where the page goes: inside an artifact directory; beside an archive (out.tar.gz -> out.report.html)."""
    if not is_archive(artifact):
        return artifact / "report.html"
    name = artifact.name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return artifact.with_name(name + ".report.html")


def run(args: argparse.Namespace) -> int:
    src = Path(args.artifact)
    with artifact_dir(src) as root:
        verify_files(root, read_manifest(root))  # a missing, damaged or changed file is named, as `run` names it
        page = render_html(root, html_dest(src))
        if args.format == "md":
            print(render_markdown(root))
        elif args.format == "csv":
            print(partition_table(root).to_csv(index=False), end="")
        elif args.format == "json":
            print(json.dumps(report_json(root), indent=2))
    print(f"wrote {page}", file=sys.stdout if args.format == "html" else sys.stderr)
    return 0
