"""Backend tables for results/backends/ and results/chains/: which backend takes which op, per-call overhead, chains of
sessions.

    python -m benchmarks.backend_tables            # full: every zoo model, ResNet-50 and BERT-base chains
    python -m benchmarks.backend_tables --quick    # smoke run on the tiny zoo models (minutes)
    python -m benchmarks.backend_tables --tables chain --rounds 100

Writes results/backends/op-support.md, results/backends/call-overhead.md and results/chains/chain.md (``*-quick.md``
with ``--quick``), each starting with the exact command that produced it. The chain table ends with what
each boundary costs in layout conversions (from the runtimes' profilers), per tensor size. Timings are
medians over many interleaved runs (configurations take turns, in a shuffled order each round), never
single samples. The chain table lives in ``benchmarks/chain_tables.py``.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from tqdm import tqdm

from benchmarks._common import header, interleaved, md_table, report_name, stats
from collage import zoo
from collage.backends import (
    backend_names,
    get_backend,
    support_table,
    unavailable_reason,
)

log = logging.getLogger("benchmarks.backend_tables")

TINY_MODELS = ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert"]


# ---------------------------------------------------------------------- helpers
def _cpu_backends() -> list[str]:
    names = []
    for n in backend_names("cpu"):
        reason = unavailable_reason(n)
        if reason is None:
            names.append(n)
        else:
            log.warning("skipping backend %s: %s", n, reason)
    return names


# ---------------------------------------------------------------------- op support
def op_support(models: list[str], command: str, out: Path) -> Path:
    names = _cpu_backends()
    lines = header("Op support per backend", command,
                    "Per zoo model and op type: how many nodes, and whether each backend takes them "
                    "(decided by compiling a one-node model of each distinct node signature; `k/n` when only "
                    "some signatures are taken).")
    sections: list[str] = []
    refused: list[list[object]] = []
    for model in tqdm(models, desc="op support", file=sys.stderr):
        graph = zoo.load_graph(f"zoo:{model}")
        cols, rows = support_table(graph, names)
        sections += [f"## {model} ({len(graph)} nodes)", ""]
        sections += md_table(["op type", "count", *cols], [[r["op"], r["count"], *(r[c] for c in cols)] for r in rows])
        refused += [[model, r["op"], r["count"], c, r[c]] for r in rows for c in cols if r[c] != "yes"]
    lines += ["## Ops some backend does not take", ""]
    lines += md_table(["model", "op type", "count", "backend", "taken"], refused) if refused else \
        [f"None: every backend ({', '.join(names)}) takes every op of every model listed.", ""]
    path = out / report_name("op-support", command)
    path.write_text("\n".join(lines + sections))
    return path


# ---------------------------------------------------------------------- call overhead
def _add_model(shape: list[int]) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add",
                          [helper.make_tensor_value_info("a", 1, shape), helper.make_tensor_value_info("b", 1, shape)],
                          [helper.make_tensor_value_info("c", 1, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _call_paths(name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, Callable[[], object]]:
    backend = get_backend(name)
    compiled = backend.compile(model)
    paths: dict[str, Callable[[], object]] = {"collage fast path (Compiled.run)": lambda: compiled.run(feeds)}
    if name == "onnxruntime":
        import onnxruntime as ort

        sess = backend.open_session(model.SerializeToString())
        values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
        paths["session.run(None, numpy feeds)"] = lambda: sess.run(None, feeds)
        paths["session.run_with_ort_values"] = lambda: sess.run_with_ort_values(["c"], values)
    elif name == "openvino":
        cm = backend.compile_model(backend.read_model(model.SerializeToString()))
        req = cm.create_infer_request()
        paths["compiled_model(feeds) (copies)"] = lambda: cm(feeds)
        paths["request.infer(feeds, share_inputs/outputs)"] = lambda: req.infer(feeds, share_inputs=True,
                                                                               share_outputs=True)
    return paths


def call_overhead(rounds: int, calls: int, command: str, out: Path) -> Path:
    shapes = {"tiny Add (1 element)": [1], "Add 1x64x56x56 (800 KB)": [1, 64, 56, 56]}
    rows = []
    for label, shape in shapes.items():
        rng = np.random.default_rng(0)
        feeds = {k: rng.standard_normal(shape).astype(np.float32) for k in ("a", "b")}
        model = _add_model(shape)
        paths = {(n, p): fn for n in _cpu_backends() for p, fn in _call_paths(n, model, feeds).items()}
        samples = interleaved(paths, rounds, f"overhead {label}", warmup=20, calls=calls, unit_ns=1e3)
        for (n, p), s in samples.items():
            med, p10, p90 = stats(s)
            rows.append([label, n, p, f"{med:.1f}", f"{p10:.1f} - {p90:.1f}", len(s)])
    lines = header("Per-call overhead", command,
                    f"Median microseconds per call, {rounds} interleaved rounds x {calls} calls per path "
                    "(path order shuffled each round). The fast path is what collage uses.")
    lines += md_table(["case", "backend", "call path", "median us", "p10 - p90 us", "samples"], rows)
    path = out / report_name("call-overhead", command)
    path.write_text("\n".join(lines))
    return path


# ---------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.backend_tables", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny zoo models and few rounds (a smoke run)")
    p.add_argument("--tables", default="support,overhead,chain", help="comma list of support, overhead, chain")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 60, quick 5)")
    p.add_argument("--models", default=None,
                   help="comma list of zoo models for the support and chain tables (default: by mode)")
    p.add_argument("--out", type=Path, default=Path("results"),
                   help="results folder: op-support and call-overhead go to OUT/backends/, chain to OUT/chains/")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = "python -m benchmarks.backend_tables " + " ".join(sys.argv[1:] if argv is None else argv)
    command = command.strip()
    for topic in ("backends", "chains"):
        (args.out / topic).mkdir(parents=True, exist_ok=True)
    tables = {t.strip() for t in args.tables.split(",") if t.strip()}
    rounds = args.rounds or (5 if args.quick else 60)
    chosen = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    if "support" in tables:
        models = chosen or (TINY_MODELS if args.quick else zoo.names())
        print(op_support(models, command, args.out / "backends"))
    if "overhead" in tables:
        print(call_overhead(rounds if args.quick else max(rounds // 2, 10), 50 if args.quick else 200, command,
                            args.out / "backends"))
    if "chain" in tables:
        models = chosen or (["tiny-resnet", "tiny-bert"] if args.quick else ["resnet50", "bert-base"])
        from benchmarks.chain_tables import chains

        print(chains(models, rounds, command, args.out / "chains"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
