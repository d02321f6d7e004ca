"""Which lower-precision backend variants ``make demo`` adds to the fp32 ones on this CPU.

Reads ``collage backends --json`` on stdin and prints a comma-separated list (empty when none is available):
- a CPU with bf16 (AMX / avx512_bf16: ``openvino-bf16`` available): ``openvino-bf16`` and ``openvino-int8-bf16``
  (OpenVINO int8 with its non-quantized ops in bf16: faster than ``openvino-int8`` on all 11 zoo models where
  both compile in results/precision/precision.md, and ONNX Runtime's int8 slower than OpenVINO's on every one);
- otherwise the int8 variants it has (``onnxruntime-int8``, ``openvino-int8``);
- otherwise nothing: the demo then tunes fp32 only and says why.
Each backend in the tune costs its whole-model measurements (outside --budget; about a minute each for the
slow ones on a loaded 2-core machine), so the demo takes the fastest of each kind to stay under 5 minutes.
fp16 is left out: OpenVINO's fp16 is slower than its fp32 on convolutions (README, precision paragraphs).

Usage: ``collage backends --json | python scripts/demo_variants.py``.
"""
from __future__ import annotations

import json
import sys
from typing import Any

BF16 = ("openvino-bf16", "openvino-int8-bf16")
INT8 = ("onnxruntime-int8", "openvino-int8")


def demo_variants(statuses: list[dict[str, Any]]) -> list[str]:
    """The variants to add, from the records of ``collage backends --json``."""
    available = {s["name"] for s in statuses if s.get("available") and s.get("device", "cpu") == "cpu"}
    wanted = BF16 if "openvino-bf16" in available else INT8
    return [name for name in wanted if name in available]


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
