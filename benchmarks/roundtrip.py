"""Round trip of tuned artifacts: `collage run` in a fresh process vs the ONNX Runtime reference.

    python -m benchmarks.roundtrip ART_ROOT [--out results/bench/roundtrip.md]

For every artifact directory under ART_ROOT (as `collage bench --artifacts ART_ROOT` leaves them),
writes seeded inputs (collage.zoo.catalog.random_inputs) to .npy files, runs `python -m collage.cli run` on
them in a fresh process, and compares every output with a whole-model ONNX Runtime fp32 run of the
model the artifact was tuned from.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from collage import zoo
from collage.util import markdown_table, source_commit

from benchmarks._common import write_report


def check(art: Path, seed: int = 7) -> dict:
    import onnxruntime as ort

    manifest = json.loads((art / "manifest.json").read_text())
    name = art.name
    graph = zoo.load_graph(f"zoo:{name}")
    feeds = zoo.random_inputs(graph, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for k, (tensor, arr) in enumerate(feeds.items()):
            path = Path(tmp) / f"in{k}.npy"
            np.save(path, arr)
            args += ["--input", f"{tensor}={path}"]
        out = Path(tmp) / "out"
        proc = subprocess.run([sys.executable, "-m", "collage.cli", "run", str(art), *args, "--output", str(out)],
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            return {"model": name, "ok": False, "error": proc.stderr.strip().splitlines()[-1:]}
        sess = ort.InferenceSession(graph.model.SerializeToString(), providers=["CPUExecutionProvider"])
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        worst = 0.0
        ok = True
        for tensor, want in ref.items():
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in tensor)
            got = np.load(out / f"{safe}.npy")
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
            ok &= bool(np.allclose(got, want, atol=1e-4, rtol=1e-3))
    parts = manifest["partitions"]
    return {"model": name, "partitions": len(parts), "backends": "+".join(sorted({p["backend"] for p in parts})),
            "max_abs_err": worst, "ok": ok}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", help="folder holding one artifact directory per zoo model")
    ap.add_argument("--out", default="results/bench/roundtrip.md")
    args = ap.parse_args(argv)
    rows = [check(d) for d in sorted(Path(args.root).iterdir()) if (d / "manifest.json").exists()]
    text = ("# Round trip: tuned artifact run by `collage run` in a fresh process vs ONNX Runtime fp32\n\n"
            f"Command: `python -m benchmarks.roundtrip {args.root}` at commit {source_commit()} (artifacts from "
            "`collage bench --artifacts`).\nTolerance atol 1e-4, rtol 1e-3; seeded inputs from "
            "collage.zoo.catalog.random_inputs(seed=7).\n\n"
            + markdown_table(rows))
    write_report(args.out, text.split("\n"))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
