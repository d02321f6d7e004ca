"""``collage run``: run a tuned artifact on inputs from .npy / .npz files (or seeded random ones).

    collage run OUT --input NAME=x.npy ... [--random] [--output DIR] [--repeat N] [--partitions]
    [--ignore-version-mismatch]
                [--allow-nonfinite]

Prints each output's name, shape and dtype (and where ``--output`` wrote it), with ``--repeat``
the median latency, and with ``--partitions`` each partition's time where it runs (inside the stitched
runs) and alone beside the tune's prediction. Loading and running is :mod:`collage.runtime.artifact`; like it, this
module imports nothing of the tuner.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from collage.errors import CollageError
from collage.runtime.artifact import Artifact, load
from collage.util import count_arg

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", help="artifact directory or .tar.gz written by `collage tune`")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="[NAME=]FILE",
                        help="an input as a .npy file (NAME= may be left out for a single-input model); "
                             "a .npz file gives several inputs by name")
    parser.add_argument("--random", action="store_true",
                        help="run on seeded random inputs instead (a multi-size artifact: at its first tuned size)")
    parser.add_argument("--seed", type=count_arg(0), default=0, help="seed for --random")
    parser.add_argument("--output", "-o", metavar="DIR", help="write each output to DIR/<name>.npy")
    parser.add_argument("--repeat", type=count_arg(0), default=0, metavar="N",
                        help="time N runs (after 3 warm-up runs) and print p50/p90/p99, mean, min, max and throughput")
    parser.add_argument("--partitions", action="store_true",
                        help="time each partition inside the stitched runs and alone on its captured inputs "
                             "(interleaved, --repeat rounds, 20 if not given) and print both beside the tune's "
                             "prediction: which partition costs more where it runs than it was priced at")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: outputs ({name: {shape, dtype, file}}) and, with --repeat, "
                             "latency_ms {runs, p50, p90, p99, mean, min, max} and throughput_per_s; with "
                             "--partitions, partitions [{index, backend, nodes, predicted_ms, in_chain_ms, alone_ms, "
                             "switch}]")
    parser.add_argument("--ignore-version-mismatch", action="store_true",
                        help="run even if a backend's installed version differs from the tuned one")
    parser.add_argument("--allow-nonfinite", action="store_true",
                        help="accept inputs holding NaN or infinity (refused by default: backends disagree on them, "
                             "so an output could look right and be wrong); for models that handle them themselves")


def _load_npy(path: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise CollageError(f"{p}: no such input file")
    try:
        return np.load(p, allow_pickle=False)
    except Exception as e:
        raise CollageError(f"{p}: not a readable .npy/.npz file ({e})") from None


def read_feeds(art: Artifact, specs: list[str]) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or (name not in art._input_specs and Path(spec).is_file()):
            name, file = "", spec
        data = _load_npy(file)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                for k in data.files:
                    try:
                        value = data[k]
                    except Exception as e:  # noqa: BLE001 - an object (pickled) member, a damaged member
                        raise CollageError(f"{file}: member {k!r} cannot be read ({e}); inputs are plain numeric "
                                           "arrays (pickled objects are refused)") from None
                    _add(feeds, k, value, spec)
            continue
        if not name:
            if len(art.inputs) != 1:
                raise CollageError(f"--input {spec}: the model has {len(art.inputs)} inputs "
                                   f"({', '.join(s.name for s in art.inputs)}); write NAME=FILE")
            name = art.inputs[0].name
        _add(feeds, name, data, spec)
    return feeds


def latency_stats(times_ms: list[float]) -> dict[str, float]:
    """runs, p50/p90/p99, mean, min, max (ms) and throughput (runs per second, back to back) of run times."""
    t = np.asarray(times_ms, dtype=np.float64)
    p50, p90, p99 = (float(x) for x in np.percentile(t, [50, 90, 99]))
    return {"runs": int(t.size), "p50": p50, "p90": p90, "p99": p99, "mean": float(t.mean()), "min": float(t.min()),
            "max": float(t.max()), "throughput_per_s": 1000.0 / float(t.mean())}


def _add(feeds: dict[str, np.ndarray], name: str, value: np.ndarray, spec: str) -> None:
    if name in feeds:
        raise CollageError(f"--input {spec}: input {name!r} is given twice; give each input once")
    feeds[name] = value


def check_output_dir(path: str | Path) -> Path:
    """``--output DIR``: a directory (made if missing) or refused with one clear line, before anything runs."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CollageError(f"--output {out}: exists and is not a directory; give a directory for the outputs")
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise CollageError(f"--output {out}: {probe} is a file, so no directory can be made under it")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CollageError(f"--output {out}: {probe} is not writable")
    return out


def sanitize(name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")
    return safe or "output"


def partition_rows(art: Artifact, feeds: dict[str, np.ndarray], repeat: int,
                   quiet: bool = False) -> list[dict[str, Any]]:
    """Each partition's predicted ms, its median call inside the stitched runs and alone (``boundary_overhead``);
    printed as a table unless ``quiet``."""
    bo = art.boundary_overhead(feeds, repeat=repeat)
    rows = [{"index": p.index, "backend": p.backend, "nodes": p.n_nodes, "predicted_ms": p.cost_ms,
             "in_chain_ms": bo.in_chain_ms[k], "alone_ms": bo.parts_ms[k],
             "switch": k > 0 and p.backend != art.partitions[k - 1].backend}
            for k, p in enumerate(art.partitions)]
    if not quiet:
        print(f"partitions over {repeat} interleaved rounds (medians, ms): stitched {bo.stitched_ms:.3f}, "
              f"sum of the calls in it {sum(bo.in_chain_ms):.3f}, sum alone {sum(bo.parts_ms):.3f}, "
              f"sum predicted " + (f"{sum(r['predicted_ms'] for r in rows):.3f}"
                                   if all(r["predicted_ms"] is not None for r in rows) else "-"))
        print("#\tbackend\tnodes\tpredicted\tin chain\talone\tchain/alone")
        for r in rows:
            pred = "-" if r["predicted_ms"] is None else f"{r['predicted_ms']:.3f}"
            ratio = f"{r['in_chain_ms'] / r['alone_ms']:.2f}" if r["alone_ms"] > 0 else "-"
            print(f"{r['index']}\t{r['backend']}{' *' if r['switch'] else ''}\t{r['nodes']}\t{pred}\t"
                  f"{r['in_chain_ms']:.3f}\t{r['alone_ms']:.3f}\t{ratio}")
        if any(r["switch"] for r in rows):
            print("* the backend changes before this partition")
    return rows


def run(args: argparse.Namespace) -> int:
    out_dir = check_output_dir(args.output) if args.output else None  # before any work
    art = load(args.artifact, check_versions=not args.ignore_version_mismatch, allow_nonfinite=args.allow_nonfinite)
    if args.random and args.input:
        raise CollageError("give either --input or --random, not both")
    if args.random:
        feeds = art.random_inputs(args.seed)
    elif args.input:
        feeds = read_feeds(art, args.input)
    else:
        raise CollageError("no inputs: pass --input NAME=FILE.npy for each of "
                           + ", ".join(f"{s.name} ({s.describe()})" for s in art.inputs) + ", or --random")
    outputs = art.run(feeds)
    used: set[str] = set()
    if out_dir:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CollageError(f"--output {out_dir}: cannot create it ({e.strerror or e})") from None
    result: dict[str, Any] = {"artifact": str(args.artifact), "outputs": {}}
    for name, arr in outputs.items():
        result["outputs"][name] = {"shape": list(arr.shape), "dtype": arr.dtype.name, "file": None}
        line = f"{name}\tshape={tuple(arr.shape)}\tdtype={arr.dtype.name}"
        if out_dir:
            base = sanitize(name)
            fname, k = base, 1
            while fname in used:
                k += 1
                fname = f"{base}_{k}"
            used.add(fname)
            try:
                np.save(out_dir / f"{fname}.npy", arr)
            except OSError as e:
                raise CollageError(f"--output {out_dir}: cannot write {fname}.npy ({e.strerror or e})") from None
            line += f"\t-> {out_dir / (fname + '.npy')}"
            result["outputs"][name]["file"] = str(out_dir / (fname + ".npy"))
        if not args.json:
            print(line)
    if args.repeat > 0:
        stats = latency_stats(art.latency_ms(feeds, repeat=args.repeat))
        result["latency_ms"] = {k: v for k, v in stats.items() if k != "throughput_per_s"}
        result["throughput_per_s"] = stats["throughput_per_s"]
        if not args.json:
            print(f"latency over {stats['runs']} runs: p50 {stats['p50']:.3f} ms, p90 {stats['p90']:.3f} ms, "
                  f"p99 {stats['p99']:.3f} ms, mean {stats['mean']:.3f} ms (min {stats['min']:.3f}, "
                  f"max {stats['max']:.3f}); throughput {stats['throughput_per_s']:.1f} runs/s (one at a time)")
    if args.partitions:
        tuned = art.artifact_for(feeds) if hasattr(art, "artifact_for") else art  # a multi-size artifact: its size's
        if tuned is None:
            raise CollageError("--partitions: this input size was not tuned; it runs on the whole original model, "
                               "which has no partitions (give inputs of a tuned size)")
        result["partitions"] = partition_rows(tuned, feeds, args.repeat if args.repeat > 0 else 20, quiet=args.json)
    if args.json:
        print(json.dumps(result, indent=2))
    sys.stdout.flush()
    return 0
