"""ONNX ops as PyTorch calls: the op table of the ``torch`` backend (collage.backends.torch.backend).

Each entry of ``OPS`` is a *builder* ``build(node: OpNode) -> fn``: it reads the node's attributes and
the inputs known at build time (``node.static[i]``: a numpy array for an initializer, a Constant's
value or anything folded from them; None for a tensor only known at run time) and returns
``fn(*inputs: torch.Tensor | None) -> tuple[torch.Tensor, ...]``. A builder that meets an attribute
value or a non-static shape argument it does not handle raises :class:`OpUnsupported` with the
reason; ``supports()`` of the backend is exactly "op in OPS and its builder does not raise".
``OpNode``, ``OpUnsupported`` and the attribute rules builders share are in
:mod:`collage.backends.torch.opnode`.

Builders decide everything they can once (pads, axes, target shapes), so the call is one or two
torch ops. Semantics follow the ONNX spec for opsets 11-21 (the ``opset`` of the model decides the
defaults that changed, e.g. Softmax's axis before opset 13).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import numpy_helper

import torch
import torch.nn.functional as F

from collage.backends.torch.opnode import Fn, OpNode, OpUnsupported, spatial, torch_dtype, torch_pad


def _unary(f: Callable) -> Callable[[OpNode], Fn]:
    return lambda node: (lambda x: (f(x),))


def _need_plain(node: OpNode, **allowed: Any) -> None:
    for key, ok in allowed.items():
        v = node.attr(key)
        if v is not None and v != ok:
            raise OpUnsupported(f"{node.op}: attribute {key}={v!r} is not handled (only {ok!r})")


def _conv(node: OpNode) -> Fn:
    w_shape = node.in_shapes[1]
    if w_shape is None:
        raise OpUnsupported("Conv: the weight shape is unknown")
    kernel = list(node.attr("kernel_shape", w_shape[2:]))
    n = len(kernel)
    if n not in (1, 2, 3):
        raise OpUnsupported(f"Conv: {n}-d convolution is not handled")
    strides, dilations, padding, explicit = spatial(node, kernel)
    group = int(node.attr("group", 1))
    conv = (F.conv1d, F.conv2d, F.conv3d)[n - 1]
    if explicit is None:
        return lambda x, w, b=None: (conv(x, w, b, strides, padding, dilations, group),)
    tp = torch_pad(explicit)
    return lambda x, w, b=None: (conv(F.pad(x, tp), w, b, strides, 0, dilations, group),)


def _batchnorm(node: OpNode) -> Fn:
    if node.n_outputs > 1 or node.attr("training_mode", 0):
        raise OpUnsupported("BatchNormalization: only inference mode with one output is handled")
    eps = float(node.attr("epsilon", 1e-5))
    return lambda x, s, b, m, v: (F.batch_norm(x, m, v, s, b, False, 0.0, eps),)


def _clip(node: OpNode) -> Fn:
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo_a, hi_a = node.const(1, "min"), node.const(2, "max")
        lo = None if lo_a is None else float(lo_a)
        hi = None if hi_a is None else float(hi_a)
    return lambda x, *_: (torch.clamp(x, lo, hi),)


def _div(node: OpNode) -> Fn:
    def div(a, b):
        if a.is_floating_point():
            return (torch.div(a, b),)
        return (torch.div(a, b, rounding_mode="trunc"),)
    return div


def _variadic(f: Callable) -> Callable[[OpNode], Fn]:
    def build(node: OpNode) -> Fn:
        def run(*xs):
            out = xs[0]
            for x in xs[1:]:
                out = f(out, x)
            return (out,)
        return run
    return build


def _gemm(node: OpNode) -> Fn:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))

    def gemm(a, b, c=None):
        a = a.t() if ta else a
        b = b.t() if tb else b
        if c is None:
            return (torch.matmul(a, b) * alpha if alpha != 1.0 else torch.matmul(a, b),)
        if alpha == 1.0 and beta == 1.0:
            return (torch.addmm(c.expand(a.shape[0], b.shape[1]), a, b),)
        return (torch.addmm(c.expand(a.shape[0], b.shape[1]), a, b, beta=beta, alpha=alpha),)
    return gemm


def _softmax(node: OpNode) -> Fn:
    rank = node.rank()
    if node.opset >= 13:
        axis = int(node.attr("axis", -1))
        return lambda x: (torch.softmax(x, axis),)
    axis = int(node.attr("axis", 1)) % rank
    return lambda x: (torch.softmax(x.reshape(math.prod(x.shape[:axis]), -1), 1).reshape(x.shape),)


def _layernorm(node: OpNode) -> Fn:
    if node.n_outputs > 1:
        raise OpUnsupported("LayerNormalization: only the Y output is handled (not Mean / InvStdDev)")
    rank = node.rank()
    axis = int(node.attr("axis", -1)) % rank
    eps = float(node.attr("epsilon", 1e-5))
    norm_shape = node.in_shapes[0][axis:]
    same = all(s is not None and tuple(s) == tuple(norm_shape) for s in node.in_shapes[1:3] if s is not None)
    if same:
        return lambda x, s, b=None: (F.layer_norm(x, norm_shape, s, b, eps),)
    dims = list(range(axis, rank))

    def ln(x, s, b=None):
        mean = x.mean(dims, keepdim=True)
        var = (x - mean).pow(2).mean(dims, keepdim=True)
        y = (x - mean) / torch.sqrt(var + eps) * s
        return (y + b if b is not None else y,)
    return ln


def _gather(node: OpNode) -> Fn:
    rank = node.rank()
    axis = int(node.attr("axis", 0)) % rank
    size = node.in_shapes[0][axis]

    def gather(x, idx):
        idx = torch.where(idx < 0, idx + size, idx) if idx.dtype != torch.uint8 else idx
        flat = x.index_select(axis, idx.reshape(-1).long())
        return (flat.reshape((*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])),)
    return gather


def _reshape(node: OpNode) -> Fn:
    shape = [int(s) for s in node.const(1, "shape")]
    allowzero = int(node.attr("allowzero", 0))
    if not allowzero and 0 in shape:
        src = node.in_shapes[0]
        if src is None:
            raise OpUnsupported("Reshape: a 0 in the shape needs the input's static shape")
        shape = [src[i] if s == 0 else s for i, s in enumerate(shape)]
    return lambda x, *_: (x.reshape(shape),)


def _transpose(node: OpNode) -> Fn:
    perm = node.attr("perm") or list(reversed(range(node.rank())))
    return lambda x: (x.permute(*perm),)


def _concat(node: OpNode) -> Fn:
    axis = int(node.attr("axis"))
    return lambda *xs: (torch.cat([x for x in xs if x is not None], axis),)


def _pool(node: OpNode, kind: str) -> Fn:
    kernel = list(node.attr("kernel_shape"))
    n = len(kernel)
    if n not in (1, 2, 3):
        raise OpUnsupported(f"{node.op}: {n}-d pooling is not handled")
    if node.n_outputs > 1:
        raise OpUnsupported(f"{node.op}: the Indices output is not handled")
    strides, dilations, padding, explicit = spatial(node, kernel)
    ceil = bool(node.attr("ceil_mode", 0))
    if kind == "max":
        _need_plain(node, storage_order=0)
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[n - 1]
        if explicit is None and all(p <= k // 2 for p, k in zip(padding, kernel)):
            return lambda x: (pool(x, kernel, strides, padding, dilations, ceil),)
        tp = torch_pad(explicit or padding + padding)
        return lambda x: (pool(F.pad(x, tp, value=-math.inf), kernel, strides, 0, dilations, ceil),)
    if any(d != 1 for d in dilations):
        raise OpUnsupported("AveragePool: dilations are not handled")
    pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[n - 1]
    include = bool(node.attr("count_include_pad", 0))
    if explicit is None and all(p <= k // 2 for p, k in zip(padding, kernel)):
        return lambda x: (pool(x, kernel, strides, padding, ceil, include),)
    if not include:
        raise OpUnsupported("AveragePool: asymmetric pads with count_include_pad=0 are not handled")
    tp = torch_pad(explicit or padding + padding)
    return lambda x: (pool(F.pad(x, tp), kernel, strides, 0, ceil, True),)


def _global_avg(node: OpNode) -> Fn:
    dims = list(range(2, node.rank()))
    return lambda x: (x.mean(dims, keepdim=True),)


def _flatten(node: OpNode) -> Fn:
    axis = int(node.attr("axis", 1))
    axis = axis + node.rank() if axis < 0 else axis
    return lambda x: (x.reshape(math.prod(x.shape[:axis]), -1),)


def _axes(node: OpNode, attr_opset: int) -> list[int] | None:
    """Axes from the attribute (opset < attr_opset) or from input 1 (constant)."""
    if node.opset < attr_opset:
        axes = node.attr("axes")
    else:
        value = node.const(1, "axes")
        axes = None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]
    return None if axes is None else list(axes)


def _reduce(node: OpNode, f: str) -> Fn:
    axes = _axes(node, 18)
    keep = bool(node.attr("keepdims", 1))
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return lambda x, *_: (x,)
        axes = list(range(node.rank()))
    if f == "mean":
        return lambda x, *_: (x.mean(axes, keepdim=keep),)
    return lambda x, *_: (x.sum(axes, keepdim=keep),)


def _unsqueeze(node: OpNode) -> Fn:
    axes = _axes(node, 13)
    if axes is None:
        raise OpUnsupported("Unsqueeze: axes are missing")
    out_rank = node.rank() + len(axes)
    axes = sorted(a % out_rank for a in axes)

    def unsqueeze(x, *_):
        for a in axes:
            x = x.unsqueeze(a)
        return (x,)
    return unsqueeze


def _squeeze(node: OpNode) -> Fn:
    axes = _axes(node, 13)
    if axes is None:
        shape = node.in_shapes[0]
        if shape is None:
            raise OpUnsupported("Squeeze: without axes the input's static shape is needed")
        axes = [i for i, s in enumerate(shape) if s == 1]
    rank = node.rank()
    dims = tuple(sorted(a % rank for a in axes))
    return lambda x, *_: (x.squeeze(dims),)


def _cast(node: OpNode) -> Fn:
    dtype = torch_dtype(int(node.attr("to")))
    return lambda x: (x.to(dtype),)


def _shape(node: OpNode) -> Fn:
    start, end = node.attr("start", 0), node.attr("end")

    def shape(x):
        return (torch.tensor(list(x.shape)[start:end], dtype=torch.int64, device=x.device),)
    return shape


def _constant(node: OpNode) -> Fn:
    a = node.attrs
    if "value" in a:
        value = numpy_helper.to_array(a["value"])
    elif "value_float" in a:
        value = np.array(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        value = np.array(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        value = np.array(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        value = np.array(a["value_ints"], dtype=np.int64)
    else:
        raise OpUnsupported(f"Constant: attribute {sorted(a)} is not handled")
    node.extra["value"] = value
    tensor = torch.from_numpy(np.asarray(value, order="C").copy())
    return lambda: (tensor,)


def _pow(node: OpNode) -> Fn:
    return lambda a, b: (torch.pow(a, b).to(a.dtype),)


def _where(node: OpNode) -> Fn:
    return lambda c, x, y: (torch.where(c, x, y),)


def _leaky(node: OpNode) -> Fn:
    slope = float(node.attr("alpha", 0.01))
    return lambda x: (F.leaky_relu(x, slope),)


def _hard_sigmoid(node: OpNode) -> Fn:
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    return lambda x: (torch.clamp(x * alpha + beta, 0.0, 1.0),)


def _expand(node: OpNode) -> Fn:
    shape = [int(s) for s in node.const(1, "shape")]
    return lambda x, *_: (x.expand(torch.broadcast_shapes(x.shape, shape)),)


def _dropout(node: OpNode) -> Fn:
    if node.n_outputs > 1:
        raise OpUnsupported("Dropout: the mask output is not handled")
    return lambda x, *_: (x,)


OPS: dict[str, Callable[[OpNode], Fn]] = {
    "Conv": _conv,
    "BatchNormalization": _batchnorm,
    "Relu": _unary(torch.relu),
    "Sigmoid": _unary(torch.sigmoid),
    "Tanh": _unary(torch.tanh),
    "Erf": _unary(torch.erf),
    "Sqrt": _unary(torch.sqrt),
    "Exp": _unary(torch.exp),
    "Log": _unary(torch.log),
    "Abs": _unary(torch.abs),
    "Neg": _unary(torch.neg),
    "Reciprocal": _unary(torch.reciprocal),
    "Not": _unary(torch.logical_not),
    "Identity": _unary(lambda x: x),
    "Clip": _clip,
    "Add": _variadic(torch.add),
    "Sub": lambda node: (lambda a, b: (torch.sub(a, b),)),
    "Mul": _variadic(torch.mul),
    "Div": _div,
    "Sum": _variadic(torch.add),
    "Max": _variadic(torch.maximum),
    "Min": _variadic(torch.minimum),
    "Equal": lambda node: (lambda a, b: (torch.eq(a, b),)),
    "Less": lambda node: (lambda a, b: (torch.lt(a, b),)),
    "Greater": lambda node: (lambda a, b: (torch.gt(a, b),)),
    "Pow": _pow,
    "MatMul": lambda node: (lambda a, b: (torch.matmul(a, b),)),
    "Gemm": _gemm,
    "Softmax": _softmax,
    "LayerNormalization": _layernorm,
    "Gather": _gather,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Concat": _concat,
    "MaxPool": lambda node: _pool(node, "max"),
    "AveragePool": lambda node: _pool(node, "avg"),
    "GlobalAveragePool": _global_avg,
    "Flatten": _flatten,
    "ReduceMean": lambda node: _reduce(node, "mean"),
    "ReduceSum": lambda node: _reduce(node, "sum"),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Where": _where,
    "Cast": _cast,
    "Shape": _shape,
    "Constant": _constant,
    "LeakyRelu": _leaky,
    "HardSigmoid": _hard_sigmoid,
    "Expand": _expand,
    "Dropout": _dropout,
}

#: Ops whose output depends only on the input's shape (folded at build time when that shape is static).
SHAPE_ONLY = {"Shape"}
