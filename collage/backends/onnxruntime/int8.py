"""``onnxruntime-int8``: ONNX Runtime's CPU provider on a candidate quantized to QDQ with the ranges
calibrated once for the model (:mod:`collage.backends.qdq`). ORT fuses the QDQ pairs into its int8
kernels (QLinearConv, MatMulInteger: AMX-INT8, VNNI or AVX2's 16-bit multiply-adds, whichever the CPU has). A
lower-precision variant: used only under an accuracy budget; available where the CPU has int8 multiply-add
instructions (AVX2 and later), which does not make it faster: on an AVX2-only AMD EPYC (Zen 1) it was slower than
ONNX Runtime fp32 on 5 of 8 zoo models (results/demo/avx2-native.md)."""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import onnx

from collage.backends import qdq
from collage.backends.onnxruntime.backend import OnnxRuntimeBackend, OrtCompiled


class OnnxRuntimeInt8Backend(OnnxRuntimeBackend):
    """ONNX Runtime CPU, int8 QDQ (weights int8 per channel, activations uint8 with calibrated ranges)."""

    name = "onnxruntime-int8"

    def __init__(self, threads: int | None = None, spin: bool = False, shared_pool: bool = True,
                 opt_level: str = "all", ops: str = "core", ranges: str | None = None, weight_bits: int = 8,
                 **_: Any) -> None:  # precision (an artifact's recorded setting): always int8, taken by **_
        super().__init__(threads=threads, spin=spin, shared_pool=shared_pool, opt_level=opt_level,
                         residual_fusion=False)
        qdq.quantizable_ops(ops)  # validates
        self.precision = "int8"
        self.ops = ops
        self.ranges = ranges  # a file; not part of the cost key (module doc of collage.backends.qdq)
        self.weight_bits = qdq.check_weight_bits(weight_bits)

    def available(self) -> str | None:
        return super().available() or qdq.cpu_int8_reason()

    def version(self) -> str:
        return super().version() + qdq.variant_tag(self.ops, self.weight_bits)

    @property
    def options(self) -> dict[str, Any]:
        return {**super().options, "ops": self.ops, **qdq.weight_option(self.weight_bits)}

    def quantized(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return qdq.quantize_with(model, self.ranges, self.ops, self.name, self.weight_bits)

    def compile(self, model: onnx.ModelProto) -> OrtCompiled:
        return super().compile(self.quantized(model))

    def compile_linked(self, models: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> list[OrtCompiled]:
        return [self.compile(m) for m in models]  # int8 partitions hand over plain float tensors
