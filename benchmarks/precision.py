"""Budgeted lower precision vs fp32 and vs all-bf16: ``python -m benchmarks.precision [--quick]``.

For each model: ``collage tune`` over onnxruntime, openvino (fp32) and openvino-bf16 under an accuracy
budget (default ``cos=0.999,rel=0.01``, judged on seeded random inputs), then, interleaved in one run:
the tuned artifact, the best fp32 single backend (ONNX Runtime, OpenVINO fp32) and OpenVINO all-bf16
on the whole model. Each one's end-to-end error is measured against the ONNX Runtime fp32 reference
on the same calibration inputs. Writes ``results/precision.md`` (``results/precision-quick.md`` with
``--quick``: the tiny zoo models, small candidates, a short measuring budget).
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("benchmarks.precision")

FULL = ["resnet50", "mobilenetv2", "bert-base"]
QUICK = ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert"]
BACKENDS = ["onnxruntime", "openvino", "openvino-bf16"]


def bench_model(name: str, accuracy: str, *, max_nodes: int, budget_s: float | None, db: str | None,
                rounds: int) -> dict:
    from collage import zoo
    from collage.backends import get_backend
    from collage.cost_models.accuracy import ErrorMeasure, compare, load_calibration, parse_accuracy, reference_runs
    from collage.runtime import load
    from collage.search.candidates import Limits
    from collage.tune import tune
    from collage.verify import measure_interleaved

    t0 = time.monotonic()
    graph = zoo.load_graph(f"zoo:{name}")
    budget = parse_accuracy(accuracy)
    out = Path(tempfile.mkdtemp(prefix=f"collage-precision-{name}-")) / "artifact"
    res = tune(f"zoo:{name}", out, backends=BACKENDS, accuracy=accuracy, limits=Limits(max_nodes=max_nodes),
               budget_s=budget_s, db=db, progress=True)
    tune_s = time.monotonic() - t0
    art = load(res.out_dir)
    runners = {"plan": art}
    for b in BACKENDS:
        runners[b] = get_backend(b).compile(graph.model)
    calib = load_calibration(graph, None)  # the same seeded samples tune judged the budget on
    refs = reference_runs(graph, calib)
    errors: dict[str, ErrorMeasure] = {}
    for k, r in runners.items():
        err = ErrorMeasure()
        for feeds, ref in zip(calib.samples, refs):
            got = {t: v.copy() for t, v in r.run(dict(feeds)).items()}
            compare(got, ref, graph.outputs, err)
        errors[k] = err
    feeds = zoo.random_inputs(graph, seed=0)
    ms = measure_interleaved({k: (lambda r=r: r.run(feeds)) for k, r in runners.items()}, rounds=rounds)
    best32 = min(("onnxruntime", "openvino"), key=ms.__getitem__)
    parts = res.plan.partitions
    return {"model": name, "nodes": len(graph), "budget": budget, "ms": ms, "errors": errors, "best32": best32,
            "partitions": len(parts), "low_partitions": sum(p.backend == "openvino-bf16" for p in parts),
            "low_nodes": sum(len(p.nodes) for p in parts if p.backend == "openvino-bf16"),
            "fallback": bool((res.report.get("precision") or {}).get("fallback_fp32")),
            "notes": list(dict.fromkeys(list(res.plan.notes) + list((res.report.get("precision") or {}).get("notes") or []))),
            "tune_s": tune_s}


def _err(e, budget) -> str:
    if not e.finite:
        return "NaN/inf"
    return f"{e.rel:.2e} / {e.cos:.6f} ({'ok' if budget.allows(e) else 'OVER'})"


def write(path: Path, rows: list[dict], args: argparse.Namespace, elapsed: float) -> None:
    lines = ["# Precision as a searched dimension: budgeted bf16 vs fp32 vs all-bf16", "",
             f"Command: `python -m benchmarks.precision{' --quick' if args.quick else ''}` "
             f"(accuracy budget `{args.accuracy}`, candidates up to {args.max_nodes} nodes, measuring budget "
             f"{args.budget or 'none'} per model). Total {elapsed / 60:.1f} min.", "",
             "Backends searched: onnxruntime, openvino (fp32), openvino-bf16. Latency: median ms of a full call, "
             f"the three measured interleaved in {args.rounds} rounds in one process. Error: vs the ONNX Runtime "
             "fp32 reference on 2 seeded random input samples (`collage.zoo.random_inputs`; not representative "
             "data), as max |err| / output range and min cosine similarity over outputs.", "",
             "| model | nodes | best fp32 single (ms) | all-bf16 OpenVINO (ms) | all-bf16 error rel / cos | "
             "budgeted plan (ms) | plan error rel / cos | bf16 partitions (nodes) | plan vs fp32 | tune s |",
             "|---|---:|---|---:|---|---:|---|---|---:|---:|"]
    for r in rows:
        ms, e, b = r["ms"], r["errors"], r["budget"]
        lines.append(
            f"| {r['model']} | {r['nodes']} | {r['best32']} {ms[r['best32']]:.3f} | {ms['openvino-bf16']:.3f} | "
            f"{_err(e['openvino-bf16'], b)} | {ms['plan']:.3f} | {_err(e['plan'], b)} | "
            f"{r['low_partitions']}/{r['partitions']} ({r['low_nodes']}/{r['nodes']})"
            f"{' fp32 fallback' if r['fallback'] else ''} | {ms[r['best32']] / ms['plan']:.2f}x | {r['tune_s']:.0f} |")
    lines += ["", "## Notes per model", ""]
    for r in rows:
        lines += [f"- **{r['model']}**: " + ("; ".join(r["notes"]) or "–")]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.precision", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny zoo models, small candidates, short budgets")
    p.add_argument("--models", default=None, help="comma-separated zoo names (default: resnet50, mobilenetv2, bert-base)")
    p.add_argument("--accuracy", default="cos=0.999,rel=0.01")
    p.add_argument("--max-nodes", type=int, default=None, help="largest candidate (default 6; 3 with --quick)")
    p.add_argument("--budget", default=None, help="measuring budget per model, e.g. 20m (default 30m; 90s with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 7; 3 with --quick)")
    p.add_argument("--db", default=None, help="cost database (default: collage's cache)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from collage.precision import cpu_bf16_reason
    from collage.tune import parse_budget

    why = cpu_bf16_reason()
    if why:
        print(f"benchmarks.precision: {why}; nothing to compare", file=sys.stderr)
        return 2
    models = args.models.split(",") if args.models else (QUICK if args.quick else FULL)
    args.max_nodes = args.max_nodes or (3 if args.quick else 6)
    args.budget = args.budget or ("90s" if args.quick else "30m")
    args.rounds = args.rounds or (3 if args.quick else 7)
    out = Path(args.out or ("results/precision-quick.md" if args.quick else "results/precision.md"))
    t0 = time.monotonic()
    rows = []
    for name in models:
        print(f"benchmarks.precision: {name}", file=sys.stderr, flush=True)
        rows.append(bench_model(name, args.accuracy, max_nodes=args.max_nodes, budget_s=parse_budget(args.budget),
                                db=args.db, rounds=args.rounds))
        write(out, rows, args, time.monotonic() - t0)  # partial results survive a later failure
    print(f"wrote {out} in {(time.monotonic() - t0) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
