"""``collage zoo list``: the built-in models (zoo:NAME), built on demand."""
from __future__ import annotations

import argparse
import json

from collage.util import human_bytes
from collage.zoo.catalog import LIST_BUILD_MB, ENTRIES, read_meta, cached_path, is_built, model_path, zoo_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="zoo_command", metavar="ACTION")
    p = sub.add_parser("list", help="table of the zoo's models (default action)")
    p.add_argument("--build", action="store_true",
                   help=f"build every model (those over {LIST_BUILD_MB} MB are otherwise listed as not built)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list: one object per model with name, family, source, built, bytes, nodes, "
                        "inputs ({name: shape}), approx_mb")
    parser.set_defaults(build=False, json=False)


def run(args: argparse.Namespace) -> int:
    from collage.progress import stderr_is_terminal, track

    rows = [("name", "family", "source", "size", "nodes", "inputs")]
    records = []
    entries = list(ENTRIES)
    for e in track(entries, "zoo", "model", enabled=stderr_is_terminal() and not args.quiet):
        if not is_built(e.name) and (args.build or e.approx_mb <= LIST_BUILD_MB):
            model_path(e.name)
        if is_built(e.name):
            path = cached_path(e.name)
            meta = read_meta(path)
            ins = ", ".join(f"{n}[{'x'.join(map(str, dims))}]" for n, dims in meta["inputs"])
            rows.append((e.name, e.family, e.source, human_bytes(path.stat().st_size), str(meta["nodes"]), ins))
            records.append({"name": e.name, "family": e.family, "source": e.source, "built": True,
                            "bytes": path.stat().st_size, "nodes": meta["nodes"],
                            "inputs": {n: list(dims) for n, dims in meta["inputs"]}, "approx_mb": e.approx_mb})
        else:
            rows.append((e.name, e.family, e.source, f"not built (~{e.approx_mb} MB)", "-", "-"))
            records.append({"name": e.name, "family": e.family, "source": e.source, "built": False, "bytes": None,
                            "nodes": None, "inputs": None, "approx_mb": e.approx_mb})
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\nuse as zoo:NAME (e.g. collage inspect zoo:resnet50); cached in {zoo_dir()}")
    return 0
