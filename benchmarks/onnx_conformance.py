"""ONNX's own backend test suite through collage, per plan: results/backends/onnx-conformance.md.

    python -m benchmarks.onnx_conformance                                  # onnxruntime, openvino, mixed, tvm
    python -m benchmarks.onnx_conformance --plans onnxruntime,mixed
    python -m benchmarks.onnx_conformance --plans tvm --tvm-every 4        # TVM: a subset (compiles are slow)

Each case of ``onnx.backend.test.BackendTest`` (node, simple, pytorch-converted, pytorch-operator and the
shipped "light" models; the ``_cpu`` variants) is prepared with ``collage.conformance.backend`` (a plan built by
hand, exported as an artifact, loaded with ``collage.load``) and ends as one of: **pass**; **refused** (a
CollageError naming the op, dtype or feature: BackendTest counts it as skipped), grouped by reason;
**excluded** (collage/conformance/exclusions.py, with its reason); **wrong** (outputs differ from ONNX's
expected ones: must be 0); **error** (an exception that is not a CollageError: a bug, not a wrong result).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import sys
import time
from pathlib import Path

from collage.conformance.backend import CATEGORIES, conformance_cases, parse_plan, run_case

OUT = Path("results/backends/onnx-conformance.md")


def reason_key(detail: str) -> str:
    """A refusal message reduced to its kind: names, numbers and model names dropped."""
    cls, _, msg = detail.partition(": ")
    msg = re.sub(r"\(node [^)]*\)", "", msg)
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\btest_\w+", "…", msg)
    msg = re.sub(r"\d+", "N", msg)
    msg = re.sub(r"\s+", " ", msg)
    if "NOT_IMPLEMENTED" in msg:
        m = re.search(r"cannot take op (\S+)", msg)
        return f"{cls}: onnxruntime has no kernel for this op/type ({m.group(1) if m else '?'} ...)"[:140]
    m = re.search(r"cannot take op (\S+)", msg)
    if m and "element type" in msg:
        t = re.search(r"element type (\w+)", msg)
        return f"{cls}: element type {t.group(1) if t else '?'} not computed exactly"
    if m:
        tail = msg.split("): ", 1)[-1]
        return f"{cls}: op {m.group(1)}: {tail}"[:140]
    return f"{cls}: {msg}"[:140]


def run_plan(plan: str, pattern: str | None, every: int, categories: tuple[str, ...] = CATEGORIES) -> dict:
    cases, excluded = conformance_cases(plan, pattern, categories=categories)
    if every > 1:
        cases = cases[::every]
    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    bad: list[str] = []
    t0 = time.monotonic()
    for k, (_category, name, test) in enumerate(cases):
        outcome, detail = run_case(test)
        counts[outcome] += 1
        if outcome == "refused":
            reasons[reason_key(detail)] += 1
        elif outcome in ("wrong", "error"):
            bad.append(f"{outcome} {name}: {detail}")
        if (k + 1) % 200 == 0:
            print(f"{plan}: {k + 1}/{len(cases)} {dict(counts)} {time.monotonic() - t0:.0f}s", file=sys.stderr,
                  flush=True)
    return {"plan": plan, "cases": len(cases), "counts": counts, "reasons": reasons, "bad": bad,
            "excluded": excluded, "seconds": time.monotonic() - t0, "every": every,
            "categories": [c for c in categories]}


def _versions() -> str:
    import onnx

    from collage.util import source_commit

    parts = [f"collage at commit {source_commit()}", f"onnx {onnx.__version__}"]
    for mod in ("onnxruntime", "openvino"):
        try:
            parts.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001
            pass
    try:
        import tvm

        parts.append(f"apache-tvm {tvm.__version__}")
    except Exception:  # noqa: BLE001
        pass
    return ", ".join(parts)


def render(results: list[dict], command: str) -> str:
    commands = list(dict.fromkeys(r.get("command", command) for r in results))
    lines = [*(f"`{c}`" for c in commands), "", f"# ONNX backend test suite through collage ({datetime.date.today()})",
             "",
             f"Versions: {_versions()}. Each case: the model exported as a collage artifact and run through "
             "`collage.load` (`collage.conformance.backend`); categories node, simple, pytorch-converted, "
             "pytorch-operator and the shipped light models, `_cpu` variants. **wrong** = outputs differ from ONNX's "
             "expected ones; **error** = an exception that is not a clean CollageError. Both must be 0.", "",
             "| plan | cases run | pass | refused | wrong | error | excluded | time |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        c = r["counts"]
        subset = f" (every {r['every']}th case)" if r["every"] > 1 else ""
        if "RealModel" not in r.get("categories", CATEGORIES):
            subset += " (no light models)"
        lines.append(f"| {r['plan']}{subset} | {r['cases']} | {c['pass']} | {c['refused']} | {c['wrong']} | "
                     f"{c['error']} | {len(r['excluded'])} | {r['seconds'] / 60:.1f} min |")
    lines += ["", "mixed = node i on onnxruntime for even i, openvino for odd i (the other one when the first refuses "
              "the node), consecutive nodes on one backend forming a partition: every boundary kind is crossed.", ""]
    for r in results:
        lines += [f"## {r['plan']}: refusals by reason ({r['counts']['refused']})", "", "| count | reason |",
                  "|---:|---|"]
        top = r["reasons"].most_common(40)
        for reason, n in top:
            lines.append(f"| {n} | {reason.replace('|', '/')} |")
        rest = sum(r["reasons"].values()) - sum(n for _, n in top)
        if rest:
            lines.append(f"| {rest} | (other reasons, {len(r['reasons']) - len(top)} kinds) |")
        lines.append("")
        if r["bad"]:
            lines += [f"### {r['plan']}: wrong / error", ""] + [f"- {b[:300]}" for b in r["bad"]] + [""]
    excluded = {}
    for r in results:
        for name, reason in r["excluded"].items():
            excluded.setdefault(reason, set()).add(name)
    lines += ["## Excluded (collage/conformance/exclusions.py)", "", "| cases | reason |", "|---:|---|"]
    for reason, names in sorted(excluded.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| {len(names)} | {reason} ({', '.join(sorted(names)[:4])}{', ...' if len(names) > 4 else ''}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plans", default="onnxruntime,openvino,mixed,tvm")
    p.add_argument("--pattern", default=None, help="regex on test names")
    p.add_argument("--tvm-every", type=int, default=4, help="TVM runs every Nth case (its compiles take seconds)")
    p.add_argument("--tvm-no-light", action="store_true",
                   help="TVM skips the light models (untuned TVM runs an Inception or a VGG for minutes)")
    p.add_argument("--no-light", action="store_true", help="skip the light models (every plan)")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--fresh", action="store_true", help="forget the plans of earlier runs (the .json beside --out)")
    args = p.parse_args(argv)
    command = "python -m benchmarks.onnx_conformance " + " ".join(argv if argv is not None else sys.argv[1:])
    # one entry per plan in a JSON file beside the table: a run of some plans replaces only theirs
    store = Path(args.out).with_suffix(".json")
    saved: dict[str, dict] = json.loads(store.read_text()) if store.is_file() and not args.fresh else {}
    results = []
    for plan in [x.strip() for x in args.plans.split(",") if x.strip()]:
        from collage.backends import unavailable_reason

        missing = [n for n in parse_plan(plan)[1] if unavailable_reason(n)]
        if missing:
            print(f"skipping plan {plan}: {missing} unavailable", file=sys.stderr)
            continue
        no_light = args.no_light or (plan == "tvm" and args.tvm_no_light)
        categories = tuple(c for c in CATEGORIES if not (no_light and c == "RealModel"))
        results.append(run_plan(plan, args.pattern, args.tvm_every if plan == "tvm" else 1, categories))
        results[-1]["command"] = command.strip()
        saved[plan] = json.loads(json.dumps(results[-1]))  # Counters as dicts
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(saved, indent=1) + "\n")
        order = [p for p in ("onnxruntime", "openvino", "tvm", "mixed") if p in saved] + \
            [p for p in saved if p not in ("onnxruntime", "openvino", "tvm", "mixed")]
        merged = [{**saved[p], "counts": collections.Counter(saved[p]["counts"]),
                   "reasons": collections.Counter(saved[p]["reasons"])} for p in order]
        Path(args.out).write_text(render(merged, command.strip()))  # after each plan: a long run keeps its part
        c = results[-1]["counts"]
        print(f"{plan}: {dict(c)} in {results[-1]['seconds']:.0f}s", file=sys.stderr, flush=True)
    return 1 if any(r["counts"]["wrong"] or r["counts"]["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
