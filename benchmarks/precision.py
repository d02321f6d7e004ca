"""Budgeted lower precision vs fp32 and vs all-bf16: ``python -m benchmarks.precision [--quick]``.

For each model: ``collage tune`` over onnxruntime, openvino (fp32) and openvino-bf16 under an accuracy
budget (default ``cos=0.999,rel=0.01``, judged on seeded random inputs), then, interleaved in one run:
the tuned artifact, the best fp32 single backend (ONNX Runtime, OpenVINO fp32) and OpenVINO all-bf16
on the whole model. Each one's end-to-end error is measured against the ONNX Runtime fp32 reference
on the same calibration inputs. Writes ``results/precision/precision-bf16.md`` (``results/precision/precision-quick.md``
with ``--quick``: the tiny zoo models, small candidates, a short measuring budget), rewritten after each
model, so a run cut short keeps the models it finished.

Default (no --models): the 11 CPU zoo models plus bert-base-masked (BERT-base with an HF-style padding
mask: all-bf16 gives NaN there), with a measuring budget of 5 min for vgg19, 4 min for bert-base-masked,
3 min for resnet50, mobilenetv2, bert-base and zfnet512, 2 min for shufflenet and 90 s for the others
(``BUDGETS``), candidates up to 4 nodes: about 60-75 min on a quiet 2-core machine (shufflenet, zfnet512
and vgg19 alone: about 15-20 min). tiny-bert-masked (0.2 ms a call: bf16 gains nothing at that size) is
in ``--quick``.

``--int8 --accuracy 'cos=0.999,rel=0.01;cos=0.99,rel=0.05'``: the int8 variants and OpenVINO fp16 join the
search, each model runs under each budget (one cost DB, so the second tune reuses the first's ranges and
measurements), those whole-model variants join the interleaved timing, and the table goes to
``results/precision/precision.md`` (the 12 models at those two budgets: 104 min).
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

from benchmarks._common import backend_as_tuned, write_atomic
from collage.util import source_commit

log = logging.getLogger("benchmarks.precision")

FULL = ["resnet50", "mobilenetv2", "bert-base", "bert-base-masked", "squeezenet", "shufflenet", "inception_v1",
        "inception_v2", "densenet121", "zfnet512", "bvlc_alexnet", "vgg19"]
QUICK = ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert", "tiny-bert-masked"]
#: measuring budget per model in the full run (others: DEFAULT_BUDGET); --budget overrides them all
#: (vgg19 and zfnet512: 40-190 ms a call and ~0.25-0.5 GB of weights a compile, 5-10 s a candidate; in 90 s
#: too few bf16 ranges got timed. shufflenet: 203 nodes, bf16 barely faster; its within-budget prefixes need time.
#: bvlc_alexnet with the fp16 variant: 90 s timed 49 of 527 candidates, too few to pair bf16 convolutions
#: with fp16 classifier Gemms.)
BUDGETS = {"resnet50": "3m", "mobilenetv2": "3m", "bert-base": "3m", "bert-base-masked": "4m", "vgg19": "5m",
           "zfnet512": "3m", "shufflenet": "2m", "bvlc_alexnet": "3m"}
DEFAULT_BUDGET = "90s"
QUICK_BUDGET = "45s"
BACKENDS = ["onnxruntime", "openvino", "openvino-bf16"]
#: with --int8: the int8 QDQ variants too (collage.backends.qdq), writing results/precision/precision.md
INT8 = ["onnxruntime-int8", "openvino-int8", "openvino-int8-bf16"]
#: with --int8 also OpenVINO fp16 (avx512_fp16, no AMX-FP16 here): slower than fp32 on convolutions
#: (results/precision/precision-variants.md) but half the weight bytes of fp32 on the batch-1 Gemms that are memory
#: bound, at ~1/6 of bf16's error (a 9216x4096 MatMul+Relu: fp32 5.6 ms, fp16 2.8 ms rel 4.5e-4, bf16 2.5 ms
#: rel 2.6e-3): the precision for large classifier Gemms under a strict budget
LOWP = ["openvino-fp16"]
#: what --int8 adds to BACKENDS
WITH_INT8 = INT8 + LOWP


def bench_model(name: str, accuracy: str, *, max_nodes: int, budget_s: float | None, db: str | None,
                rounds: int, int8: bool = False) -> dict:
    # tune's work files (stitched rounds, chains: GBs for the big models) land in a scratch folder,
    # removed after each model
    scratch = Path(tempfile.mkdtemp(prefix=f"collage-precision-{name}-"))
    before, tempfile.tempdir = tempfile.tempdir, str(scratch)
    try:
        return _bench_model(name, accuracy, scratch / "artifact", max_nodes=max_nodes, budget_s=budget_s, db=db,
                            rounds=rounds, int8=int8)
    finally:
        tempfile.tempdir = before
        shutil.rmtree(scratch, ignore_errors=True)


def _bench_model(name: str, accuracy: str, out: Path, *, max_nodes: int, budget_s: float | None, db: str | None,
                 rounds: int, int8: bool = False) -> dict:
    from collage import zoo
    from collage.measure.accuracy import load_calibration, parse_accuracy, reference_runs, run_error
    from collage.errors import CollageError
    from collage.runtime.artifact import load
    from collage.search.candidates import Limits
    from collage.tuner.job import tune
    from collage.tuner.checks import measure_interleaved

    t0 = time.monotonic()
    graph = zoo.load_graph(f"zoo:{name}")
    budget = parse_accuracy(accuracy)
    backends = BACKENDS + (WITH_INT8 if int8 else [])
    res = tune(f"zoo:{name}", out, backends=backends, accuracy=accuracy, limits=Limits(max_nodes=max_nodes),
               budget_s=budget_s, db=db, progress=True)
    tune_s = time.monotonic() - t0
    art = load(res.out_dir)
    runners = {"plan": art}
    ranges = ((res.report.get("precision") or {}).get("int8") or {}).get("file")
    refused: dict[str, str] = {}
    for b in backends:  # the int8 whole models quantized with the ranges the tune calibrated (or reused)
        try:
            runners[b] = backend_as_tuned(b, ranges, INT8).compile(graph.model)
        except CollageError as e:  # a lower-precision whole model the runtime cannot build: a cell, not the row
            if b not in WITH_INT8:  # the fp32 baselines and all-bf16 are every table's columns
                raise
            refused[b] = str(e).splitlines()[0][:300]
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
    mix: dict[str, int] = {}
    for p in parts:
        mix[p.backend] = mix.get(p.backend, 0) + 1
    prec = res.report.get("precision") or {}
    return {"model": name, "nodes": len(graph), "budget": budget, "ms": ms, "errors": errors, "best32": best32,
            "mix": mix, "predicted_ms": res.report.get("predicted_ms"), "int8": prec.get("int8"), "refused": refused,
            "parts": [(p["backend"], p["precision"], p["rel"], p["cos"]) for p in prec.get("partitions") or []],
            "partitions": len(parts), "low_partitions": sum(p.backend == "openvino-bf16" for p in parts),
            "low_nodes": sum(len(p.nodes) for p in parts if p.backend == "openvino-bf16"),
            "fallback": bool((res.report.get("precision") or {}).get("fallback_fp32")),
            "notes": list(dict.fromkeys(list(res.plan.notes)
                                        + list((res.report.get("precision") or {}).get("notes") or []))),
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
             f"Command: `{args.command}` at commit {source_commit()} (accuracy budget `{args.accuracy}`, candidates up "
             f"to {args.max_nodes} nodes; measuring budget per model: {budgets}). Total {elapsed / 60:.1f} "
             f"min.{status}", "",
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
    write_atomic(path, lines)


def _mix(r: dict) -> str:
    return ", ".join(f"{b} x{k}" for b, k in sorted(r["mix"].items(), key=lambda kv: -kv[1]))


def write_int8(path: Path, rows: list[dict], args: argparse.Namespace, elapsed: float, todo: int) -> None:
    """results/precision/precision.md (--int8): one table per accuracy budget (rows carry theirs), int8 columns."""
    done = len(rows)
    status = "" if done == todo else f" **Partial: {done} of {todo} (model, budget) runs done.**"
    lines = ["# INT8 in the search: fp32 / bf16 / int8 across ONNX Runtime and OpenVINO under an accuracy budget", "",
             f"Command: `{args.command}` at commit {source_commit()}. Total {elapsed / 60:.1f} min.{status}", "",
             f"Backends searched: {', '.join(BACKENDS + WITH_INT8)} (candidates up to {args.max_nodes} nodes). "
             "Latency: median ms of a full call, the plan and every whole-model runner measured interleaved in "
             f"{args.rounds} rounds in one process (2 threads on a 2-core machine, whose speed level moves 13-25% "
             "between runs minutes apart: results/measurement/machine-level.md; compare within a table). "
             "Error vs the ONNX Runtime fp32 reference on 2 seeded random input samples (the same samples calibrate "
             "the int8 ranges: min/max, per tensor, once per model), as max |err| / output range and min cosine. "
             "int8: QDQ with weights int8 per channel, activations uint8, Conv/MatMul/Gemm quantized "
             "(collage.backends.qdq); `int8+bf16`: OpenVINO's non-quantized ops in bf16; fp16: OpenVINO's "
             "inference precision f16 (avx512_fp16). *pred/meas*: the "
             "search's predicted plan ms over the measured one.", ""]
    for text in dict.fromkeys(r["accuracy"] for r in rows):
        mine = [r for r in rows if r["accuracy"] == text]
        lines += [f"## Budget `{text}`", "",
                  "| model | best fp32 single (ms) | all-bf16 OV (ms, rel / cos) | all-fp16 OV (ms, rel / cos) | "
                  "all-int8 ORT (ms, rel / cos) | all-int8 OV (ms, rel / cos) | all-int8+bf16 OV (ms, rel / cos) | "
                  "plan (ms) | plan error | within budget | plan mix (backend x partitions) | plan vs fp32 | predicted "
                  "ms | pred/meas | tune s |",
                  "|---|---|---|---|---|---|---|---:|---|---|---|---:|---:|---:|---:|"]
        ratios, mixed = [], 0
        for r in mine:
            if "failed" in r:
                lines.append(f"| {r['model']} | failed: {r['failed']} |" + " |" * 13)
                continue
            ms, e, b = r["ms"], r["errors"], r["budget"]

            def cell(k: str, r=r, ms=ms, e=e, b=b) -> str:
                if k in (r.get("refused") or {}):
                    return "does not compile (notes)"
                return f"{ms[k]:.2f} ({_err(e[k], b)})" if k in ms else "-"
            pred = r.get("predicted_ms")
            ratio = ms[r["best32"]] / ms["plan"]
            pm = "-" if not pred else f"{pred / ms['plan']:.2f}"
            ratios.append(ratio)
            mixed += len({x.split("-")[0] for x in r["mix"]}) > 1
            lines.append(
                f"| {r['model']} | {r['best32']} {ms[r['best32']]:.2f} | {cell('openvino-bf16')} | "
                f"{cell('openvino-fp16')} | {cell('onnxruntime-int8')} | {cell('openvino-int8')} | "
                f"{cell('openvino-int8-bf16')} | {ms['plan']:.2f} | {_err(e['plan'], b)} | {_verdict(e['plan'], b)} | "
                f"{_mix(r)} | {ratio:.2f}x | {'-' if pred is None else f'{pred:.2f}'} | {pm} | "
                f"{r['tune_s']:.0f} |")
        if ratios:
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            lines += ["", f"Geomean plan vs fp32 best single over {len(ratios)} model(s): **{geo:.2f}x**; plans that "
                          "mix "
                      f"runtimes (ONNX Runtime and OpenVINO): {mixed} of {len(ratios)}.", ""]
    lines += ["## Partitions and notes per run", ""]
    for r in rows:
        if "failed" in r:
            continue
        parts = "; ".join(f"{b} ({p}, rel {rel:.2g})" if rel is not None else f"{b} ({p})"
                          for b, p, rel, _ in r["parts"])
        i8 = r.get("int8") or {}
        refused = "".join(f" The whole model on {k} does not compile: {v}."
                          for k, v in (r.get("refused") or {}).items())
        lines += [f"- **{r['model']}** `{r['accuracy']}`: partitions: {parts or '-'}.{refused} int8 ranges: "
                  f"{i8.get('tensors', '-')} tensors, {i8.get('method', '-')}, calibration runs "
                  f"{i8.get('calibration_runs', '-')} ({(i8.get('calibration') or {}).get('samples', '-')} samples, "
                  f"{'random' if (i8.get('calibration') or {}).get('random') else 'given'}). Notes: "
                  + ("; ".join(r.get("notes") or []) or "-")]
    write_atomic(path, lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.precision", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny zoo models, small candidates, short budgets")
    p.add_argument("--models", default=None, help=f"comma-separated zoo names (default: {', '.join(FULL)})")
    p.add_argument("--accuracy", default="cos=0.999,rel=0.01",
                   help="budget; with --int8 several separated by ';' (each model runs under each)")
    p.add_argument("--int8", action="store_true", help="search the int8 variants too; write "
                                                       "results/precision/precision.md")
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
    models = ([m.strip() for m in args.models.split(",") if m.strip()] if args.models
              else (QUICK if args.quick else FULL))
    args.max_nodes = args.max_nodes or (3 if args.quick else 4)
    args.rounds = args.rounds or (3 if args.quick else 7)
    out = Path(args.out or ("results/precision/precision.md" if args.int8 and not args.quick else
                            "results/precision/precision-quick.md" if args.quick
                            else "results/precision/precision-bf16.md"))
    accuracies = [a.strip() for a in args.accuracy.split(";") if a.strip()] if args.int8 else [args.accuracy]
    runs = [(a, m) for m in models for a in accuracies]  # model-major: a run cut short has both budgets of its models
    t0 = time.monotonic()
    rows: list[dict] = []
    failed = 0
    for k, (accuracy, name) in enumerate(runs):
        budget = args.budget or (QUICK_BUDGET if args.quick else BUDGETS.get(name, DEFAULT_BUDGET))
        print(f"benchmarks.precision: {name} at {accuracy} ({k + 1}/{len(runs)}, budget {budget}, "
              f"{(time.monotonic() - t0) / 60:.1f} min so far)", file=sys.stderr, flush=True)
        try:
            row = bench_model(name, accuracy, max_nodes=args.max_nodes,
                              budget_s=parse_duration(budget) if budget else None,
                              db=args.db, rounds=args.rounds, int8=args.int8)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - one model's failure is a row; the others still run
            traceback.print_exc()
            row = {"model": name, "failed": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
            failed += 1
        row["budget_text"] = budget
        row["accuracy"] = accuracy
        rows.append(row)
        if args.int8:
            write_int8(out, rows, args, time.monotonic() - t0, len(runs))
        else:
            write(out, rows, args, time.monotonic() - t0, len(models))  # partial results survive a kill
    print(f"wrote {out} in {(time.monotonic() - t0) / 60:.1f} min")
    bad = [f"{r['model']} ({r['accuracy']})" for r in rows if "failed" not in r and not _ok(r)]
    if bad:
        print(f"benchmarks.precision: plan NaN or over budget on {', '.join(bad)}", file=sys.stderr)
    return 1 if failed or bad else 0


def _ok(row: dict) -> bool:
    e = row["errors"]["plan"]
    return e.finite and row["budget"].allows(e) and math.isfinite(row["ms"]["plan"])


if __name__ == "__main__":
    sys.exit(main())
