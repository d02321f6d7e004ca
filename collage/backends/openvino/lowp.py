"""Lower-precision backend variants (``openvino-bf16``, ``openvino-fp16``): OpenVINO's CPU plugin with an
``INFERENCE_PRECISION_HINT``, available where the CPU runs that precision natively. Registered in
``collage.backends`` (as ``collage.tuner.precision.tuner:OpenVINOBF16Backend``, re-exported there); used only under an
accuracy budget (:mod:`collage.tuner.precision.tuner`)."""
from __future__ import annotations

from typing import Any

from collage.backends.openvino.backend import OpenVINOBackend, core
from collage.util import cpu_flags

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
    if (cpu_flags() or set()) & {"avx512_bf16", "amx_bf16"}:
        return None
    return native_support("BF16")


def precision_of(backend: Any) -> str:
    return str(getattr(backend, "precision", "fp32") or "fp32")


class OpenVINOInt8Backend(OpenVINOBackend):
    """OpenVINO CPU on a candidate quantized to QDQ with the model's calibrated ranges
    (:mod:`collage.backends.qdq`): its low-precision transformations run the quantized ops in int8
    (AMX-INT8 / VNNI), the rest in ``rest`` precision (f32 here; ``openvino-int8-bf16``: bf16, OpenVINO's
    default on AMX). A lower-precision variant, used only under --accuracy."""

    name = "openvino-int8"
    rest = "fp32"

    def __init__(self, threads: int | None = None, precision: str | None = None, pinning: bool = False,
                 hint: str = "LATENCY", ops: str = "core", ranges: str | None = None, weight_bits: int = 8) -> None:
        from collage.backends import qdq

        super().__init__(threads=threads, precision=self.rest, pinning=pinning, hint=hint)
        qdq.quantizable_ops(ops)  # validates
        self.precision = "int8" if self.rest == "fp32" else f"int8+{self.rest}"
        self.ops = ops
        self.ranges = ranges  # a file; not part of the cost key (module doc of collage.backends.qdq)
        self.weight_bits = qdq.check_weight_bits(weight_bits)

    def available(self) -> str | None:
        from collage.backends import qdq

        why = super().available() or qdq.cpu_int8_reason()
        return why or (native_support(self.rest.upper()) if self.rest != "fp32" else None)

    def version(self) -> str:
        from collage.backends import qdq

        return super().version() + qdq.variant_tag(self.ops, self.weight_bits)

    @property
    def options(self) -> dict[str, Any]:
        from collage.backends import qdq

        return {"threads": self.threads, "hint": self.hint, "pinning": self.pinning, "ops": self.ops,
                "precision": self.precision, **qdq.weight_option(self.weight_bits)}

    def config(self) -> dict[str, str]:
        saved, self.precision = self.precision, self.rest
        try:
            return super().config()
        finally:
            self.precision = saved

    def quantized(self, model: Any) -> Any:
        from collage.backends import qdq

        return qdq.quantize_with(model, self.ranges, self.ops, self.name, self.weight_bits)

    def compile(self, model: Any) -> Any:
        return super().compile(self.quantized(model))

    def compile_linked(self, models: Any, plain: Any = ()) -> list[Any]:
        return [self.compile(m) for m in models]  # int8 partitions hand over plain float tensors


class OpenVINOInt8BF16Backend(OpenVINOInt8Backend):
    """``openvino-int8`` with bf16 (AMX) for the ops left in float."""

    name = "openvino-int8-bf16"
    rest = "bf16"


#: the int8 variants' precisions (report)
INT8_VARIANTS = {"openvino-int8": "int8", "openvino-int8-bf16": "int8+bf16", "onnxruntime-int8": "int8"}
