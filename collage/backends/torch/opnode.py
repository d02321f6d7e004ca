"""What a builder of the torch op table (:mod:`collage.backends.torch.ops`) works with.

:class:`OpNode` is what a builder sees of one ONNX node (attributes, the inputs known at build time,
static input shapes, the opset); :class:`OpUnsupported` is how it refuses a node, with the reason;
:func:`attributes` reads a node's attributes for an ``OpNode``; :func:`torch_dtype` maps ONNX element
types to torch dtypes. :func:`spatial` and :func:`torch_pad` are the ONNX convolution / pooling
attribute rules (strides, dilations, ``pads`` and ``auto_pad``) in torch's terms, shared by the builders
of Conv and the pools.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

import torch

Fn = Callable[..., tuple]


class OpUnsupported(Exception):
    """A node the table cannot take (the message says which attribute or input is the problem)."""


@dataclass
class OpNode:
    """What a builder sees of one ONNX node."""

    op: str
    name: str
    attrs: dict[str, Any]
    static: list[np.ndarray | None]
    in_shapes: list[tuple[int, ...] | None]
    n_outputs: int
    opset: int
    extra: dict[str, Any] = field(default_factory=dict)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i`` as a numpy array if known at build time; None if the input is absent."""
        if i >= len(self.static) or (self.static[i] is None and self.in_shapes[i] is None):
            return None
        if self.static[i] is None:
            raise OpUnsupported(f"{self.op}: {what} (input {i}) must be a constant, it is computed at run time")
        return self.static[i]

    def rank(self, i: int = 0) -> int:
        shape = self.in_shapes[i] if i < len(self.in_shapes) else None
        if shape is None:
            raise OpUnsupported(f"{self.op}: the rank of input {i} is unknown (no static shape)")
        return len(shape)


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


_ONNX_TO_TORCH = {
    onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT8: torch.int8, onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32, onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.BOOL: torch.bool,
}


def torch_dtype(onnx_type: int) -> torch.dtype:
    try:
        return _ONNX_TO_TORCH[onnx_type]
    except KeyError:
        name = onnx.TensorProto.DataType.Name(onnx_type)
        raise OpUnsupported(f"ONNX element type {name} has no torch dtype here") from None


def spatial(node: OpNode, kernel: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int] | None]:
    """strides, dilations, symmetric pads (or the full ONNX pads when asymmetric -> explicit F.pad)."""
    n = len(kernel)
    auto_pad = node.attr("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    strides = list(node.attr("strides", [1] * n))
    dilations = list(node.attr("dilations", [1] * n))
    if auto_pad in ("NOTSET", "VALID"):
        pads = [0] * (2 * n) if auto_pad == "VALID" else list(node.attr("pads", [0] * (2 * n)))
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = node.in_shapes[0]
        if shape is None:
            raise OpUnsupported(f"{node.op}: auto_pad={auto_pad} needs the input's static shape")
        pads = [0] * (2 * n)
        for d in range(n):
            size = shape[2 + d]
            out = math.ceil(size / strides[d])
            total = max(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - size)
            small, big = total // 2, total - total // 2
            pads[d], pads[d + n] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    else:
        raise OpUnsupported(f"{node.op}: auto_pad={auto_pad!r} is not handled")
    begin, end = pads[:n], pads[n:]
    if begin == end:
        return strides, dilations, begin, None
    return strides, dilations, [0] * n, pads


def torch_pad(pads: list[int]) -> list[int]:
    """ONNX [b1, b2, ..., e1, e2, ...] -> F.pad's (last dim first) [b_last, e_last, ...]."""
    n = len(pads) // 2
    out: list[int] = []
    for d in reversed(range(n)):
        out += [pads[d], pads[d + n]]
    return out
