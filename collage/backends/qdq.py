"""INT8 by QDQ with ranges calibrated once per model: shared by ``onnxruntime-int8`` and ``openvino-int8``.

**Calibration** (:func:`calibrate`, called by the precision tuner once per model and calibration set):
the fp32 model runs on ONNX Runtime over the calibration samples with every float intermediate tensor
exposed (``onnxruntime.quantization``'s calibrator); each tensor gets its range (min/max: chosen by
measured error against percentile and entropy, results/precision/int8-calibration.md). ORT's per-node range
adjustments (a Relu/Clip's input takes its output's range, Softmax outputs ``[0, 1]``) are then applied
ONCE, on the whole model (:func:`adjust`), so that they do not depend on where a candidate was cut.

**Quantizing a candidate** (:func:`quantize`): ``onnxruntime.quantization``'s ``QDQQuantizer`` (what
``quantize_static(quant_format=QDQ)`` runs after its calibration) is given the recorded ranges of the
tensors in the cut-out model, with its own range adjustment switched off; weights are int8
per-channel (symmetric; per-tensor in a model below opset 13, whose DequantizeLinear has no ``axis``: ORT's
quantizer writes one anyway and both runtimes then refuse the model), activations uint8 (asymmetric, U8S8:
ONNX Runtime's x86 choice). A boundary
tensor therefore gets the same scale and zero point in the partition that produces it and in the one
that reads it, and Q(DQ(Q(x))) = Q(x): two adjacent int8 partitions compute what one does. Quantized
ops (``ops``): ``"core"`` = Conv, ConvTranspose, MatMul, Gemm (the int8 kernels; default: residual Adds
and attention's Softmax stay float: closer to fp32 on resnet50, results/precision/int8-calibration.md), or ``"all"``
(every op ORT's QDQ quantizer knows).

**Where the ranges come from at compile time**: the backend's ``ranges`` option (a JSON file written by
:func:`save_ranges`). The precision tuner sets it for the model being tuned in the tune's backend options,
which reach every place a backend is built by name (measurement worker processes, export). The ranges
are not part of the cost key (``options`` leaves them out): an int8 kernel's latency does not depend on
scale values. A tensor without a recorded range is left in float.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from collage.errors import CompileError
from collage.util import cpu_flags, int8_kernels

log = logging.getLogger(__name__)

#: op sets a variant may quantize
CORE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
#: version of the QDQ recipe (part of the variants' version strings: cost, support and error keys).
#: qdq3: weights per tensor below opset 13 (qdq2 wrote a per-channel DequantizeLinear there: refused)
RECIPE = "qdq3"
#: weight bits a variant quantizes with: 8, or 7 (ONNX Runtime's ``reduce_range``: symmetric weights in [-64, 64])
#: where the CPU's int8 kernels are AVX2's, which multiply-add uint8 x int8 pairs into 16 bits and saturate past 32767
#: (255 x 127 x 2 does; 255 x 64 x 2 = 32640 does not). Measured on an AVX2-only Zen 1: ONNX Runtime int8 on a Conv
#: at opset 11 rel 0.398 -> 0.016, tiny-bert 0.084 -> 0.017 (OpenVINO's 0.084 -> 0.017 too), tiny-resnet 0.019 ->
#: 0.011 (tests/tuner/test_precision_int8.py). The tune picks 7 on such a CPU (``tuned_weight_bits``, in
#: collage.tuner.precision.tuner.prepare_int8)
WEIGHT_BITS = (8, 7)
#: the first opset whose DequantizeLinear takes ``axis`` (per-channel weights)
PER_CHANNEL_OPSET = 13
#: calibration methods (onnxruntime.quantization.CalibrationMethod names)
METHODS = ("minmax", "percentile", "entropy")
DEFAULT_METHOD = "minmax"

Ranges = dict[str, tuple[float, float]]


def cpu_int8_reason() -> str | None:
    """None when this CPU runs int8 kernels natively: AVX2 (ONNX Runtime's and OpenVINO's u8s8 paths, multiply-add
    to 16 bits) and better, AVX512-VNNI / AVX-VNNI / AMX-INT8 (dot products to 32 bits); else why not. Whether an
    int8 variant is faster than fp32 on a given CPU is measured like any candidate, and its error is judged against
    the accuracy budget (the AVX2 path can saturate where VNNI does not: that is an error the budget sees)."""
    if cpu_flags() is None:
        return "cannot read /proc/cpuinfo to look for AVX2/VNNI/AMX-INT8; not offering int8"
    if int8_kernels() is not None:
        return None
    return ("this CPU has no int8 multiply-add instructions (no avx2, avx_vnni, avx512_vnni or amx_int8 in "
            "/proc/cpuinfo): int8 kernels would emulate them and lose to fp32")


def quantizable_ops(ops: str) -> list[str]:
    if ops == "core":
        return list(CORE_OPS)
    if ops == "all":
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

        return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
    raise CompileError(f"int8: ops must be 'core' or 'all', not {ops!r}")


def has_quantizable_op(ops: Iterable[str], which: str = "core") -> bool:
    """Whether any of the op types ``ops`` is one the int8 variants quantize (else int8 only adds QDQ)."""
    return bool(set(ops) & set(quantizable_ops(which) if which == "all" else CORE_OPS))


# ---------------------------------------------------------------------- calibration
def calibrate(model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]], method: str = DEFAULT_METHOD,
              ops: str = "core") -> Ranges:
    """Every float tensor's range over ``samples`` (fp32 ONNX Runtime), adjusted once on the whole model."""
    from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator

    names = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}
    if method not in names:
        raise CompileError(f"int8 calibration method must be one of {list(names)}, not {method!r}")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([dict(s) for s in samples])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory(prefix="collage-calib-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, str(path), save_as_external_data=model.ByteSize() > 1_800_000_000)
        calibrator = create_calibrator(path, None, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=getattr(CalibrationMethod, names[method]))
        calibrator.collect_data(Reader())
        data = calibrator.compute_data()
        del calibrator
    ranges = {name: (float(np.asarray(td.range_value[0]).min()), float(np.asarray(td.range_value[1]).max()))
              for name, td in data.data.items()}
    return adjust(model, ranges, ops)


def _tensors_data(ranges: Mapping[str, tuple[float, float]]) -> Any:
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    return TensorsData(CalibrationMethod.MinMax,
                       {k: TensorData(lowest=np.float32(lo), highest=np.float32(hi)) for k, (lo, hi) in ranges.items()})


def adjust(model: onnx.ModelProto, ranges: Ranges, ops: str = "core") -> Ranges:
    """ORT's per-node range adjustments (Relu/Clip inputs, Softmax outputs), applied once on the whole model."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer

    q = QDQQuantizer(onnx.ModelProto.FromString(model.SerializeToString()), True, False, QuantType.QInt8,
                     QuantType.QUInt8, _tensors_data(ranges), None, None, quantizable_ops(ops), {})
    q.adjust_tensor_ranges()
    return {k: (float(td.range_value[0]), float(td.range_value[1])) for k, td in q.tensors_range.data.items()}


def save_ranges(ranges: Mapping[str, tuple[float, float]], path: str | Path,
                info: Mapping[str, Any] | None = None) -> Path:
    """Write ``ranges`` (and ``info``: method, calibration) as JSON, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump({"info": dict(info or {}), "ranges": {k: [lo, hi] for k, (lo, hi) in ranges.items()}}, f)
    os.replace(tmp, path)
    return path


_loaded: dict[tuple[str, float], Ranges] = {}


def load_ranges(path: str | Path) -> Ranges:
    path = Path(path)
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError as e:
        raise CompileError(f"int8: ranges file {path} cannot be read ({e})") from None
    if key not in _loaded:
        data = json.loads(path.read_text())
        _loaded[key] = {k: (float(v[0]), float(v[1])) for k, v in data["ranges"].items()}
    return _loaded[key]


# ---------------------------------------------------------------------- quantizing a candidate
def quantize(model: onnx.ModelProto, ranges: Mapping[str, tuple[float, float]], ops: str = "core",
             weight_bits: int = 8) -> onnx.ModelProto:
    """``model`` (a cut-out candidate, original tensor names) in QDQ form with the recorded ranges (module doc),
    weights in ``weight_bits`` (``WEIGHT_BITS``; 7: every int8 weight checked within [-64, 64] after, so a quantizer
    that ignored ``reduce_range`` is a CompileError, never a -w7 key on 8-bit weights)."""
    check_weight_bits(weight_bits)
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer

    class _Fixed(QDQQuantizer):
        def adjust_tensor_ranges(self) -> None:  # done once on the whole model at calibration
            pass

    names = {t for node in model.graph.node for t in (*node.input, *node.output)}
    names.update(i.name for i in model.graph.input)
    present = {k: v for k, v in ranges.items() if k in names}
    missing = {t for node in model.graph.node if node.op_type in quantizable_ops(ops) for t in node.input[:1]
               if t and t not in ranges and t not in {i.name for i in model.graph.initializer}}
    if missing:
        log.debug("int8: %d activation(s) without a recorded range stay float: %s", len(missing), sorted(missing)[:5])
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    per_channel = default_opset(model) >= PER_CHANNEL_OPSET
    try:
        q = _Fixed(copy, per_channel, weight_bits == 7, QuantType.QInt8, QuantType.QUInt8, _tensors_data(present),
                   None, None, quantizable_ops(ops), {"ActivationSymmetric": False, "WeightSymmetric": True})
        q.quantize_model()
        out = q.model.model
    except Exception as e:  # noqa: BLE001 - the quantizer's message is the answer
        raise CompileError(f"int8: cannot quantize model {model.graph.name!r}: {type(e).__name__}: {e}") from e
    if weight_bits == 7:
        _check_7_bit_weights(out)
    return out


def _check_7_bit_weights(model: onnx.ModelProto) -> None:
    """CompileError naming a DequantizeLinear weight (an int8 initializer) outside [-64, 64]."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        t = inits.get(node.input[0]) if node.op_type == "DequantizeLinear" and node.input else None
        if t is not None and t.data_type == onnx.TensorProto.INT8:
            peak = int(np.abs(numpy_helper.to_array(t).astype(np.int16)).max(initial=0))
            if peak > 64:
                raise CompileError(f"int8: weight {t.name!r} quantized to 7 bits reaches {peak} (> 64): this "
                                   "onnxruntime's quantizer ignored reduce_range; upgrade onnxruntime")


def tuned_weight_bits(backend: object) -> int:
    """The weight bits a tune quantizes an int8 variant with on this CPU: 7 where its int8 kernels are AVX2's
    (``WEIGHT_BITS``), else 8."""
    kernels = getattr(backend, "int8_kernels", None)
    return 7 if callable(kernels) and kernels() == "avx2" else 8


def default_opset(model: onnx.ModelProto) -> int:
    """The model's ``ai.onnx`` opset version."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def quantize_with(model: onnx.ModelProto, explicit: str | None, ops: str, who: str,
                  weight_bits: int = 8) -> onnx.ModelProto:
    """``quantize`` with the ranges in the file ``explicit``; CompileError saying how to get them when none."""
    if not explicit:
        raise CompileError(f"{who}: no calibrated int8 ranges: pass the backend option ranges=FILE "
                           "(collage.backends.qdq.save_ranges); collage tune does this under --accuracy")
    return quantize(model, load_ranges(explicit), ops, weight_bits)


def check_weight_bits(bits: int) -> int:
    """``bits`` when it is one of ``WEIGHT_BITS``, else ValueError naming them."""
    if bits not in WEIGHT_BITS:
        raise ValueError(f"weight_bits must be one of {list(WEIGHT_BITS)}, not {bits!r}")
    return int(bits)


def variant_tag(ops: str, bits: int) -> str:
    """What an int8 variant adds to its runtime's version string (its cost, support and error keys): the recipe, the
    op set and, for 7-bit weights only, ``-w7`` (every key from before 7 existed stays as it was)."""
    return f"-{RECIPE}-{ops}" + ("" if bits == 8 else f"-w{bits}")


def weight_option(bits: int) -> dict[str, int]:
    """An int8 variant's ``weight_bits`` as a recorded option: ``{}`` for 8 (the default, as before 7 existed)."""
    return {} if bits == 8 else {"weight_bits": bits}
