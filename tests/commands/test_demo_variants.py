"""``make demo``'s choice of lower-precision variants (scripts/demo_variants.py, issue 40 item 3): bf16 and int8
on a CPU with bf16, int8 only on a CPU with int8 but no bf16, nothing (fp32 only) on a CPU with neither."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_variants.py"
_spec = importlib.util.spec_from_file_location("demo_variants", SCRIPT)
assert _spec and _spec.loader
demo_variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_variants)

LOWP = ("openvino-bf16", "openvino-fp16", "onnxruntime-int8", "openvino-int8", "openvino-int8-bf16")


def _statuses(available: set[str]) -> list[dict[str, object]]:
    """`collage backends --json` records: fp32 CPU backends, a CUDA one, and the variants (available or not)."""
    rows: list[dict[str, object]] = [
        {"name": "onnxruntime", "device": "cpu", "available": True},
        {"name": "openvino", "device": "cpu", "available": True},
        {"name": "tensorrt", "device": "cuda", "available": False},
    ]
    return rows + [{"name": n, "device": "cpu", "available": n in available} for n in LOWP]


def test_bf16_cpu_gets_bf16_and_int8_bf16() -> None:
    """AMX / avx512_bf16 (this machine's Zen 5, a Sapphire Rapids Xeon): OpenVINO bf16 and int8 with bf16 for the
    rest, the fastest of each kind (results/precision/precision.md); no fp16, no plain int8 (each backend costs
    minutes)."""
    got = demo_variants.demo_variants(_statuses(set(LOWP)))
    assert got == ["openvino-bf16", "openvino-int8-bf16"]


def test_int8_only_cpu_gets_int8() -> None:
    """int8 but no bf16 (openvino-int8-bf16 is then unavailable too): the two int8 variants."""
    got = demo_variants.demo_variants(_statuses({"onnxruntime-int8", "openvino-int8"}))
    assert got == ["onnxruntime-int8", "openvino-int8"]


def test_neither_gets_nothing() -> None:
    assert demo_variants.demo_variants(_statuses(set())) == []


def test_an_unavailable_variant_is_never_chosen() -> None:
    """bf16 available but no int8 (no VNNI / AMX-INT8): bf16 alone; int8 without ONNX Runtime's: OpenVINO's."""
    assert demo_variants.demo_variants(_statuses({"openvino-bf16"})) == ["openvino-bf16"]
    assert demo_variants.demo_variants(_statuses({"openvino-int8"})) == ["openvino-int8"]


def test_script_on_this_machines_backends() -> None:
    """The Makefile's pipe, for real: `collage backends --json | python scripts/demo_variants.py` prints the
    variants this machine has, each one `collage backends` calls available."""
    listing = subprocess.run([sys.executable, "-m", "collage.cli", "backends", "--json"], capture_output=True,
                             text=True, timeout=120, check=True).stdout
    out = subprocess.run([sys.executable, str(SCRIPT)], input=listing, capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    available = {s["name"] for s in json.loads(listing) if s["available"]}
    chosen = out.split(",") if out else []
    assert set(chosen) <= available
    assert chosen == demo_variants.demo_variants(json.loads(listing))


def test_script_on_bad_input_is_one_line_exit_2() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], input="not json", capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
