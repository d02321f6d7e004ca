"""Backend tables for results/: which backend takes which op, per-call overhead, chains of sessions.

    python -m benchmarks.backend_tables            # full: every zoo model, ResNet-50 and BERT-base chains
    python -m benchmarks.backend_tables --quick    # smoke run on the tiny zoo models (minutes)
    python -m benchmarks.backend_tables --tables chain --rounds 100

Writes results/op-support.md, results/call-overhead.md and results/chain.md (``*-quick.md`` with
``--quick``), each starting with the exact command that produced it. The chain table ends with what
each boundary costs in layout conversions (from the runtimes' profilers), per tensor size. Timings are
medians over many interleaved runs (configurations take turns, in a shuffled order each round), never
single samples.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import logging
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from tqdm import tqdm

from collage import zoo
from collage.backends import backend_names, get_backend, support_table, unavailable_reason
from collage.graph import Graph
from collage.util import machine_id, physical_cores

log = logging.getLogger("benchmarks.backend_tables")

TINY_MODELS = ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert"]


# ---------------------------------------------------------------------- helpers
SMOKE = ("**Smoke run (`--quick`): tiny models, few rounds; these numbers only prove the script works. "
         "Run without `--quick` on a quiet machine for the real table.**")


def _fname(stem: str, command: str) -> str:
    """``stem.md``; ``stem-quick.md`` for a smoke run, so it is never mistaken for the real table."""
    return f"{stem}-quick.md" if "--quick" in command else f"{stem}.md"


def _header(title: str, command: str, notes: str = "") -> list[str]:
    import onnxruntime
    import openvino

    lines = [f"# {title}", "", f"Command: `{command}`", "",
             f"Machine: {machine_id()}; threads {physical_cores()}; onnxruntime {onnxruntime.__version__}; "
             f"openvino {openvino.get_version().split('-')[0]}; written {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC.", ""]
    if "--quick" in command:
        lines += [SMOKE, ""]
    if notes:
        lines += [notes, ""]
    return lines


def _md_table(head: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def _cpu_backends() -> list[str]:
    names = []
    for n in backend_names("cpu"):
        reason = unavailable_reason(n)
        if reason is None:
            names.append(n)
        else:
            log.warning("skipping backend %s: %s", n, reason)
    return names


def _stats(samples: list[float]) -> tuple[float, float, float]:
    a = np.asarray(samples)
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90))


# ---------------------------------------------------------------------- op support
def op_support(models: list[str], command: str, out: Path) -> Path:
    names = _cpu_backends()
    lines = _header("Op support per backend", command,
                    "Per zoo model and op type: how many nodes, and whether each backend takes them "
                    "(decided by compiling a one-node model of each distinct node signature; `k/n` when only "
                    "some signatures are taken).")
    sections: list[str] = []
    refused: list[list[object]] = []
    for model in tqdm(models, desc="op support", file=sys.stderr):
        graph = zoo.load_graph(f"zoo:{model}")
        cols, rows = support_table(graph, names)
        sections += [f"## {model} ({len(graph)} nodes)", ""]
        sections += _md_table(["op type", "count", *cols], [[r["op"], r["count"], *(r[c] for c in cols)] for r in rows])
        refused += [[model, r["op"], r["count"], c, r[c]] for r in rows for c in cols if r[c] != "yes"]
    lines += ["## Ops some backend does not take", ""]
    lines += _md_table(["model", "op type", "count", "backend", "taken"], refused) if refused else \
        [f"None: every backend ({', '.join(names)}) takes every op of every model listed.", ""]
    path = out / _fname("op-support", command)
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

        sess = backend._session(model.SerializeToString())
        values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
        paths["session.run(None, numpy feeds)"] = lambda: sess.run(None, feeds)
        paths["session.run_with_ort_values"] = lambda: sess.run_with_ort_values(["c"], values)
    elif name == "openvino":
        cm = backend._compile(backend._read(model.SerializeToString()))
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
        samples: dict[tuple[str, str], list[float]] = {k: [] for k in paths}
        for fn in paths.values():
            for _ in range(20):
                fn()
        keys = list(paths)
        gc.disable()
        try:
            for _ in tqdm(range(rounds), desc=f"overhead {label}", file=sys.stderr):
                random.shuffle(keys)
                for k in keys:
                    fn = paths[k]
                    for _ in range(calls):
                        t = time.perf_counter_ns()
                        fn()
                        samples[k].append((time.perf_counter_ns() - t) / 1e3)
        finally:
            gc.enable()
        for (n, p), s in samples.items():
            med, p10, p90 = _stats(s)
            rows.append([label, n, p, f"{med:.1f}", f"{p10:.1f} - {p90:.1f}", len(s)])
    lines = _header("Per-call overhead", command,
                    f"Median microseconds per call, {rounds} interleaved rounds x {calls} calls per path "
                    "(path order shuffled each round). The fast path is what collage uses.")
    lines += _md_table(["case", "backend", "call path", "median us", "p10 - p90 us", "samples"], rows)
    path = out / _fname("call-overhead", command)
    path.write_text("\n".join(lines))
    return path


# ---------------------------------------------------------------------- chains
def resnet_cuts(graph: Graph) -> list[int]:
    """Piece ends: the stem's MaxPool, then every residual block's closing Relu (the head is the last piece)."""
    ends = [i for i in range(len(graph)) if graph.op_type(i) == "MaxPool"][:1]
    for i in range(len(graph)):
        if graph.op_type(i) == "Relu":
            src = graph.producer(graph.op(i).input[0])
            if src is not None and graph.op_type(src) in ("Sum", "Add"):
                ends.append(i)
    return sorted(set(ends))


def bert_cuts(graph: Graph) -> list[int]:
    """Piece ends: the embedding's LayerNormalization, then each encoder layer's output LayerNormalization
    except the last (the last layer and the pooler are the last piece)."""
    ln = [i for i in range(len(graph)) if graph.op_type(i) == "LayerNormalization"]
    return ln[0:-1:2]


def pieces(graph: Graph, ends: list[int]) -> list[list[int]]:
    """Contiguous ranges of the topological order (always convex) ending after each of ``ends``."""
    out, start = [], 0
    for e in [*ends, len(graph) - 1]:
        if e >= start:
            out.append(list(range(start, e + 1)))
            start = e + 1
    return out


class Chain:
    """Pieces run in order, each on its backend, tensors handed over by name (outputs reused in place)."""

    def __init__(self, graph: Graph, parts: list[list[int]], compiled: list) -> None:
        self.steps = []
        for ids, c in zip(parts, compiled):
            entering, leaving = graph.boundary(ids)
            self.steps.append((c, entering))
        self.outputs = graph.outputs

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env = dict(feeds)
        for c, entering in self.steps:
            env.update(c.run({t: env[t] for t in entering}))
        return {t: env[t] for t in self.outputs}


def _chain_rows(model: str, rounds: int, handover: bool) -> list[list[object]]:
    graph = zoo.load_graph(f"zoo:{model}")
    cuts = bert_cuts(graph) if "bert" in model else resnet_cuts(graph)
    parts = pieces(graph, cuts)
    ort_opts = {"spin": not handover}
    ov_opts = {"pinning": not handover}
    ort = get_backend("onnxruntime", **ort_opts)
    ov = get_backend("openvino", **ov_opts) if unavailable_reason("openvino") is None else None
    feeds = zoo.random_inputs(graph)
    models = [graph.extract(p, name=f"{model}_piece{k}") for k, p in enumerate(parts)]
    log.info("%s: %d pieces of %s nodes", model, len(parts), [len(p) for p in parts])
    configs: dict[str, Callable[[], object]] = {}
    whole_ort = ort.compile(graph.model)
    configs["whole model, onnxruntime"] = lambda: whole_ort.run(feeds)
    ort_parts = [ort.compile(m) for m in tqdm(models, desc=f"{model} ort pieces", file=sys.stderr)]
    configs["chain all-onnxruntime"] = lambda ch=Chain(graph, parts, ort_parts): ch(feeds)
    if any(getattr(c, "_optimized", None) is not None for c in ort_parts):  # some cut reads a residual input
        plain = get_backend("onnxruntime", residual_fusion=False, **ort_opts)
        plain_parts = [plain.compile(m) for m in models]
        configs["chain all-onnxruntime, residual fusion off"] = lambda ch=Chain(graph, parts, plain_parts): ch(feeds)
    if ov is not None:
        whole_ov = ov.compile(graph.model)
        configs["whole model, openvino"] = lambda: whole_ov.run(feeds)
        ov_parts = [ov.compile(m) for m in tqdm(models, desc=f"{model} ov pieces", file=sys.stderr)]
        configs["chain all-openvino"] = lambda ch=Chain(graph, parts, ov_parts): ch(feeds)
        alt = [ort_parts[k] if k % 2 == 0 else ov_parts[k] for k in range(len(parts))]
        configs["chain alternating ort/ov"] = lambda ch=Chain(graph, parts, alt): ch(feeds)
        alt2 = [ov_parts[k] if k % 2 == 0 else ort_parts[k] for k in range(len(parts))]
        configs["chain alternating ov/ort"] = lambda ch=Chain(graph, parts, alt2): ch(feeds)
    samples: dict[str, list[float]] = {k: [] for k in configs}
    for fn in configs.values():
        for _ in range(3):
            fn()
    keys = list(configs)
    gc.disable()
    try:
        for _ in tqdm(range(rounds), desc=f"{model} chains", file=sys.stderr):
            random.shuffle(keys)
            for k in keys:
                t = time.perf_counter_ns()
                configs[k]()
                samples[k].append((time.perf_counter_ns() - t) / 1e6)
    finally:
        gc.enable()
    whole = {"onnxruntime": _stats(samples["whole model, onnxruntime"])[0]}
    if "whole model, openvino" in samples:
        whole["openvino"] = _stats(samples["whole model, openvino"])[0]
    rows = []
    for k, s in samples.items():
        med, p10, p90 = _stats(s)
        ref = "onnxruntime" if "onnxruntime" in k else "openvino" if "openvino" in k else None
        vs = f"{med / whole[ref]:.2f}x" if ref in whole and k.startswith("chain") else ""
        rows.append([model, f"{len(parts)}", "on" if handover else "off", k, f"{med:.2f}", f"{p10:.2f} - {p90:.2f}",
                     vs, len(s)])
    return rows


def _ort_conversions(models: list[onnx.ModelProto], feeds: dict[str, np.ndarray], graph: Graph,
                     parts: list[list[int]], runs: int) -> list[tuple[float, float]]:
    """Per piece (ms at its input, ms at its output) in onnxruntime's layout conversions (ReorderInput,
    ReorderOutput), from its profiler's kernel times: median over ``runs`` chain runs."""
    import json
    import tempfile

    backend = get_backend("onnxruntime")
    options = backend.session_options
    with tempfile.TemporaryDirectory(prefix="collage-prof-") as tmp:
        def profiled(opt_level: str | None = None):  # noqa: ANN202
            so = options(opt_level)
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / "piece")
            return so

        backend.session_options = profiled  # type: ignore[method-assign]
        compiled = [backend.compile(m) for m in models]
        chain = Chain(graph, parts, compiled)
        for _ in range(runs + 1):
            chain(feeds)
        out = []
        for c in compiled:
            per_node: dict[tuple[str, str], list[float]] = {}
            for e in json.loads(Path(c._session.end_profiling()).read_text()):
                if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                    per_node.setdefault((e["args"]["op_name"], e["name"]), []).append(e["dur"] / 1e3)
            cost = {op: sum(float(np.median(v[1:])) for (o, _), v in per_node.items() if o == op)
                    for op in ("ReorderInput", "ReorderOutput")}
            out.append((cost["ReorderInput"], cost["ReorderOutput"]))
    return out


def _ov_conversions(models: list[onnx.ModelProto], feeds: dict[str, np.ndarray], graph: Graph,
                    parts: list[list[int]], runs: int) -> list[tuple[float, float]]:
    """Per piece (ms at its input, ms at its output) in OpenVINO's Reorder nodes (``PERF_COUNT``; a
    Reorder feeding a result counts as output side): median over ``runs`` chain runs."""
    backend = get_backend("openvino")
    config = backend.config
    backend.config = lambda: {**config(), "PERF_COUNT": "YES"}  # type: ignore[method-assign]
    compiled = [backend.compile(m) for m in models]
    chain = Chain(graph, parts, compiled)
    samples: list[list[tuple[float, float]]] = [[] for _ in compiled]
    chain(feeds)
    for _ in range(runs):
        chain(feeds)
        for k, c in enumerate(compiled):
            side = [0.0, 0.0]
            for info in c._request.profiling_info:
                if info.node_type == "Reorder":
                    side["sink_port" in info.node_name] += info.real_time.total_seconds() * 1e3
            samples[k].append((side[0], side[1]))
    return [(float(np.median([s[0] for s in x])), float(np.median([s[1] for s in x]))) for x in samples]


def _boundary_rows(model: str, runs: int, medians: dict[str, float]) -> tuple[list[list[object]], list[list[object]]]:
    """What each cut costs in layout conversions, per backend: (per-boundary rows, summary rows)."""
    graph = zoo.load_graph(f"zoo:{model}")
    parts = pieces(graph, bert_cuts(graph) if "bert" in model else resnet_cuts(graph))
    models = [graph.extract(p, name=f"{model}_piece{k}") for k, p in enumerate(parts)]
    feeds = zoo.random_inputs(graph)
    sizes = []  # bytes crossing each boundary k -> k+1
    for k in range(len(parts) - 1):
        _, leaving = graph.boundary(parts[k])
        entering_next = set(graph.boundary(parts[k + 1])[0])
        sizes.append(sum(graph.tensor(t).nbytes for t in leaving if t in entering_next))
    measured = {"onnxruntime": _ort_conversions}
    if unavailable_reason("openvino") is None:
        measured["openvino"] = _ov_conversions
    per, summary = [], []
    for name, fn in measured.items():
        conv = fn(models, feeds, graph, parts, runs)
        costs = [conv[k][1] + conv[k + 1][0] for k in range(len(parts) - 1)]
        for k, (nbytes, ms) in enumerate(zip(sizes, costs)):
            per.append([model, name, f"{k}->{k + 1}", f"{nbytes / 1e6:.3f}", f"{ms:.3f}",
                        f"{ms / (nbytes / 1e6):.3f}" if nbytes else ""])
        mb = np.asarray(sizes, dtype=float) / 1e6
        slope = float(np.dot(mb, costs) / np.dot(mb, mb)) if mb.any() else 0.0
        whole, chain = medians.get(f"whole model, {name}"), medians.get(f"chain all-{name}")
        gap = f"{chain - whole:.2f}" if whole and chain else ""
        rest = f"{chain - whole - sum(costs):.2f}" if whole and chain else ""
        summary.append([model, name, len(costs), f"{sum(costs):.2f}", f"{sum(costs) / max(len(costs), 1):.3f}",
                        f"{slope:.3f}", gap, rest])
    return per, summary


def chains(models: list[str], rounds: int, command: str, out: Path) -> Path:
    rows, per, summary = [], [], []
    for model in models:
        for handover in (True, False):
            rows += _chain_rows(model, rounds, handover)
            gc.collect()
        medians = {r[3]: float(r[4]) for r in rows if r[0] == model and r[2] == "on"}
        p, s = _boundary_rows(model, max(5, rounds // 2), medians)
        per += p
        summary += s
        gc.collect()
    lines = _header("Chains of sessions vs the whole model", command,
                    "Each model is cut at positions found in its graph (ResNet: the stem's MaxPool and every residual "
                    "block's closing Relu; BERT: the embedding's LayerNormalization and each layer's output "
                    "LayerNormalization) and run piece by piece through collage's fast call path. Hand-over settings "
                    "on: onnxruntime stops spinning after each run (`spin=False`), OpenVINO threads unpinned "
                    "(`pinning=False`); off: `spin=True`, `pinning=True`. Within one model and setting, "
                    "configurations take turns in a shuffled order each round; median milliseconds. "
                    "`vs whole` compares a same-backend chain with the whole model on that backend (target <= 1.10x).")
    lines += _md_table(["model", "pieces", "hand-over settings", "configuration", "median ms", "p10 - p90 ms",
                        "vs whole", "runs"], rows)
    lines += ["## What a boundary costs", "",
              "Both runtimes compute convolutions in a blocked layout of their own (onnxruntime NCHWc, OpenVINO "
              "channels-last for brgemm) and keep it across the whole model; a partition boundary is a plain NCHW "
              "tensor, so every cut pays a conversion out of the blocked layout at the end of one piece and back "
              "into it at the start of the next (onnxruntime: ReorderOutput + ReorderInput nodes; OpenVINO: Reorder "
              "nodes). These are memory-bound passes over the tensor, so their cost grows with its size. Measured "
              "from the runtimes' own profilers (onnxruntime session profiling, OpenVINO `PERF_COUNT`), median "
              "kernel time per boundary, hand-over settings on. onnxruntime's residual fusion (a cut at a residual "
              "block's input no longer keeps the block's closing Add/Sum and Relu unfused; "
              "`collage/backends/onnxruntime.py`) is on; the row `residual fusion off` above shows what it saves. "
              "The tuner charges conversions without a model of its own: every candidate partition is compiled "
              "and measured on its own, conversions at its edges included; `gap` is the chain's median minus the "
              "whole model's, `rest` the part of it the conversions do not explain (thread wake-ups, colder caches, "
              "call overhead), which `collage.tune.calibrate_partition_overhead` charges per partition.", ""]
    lines += _md_table(["model", "backend", "boundaries", "conversions ms (sum)", "ms per boundary",
                        "ms per MB (fit through 0)", "gap ms (chain - whole)", "rest ms"], summary)
    lines += _md_table(["model", "backend", "boundary", "tensor MB", "conversion ms", "ms per MB"], per)
    path = out / _fname("chain", command)
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
    p.add_argument("--out", type=Path, default=Path("results"), help="folder for the .md files")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = "python -m benchmarks.backend_tables " + " ".join(sys.argv[1:] if argv is None else argv)
    command = command.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    tables = {t.strip() for t in args.tables.split(",") if t.strip()}
    rounds = args.rounds or (5 if args.quick else 60)
    chosen = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    if "support" in tables:
        models = chosen or (TINY_MODELS if args.quick else zoo.names())
        print(op_support(models, command, args.out))
    if "overhead" in tables:
        print(call_overhead(rounds if args.quick else max(rounds // 2, 10), 50 if args.quick else 200, command, args.out))
    if "chain" in tables:
        models = chosen or (["tiny-resnet", "tiny-bert"] if args.quick else ["resnet50", "bert-base"])
        print(chains(models, rounds, command, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
