"""Reading an ONNX model and normalising it into the form :class:`collage.graph.ir.Graph` holds.

``read_model`` opens a file (or takes a ``ModelProto``) and refuses what is not a readable, non-empty
ONNX model, naming the file. ``prepare_model`` turns it into what the Graph's contract promises, after
the checks of :mod:`collage.graph.model_checks` (names valid UTF-8, graph outputs present, initializer data
as long as its dims say, input sizes within int64 and memory): sparse initializers made dense,
symbolic input dimensions fixed by ``--shape`` overrides (or refused, with the override to pass),
operators only from known domains, ``Constant`` nodes folded into initializers, nodes that reach no
graph output dropped, nodes in a stable topological order, node names unique (``unique_node_names``: a
name the file gives several nodes is suffixed on all but the first, so that no piece of the model is refused
for its names: ONNX Runtime rejects a model with two nodes of one name), and every tensor's shape inferred (on a
``skeleton`` of the model, so that the weights are not serialised). ``node_reads`` is the one rule for
which tensors a node reads (its inputs, and the outer-scope names its subgraphs use).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from collage.errors import ModelError
from collage.graph.model_checks import (check_dims, check_initializer_data, check_input_sizes, check_names,
                                        memory_bytes)

log = logging.getLogger(__name__)

#: Operator domains collage knows how to hand to a backend.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def read_model(source: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """(the model, a name for messages: the path, or the graph's name for a ModelProto)."""
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "<model>"
    path = Path(source)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, expected an .onnx file")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # DecodeError, truncated external data, ...
        raise ModelError(f"{path}: not a readable ONNX model ({type(e).__name__}: {str(e).strip() or 'parse error'})") from e
    if not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model, or an empty one (no graph nodes)")
    return model, str(path)


def _subgraph_reads(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensors read by a node's subgraphs (If/Loop/Scan bodies)."""
    names: list[str] = []
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                for t in list(n.input) + _subgraph_reads(n):
                    if t and t not in local:
                        names.append(t)
                local.update(n.output)
    return names


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a node reads, each once, in order: its inputs, then outer-scope names its subgraphs use."""
    seen: list[str] = []
    for t in list(node.input) + _subgraph_reads(node):
        if t and t not in seen:
            seen.append(t)
    return seen


def prepare_model(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], source: str) -> onnx.ModelProto:
    """The model as ``Graph`` holds it (module docstring): a copy, with ``shapes`` fixing symbolic input
    dimensions, constants folded, dead nodes dropped, nodes in topological order, shapes inferred."""
    model = copy_model(model)
    g = model.graph
    check_names(g, source)
    if not g.output:
        raise ModelError(f"{source}: the graph has no outputs, so there is nothing to compute; mark the tensors the "
                         "model should produce as graph outputs (graph.output) and save it again")
    check_initializer_data(g, source)
    _densify_sparse(g, source)
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise ModelError(f"{source}: the model imports opset {o.version} of ai.onnx; the newest one the onnx "
                             f"package here knows is {newest} (install a newer onnx, or export the model at opset <= {newest})")
    for node in g.node:
        if node.domain not in KNOWN_DOMAINS:
            which = repr(node.name) if node.name else f"(unnamed, writing {node.output[0]!r})"
            raise ModelError(
                f"{source}: node {which} uses op {node.op_type!r} from unknown domain {node.domain!r}; collage "
                f"handles the domains {sorted({d or 'ai.onnx' for d in KNOWN_DOMAINS})}")
    init_names = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    unknown = set(shapes) - {i.name for i in real_inputs}
    if unknown:
        raise ModelError(f"{source}: --shape names no graph input: {sorted(unknown)} "
                         f"(inputs are {[i.name for i in real_inputs]})")
    for inp in real_inputs:
        tt = inp.type.tensor_type
        if inp.name in shapes:
            dims = check_dims(inp.name, shapes[inp.name], f"shape for input {inp.name!r}")
            if tt.HasField("shape") and len(tt.shape.dim) not in (0, len(dims)):
                raise ModelError(f"{source}: --shape {inp.name} has {len(dims)} dims, the input has "
                                 f"{len(tt.shape.dim)}")
            tt.ClearField("shape")
            for d in dims:
                tt.shape.dim.add().dim_value = d
        elif tt.HasField("shape") and any(d.HasField("dim_value") and d.dim_value == 0 for d in tt.shape.dim):
            dims = ["?" if not d.HasField("dim_value") else str(d.dim_value) for d in tt.shape.dim]
            raise ModelError(
                f"{source}: input {inp.name!r} has a dimension of size 0 ([{','.join(dims)}]): an empty tensor, which "
                f"collage cannot measure or run; give it a non-empty shape with --shape {inp.name}="
                + ",".join("1" if x in ("?", "0") else x for x in dims))
        elif not tt.HasField("shape") or any(not d.HasField("dim_value") or d.dim_value <= 0 for d in tt.shape.dim):
            dims = ["?" if not d.HasField("dim_value") else str(d.dim_value) for d in tt.shape.dim]
            sym = [d.dim_param or "?" for d in tt.shape.dim if not d.HasField("dim_value")]
            raise ModelError(
                f"{source}: input {inp.name!r} has symbolic dims [{','.join(dims)}] ({', '.join(sym) or 'no shape'}); "
                f"fix them with --shape {inp.name}=" + ",".join("1" if x == "?" else x for x in dims))
    check_input_sizes(g, source)
    _fold_constants(g)
    # keep only the nodes that feed a graph output; reorder topologically (stable)
    _prune_and_sort(g, source)
    unique_node_names(g, source)
    for vi in list(g.value_info):
        g.value_info.remove(vi)
    try:
        # on a skeleton: inferring on the full model serialises every weight twice (7 s for VGG-19)
        inferred = shape_inference.infer_shapes(skeleton(model), strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"{source}: shape inference failed: {str(e).strip().splitlines()[0]}") from e
    g.value_info.extend(inferred.graph.value_info)
    del g.output[:]
    g.output.extend(inferred.graph.output)
    _check_channels(model, source)
    return model


def _static_dims(types: Mapping[str, onnx.ValueInfoProto], inits: Mapping[str, onnx.TensorProto],
                 name: str) -> list[int] | None:
    if name in inits:
        return list(inits[name].dims)
    vi = types.get(name)
    if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    return None if None in dims else dims


def _check_channels(model: onnx.ModelProto, source: str) -> None:
    """Refuse input shapes that contradict the weights (ONNX shape inference does not check a Conv's
    input channels against its kernel): a ModelError naming the node, not a runtime error later."""
    g = model.graph
    types = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    inits = {t.name: t for t in g.initializer}
    for node in g.node:
        if node.op_type not in ("Conv", "ConvTranspose", "MatMul", "Gemm") or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.input) < 2:
            continue
        x, w = _static_dims(types, inits, node.input[0]), _static_dims(types, inits, node.input[1])
        if not x or not w:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        label = f"node {node.name or node.output[0]!r} ({node.op_type})"
        if node.op_type == "Conv" and len(x) >= 2 and len(w) >= 2:
            group = int(attrs.get("group", 1))
            if x[1] != w[1] * group:
                raise ModelError(f"{source}: {label} reads {node.input[0]!r} with {x[1]} channels (shape {x}), but its "
                                 f"weights {node.input[1]!r} {w} (group {group}) take {w[1] * group}; fix the input "
                                 "shape (--shape) to match the model")
        elif node.op_type == "ConvTranspose" and len(x) >= 2 and w and x[1] != w[0]:
            raise ModelError(f"{source}: {label} reads {node.input[0]!r} with {x[1]} channels (shape {x}), but its "
                             f"weights {node.input[1]!r} {w} take {w[0]}; fix the input shape (--shape) to match the model")
        elif node.op_type == "MatMul" and len(x) >= 1 and len(w) >= 2 and x[-1] != w[-2]:
            raise ModelError(f"{source}: {label} multiplies {node.input[0]!r} {x} by {node.input[1]!r} {w}: inner "
                             f"dimensions {x[-1]} and {w[-2]} differ; fix the input shape (--shape) to match the model")
        elif node.op_type == "Gemm" and len(x) == 2 and len(w) == 2:
            k_x = x[0] if attrs.get("transA", 0) else x[1]
            k_w = w[1] if attrs.get("transB", 0) else w[0]
            if k_x != k_w:
                raise ModelError(f"{source}: {label} multiplies {node.input[0]!r} {x} by {node.input[1]!r} {w}: inner "
                                 f"dimensions {k_x} and {k_w} differ; fix the input shape (--shape) to match the model")


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def skeleton(model: onnx.ModelProto, keep_elems: int = 4096) -> onnx.ModelProto:
    """The model without its large initializers, which become typed graph inputs instead: what shape
    inference and the checker need (small initializers, e.g. Reshape targets, keep their values),
    without serialising the weights."""
    g = model.graph
    skel = onnx.ModelProto()
    skel.ir_version = model.ir_version
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    sg = skel.graph
    sg.name = g.name
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    listed = {i.name for i in g.input}
    for t in g.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) <= keep_elems or t.data_location == onnx.TensorProto.EXTERNAL:
            sg.initializer.append(t)
        elif t.name not in listed:
            sg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return skel


def _densify_sparse(g: onnx.GraphProto, source: str) -> None:
    """Turn each ``sparse_initializer`` into the dense initializer it stands for (values at their indices,
    zeros elsewhere), so that every backend reads it as a plain weight."""
    memory = memory_bytes()
    for sp in g.sparse_initializer:
        name, dims = sp.values.name, [int(d) for d in sp.dims]
        values = numpy_helper.to_array(sp.values).ravel()
        idx = numpy_helper.to_array(sp.indices).astype(np.int64) if sp.HasField("indices") else np.zeros(0, np.int64)
        size = int(np.prod(dims, dtype=object)) if dims else 1
        if memory is not None and size * values.dtype.itemsize > memory:
            raise ModelError(f"{source}: sparse initializer {name!r} {dims} would take more than this machine's memory "
                             "once dense; collage needs dense weights")
        if idx.ndim == 2 and idx.shape == (len(values), len(dims)):  # coordinates: [NNZ, rank]
            if (idx < 0).any() or (idx >= np.array(dims)).any():
                raise ModelError(f"{source}: sparse initializer {name!r} {dims} has an index out of range")
            flat = np.ravel_multi_index(tuple(idx.T), dims)
        elif idx.ndim == 1 and len(idx) == len(values):
            flat = idx
        else:
            raise ModelError(f"{source}: sparse initializer {name!r}: {len(values)} values but indices of shape "
                             f"{list(idx.shape)}; the model is malformed (re-export it)")
        if len(flat) and (flat.min() < 0 or flat.max() >= size):
            raise ModelError(f"{source}: sparse initializer {name!r} {dims} has an index out of range")
        dense = np.zeros(size, values.dtype)
        dense[flat] = values
        g.initializer.append(numpy_helper.from_array(dense.reshape(dims), name))
        log.info("%s: sparse initializer %r %s made dense", source, name, dims)
    g.ClearField("sparse_initializer")


def _fold_constants(g: onnx.GraphProto) -> None:
    """Turn ``Constant`` nodes into initializers, so that constants travel with the nodes that read them."""
    keep = []
    for node in g.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1:
            a = node.attribute[0]
            value = None
            if a.name == "value":
                value = numpy_helper.to_array(a.t)
            elif a.name in ("value_float", "value_int"):
                value = np.array(a.f if a.name == "value_float" else a.i,
                                 dtype=np.float32 if a.name == "value_float" else np.int64)
            elif a.name in ("value_floats", "value_ints"):
                value = np.array(list(a.floats) if a.name == "value_floats" else list(a.ints),
                                 dtype=np.float32 if a.name == "value_floats" else np.int64)
            if value is not None:
                g.initializer.append(numpy_helper.from_array(value, node.output[0]))
                continue
        keep.append(node)
    if len(keep) != len(g.node):
        del g.node[:]
        g.node.extend(keep)


def unique_node_names(g: onnx.GraphProto, source: str) -> None:
    """Give every named node of ``g`` a name no other node has: the second and later nodes of a repeated name
    get ``NAME_2``, ``NAME_3``, ... (the next such name that is free). Unnamed nodes stay unnamed.

    The names are no part of a candidate's fingerprint (collage.graph.ir), so a failure they caused would be
    shared with every model of the same structure; ONNX Runtime refuses a model in which two nodes share a
    name ("two nodes with same node name"), and this makes that failure impossible.
    """
    taken = {n.name for n in g.node if n.name}
    seen: set[str] = set()
    renamed = 0
    for node in g.node:
        if not node.name:
            continue
        if node.name in seen:
            k = 2
            while f"{node.name}_{k}" in taken:
                k += 1
            node.name = f"{node.name}_{k}"
            taken.add(node.name)
            renamed += 1
        seen.add(node.name)
    if renamed:
        log.info("%s: %d nodes shared a name with an earlier node; renamed (NAME_2, NAME_3, ...)", source, renamed)


def _prune_and_sort(g: onnx.GraphProto, source: str) -> None:
    producers: dict[str, int] = {}
    nodes = list(g.node)
    for i, node in enumerate(nodes):
        for t in node.output:
            if t:
                if t in producers:
                    raise ModelError(f"{source}: tensor {t!r} is written by two nodes; the model is malformed")
                producers[t] = i
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(nodes)))
    for i, node in enumerate(nodes):
        for t in node_reads(node):
            if t in producers:
                dag.add_edge(producers[t], i)
    if not nx.is_directed_acyclic_graph(dag):
        raise ModelError(f"{source}: the graph has a cycle; ONNX graphs must be acyclic")
    live: set[int] = set()
    for o in g.output:
        if o.name in producers:
            p = producers[o.name]
            live.add(p)
            live |= nx.ancestors(dag, p)
    dropped = len(nodes) - len(live)
    if dropped:
        log.info("%s: dropped %d nodes that feed no graph output", source, dropped)
    order = list(nx.lexicographical_topological_sort(dag.subgraph(live)))
    del g.node[:]
    g.node.extend(nodes[i] for i in order)
