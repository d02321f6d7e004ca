"""``collage inspect MODEL``: what a model is made of, before anything is measured.

Prints the node count, parameter count and bytes, a FLOPs estimate, the inputs and outputs with
shapes and dtypes, and the op-type histogram. ``--support`` adds, per op type, which backends take
it (``collage.backends.support_report``).

FLOPs: convolutions, matrix products and recurrences (``MAC_OPS``: Conv, ConvTranspose, MatMul, Gemm, their
integer and QLinear forms, LSTM / GRU / RNN and ONNX Runtime's DynamicQuantizeLSTM) count 2 x multiply-accumulates
(bias ignored; a recurrence: every step's input and recurrent products, gates and directions included); every other
op counts one operation per output element ("element ops"), which is what it is for activations and
arithmetic and an over-estimate for pure data movement (Reshape, Transpose, Concat).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from collage.errors import ModelError
from collage.graph.ir import Graph
from collage.util import human_bytes

#: where a convolution's weight is, by op type (QLinearConv's inputs are x, its scale and zero point, then w)
_CONV_WEIGHT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
#: recurrences: X [seq, batch, input] (or [batch, seq, input]), W and R [directions, gates x hidden, input or
#: hidden] (DynamicQuantizeLSTM's transposed: the same elements)
_RECURRENT = frozenset({"LSTM", "GRU", "RNN", "DynamicQuantizeLSTM"})
#: Ops whose FLOPs are counted as multiply-accumulates; the rest are element ops.
MAC_OPS = frozenset({*_CONV_WEIGHT, "ConvTranspose", "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm",
                     *_RECURRENT})


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return a.i if a.type == a.INT else list(a.ints)
    return default


def node_flops(graph: Graph, i: int) -> int:
    """Estimated floating-point operations of node ``i`` (see the module docstring)."""
    node = graph.op(i)
    out_elems = 0
    for t in node.output:
        if t:
            try:
                out_elems += int(np.prod(graph.tensor(t).shape, dtype=np.int64))
            except ModelError:  # an output nothing reads may have no shape (Dropout's mask)
                pass
    op = node.op_type
    if op in _CONV_WEIGHT and len(node.input) > _CONV_WEIGHT[op]:
        w = graph.tensor(node.input[_CONV_WEIGHT[op]]).shape  # [Cout, Cin/group, k...]
        return 2 * out_elems * int(np.prod(w[1:], dtype=np.int64))
    if op in _RECURRENT and len(node.input) > 2:
        steps = int(np.prod(graph.tensor(node.input[0]).shape[:2], dtype=np.int64))  # seq x batch
        weights = sum(int(np.prod(graph.tensor(t).shape, dtype=np.int64)) for t in node.input[1:3])
        return 2 * steps * weights
    if op == "ConvTranspose" and len(node.input) > 1:
        x = graph.tensor(node.input[0]).shape
        w = graph.tensor(node.input[1]).shape  # [Cin, Cout/group, k...]
        return 2 * int(np.prod(x, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = graph.tensor(node.input[0]).shape
        return 2 * out_elems * (a[-1] if a else 1)
    if op == "Gemm":
        a = graph.tensor(node.input[0]).shape
        k = a[0] if _attr(node, "transA", 0) else a[-1]
        return 2 * out_elems * k
    return out_elems


@dataclass
class Inspection:
    """What ``collage inspect`` reports, as data (for other tools and tests)."""

    name: str
    source: str
    nodes: int
    opset: int
    params: int
    param_bytes: int
    flops: int
    mac_flops: int
    inputs: list[tuple[str, str, tuple[int, ...]]]
    outputs: list[tuple[str, str, tuple[int, ...]]]
    ops: Counter = field(default_factory=Counter)
    op_flops: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        """``collage inspect --json``: name, source, nodes, opset, params, param_bytes, flops, mac_flops,
        inputs/outputs ([{name, dtype, shape}]), ops ({op type: {count, flops}}, most FLOPs first)."""
        io = lambda rows: [{"name": n, "dtype": dt, "shape": [int(d) for d in s]} for n, dt, s in rows]  # noqa: E731
        order = sorted(self.ops, key=lambda op: (-self.op_flops[op], -self.ops[op], op))
        return {"name": self.name, "source": self.source, "nodes": self.nodes, "opset": self.opset,
                "params": self.params, "param_bytes": self.param_bytes, "flops": self.flops,
                "mac_flops": self.mac_flops, "inputs": io(self.inputs), "outputs": io(self.outputs),
                "ops": {op: {"count": self.ops[op], "flops": self.op_flops[op]} for op in order}}


def inspect_graph(graph: Graph) -> Inspection:
    ops: Counter = Counter()
    op_flops: Counter = Counter()
    for i in range(len(graph)):
        op = graph.op_type(i)
        ops[op] += 1
        op_flops[op] += node_flops(graph, i)
    params = sum(int(np.prod(t.dims, dtype=np.int64)) for t in graph.initializers.values())
    param_bytes = sum(graph.tensor(n).nbytes for n in graph.initializers)
    opset = next((o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")), 0)

    def io(names: list[str]) -> list[tuple[str, str, tuple[int, ...]]]:
        return [(n, str(graph.tensor(n).dtype), graph.tensor(n).shape) for n in names]

    return Inspection(
        name=graph.name, source=graph.source, nodes=len(graph), opset=opset, params=params,
        param_bytes=param_bytes, flops=sum(op_flops.values()),
        mac_flops=sum(v for k, v in op_flops.items() if k in MAC_OPS),
        inputs=io(graph.inputs), outputs=io(graph.outputs), ops=ops, op_flops=op_flops)


def _count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f}"


def format_inspection(r: Inspection) -> str:
    lines = [
        f"model:      {r.name} ({r.source})",
        f"nodes:      {r.nodes} (opset {r.opset})",
        f"parameters: {_count(r.params)} ({human_bytes(r.param_bytes)})",
        f"FLOPs:      {_count(r.flops)} (convolutions, matrix products, recurrences {_count(r.mac_flops)}; "
        f"other ops counted as element ops, 1 per output element: {_count(r.flops - r.mac_flops)})",
        "inputs:",
    ]
    for label, rows in (("inputs", r.inputs), ("outputs", r.outputs)):
        if label == "outputs":
            lines.append("outputs:")
        width = max(len(n) for n, _, _ in rows)
        lines += [f"  {n.ljust(width)}  {dt:8s} [{','.join(map(str, s))}]" for n, dt, s in rows]
    lines.append("ops:")
    width = max(len(op) for op in r.ops)
    lines.append(f"  {'op'.ljust(width)}  {'count':>5}  {'FLOPs':>10}  {'%FLOPs':>6}")
    for op, n in sorted(r.ops.items(), key=lambda kv: (-r.op_flops[kv[0]], -kv[1], kv[0])):
        share = 100.0 * r.op_flops[op] / r.flops if r.flops else 0.0
        lines.append(f"  {op.ljust(width)}  {n:>5}  {_count(r.op_flops[op]):>10}  {share:>5.1f}%")
    return "\n".join(lines)
