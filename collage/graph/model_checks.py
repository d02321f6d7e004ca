"""What loading refuses before it normalises a model: the checks whose failure would otherwise surface late,
as a traceback or as a backend's fault.

- :func:`check_names`: every tensor and node name is valid UTF-8 (protobuf hands a name that is not back as
  ``bytes``, which the first ``ValueInfoProto`` built from it cannot take);
- :func:`check_initializer_data`: each initializer holds as many bytes (or values) as its dims and type
  declare;
- :func:`check_dims` and :func:`check_input_sizes`: a dimension is a positive int64, a tensor's element count
  fits in int64 and its bytes in this machine's memory (a shape override is not an allocation request);
- :func:`check_serializable`: the model fits in one serialized protobuf message (2 GB): collage hands each piece
  of it, and the whole model, to the backends and its measuring processes serialized; a model stored with external
  data is read, but one past 2 GB failed at its first measurement with protobuf's "Failed to serialize proto".

Every refusal is a :class:`collage.errors.ModelError` naming the node, tensor or input and what to do.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
from onnx import helper

from collage.errors import ModelError

#: the largest value an ONNX dimension (int64) or element count can hold
INT64_MAX = 2**63 - 1


def _bad(name: object) -> bool:
    return isinstance(name, bytes)


def _node_names(node: onnx.NodeProto) -> Iterator[tuple[str, object]]:
    yield "name", node.name
    yield "op type", node.op_type
    yield "domain", node.domain
    for k, t in enumerate(node.input):
        yield f"input {k}", t
    for k, t in enumerate(node.output):
        yield f"output {k}", t


def _fix(value: object) -> str:
    return (f"is {value!r}, which is not valid UTF-8 (ONNX names are UTF-8 strings); rename it in the model "
            "(e.g. with the onnx package: set the name to a str on every node and value that uses it) and save it "
            "again")


def check_names(graph: onnx.GraphProto, source: str, where: str = "") -> None:
    """Refuse a name that is not valid UTF-8: a node's (by index and op type) or a graph input's, output's,
    value info's or initializer's; subgraphs (If/Loop/Scan bodies) too, named by their outer node."""
    for i, node in enumerate(graph.node):
        op = node.op_type if not _bad(node.op_type) else "?"
        label = f"{where}node #{i} ({op}{'' if _bad(node.name) or not node.name else ' ' + repr(node.name)})"
        for field, value in _node_names(node):
            if _bad(value):
                raise ModelError(f"{source}: {label}: its {field} {_fix(value)}")
        for attr in node.attribute:
            for sub in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
                check_names(sub, source, f"{label}, attribute {attr.name!r}: ")
    kinds = (("graph input", graph.input), ("graph output", graph.output), ("value info", graph.value_info),
             ("initializer", graph.initializer), ("sparse initializer", [s.values for s in graph.sparse_initializer]))
    for kind, items in kinds:
        for k, item in enumerate(items):
            if _bad(item.name):
                raise ModelError(f"{source}: {where}{kind} #{k}'s name {_fix(item.name)}")


def _elements(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims)


def _payload(t: onnx.TensorProto) -> tuple[str, int, int] | None:
    """(where the data is, its size, the size the dims and type declare), in bytes for raw data, else in
    values; None when the tensor has no data here to check (external data, strings, 4-bit packing)."""
    if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type in (onnx.TensorProto.STRING,
                                                                        onnx.TensorProto.UNDEFINED):
        return None
    n = _elements(t.dims)
    if t.HasField("raw_data"):
        try:
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        except (KeyError, TypeError, ValueError):
            return None
        if t.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
            return None
        return "raw data", len(t.raw_data), n * itemsize
    try:
        field = helper.tensor_dtype_to_field(t.data_type)
    except (KeyError, TypeError, ValueError):
        return None
    if t.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
        return None
    per = 2 if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
    return field, len(getattr(t, field)), n * per


def check_initializer_data(graph: onnx.GraphProto, source: str) -> None:
    """Refuse an initializer whose data does not match its declared dims and type (a truncated or padded
    ``raw_data``, a wrong number of typed values), naming it, before a backend reads past its end."""
    for t in graph.initializer:
        if any(d < 0 for d in t.dims):
            raise ModelError(f"{source}: initializer {t.name!r} declares a negative dimension {list(t.dims)}; "
                             "the model is malformed (re-export it)")
        found = _payload(t)
        if found is None:
            continue
        where, have, want = found
        if have != want:
            unit = "bytes" if where == "raw data" else "values"
            dtype = helper.tensor_dtype_to_string(t.data_type).removeprefix("TensorProto.")
            raise ModelError(f"{source}: initializer {t.name!r} declares {dtype} {list(t.dims)} ({want} {unit}) but "
                             f"its {where} holds {have} {unit}: the model file is damaged or was cut short; re-export "
                             "or download it again")


#: protobuf's limit on one serialized message, less room for the graph's structure beside the weights
SERIALIZED_MAX = 2**31 - 1 - 2**25


def check_serializable(model: onnx.ModelProto, source: str) -> None:
    """Refuse a model whose weights (initializers and Constant nodes' tensors, subgraphs' too) pass protobuf's 2 GB
    limit on one serialized message, saying how much they hold. Counted from the tensors, not ``ByteSize()``: upb
    serializes to size a message (15 s for a 2.4 GB model, before it fails)."""
    weights = sum(_tensor_bytes(t) for g in all_graphs(model.graph)
                  for t in [*g.initializer, *(a.t for n in g.node for a in n.attribute if a.HasField("t")),
                            *(t for n in g.node for a in n.attribute for t in a.tensors)])
    if weights > SERIALIZED_MAX:
        raise ModelError(f"{source}: the model is past the 2 GB one serialized ONNX model can hold "
                         f"({weights / 1e6:.0f} MB of weights); collage compiles and measures the whole model and "
                         "each piece of it serialized, so it tunes models up to 2 GB (a model stored with external "
                         "data is read, but must fit); quantize its weights or tune a smaller part of it")


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """A node's subgraphs (If branches, Loop and Scan bodies), in attribute order."""
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]


def all_graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``g`` and every subgraph nested in it, depth first."""
    yield g
    for node in g.node:
        for sub in subgraphs(node):
            yield from all_graphs(sub)


def _tensor_bytes(t: onnx.TensorProto) -> int:
    """The bytes a tensor's data takes serialized (raw data as stored; typed values at their element size)."""
    if t.HasField("raw_data"):
        return len(t.raw_data)
    if t.data_type == onnx.TensorProto.STRING:
        return sum(len(v) for v in t.string_data)
    try:
        return _elements(t.dims) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0


def check_dims(name: str, dims: object, what: str) -> tuple[int, ...]:
    """``dims`` as a shape: each a whole number from 1 to int64's largest, their product within int64 too.
    ``what`` names the source in the message (``"--shape 'x=1,3'"``, ``"shapes['x']"``); a ModelError, as the
    other shape refusals."""
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
        raise ModelError(f"bad {what}: {dims!r} is not a sequence of dimensions (for example (1, 3, 224, 224))")
    out: list[int] = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise ModelError(f"bad {what}: dimension {d!r} of input {name!r} is not a whole number")
        d = int(d)
        if d < 0:
            raise ModelError(f"bad {what}: dimension {d} is negative; dimensions are sizes >= 1")
        if d == 0:
            raise ModelError(f"bad {what}: a dimension of size 0 makes an empty tensor, which collage cannot measure "
                             "or run; give sizes >= 1 (for example a batch of 1)")
        if d > INT64_MAX:
            raise ModelError(f"bad {what}: dimension {d} of input {name!r} is past the largest ONNX dimension "
                             f"(int64: {INT64_MAX}); give a real size")
        out.append(d)
    if _elements(out) > INT64_MAX:
        raise ModelError(f"bad {what}: input {name!r} would hold {_elements(out)} elements, more than int64 can count; "
                         "give a real size")
    return tuple(out)


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_input_sizes(graph: onnx.GraphProto, source: str) -> None:
    """Refuse a graph input (static dims, after the overrides) whose element count is past int64 or whose
    bytes alone exceed this machine's memory: collage would have to allocate it, several times over."""
    inits = {t.name for t in graph.initializer}
    memory = memory_bytes()
    for vi in graph.input:
        tt = vi.type.tensor_type
        if vi.name in inits or not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue
        dims = [d.dim_value for d in tt.shape.dim]
        n = _elements(dims)
        if n > INT64_MAX:
            raise ModelError(f"{source}: input {vi.name!r} {dims} would hold {n} elements, more than int64 can count; "
                             f"give it a real shape (--shape {vi.name}=...)")
        try:
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            continue
        if memory is not None and n * itemsize > memory:
            raise ModelError(f"{source}: input {vi.name!r} {dims} would take {n * itemsize / 2**30:.3g} GiB, more than "
                             f"this machine's {memory / 2**30:.3g} GiB of memory; give it a smaller shape "
                             f"(--shape {vi.name}=...)")
