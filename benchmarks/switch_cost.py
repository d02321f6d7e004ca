"""What a switch between ONNX Runtime and OpenVINO costs with real work on both sides, per threading setting.

    python -m benchmarks.transitions --switch             # -> results/transitions/transitions.md (~10-15 min on 2
    cores)
    python -m benchmarks.switch_cost --rounds 20 -o results/transitions/transitions.md   # the same, directly

BERT-base and ResNet-50 are each cut in two halves (A, B: a contiguous cut at the middle layer / residual
block), compiled with collage's backends (``get_backend(...).compile``). In one process per setting (ONNX
Runtime's process-wide pool is per process), interleaved round robin, medians over ``--rounds`` rounds:

* each half alone on each runtime, called back to back (hot, its own threads), and each whole model;
* chains A, B, A, B, ... (``--cycles`` cycles) on ORT/OV, OV/ORT, ORT/ORT and OV/OV, each call timed.
  The cost of a switch ``X -> Y`` is the time of the half on ``Y`` right after a half on ``X`` minus the
  time of the same half on ``Y`` right after a half on ``Y`` (same position, same-runtime chain): the
  runtime change alone, the "next partition" overhead cancelled. ``over alone`` is against the half's
  back-to-back time instead;
* ResNet-50 in 18 pieces (after the stem's MaxPool and every residual block) all on ONNX Runtime, against
  the whole model on ONNX Runtime in the same round (the same-runtime chain the shared pool was made for).

Settings (``SETTINGS``, a subset with ``--settings``): ``before``: one process-wide ONNX Runtime pool (spin
off per session, which does not reach that pool); ``park``: the same pool, its workers parked while
OpenVINO runs (``collage.backends.handover``; the default); ``nice``: the same pool with its workers
at a lower priority (``pool_nice``); ``timed``: each session on its own pool with time-based spinning
(``session.intra_op.spin_duration_us`` = 100 after a parallel section, then sleep); ``stop``: each session
on its own pool, spinning while a run lasts and stopped when it returns (``session.force_spinning_stop``).
OpenVINO unpinned in all. Processes run the settings in turn, ``--repeats`` times, and the tables pool their
rounds, so that the machine's drift between processes cancels.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

log = logging.getLogger("benchmarks.switch_cost")

SETTINGS: dict[str, dict[str, dict]] = {
    "before": {"onnxruntime": {"shared_pool": True, "spin": False, "park": False}, "openvino": {"pinning": False}},
    "park": {"onnxruntime": {"shared_pool": True, "spin": False}, "openvino": {"pinning": False}},
    "nice": {"onnxruntime": {"shared_pool": True, "spin": False, "pool_nice": 19, "park": False},
             "openvino": {"pinning": False}},
    "timed": {"onnxruntime": {"shared_pool": False, "spin": False, "wait": "timed", "spin_us": 100},
              "openvino": {"pinning": False}},
    "stop": {"onnxruntime": {"shared_pool": False, "spin": False, "wait": "stop", "spin_us": 0},
             "openvino": {"pinning": False}},

}


def _halves(graph, model: str) -> list[list[int]]:
    from benchmarks.chain_tables import bert_cuts, pieces, resnet_cuts

    cuts = bert_cuts(graph) if "bert" in model else resnet_cuts(graph)
    return pieces(graph, [cuts[len(cuts) // 2]])


def worker(setting: str, rounds: int, cycles: int, out: Path) -> None:
    """(One process.) Time everything for one setting; write raw per-round samples as JSON."""
    from benchmarks.chain_tables import Chain, pieces, resnet_cuts
    from collage import zoo
    from collage.backends import get_backend

    opts = SETTINGS[setting]
    ort, ov = get_backend("onnxruntime", **opts["onnxruntime"]), get_backend("openvino", **opts["openvino"])
    rt = {"ort": ort, "ov": ov}
    runners: dict[str, object] = {}   # name -> callable returning per-call times (list) or one time
    for model in ("bert-base", "resnet50"):
        g = zoo.load_graph(f"zoo:{model}")
        feeds = zoo.random_inputs(g)
        halves = _halves(g, model)
        models = [g.extract(h, name=f"{model}_half{k}") for k, h in enumerate(halves)]
        comp = {(k, r): rt[r].compile(m) for k, m in enumerate(models) for r in rt}
        whole = {r: rt[r].compile(g.model) for r in rt}
        ins = [g.boundary(h)[0] for h in halves]

        def call(k, r, env, comp=comp, ins=ins):
            c = comp[(k, r)]
            t0 = time.perf_counter_ns()
            out = c.run({t: env[t] for t in ins[k]})
            dt = (time.perf_counter_ns() - t0) / 1e6
            env.update(out)  # (reused buffers: read by the next call before this one runs again)
            return dt

        base_env = dict(feeds)
        call(0, "ort", base_env)  # the half-A outputs B reads, computed once
        for r in rt:
            for k in range(2):
                def alone(k=k, r=r, env=dict(base_env), call=call):
                    call(k, r, env)  # back to back: the second call is timed
                    return call(k, r, env)
                runners[f"{model}|alone|{k}|{r}"] = alone

            def whole_run(c=whole[r], feeds=feeds):
                t0 = time.perf_counter_ns()
                c.run(feeds)
                return (time.perf_counter_ns() - t0) / 1e6
            runners[f"{model}|whole|{r}"] = whole_run
        for first, second in (("ort", "ov"), ("ov", "ort"), ("ort", "ort"), ("ov", "ov")):
            def chain(first=first, second=second, env=dict(feeds), call=call):
                times = []
                for _ in range(cycles):
                    times.append(call(0, first, env))
                    times.append(call(1, second, env))
                return times
            runners[f"{model}|chain|{first}|{second}"] = chain
    # ResNet-50 in 18 pieces on ONNX Runtime vs the whole model
    g = zoo.load_graph("zoo:resnet50")
    feeds = zoo.random_inputs(g)
    parts = pieces(g, resnet_cuts(g))
    ch = Chain(g, parts, [ort.compile(g.extract(p, name=f"r50_piece{k}")) for k, p in enumerate(parts)])
    whole_ort = ort.compile(g.model)

    def chain18():
        t0 = time.perf_counter_ns()
        ch(feeds)
        t1 = time.perf_counter_ns()
        whole_ort.run(feeds)
        t2 = time.perf_counter_ns()
        return [(t1 - t0) / 1e6, (t2 - t1) / 1e6]
    runners["resnet50|chain18"] = chain18
    names = list(runners)
    for name in names:  # warm-up
        runners[name]()
    samples: dict[str, list] = {name: [] for name in names}
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        for i in rng.permutation(len(names)):
            samples[names[i]].append(runners[names[i]]())
    out.write_text(json.dumps({"setting": setting, "options": opts, "pieces18": len(parts), "samples": samples}))


def _run_processes(rounds: int, cycles: int, repeats: int, settings: list[str]) -> dict[str, list[dict]]:
    got: dict[str, list[dict]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            for setting in settings:
                path = Path(tmp) / f"{setting}-{rep}.json"
                log.info("%s, process %d of %d ...", setting, rep + 1, repeats)
                subprocess.run([sys.executable, "-m", "benchmarks.switch_cost", "--worker", setting, "--rounds",
                                str(rounds),
                                "--cycles", str(cycles), "--json", str(path)], check=True, env=os.environ.copy())
                got[setting].append(json.loads(path.read_text()))
    return got


def _med(x) -> float:
    return float(np.median(np.asarray(x, dtype=np.float64))) if len(x) else float("nan")


def tables(got: dict[str, list[dict]], cycles: int) -> list[str]:
    lines: list[str] = []
    summary: dict[str, dict[str, float]] = {}
    for model in ("bert-base", "resnet50"):
        lines += [f"### {model}, two halves", "",
                  "| setting | ORT A alone | ORT B alone | OV A alone | OV B alone | ORT->OV per switch | OV->ORT per "
                  "switch | ORT->ORT over alone | OV->OV over alone | ORT->OV over alone | OV->ORT over alone | whole "
                  "ORT | whole OV |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for setting, runs in got.items():
            pool = lambda key, runs=runs: [v for r in runs for v in r["samples"][key]]  # noqa: E731
            alone = {(k, r): _med(pool(f"{model}|alone|{k}|{r}")) for k in range(2) for r in ("ort", "ov")}

            def at(first, second, pos, pool=pool, model=model):
                """Median ms of the call at chain position ``pos`` parity (0: half A on first, 1: half B on second),
                over every cycle but the first (the first A follows the previous configuration's run)."""
                vals = [t[j] for t in pool(f"{model}|chain|{first}|{second}") for j in range(2, 2 * cycles)
                        if j % 2 == pos]
                return _med(vals)
            # X -> Y: the half on Y after X, minus the same half on Y after Y
            ort_ov = at("ort", "ov", 1) - at("ov", "ov", 1)       # B on OV after A on ORT
            ov_ort_b = at("ov", "ort", 1) - at("ort", "ort", 1)   # B on ORT after A on OV
            ov_ort_a = at("ort", "ov", 0) - at("ort", "ort", 0)   # A on ORT after B on OV
            ort_ov_a = at("ov", "ort", 0) - at("ov", "ov", 0)     # A on OV after B on ORT
            to_ov = (ort_ov + ort_ov_a) / 2
            to_ort = (ov_ort_b + ov_ort_a) / 2
            same_ort = (at("ort", "ort", 0) - alone[(0, "ort")] + at("ort", "ort", 1) - alone[(1, "ort")]) / 2
            same_ov = (at("ov", "ov", 0) - alone[(0, "ov")] + at("ov", "ov", 1) - alone[(1, "ov")]) / 2
            over_to_ov = (at("ort", "ov", 1) - alone[(1, "ov")] + at("ov", "ort", 0) - alone[(0, "ov")]) / 2
            over_to_ort = (at("ov", "ort", 1) - alone[(1, "ort")] + at("ort", "ov", 0) - alone[(0, "ort")]) / 2
            whole = {r: _med(pool(f"{model}|whole|{r}")) for r in ("ort", "ov")}
            summary[f"{model}|{setting}"] = {"to_ov": to_ov, "to_ort": to_ort, "whole_ort": whole["ort"],
                                             "whole_ov": whole["ov"]}
            lines.append(f"| {setting} | {alone[(0, 'ort')]:.2f} | {alone[(1, 'ort')]:.2f} | {alone[(0, 'ov')]:.2f} | "
                         f"{alone[(1, 'ov')]:.2f} | **{to_ov:+.2f}** | **{to_ort:+.2f}** | {same_ort:+.2f} | "
                         f"{same_ov:+.2f} | {over_to_ov:+.2f} | {over_to_ort:+.2f} | {whole['ort']:.2f} | "
                         f"{whole['ov']:.2f} |")
        lines.append("")
    lines += ["### ResNet-50 in 18 pieces, all on ONNX Runtime", "",
              "| setting | chain ms | whole ms | chain / whole (median of per-round ratios) | rounds |",
              "|---|---:|---:|---:|---:|"]
    for setting, runs in got.items():
        pairs = [v for r in runs for v in r["samples"]["resnet50|chain18"]]
        chain = [p[0] for p in pairs]
        whole = [p[1] for p in pairs]
        ratio = _med([c / w for c, w in pairs])
        summary[f"chain18|{setting}"] = {"ratio": ratio}
        lines.append(f"| {setting} | {_med(chain):.2f} | {_med(whole):.2f} | {ratio:.2f}x | {len(pairs)} |")
    lines.append("")
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12, help="interleaved rounds per process")
    ap.add_argument("--cycles", type=int, default=4, help="A, B cycles per chain run")
    ap.add_argument("--repeats", type=int, default=2, help="processes per setting (alternating settings)")
    ap.add_argument("-o", "--output", type=Path, default=Path("results/transitions") / "transitions.md")
    ap.add_argument("--worker", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help=f"comma-separated settings to compare (default: all of {', '.join(SETTINGS)})")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.worker:
        worker(args.worker, args.rounds, args.cycles, args.json)
        return 0
    from collage.util import machine_id, source_commit

    t0 = time.time()
    settings = [s for s in args.settings.split(",") if s]
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        ap.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    got = _run_processes(args.rounds, args.cycles, args.repeats, settings)
    body, summary = tables(got, args.cycles)
    cmd = "python -m benchmarks.switch_cost " + " ".join(argv if argv is not None else sys.argv[1:])
    head = [
        "# Transition costs: a switch between ONNX Runtime and OpenVINO with real work on both sides",
        "",
        f"Command: `{cmd.strip()}` at commit {source_commit()} ({time.time() - t0:.0f} s). Machine: {machine_id()}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. The machine's speed level moves "
        "13-25% between runs minutes apart (results/measurement/machine-level.md): every number is a median over "
        f"interleaved rounds, pooled over {args.repeats} processes per setting run alternately ({args.rounds} rounds "
        f"each, {args.cycles} A,B cycles per chain run); compare settings within this file only.",
        "",
        "Settings:",
        "",
        *[f"- **{k}**: `{json.dumps(SETTINGS[k])}`" for k in settings],
        "- before = collage's defaults until issue 19: one process-wide ONNX Runtime pool "
        "(`set_global_thread_pool_sizes`), `session.force_spinning_stop` 1 and `allow_spinning` 0 per session, which "
        "never reach that pool (onnxruntime/core/session/inference_session.cc: spinning control applies to "
        "per-session pools only); its worker spins ~50 ms after every run (1<<20 SpinPause).",
        "- park = before, with the pool's worker threads parked while another runtime runs (the default since "
        "this setting was measured): at a switch away from ONNX Runtime each worker gets a real-time signal whose "
        "handler is libc's sleep, at the switch back a second signal ends it (`collage.backends.handover`).",
        "- nice = before, with the pool's worker threads at nice +19 (`setpriority` per thread id, Linux): while "
        "ONNX Runtime runs alone they get a core as before; when its spin overlaps another runtime's threads "
        "the kernel gives the core to those.",
        "- timed = every ONNX Runtime session on its own pool of 2 threads with `session.intra_op.allow_spinning` 1 "
        "and `session.intra_op.spin_duration_us` 100 (time-based spinning, ORT PR #27916, in 1.32): workers spin at "
        "most 0.1 ms for more work, then sleep. OpenVINO: nothing to set; its oneTBB 2021.13 workers yield ~1 ms "
        "after a task (`worker_wait_leave_duration`), no property or environment variable of OpenVINO 2026.4 "
        "shortens it; pinning made no measurable difference (research notes /tmp/r19, issue 19).",
        "- stop = every ONNX Runtime session on its own pool, spinning while a run lasts and stopped when it "
        "returns (`session.force_spinning_stop` 1).",
        "",
        "Per switch X -> Y = (the half on Y right after a half on X) - (the same half on Y right after a half on Y), "
        "averaged over both halves; \"over alone\" columns: the same calls against the half called back to back. "
        "All ms.",
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(head + body) + "\n")
    (args.output.with_suffix(".json")).write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
