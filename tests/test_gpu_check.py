"""benchmarks/gpu_check.sh and its Python parts, as far as a CPU can check them: the script parses, every test file
and benchmark script it runs exists, it stays within its time (CHECK_S) and stops saying why when no GPU backend is
there; the torch anchors run on the CPU with a tiny model; the results page puts the plans beside the anchors and
checks issue 41's goal per model."""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def test_the_script_parses():
    assert shutil.which("bash")
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_what_the_script_runs_exists():
    text = SCRIPT.read_text()
    paths = set(re.findall(r"(?<![\w/])((?:tests|benchmarks)/[\w/]+\.py)", text))
    assert {"benchmarks/torch_anchors.py", "benchmarks/cuda_results.py", "tests/backends/test_backends_gpu.py"} <= paths
    missing = [p for p in sorted(paths) if not (ROOT / p).is_file()]
    assert not missing, f"gpu_check.sh names files that do not exist: {missing}"


@pytest.mark.slow  # the script's first steps on this machine: ~16 s
def test_without_a_gpu_it_stops_in_time_and_says_why(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CHECK_S": "30", "PYTHON": sys.executable}
    got = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 1
    assert "no GPU backend is available" in got.stdout
    assert "=== 2. GPU tests" in got.stdout


def test_torch_anchors_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "anchors"
    subprocess.run([sys.executable, "benchmarks/torch_anchors.py", "--models", "tiny-resnet", "--device", "cpu",
                    "--repeat", "3", "--warmup", "1", "--no-compile", "--out", str(out)], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    with open(out.with_suffix(".csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["anchor"] for r in rows] == ["eager_fp32", "eager_bf16"]  # the CUDA-only ones are left out on a CPU
    assert all(float(r["ms"]) > 0 and not r["error"] for r in rows)
    assert "| tiny-resnet |" in out.with_suffix(".md").read_text()


def test_results_page_checks_the_goal(tmp_path):
    from benchmarks import cuda_results

    plans = tmp_path / "plans.jsonl"
    rows = [{"model": "resnet50", "tag": "fp32", "plan_backends": "torch", "device_ms": 2.3, "predicted_ms": 2.2,
             "verified_ms": 2.4},
            {"model": "resnet50", "tag": "cos=0.999,rel=0.01", "plan_backends": "torch-bf16+torch", "device_ms": 1.0,
             "predicted_ms": 1.05, "verified_ms": 1.0},
            {"model": "bert-base", "tag": "fp32", "plan_backends": "torch", "device_ms": 4.0}]
    plans.write_text("".join(json.dumps(r) + "\n" for r in rows))
    anchors = tmp_path / "anchors.csv"
    anchors.write_text("model,anchor,ms,compile_s,error,device\nresnet50,eager_fp32,3.6,,,cuda\n"
                       "resnet50,graph_fp32,2.2,,,cuda\nbert-base,graph_fp32,3.23,,,cuda\n")
    args = argparse.Namespace(plans=str(plans), anchors=str(anchors), bench=None, out=str(tmp_path / "results"))
    stem = cuda_results.merge(args)
    md = stem.with_suffix(".md").read_text()
    # resnet50: 2.3 <= 1.05 * 2.2 -> within 5%; 3.6 / 1.0 -> 3.60x; the bf16 mix predicted 1.05x its measurement
    assert "| resnet50 | 2.3 | 2.2 | yes | 1.0 | 3.6 | 3.60x | torch-bf16+torch | 1.05 |" in md
    assert "| bert-base | 4.0 | 3.23 | no | - | - | - | none | - |" in md
    assert stem.with_suffix(".csv").read_text().count("anchor,") == 3


def test_a_plan_row_of_an_artifact(tmp_path):
    pytest.importorskip("torch")
    from benchmarks import cuda_results
    from collage import zoo
    from collage.graph.ir import Graph
    from collage.plan import Partition, Plan
    from collage.tuner.export import export

    graph = Graph.load(zoo.model_path("tiny-resnet"))
    k = len(graph) // 2
    plan = Plan([Partition(tuple(range(k)), "torch"), Partition(tuple(range(k, len(graph))), "onnxruntime")])
    out = export(graph, plan, tmp_path / "art", backend_options={"torch": {"device": "cpu"}})
    row = cuda_results.plan_row(Path(out), "fp32", repeat=3)
    assert row["plan_backends"] == "torch+onnxruntime" and row["partitions"] == 2 and row["device_ms"] > 0
