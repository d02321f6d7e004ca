"""Do two `collage bench --artifacts` runs over one cost DB give the same plans? (issue 39: behaviour unchanged)

    python -m benchmarks.same_plans BEFORE_ARTIFACTS AFTER_ARTIFACTS [-o results/bench/architecture-check.md]

Compares, per model, the plan the cost DB's contents alone give (report.json ``cost_db_plan``: the search over the
stored candidate costs and partition charges, nothing of the run's own end-to-end timings, so two tunes on the
same DB contents derive the same plan), node by node, and its price; beside it the searched plan and the plan
shipped, which also rest on timings taken in each run (the search's attempts, the never-worse rule), and whether
report.json has the same keys in the same order."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _plan(p: dict | None) -> str:
    if not p:
        return "-"
    return " + ".join(f"{x['backend']}[{len(x['nodes'])}]" for x in p["partitions"])


def _same(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is b
    nodes = [[(x["backend"], x["nodes"]) for x in p["partitions"]] for p in (a, b)]
    return nodes[0] == nodes[1] and round(a["predicted_ms"], 6) == round(b["predicted_ms"], 6)


def rows(before: Path, after: Path) -> list[str]:
    out = ["| model | cost-DB plan before | after | same (nodes, price) | searched before / after | shipped before"
           " / after | report.json keys |", "|---|---|---|---|---|---|---|"]
    for d in sorted(p for p in before.iterdir() if (p / "report.json").is_file()):
        b = json.loads((d / "report.json").read_text())
        a = json.loads((after / d.name / "report.json").read_text())
        added = sorted(set(a) - set(b))
        keys = "same order" if list(b) == [k for k in a if k not in added] else "differ"
        shipped = [_plan({"partitions": json.loads((x / d.name / "plan.json").read_text())["partitions"]})
                   for x in (before, after)]
        out.append(f"| {d.name} | {_plan(b.get('cost_db_plan'))} | {_plan(a.get('cost_db_plan'))} | "
                   f"{'yes' if _same(b.get('cost_db_plan'), a.get('cost_db_plan')) else '**no**'} | "
                   f"{_plan(b.get('searched_plan'))} / {_plan(a.get('searched_plan'))} | {shipped[0]} / {shipped[1]} | "
                   f"{keys}{' + ' + ', '.join(added) if added else ''} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.same_plans", description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("-o", "--out", type=Path)
    args = p.parse_args(argv)
    text = "\n".join(rows(args.before, args.after)) + "\n"
    if args.out:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
