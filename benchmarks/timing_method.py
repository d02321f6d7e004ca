"""How artifacts are timed against each other: one call each in a shuffled round, or a block of calls each.

    python -m benchmarks.timing_method --work work/tt/shufflenet      # -> results/budget/timing-method.md

``benchmarks.tune_time`` times every artifact of a model in one process (the tunes' plans and the reference's).
Until 2026-12-05 it took one call per artifact a round; it now takes a block of calls
(``benchmarks.budget.interleaved_ms``). This benchmark shows why, on the artifacts in ``--work``
(``*/out``, each a plan of one or more runtimes), in one run, the two methods alternating ``--repeats`` times:

* **single calls**: each round every artifact once, a fresh random order (the old method); each call's time is
  kept with what the call before it ran: another runtime (a switch), another artifact of its runtime, or itself;
* **blocks**: each round every artifact for a block of at least ``--block`` seconds (at least 3 calls), a fresh
  random order, medians paired round by round (:func:`collage.tuner.checks.paired_medians`).

Reported per artifact: its runtimes, each method's median and ratio to the reference's artifact, and the single
calls' medians by the call before them.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import header, md_table, write_report
from benchmarks.budget import artifact_runners, load_line
from collage.tuner.checks import interleaved_rounds, paired_medians


def runtimes(artifact: Path) -> str:
    plan = json.loads((artifact / "plan.json").read_text())
    return "+".join(sorted({p["backend"] for p in plan["partitions"]}))


#: single calls by the call before them (:func:`single_calls`)
PARTS = ("all", "switch", "other", "itself")


def single_calls(runners: dict[str, Callable[[], object]], kinds: dict[str, str], rounds: int,
                 rng: random.Random) -> dict[str, dict[str, list[float]]]:
    """Each round every artifact once, shuffled: per artifact, its calls' ms by the call before them: another
    runtime ('switch'), another artifact of the same runtime ('other'), itself ('itself'); 'all' of them."""
    out: dict[str, dict[str, list[float]]] = {k: {p: [] for p in PARTS} for k in runners}
    order, prev = list(runners), None
    for _ in range(rounds):
        rng.shuffle(order)
        for k in order:
            t = time.perf_counter()
            runners[k]()
            ms = (time.perf_counter() - t) * 1e3
            out[k]["all"].append(ms)
            out[k]["itself" if prev == k else "other" if prev is not None and kinds[prev] == kinds[k] else
                   "switch"].append(ms)
            prev = k
    return out


def main(argv: list[str] | None = None) -> None:
    from collage.util import machine_id

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="a model's folder of benchmarks.tune_time (its */out artifacts)")
    ap.add_argument("--repeats", type=int, default=4, help="times each method runs, alternating")
    ap.add_argument("--rounds", type=int, default=40, help="rounds of each method per repeat")
    ap.add_argument("--block", type=float, default=0.15, help="a block's least seconds")
    ap.add_argument("--out", default="results/budget/timing-method.md")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.timing_method " + " ".join(argv if argv is not None else sys.argv[1:])
    arts = {p.parent.name: p for p in sorted(Path(args.work).glob("*/out")) if (p / "plan.json").exists()}
    kinds = {k: runtimes(p) for k, p in arts.items()}
    start_load, rng = load_line(), random.Random(0)
    singles: dict[str, dict[str, list[float]]] = {k: {p: [] for p in PARTS} for k in arts}
    blocks: dict[str, list[float]] = {k: [] for k in arts}
    with artifact_runners(arts, 0) as runners:
        for _ in range(3):  # warm-up calls
            for run in runners.values():
                run()
        for rep in range(args.repeats):
            for k, v in single_calls(runners, kinds, args.rounds, rng).items():
                for part, ms in v.items():
                    singles[k][part] += ms
            per = interleaved_rounds(runners, rounds=args.rounds, min_time_s=args.block, warmup_s=0.0, shuffle=rng)
            for k, v in per.items():
                blocks[k] += v
            print(f"repeat {rep + 1} of {args.repeats}", file=sys.stderr, flush=True)
    paired = paired_medians(blocks)
    single = {k: statistics.median(v["all"]) for k, v in singles.items()}
    first = "reference" if "reference" in arts else next(iter(arts))
    rows = [[k, kinds[k], f"{single[k]:.3f}", f"{single[k] / single[first]:.3f}", f"{paired[k]:.3f}",
             f"{paired[k] / paired[first]:.3f}", f"{len(singles[k]['switch'])} / {len(singles[k]['all'])}",
             *(f"{statistics.median(singles[k][p]):.3f} ({len(singles[k][p])})" if singles[k][p] else "-"
               for p in PARTS[1:])] for k in arts]
    lines = header("Timing artifacts against each other: single calls or blocks", command,
                   f"The artifacts under `{args.work}` loaded in one process, same seeded inputs. {args.repeats} "
                   f"repeats, alternating: {args.rounds} rounds of single calls (every artifact once a round, a "
                   f"fresh random order: the method benchmarks.tune_time used before 2026-12-05), then "
                   f"{args.rounds} rounds of blocks (every artifact for at least {args.block} s and 3 calls a "
                   "round, a fresh random order; block medians paired round by round: the method it uses now). "
                   f"Ratios are to `{first}`. Single calls are also split by the call before them: another "
                   "runtime (a switch), another artifact of the same runtime, or the same artifact (calls in "
                   "brackets).")
    lines += [f"Machine: {machine_id()}. Load when it started: {start_load}; ended: {load_line()}.", ""]
    lines += md_table(["artifact", "runtimes", "single calls ms", "ratio", "blocks ms (paired)", "ratio",
                       "calls after a switch", "single after a switch ms", "after another artifact of its runtime ms",
                       "after itself ms"], rows)
    write_report(args.out, lines, echo=True)


if __name__ == "__main__":
    main()
