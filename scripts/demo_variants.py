"""Which lower-precision backend variants ``make demo`` adds to the fp32 ones on this CPU.

Reads ``collage backends --json`` on stdin and prints a comma-separated list (empty when none is available):
- a CPU with bf16 (AMX / avx512_bf16: ``openvino-bf16`` available): the bf16 variants and the int8 ones it has
  (``openvino-bf16``, ``onnxruntime-int8``, ``openvino-int8``, ``openvino-int8-bf16``);
- otherwise the int8 variants it has (``onnxruntime-int8``, ``openvino-int8``);
- otherwise nothing: the demo then tunes fp32 only and says why.
fp16 is left out: OpenVINO's fp16 is slower than its fp32 on convolutions (README, precision paragraphs).

Usage: ``collage backends --json | python scripts/demo_variants.py``.
"""
from __future__ import annotations

import json
import sys
from typing import Any

BF16 = ("openvino-bf16", "openvino-int8-bf16")
INT8 = ("onnxruntime-int8", "openvino-int8")
ORDER = ("openvino-bf16", "onnxruntime-int8", "openvino-int8", "openvino-int8-bf16")


def demo_variants(statuses: list[dict[str, Any]]) -> list[str]:
    """The variants to add, in ORDER, from the records of ``collage backends --json``."""
    available = {s["name"] for s in statuses if s.get("available") and s.get("device", "cpu") == "cpu"}
    wanted = set(INT8)
    if "openvino-bf16" in available:
        wanted |= set(BF16)
    return [name for name in ORDER if name in wanted and name in available]


def main() -> int:
    try:
        statuses = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        print(f"demo_variants: stdin is not `collage backends --json` output ({e})", file=sys.stderr)
        return 2
    print(",".join(demo_variants(statuses)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
