"""The chain table of results/chains/chain.md: a model cut into pieces, each chain run on one backend or alternating.

Part of ``python -m benchmarks.backend_tables --tables chain`` (see that module for the command line).
ResNet-50 is cut after the stem's MaxPool and every residual block (18 pieces), BERT-base after the
embedding and each encoder layer (13 pieces). Per backend, the chain compiled piece by piece and the
chain compiled with ``Backend.compile_linked`` (tensors handed over in the runtime's own blocked layout)
are timed against the whole model, interleaved; then the runtimes' profilers say what each boundary
costs in layout conversions.
"""
from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from tqdm import tqdm

from benchmarks._common import header, interleaved, md_table, report_name, stats
from collage import zoo
from collage.backends import get_backend, unavailable_reason
from collage.graph.ir import Graph

log = logging.getLogger("benchmarks.chain_tables")


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


def _add_linked(configs: dict[str, Callable[[], object]], label: str, backend, graph: Graph,  # noqa: ANN001
                parts: list[list[int]], models: list[onnx.ModelProto], alone: list,
                feeds: dict[str, np.ndarray]) -> None:
    """Add the chain compiled with ``backend.compile_linked`` (only graph outputs kept plain), after checking
    that it computes what the chain of partitions compiled alone computes."""
    linked = Chain(graph, parts, backend.compile_linked(models, plain=graph.outputs))
    want = {k: np.array(v, copy=True) for k, v in Chain(graph, parts, alone)(feeds).items()}
    for name, got in linked(feeds).items():
        if not np.allclose(got, want[name], rtol=1e-3, atol=1e-4):
            raise RuntimeError(f"{label}: output {name!r} differs from the unlinked chain by "
                               f"{float(np.abs(got - want[name]).max()):.3g}; not timing a wrong chain")
    configs[label] = lambda: linked(feeds)


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
    _add_linked(configs, "chain all-onnxruntime, linked", ort, graph, parts, models, ort_parts, feeds)
    if any(getattr(c, "_optimized", None) is not None for c in ort_parts):  # some cut reads a residual input
        plain = get_backend("onnxruntime", residual_fusion=False, **ort_opts)
        plain_parts = [plain.compile(m) for m in models]
        configs["chain all-onnxruntime, residual fusion off"] = lambda ch=Chain(graph, parts, plain_parts): ch(feeds)
    if ov is not None:
        whole_ov = ov.compile(graph.model)
        configs["whole model, openvino"] = lambda: whole_ov.run(feeds)
        ov_parts = [ov.compile(m) for m in tqdm(models, desc=f"{model} ov pieces", file=sys.stderr)]
        configs["chain all-openvino"] = lambda ch=Chain(graph, parts, ov_parts): ch(feeds)
        _add_linked(configs, "chain all-openvino, linked", ov, graph, parts, models, ov_parts, feeds)
        alt = [ort_parts[k] if k % 2 == 0 else ov_parts[k] for k in range(len(parts))]
        configs["chain alternating ort/ov"] = lambda ch=Chain(graph, parts, alt): ch(feeds)
        alt2 = [ov_parts[k] if k % 2 == 0 else ort_parts[k] for k in range(len(parts))]
        configs["chain alternating ov/ort"] = lambda ch=Chain(graph, parts, alt2): ch(feeds)
    samples = interleaved(configs, rounds, f"{model} chains")
    whole = {"onnxruntime": stats(samples["whole model, onnxruntime"])[0]}
    if "whole model, openvino" in samples:
        whole["openvino"] = stats(samples["whole model, openvino"])[0]
    rows = []
    for k, s in samples.items():
        med, p10, p90 = stats(s)
        ref = "onnxruntime" if "onnxruntime" in k else "openvino" if "openvino" in k else None
        vs = paired = ""
        if ref in whole and k.startswith("chain"):
            vs = f"{med / whole[ref]:.2f}x"
            # the same round's whole model (taken within a second of it): the machine's level cancels out
            ratios = np.array(s) / np.array(samples[f"whole model, {ref}"])
            paired = f"{np.median(ratios):.2f}x ({np.percentile(ratios, 25):.2f} - {np.percentile(ratios, 75):.2f})"
        rows.append([model, f"{len(parts)}", "on" if handover else "off", k, f"{med:.2f}", f"{p10:.2f} - {p90:.2f}",
                     vs, paired, len(s)])
    return rows


def _compile_all(backend, models: list[onnx.ModelProto], graph: Graph, linked: bool) -> list:  # noqa: ANN001
    return backend.compile_linked(models, plain=graph.outputs) if linked else [backend.compile(m) for m in models]


def _edge_reorders(backend, compiled) -> set[str]:  # noqa: ANN001
    """Names of the ReorderInput nodes reading a graph input and the ReorderOutput nodes making a graph output
    of the optimised graph an onnxruntime partition runs (conversions inside a piece are no boundary's cost)."""
    from collage.backends.onnxruntime.link import optimized_graph

    g = (onnx.load_from_string(compiled._optimized) if compiled._optimized is not None
         else optimized_graph(backend, compiled._model)).graph
    ins, outs = {v.name for v in g.input}, {v.name for v in g.output}
    return {n.name for n in g.node if (n.op_type == "ReorderInput" and n.input[0] in ins)
            or (n.op_type == "ReorderOutput" and n.output[0] in outs)}


def _ort_conversions(models: list[onnx.ModelProto], feeds: dict[str, np.ndarray], graph: Graph,
                     parts: list[list[int]], runs: int, linked: bool = False) -> list[tuple[float, float]]:
    """Per piece (ms at its input, ms at its output) in onnxruntime's layout conversions at its edges
    (ReorderInput of an input, ReorderOutput of an output), from its profiler's kernel times: median over ``runs`` chain
    runs (``linked``: the pieces compiled with ``compile_linked``)."""
    import json
    import tempfile

    backend = get_backend("onnxruntime")
    options = backend.session_options
    made = iter(range(1 << 30))
    with tempfile.TemporaryDirectory(prefix="collage-prof-") as tmp:
        def profiled(opt_level: str | None = None):  # noqa: ANN202
            so = options(opt_level)
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / f"session{next(made)}")  # one file per session
            return so

        backend.session_options = profiled  # type: ignore[method-assign]
        compiled = _compile_all(backend, models, graph, linked)
        chain = Chain(graph, parts, compiled)
        for _ in range(runs + 1):
            chain(feeds)
        out = []
        for c in compiled:
            edges = _edge_reorders(backend, c)
            per_node: dict[tuple[str, str], list[float]] = {}
            for e in json.loads(Path(c._session.end_profiling()).read_text()):
                if e.get("cat") == "Node" and e["name"].removesuffix("_kernel_time") in edges:
                    per_node.setdefault((e["args"]["op_name"], e["name"]), []).append(e["dur"] / 1e3)
            cost = {op: sum(float(np.median(v[1:])) for (o, _), v in per_node.items() if o == op)
                    for op in ("ReorderInput", "ReorderOutput")}
            out.append((cost["ReorderInput"], cost["ReorderOutput"]))
    return out


def _ov_conversions(models: list[onnx.ModelProto], feeds: dict[str, np.ndarray], graph: Graph,
                    parts: list[list[int]], runs: int, linked: bool = False) -> list[tuple[float, float]]:
    """Per piece (ms at its input, ms at its output) in OpenVINO's Reorder nodes (``PERF_COUNT``; a
    Reorder feeding a result counts as output side): median over ``runs`` chain runs."""
    backend = get_backend("openvino")
    config = backend.config
    backend.config = lambda: {**config(), "PERF_COUNT": "YES"}  # type: ignore[method-assign]
    compiled = _compile_all(backend, models, graph, linked)
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
    measured = {"onnxruntime": (_ort_conversions, False), "onnxruntime, linked": (_ort_conversions, True)}
    if unavailable_reason("openvino") is None:
        measured["openvino"] = (_ov_conversions, False)
        measured["openvino, linked"] = (_ov_conversions, True)
    per, summary = [], []
    for name, (fn, linked) in measured.items():
        try:
            conv = fn(models, feeds, graph, parts, runs, linked)
        except AttributeError as e:  # a linked Compiled without the profiler hooks used here
            log.warning("%s %s: no conversion profile (%s)", model, name, e)
            continue
        costs = [conv[k][1] + conv[k + 1][0] for k in range(len(parts) - 1)]
        for k, (nbytes, ms) in enumerate(zip(sizes, costs)):
            per.append([model, name, f"{k}->{k + 1}", f"{nbytes / 1e6:.3f}", f"{ms:.3f}",
                        f"{ms / (nbytes / 1e6):.3f}" if nbytes else ""])
        mb = np.asarray(sizes, dtype=float) / 1e6
        slope = float(np.dot(mb, costs) / np.dot(mb, mb)) if mb.any() else 0.0
        whole, chain = medians.get(f"whole model, {name.split(',')[0]}"), medians.get(f"chain all-{name}")
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
    lines = header("Chains of sessions vs the whole model", command,
                    "Each model is cut at positions found in its graph (ResNet: the stem's MaxPool and every residual "
                    "block's closing Relu; BERT: the embedding's LayerNormalization and each layer's output "
                    "LayerNormalization) and run piece by piece through collage's fast call path. Hand-over settings "
                    "on: onnxruntime stops spinning after each run (`spin=False`), OpenVINO threads unpinned "
                    "(`pinning=False`); off: `spin=True`, `pinning=True`. Within one model and setting, "
                    "configurations take turns in a shuffled order each round; median milliseconds. "
                    "`vs whole` compares a same-backend chain's median with the whole model's on that backend "
                    "(target <= 1.10x); `paired` is the median (and quartiles) over rounds of the chain's time divided "
                    "by the whole model's in the same round, taken within a second of each other, so that the "
                    "machine's speed level, which moves by 10-25% over minutes here "
                    "(results/measurement/machine-level.md), cancels out.")
    lines += md_table(["model", "pieces", "hand-over settings", "configuration", "median ms", "p10 - p90 ms",
                        "vs whole", "paired: vs whole (quartiles)", "runs"], rows)
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
              "call overhead), which `collage.tuner.stitching.calibrate_partition_charges` charges as a level and a "
              "cost per cut. Rows `, linked`: the pieces compiled together with `Backend.compile_linked` (only the "
              "graph outputs kept in ONNX layout), which hands a tensor from one piece to the next in the runtime's "
              "own layout. For onnxruntime (`collage/backends/ort_link.py`) this removes the ReorderOutput at the end "
              "of a piece and the ReorderInput at the start of the next wherever the next piece reads the tensor only "
              "through ReorderInput (every ResNet cut; BERT has no NCHWc, so nothing changes there): its conversions "
              "column should be about 0 and its gap only the `rest`. For OpenVINO (`collage/backends/ov_link.py`) a "
              "linked feature map is declared NHWC on both sides (the CPU plugin's own channels-last form), so the "
              "plugin's Reorders become no-ops; where a piece ends in a convolution with a fused residual sum the "
              "plugin keeps a Transpose, and a 1x1 MaxPool copy in front of the output lets it merge (one plain copy "
              "per boundary, which the conversions column does not count).", ""]
    lines += md_table(["model", "backend", "boundaries", "conversions ms (sum)", "ms per boundary",
                        "ms per MB (fit through 0)", "gap ms (chain - whole)", "rest ms"], summary)
    lines += md_table(["model", "backend", "boundary", "tensor MB", "conversion ms", "ms per MB"], per)
    path = out / report_name("chain", command)
    path.write_text("\n".join(lines))
    return path
