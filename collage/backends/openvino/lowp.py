"""Lower-precision backend variants (``openvino-bf16``, ``openvino-fp16``): OpenVINO's CPU plugin with an
``INFERENCE_PRECISION_HINT``, available where the CPU runs that precision natively. Registered in
``collage.backends`` (as ``collage.tuner.precision.tuner:OpenVINOBF16Backend``, re-exported there); used only under an
accuracy budget (:mod:`collage.tuner.precision.tuner`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from collage.backends.openvino.backend import OpenVINOBackend, core

#: registry names of the lower-precision variants and the precision each runs
VARIANTS = {"openvino-bf16": "bf16", "openvino-fp16": "fp16"}


# ---------------------------------------------------------------------- backend variants
def native_support(kind: str) -> str | None:
    """None when OpenVINO's CPU plugin runs ``kind`` ("BF16"/"FP16") natively here, else why not."""
    try:
        caps = core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception as e:  # noqa: BLE001 - the runtime's message is the answer
        return f"cannot ask OpenVINO for the CPU's capabilities: {e}"
    if kind not in caps:
        return (f"this CPU has no native {kind.lower()} support (OpenVINO OPTIMIZATION_CAPABILITIES: "
                f"{', '.join(caps)}); OpenVINO would silently compute in f32")
    return None


class _OpenVINOLowPrecision(OpenVINOBackend):
    """OpenVINO CPU in a lower precision (``kind``), available where the CPU runs it natively; a
    lower-precision variant, used only under --accuracy."""

    kind = ""  # OpenVINO's capability name: "BF16" / "FP16"

    def __init__(self, threads: int | None = None, precision: str | None = None, pinning: bool = False,
                 hint: str = "LATENCY") -> None:
        super().__init__(threads=threads, precision=precision or self.kind.lower(), pinning=pinning, hint=hint)

    def available(self) -> str | None:
        return super().available() or native_support(self.kind)


class OpenVINOBF16Backend(_OpenVINOLowPrecision):
    """OpenVINO CPU in bf16 (AMX / avx512_bf16)."""

    name = "openvino-bf16"
    kind = "BF16"


class OpenVINOFP16Backend(_OpenVINOLowPrecision):
    """OpenVINO CPU in fp16 (avx512_fp16 / AMX-FP16)."""

    name = "openvino-fp16"
    kind = "FP16"


def cpu_bf16_reason() -> str | None:
    """None when this CPU runs bf16 natively (/proc/cpuinfo flags or OpenVINO), else why not (for test skips)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
        if "avx512_bf16" in flags or "amx_bf16" in flags:
            return None
    except OSError:
        pass
    return native_support("BF16")


def precision_of(backend: Any) -> str:
    return str(getattr(backend, "precision", "fp32") or "fp32")
