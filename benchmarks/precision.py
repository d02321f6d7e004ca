"""Budgeted lower precision vs fp32 and vs all-bf16: ``python -m benchmarks.precision [--quick]``.

For each model: ``collage tune`` over onnxruntime, openvino (fp32) and openvino-bf16 under an accuracy
budget (default ``cos=0.999,rel=0.01``, judged on seeded random inputs), then, interleaved in one run:
the tuned artifact, the best fp32 single backend (ONNX Runtime, OpenVINO fp32) and OpenVINO all-bf16
on the whole model. Each one's end-to-end error is measured against the ONNX Runtime fp32 reference
on the same calibration inputs. Writes ``results/precision.md`` (``results/precision-quick.md`` with
``--quick``: the tiny zoo models, small candidates, a short measuring budget), rewritten after each
model, so a run cut short keeps the models it finished.

Default (no --models): the 11 CPU zoo models plus bert-base-masked (BERT-base with an HF-style padding
mask: all-bf16 gives NaN there), with a measuring budget of 5 min for vgg19, 4 min for bert-base-masked,
3 min for resnet50, mobilenetv2, bert-base and zfnet512, 2 min for shufflenet and 90 s for the others
(``BUDGETS``), candidates up to 4 nodes: about 60-75 min on a quiet 2-core machine (shufflenet, zfnet512
and vgg19 alone: about 15-20 min). tiny-bert-masked (0.2 ms a call: bf16 gains nothing at that size) is
in ``--quick``.
"""
from __future__ import annotations

import argparse
import logging
import math
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

log = logging.getLogger("benchmarks.precision")

FULL = ["resnet50", "mobilenetv2", "bert-base", "bert-base-masked", "squeezenet", "shufflenet", "inception_v1",
        "inception_v2", "densenet121", "zfnet512", "bvlc_alexnet", "vgg19"]
QUICK = ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert", "tiny-bert-masked"]
#: measuring budget per model in the full run (others: DEFAULT_BUDGET); --budget overrides them all
#: (vgg19 and zfnet512: 40-190 ms a call and ~0.25-0.5 GB of weights a compile, 5-10 s a candidate; in 90 s
#: too few bf16 ranges got timed. shufflenet: 203 nodes, bf16 barely faster; its within-budget prefixes need time.)
BUDGETS = {"resnet50": "3m", "mobilenetv2": "3m", "bert-base": "3m", "bert-base-masked": "4m", "vgg19": "5m",
           "zfnet512": "3m", "shufflenet": "2m"}
DEFAULT_BUDGET = "90s"
QUICK_BUDGET = "45s"
BACKENDS = ["onnxruntime", "openvino", "openvino-bf16"]


def bench_model(name: str, accuracy: str, *, max_nodes: int, budget_s: float | None, db: str | None,
                rounds: int) -> dict:
    # tune's work files (stitched rounds, chains: GBs for the big models) land in a scratch folder,
    # removed after each model
    scratch = Path(tempfile.mkdtemp(prefix=f"collage-precision-{name}-"))
    before, tempfile.tempdir = tempfile.tempdir, str(scratch)
    try:
        return _bench_model(name, accuracy, scratch / "artifact", max_nodes=max_nodes, budget_s=budget_s, db=db,
                            rounds=rounds)
    finally:
        tempfile.tempdir = before
        shutil.rmtree(scratch, ignore_errors=True)


def _bench_model(name: str, accuracy: str, out: Path, *, max_nodes: int, budget_s: float | None, db: str | None,
                 rounds: int) -> dict:
    from collage import zoo
    from collage.backends import get_backend
    from collage.cost_models.accuracy import load_calibration, parse_accuracy, reference_runs, run_error
    from collage.runtime.artifact import load
    from collage.search.candidates import Limits
    from collage.tuner.job import tune
    from collage.tuner.verify import measure_interleaved

    t0 = time.monotonic()
    graph = zoo.load_graph(f"zoo:{name}")
    budget = parse_accuracy(accuracy)
    res = tune(f"zoo:{name}", out, backends=BACKENDS, accuracy=accuracy, limits=Limits(max_nodes=max_nodes),
               budget_s=budget_s, db=db, progress=True)
    tune_s = time.monotonic() - t0
    art = load(res.out_dir)
    runners = {"plan": art}
    for b in BACKENDS:
        runners[b] = get_backend(b).compile(graph.model)
    calib = load_calibration(graph, None)  # the same seeded samples tune judged the budget on
    refs = reference_runs(graph, calib)
    errors = {k: run_error(r.run, calib, refs, graph.outputs) for k, r in runners.items()}
    feeds = zoo.random_inputs(graph, seed=0)
    ms = measure_interleaved({k: (lambda r=r: r.run(feeds)) for k, r in runners.items()}, rounds=rounds)
    parts = res.plan.partitions
    if len(parts) == 1 and parts[0].backend in ms:
        # the plan is one backend on the whole model: the same configuration as that runner, so one number
        # stands for both (as in tune; two samples of it would only show the noise as a speedup or a loss)
        ms["plan"] = ms[parts[0].backend]
    best32 = min(("onnxruntime", "openvino"), key=ms.__getitem__)
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


def _verdict(e, budget) -> str:
    if not e.finite:
        return "**NaN**"
    return "yes" if budget.allows(e) else "**over**"


def write(path: Path, rows: list[dict], args: argparse.Namespace, elapsed: float, todo: int) -> None:
    done = len(rows)
    status = "" if done == todo else f" **Partial: {done} of {todo} models done.**"
    budgets = ", ".join(f"{r['model']} {r['budget_text']}" for r in rows) or "-"
    lines = ["# Precision as a searched dimension: budgeted bf16 vs fp32 vs all-bf16", "",
             f"Command: `{args.command}` (accuracy budget `{args.accuracy}`, candidates up to {args.max_nodes} "
             f"nodes; measuring budget per model: {budgets}). Total {elapsed / 60:.1f} min.{status}", "",
             "Backends searched: onnxruntime, openvino (fp32), openvino-bf16. Latency: median ms of a full call, "
             f"the four measured interleaved in {args.rounds} rounds in one process. Error: vs the ONNX Runtime "
             "fp32 reference on 2 seeded random input samples (`collage.zoo.catalog.random_inputs`; not representative "
             "data), as max |err| / output range and min cosine similarity over outputs. *Within budget*: the "
             "plan's error meets the budget and is finite (NaN: not). *vs fp32*: best fp32 single backend ms / "
             "plan ms (> 1: the plan is faster).", "",
             "| model | nodes | best fp32 single (ms) | all-bf16 OpenVINO (ms) | all-bf16 error rel / cos | "
             "budgeted plan (ms) | plan error rel / cos | plan within budget | bf16 partitions (nodes) | "
             "plan vs fp32 | plan vs all-bf16 | tune s |",
             "|---|---:|---|---:|---|---:|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['model']} | | failed: {r['failed']} | | | | | | | | | |")
            continue
        ms, e, b = r["ms"], r["errors"], r["budget"]
        lines.append(
            f"| {r['model']} | {r['nodes']} | {r['best32']} {ms[r['best32']]:.3f} | {ms['openvino-bf16']:.3f} | "
            f"{_err(e['openvino-bf16'], b)} | {ms['plan']:.3f} | {_err(e['plan'], b)} | {_verdict(e['plan'], b)} | "
            f"{r['low_partitions']}/{r['partitions']} ({r['low_nodes']}/{r['nodes']})"
            f"{' fp32 fallback' if r['fallback'] else ''} | {ms[r['best32']] / ms['plan']:.2f}x | "
            f"{ms['openvino-bf16'] / ms['plan']:.2f}x | {r['tune_s']:.0f} |")
    lines += ["", "## Notes per model", ""]
    for r in rows:
        lines += [f"- **{r['model']}**: " + ("; ".join(r.get("notes") or []) or "-")]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)  # a kill mid-write leaves the previous table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.precision", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny zoo models, small candidates, short budgets")
    p.add_argument("--models", default=None, help=f"comma-separated zoo names (default: {', '.join(FULL)})")
    p.add_argument("--accuracy", default="cos=0.999,rel=0.01")
    p.add_argument("--max-nodes", type=int, default=None, help="largest candidate (default 4; 3 with --quick)")
    p.add_argument("--budget", default=None,
                   help=f"measuring budget for every model, e.g. 3m (default: {DEFAULT_BUDGET}, "
                        f"{', '.join(f'{k} {v}' for k, v in BUDGETS.items())}; {QUICK_BUDGET} with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 7; 3 with --quick)")
    p.add_argument("--db", default=None, help="cost database (default: collage's cache)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    args.command = "python -m benchmarks.precision " + " ".join(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from collage.tuner.precision.tuner import cpu_bf16_reason
    from collage.util import parse_duration

    why = cpu_bf16_reason()
    if why:
        print(f"benchmarks.precision: {why}; nothing to compare", file=sys.stderr)
        return 2
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else (QUICK if args.quick else FULL)
    args.max_nodes = args.max_nodes or (3 if args.quick else 4)
    args.rounds = args.rounds or (3 if args.quick else 7)
    out = Path(args.out or ("results/precision-quick.md" if args.quick else "results/precision.md"))
    t0 = time.monotonic()
    rows: list[dict] = []
    failed = 0
    for k, name in enumerate(models):
        budget = args.budget or (QUICK_BUDGET if args.quick else BUDGETS.get(name, DEFAULT_BUDGET))
        print(f"benchmarks.precision: {name} ({k + 1}/{len(models)}, budget {budget}, "
              f"{(time.monotonic() - t0) / 60:.1f} min so far)", file=sys.stderr, flush=True)
        try:
            row = bench_model(name, args.accuracy, max_nodes=args.max_nodes, budget_s=parse_duration(budget) if budget else None,
                              db=args.db, rounds=args.rounds)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - one model's failure is a row; the others still run
            traceback.print_exc()
            row = {"model": name, "failed": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
            failed += 1
        row["budget_text"] = budget
        rows.append(row)
        write(out, rows, args, time.monotonic() - t0, len(models))  # partial results survive a kill
    print(f"wrote {out} in {(time.monotonic() - t0) / 60:.1f} min")
    bad = [r["model"] for r in rows if "failed" not in r and not _ok(r)]
    if bad:
        print(f"benchmarks.precision: plan NaN or over budget on {', '.join(bad)}", file=sys.stderr)
    return 1 if failed or bad else 0


def _ok(row: dict) -> bool:
    e = row["errors"]["plan"]
    return e.finite and row["budget"].allows(e) and math.isfinite(row["ms"]["plan"])


if __name__ == "__main__":
    sys.exit(main())
