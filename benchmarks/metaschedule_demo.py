"""MetaSchedule on one ResNet-50 block: what tuning buys, what it costs, and that its database is reused.

    python -m benchmarks.metaschedule_demo --trials 64     # ~6-10 min on 2 cores (tuning ~5 min)
    python -m benchmarks.metaschedule_demo --trials 4      # smoke run, ~1-2 min

The subgraph is ResNet-50's first layer1 3x3 conv (1x64x56x56, 64 -> 64 channels, pad 1) with its
BatchNormalization and Relu, cut from ``zoo:resnet50`` (TVM folds the BatchNormalization into the
conv), or a conv + relu built with onnx.helper at the same shape (``--source helper``).
Steps: compile untuned; compile with MetaSchedule into a fresh database (tuning seconds); compile it
again from a fresh backend on the same database (must tune nothing); ONNX Runtime for reference. The
three runtimes are timed interleaved, in rounds (median ms of single calls). Writes
results/tvm/metaschedule.md (results/tvm/metaschedule-quick.md below 64 trials) with the command.
"""
from __future__ import annotations

import argparse
import datetime
import logging
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from collage.backends import get_backend
from collage.backends.tvm.backend import TVMBackend
from collage.util import machine_id, physical_cores, source_commit

log = logging.getLogger("benchmarks.metaschedule_demo")

SHAPE = (1, 64, 56, 56)


def from_zoo() -> onnx.ModelProto:
    """ResNet-50's first 3x3 64->64 conv at 56x56, with the BatchNormalization and Relu after it."""
    from collage import zoo

    graph = zoo.load_graph("zoo:resnet50")
    for i in range(len(graph)):
        node = graph.op(i)
        if node.op_type != "Conv":
            continue
        w = graph.tensor(node.input[1]).shape
        if tuple(w) != (64, 64, 3, 3) or graph.tensor(node.input[0]).shape != SHAPE:
            continue
        ids, tensor = [i], node.output[0]
        for op in ("BatchNormalization", "Relu"):
            nxt = [j for j in graph.consumers(tensor) if graph.op_type(j) == op]
            if nxt:
                ids.append(nxt[0])
                tensor = graph.op(nxt[0]).output[0]
        return graph.extract(ids, name="resnet50_layer1_" + "_".join(graph.op_type(j).lower() for j in ids))
    raise SystemExit("zoo:resnet50 has no 3x3 64->64 conv at 56x56: use --source helper")


def from_helper() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(64) * 0.05).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "conv3x3_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def time_interleaved(runs: dict, feeds: dict, rounds: int, budget_s: float) -> dict[str, float]:
    """Median ms of single calls per runner, timed in ``rounds`` interleaved rounds of ``budget_s`` each."""
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for run in runs.values():  # warm-up
        run(feeds)
    for _ in range(rounds):
        for name, run in runs.items():
            end = time.perf_counter() + budget_s
            taken = 0
            while taken < 3 or time.perf_counter() < end:
                t = time.perf_counter()
                run(feeds)
                samples[name].append((time.perf_counter() - t) * 1e3)
                taken += 1
    return {k: float(np.median(v)) for k, v in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=64, help="MetaSchedule trials per workload (default 64)")
    parser.add_argument("--source", choices=["zoo", "helper"], default="zoo")
    parser.add_argument("--db", type=Path, help="tuning database directory (default: a fresh temporary one)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per runner per round (default 1)")
    parser.add_argument("--out", type=Path, help="results file (default results/tvm/metaschedule[-quick].md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    command = "python -m benchmarks.metaschedule_demo " + shlex.join(argv if argv is not None else sys.argv[1:])
    started = time.perf_counter()

    model = from_zoo() if args.source == "zoo" else from_helper()
    feeds = {"x" if args.source == "helper" else model.graph.input[0].name:
             np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)}
    db = args.db or Path(tempfile.mkdtemp(prefix="collage-ms-db-"))

    t = time.perf_counter()
    untuned = TVMBackend().compile(model)
    untuned_compile_s = time.perf_counter() - t
    t = time.perf_counter()
    tuned = TVMBackend(tuning="metaschedule", trials=args.trials, tuning_db=db).compile(model)
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    again = TVMBackend(tuning="metaschedule", trials=args.trials, tuning_db=db).compile(model)
    second_s = time.perf_counter() - t
    ort = get_backend("onnxruntime").compile(model)

    want = ort.run(feeds)
    for name, c in (("untuned", untuned), ("tuned", tuned)):
        got = c.run(feeds)
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-4, err_msg=f"TVM {name} output {k}")
    log.info("timing (%d rounds x %.1f s)", args.rounds, args.budget)
    ms = time_interleaved({"untuned": untuned.run, "tuned": tuned.run, "ort": ort.run}, feeds, args.rounds, args.budget)

    quick = args.trials < 64
    out = args.out or Path("results/tvm") / ("metaschedule-quick.md" if quick else "metaschedule.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    ts = tuned.tuning
    lines = [
        "# MetaSchedule on one ResNet-50 3x3 conv block" + (" (quick smoke run)" if quick else ""),
        "",
        f"Command: `{command}` at commit {source_commit()} ({time.perf_counter() - started:.0f} s). Machine: "
        f"{machine_id()}, {physical_cores()} cores; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        f"Subgraph: {model.graph.name} ({args.source}: {', '.join(n.op_type for n in model.graph.node)}), input "
        "1x64x56x56, 64 -> 64 channels, 3x3, pad 1. TVM "
        f"{TVMBackend(tuning='metaschedule', trials=args.trials).version()}; {args.trials} trials per workload; "
        f"database {db}.",
        "",
        "| what | value |",
        "|---|---:|",
        f"| TVM untuned, median ms | {ms['untuned']:.3f} |",
        f"| TVM MetaSchedule ({args.trials} trials), median ms | {ms['tuned']:.3f} |",
        f"| ONNX Runtime, median ms | {ms['ort']:.3f} |",
        f"| speed-up of tuning | {ms['untuned'] / ms['tuned']:.1f}x |",
        f"| tuning seconds (workloads tuned: {ts.get('tuned')} of {ts.get('workloads')}) | {ts.get('tuning_s', 0):.1f} "
        "|",
        f"| first tuned compile, seconds (tuning included) | {first_s:.1f} |",
        f"| second compile on the same database, seconds (workloads tuned: {again.tuning.get('tuned')}, "
        f"reused: {again.tuning.get('reused')}) | {second_s:.1f} |",
        f"| untuned compile, seconds | {untuned_compile_s:.1f} |",
        "",
        f"Timing: {args.rounds} interleaved rounds of {args.budget:.1f} s per runtime, single calls, median. "
        "Numbers taken on a shared or busy machine are noisy; rerun on a quiet one.",
        "",
    ]
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    if again.tuning.get("tuned"):
        log.error("the second compile tuned %s workloads: the database was not reused", again.tuning.get("tuned"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
