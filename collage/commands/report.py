"""``collage report OUT``: what runs where in a tuned artifact, and why (collage.report.render)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collage.report.render import partition_table, render_html, render_markdown, report_json
from collage.runtime.artifact import artifact_dir, is_archive, verify_files
from collage.runtime.manifest import read_manifest
from collage.runtime.multisize import dynamic_model_path, is_multi_size, read_multi_manifest


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
        if is_multi_size(root):
            return report_sizes(src, root, args.format)
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


def report_sizes(src: Path, root: Path, fmt: str) -> int:
    """A multi-size artifact (collage.runtime.multisize): each size set's report in turn, under a heading naming
    its sizes; one HTML page per size set (inside its sizes/NNN folder, or OUT.sizes-NNN.report.html beside an
    archive); csv: one table with a ``sizes`` column; json: {"kind", "sizes": [{inputs, dir, <report>}]}."""
    import pandas as pd

    manifest = read_multi_manifest(root)
    dynamic_model_path(root, manifest)  # its checksum, as `run` checks it
    n = len(manifest["sizes"])
    if fmt == "md":
        print(f"Multi-size artifact: {n} size sets, each with its own plan below; any other size runs untuned on "
              f"the original model ({manifest['dynamic'].get('dir', 'dynamic')}/, ONNX Runtime).\n")
    tables, sizes, pages = [], [], []
    for k, entry in enumerate(manifest["sizes"]):
        sub = root / entry["dir"]
        verify_files(sub, read_manifest(sub))
        label = " ".join(f"{name}={list(shape)}" for name, shape in entry["inputs"].items())
        dest = (html_dest(src).with_name(html_dest(src).name.replace(".report.html", f".sizes-{k:03d}.report.html"))
                if is_archive(src) else sub / "report.html")
        pages.append(render_html(sub, dest))
        if fmt == "md":
            print(f"# Size set {k + 1} of {n}: {label}\n")
            print(render_markdown(sub))
        elif fmt == "csv":
            table = partition_table(sub)
            table.insert(0, "sizes", label)
            tables.append(table)
        elif fmt == "json":
            sizes.append({"inputs": entry["inputs"], "dir": entry["dir"], **report_json(sub)})
    if fmt == "csv":
        print(pd.concat(tables, ignore_index=True).to_csv(index=False), end="")
    elif fmt == "json":
        print(json.dumps({"kind": manifest["kind"], "sizes": sizes}, indent=2))
    for page in pages:
        print(f"wrote {page}", file=sys.stdout if fmt == "html" else sys.stderr)
    return 0
