"""Reading an ONNX model and normalising it into the form :class:`collage.graph.ir.Graph` holds.

``read_model`` opens a file (or takes a ``ModelProto``) and refuses what is not a readable, non-empty
ONNX model, naming the file. ``prepare_model`` turns it into what the Graph's contract promises, after
the checks of :mod:`collage.graph.model_checks` (names valid UTF-8, graph outputs present, initializer data
as long as its dims say, input sizes within int64 and memory): sparse initializers made dense,
symbolic input dimensions fixed by ``--shape`` overrides (or refused, with the override to pass),
the model's own functions (``FunctionProto``: what ``torch.onnx.export(..., export_modules_as_functions=...)``
or onnxscript writes) inlined into their callers, operators only from known domains, ``Constant`` nodes
folded into initializers, nodes that reach no graph output dropped, nodes in a stable topological order,
node names unique (``unique_node_names``: a name the file gives several nodes is suffixed on all but the
first, so that no piece of the model is refused for its names: ONNX Runtime rejects a model with two nodes of
one name), and every tensor's shape inferred (on a
``skeleton`` of the model, so that the weights are not serialised). ``node_reads`` is the one rule for
which tensors a node reads (its inputs, and the outer-scope names its subgraphs use).

Once every input size is fixed, what an exporter computes from sizes (``Shape -> Gather -> Concat ->
Reshape``, ``Range`` over a size, ``Pad`` with computed pads, an ``If`` on a size) is a constant: ``fold``
folds it, with every other constant subgraph, before shape inference (:class:`Folding` says what it did).
The model as read, with the sizes fixed and nothing folded, is kept (``Prepared.original``): the tuner's
numerics are checked against ONNX Runtime running it, so a folding bug cannot pass.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import onnx
from onnx import helper, inliner, numpy_helper, shape_inference

from collage.errors import ModelError
from collage.graph.contrib import SIZED_DOMAINS, contrib_types, is_static, sized_values, static_dims
from collage.graph.model_checks import (all_graphs, check_dims, check_initializer_data, check_input_sizes,
                                        check_names, check_serializable, memory_bytes, subgraphs)

log = logging.getLogger(__name__)

#: Operator domains collage knows how to hand to a backend.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

#: onnxslim's passes ``fold`` leaves out (it runs constant folding only): its pattern fusions (Conv+BN, Gelu, Gemm
#: ...) rewrite the exported ops into others, which the backends do themselves; dead-node and common-subexpression
#: elimination and weight tying drop or merge nodes that are real work as exported (an Identity, two equal
#: branches): the partitioner sees the model's own ops, less what the fixed sizes make constant.
_FOLD_SKIPS = ["graph_fusion", "dead_node_elimination", "subexpression_elimination", "weight_tying"]


@dataclass(frozen=True)
class Folding:
    """What ``fold`` did at load: ``tool`` (name and version), the node counts before and after, its seconds;
    ``applied``: the folded model is used (False: nothing to fold, or folding failed); ``error``: folding failed
    and the model is used as exported (the message says why); ``nodes``: the nodes the Graph holds (after folding,
    its ``Constant`` nodes made initializers and the nodes no output needs dropped; set by ``prepare_model``);
    ``inlined``: the model's local functions inlined before folding (``domain::name``; ``nodes_before`` counts the
    nodes after inlining)."""

    tool: str
    nodes_before: int
    nodes_after: int
    seconds: float
    applied: bool = True
    error: str | None = None
    nodes: int | None = None
    inlined: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """report.json's ``load`` section."""
        return {"folded_by": self.tool, "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "fold_s": round(self.seconds, 3), "applied": self.applied, "error": self.error, "nodes": self.nodes,
                "inlined": list(self.inlined)}


@dataclass
class Prepared:
    """``prepare_model``'s result: ``model`` as the Graph holds it (folded), ``original`` (the model as read with
    the sizes fixed, nothing folded: the numerics reference) and what folding did."""

    model: onnx.ModelProto
    original: onnx.ModelProto
    folding: Folding


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
        raise ModelError(f"{path}: not a readable ONNX model "
                         f"({type(e).__name__}: {str(e).strip() or 'parse error'})") from e
    if not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model, or an empty one (no graph nodes)")
    return model, str(path)


def _subgraph_reads(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensors read by a node's subgraphs (If/Loop/Scan bodies)."""
    names: list[str] = []
    for g in subgraphs(node):
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


def prepare_model(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], source: str) -> Prepared:
    """The model as ``Graph`` holds it (module docstring): a copy, with ``shapes`` fixing symbolic input
    dimensions, what the fixed sizes make constant folded, dead nodes dropped, nodes in topological order,
    shapes inferred; beside it the model as read with the sizes fixed (``Prepared.original``)."""
    model_as_read = model
    original = fix_input_shapes(model, shapes, source)
    model, folding = fold(original, source)  # nothing folded: ``original`` itself, prepared below (no second copy)
    model, inferred = _settle(model, source)
    sized: list[onnx.ValueInfoProto] = []
    asked: set[str] = set()  # the values ONNX Runtime sized: never asked again
    while True:  # ONNX Runtime sizes the ops ONNX does not know, ONNX's inference what follows from them (cheap) ...
        grew = False
        while new := [vi for vi in contrib_types(model, inferred) if vi.name not in asked]:
            sized += new
            asked.update(vi.name for vi in new)
            grew = True
            model.graph.value_info.extend(new)
            inferred = _infer(model, source)
        if not grew:
            break
        # ... then what those sizes make constant (a Shape of an LSTM's output) is folded, on a copy that carries
        # every size for onnxslim (``model`` may be ``original``, which stays as read), and all of it again
        sizes = copy_model(model)
        del sizes.graph.value_info[:]
        sizes.graph.value_info.extend(inferred.graph.value_info)
        again, refold = fold(sizes, source)
        if not refold.applied or refold.nodes_after >= refold.nodes_before:
            break
        folding = Folding(folding.tool, folding.nodes_before, refold.nodes_after, folding.seconds + refold.seconds)
        model, inferred = _settle(again, source, keep=sized)
    if sized:
        log.info("%s: ONNX Runtime sized %d output(s) of ops ONNX's inference does not know (%s)", source,
                 len(sized), ", ".join(sorted({n.op_type for n in model.graph.node
                                               if n.domain not in SIZED_DOMAINS})))
    g = model.graph
    carried = _loop_state_types(model, inferred)
    if carried:  # ONNX leaves a Loop's carried state without a shape; one that keeps its shape has it
        g.value_info.extend(carried)
        inferred = _infer(model, source)
    del g.value_info[:]
    g.value_info.extend(inferred.graph.value_info)
    sizes = sized_values(inferred)  # a graph output ONNX Runtime sized has its size in the value infos
    declared = {o.name: o for o in model_as_read.graph.output if is_static(o)}
    del g.output[:]
    g.output.extend(_output_type(o, sizes, declared, source) for o in inferred.graph.output)
    _check_channels(model, source)
    folding = dataclasses.replace(folding, nodes=len(g.node), inlined=called_functions(model_as_read))
    return Prepared(model, original if folding.applied else model, folding)


def _output_type(out: onnx.ValueInfoProto, sizes: Mapping[str, onnx.ValueInfoProto],
                 declared: Mapping[str, onnx.ValueInfoProto], source: str) -> onnx.ValueInfoProto:
    """A graph output's type: as inferred (or sized by ONNX Runtime); where neither sized it, the static size the
    file declares (a Loop's scan output over a constant trip count, which ONNX's inference leaves unsized), said in
    the log: the declarations are hints (``_drop_size_hints``), used only where nothing computes the size."""
    found = sizes.get(out.name, out)
    if is_static(found) or out.name not in declared:
        return found
    log.info("%s: graph output %r sized %s as the file declares it (ONNX's inference gave it no size)", source,
             out.name, static_dims(declared[out.name]))
    return declared[out.name]


def _settle(model: onnx.ModelProto, source: str, keep: Sequence[onnx.ValueInfoProto] = ()) \
        -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Constants folded into initializers, dead nodes dropped, nodes in topological order, value infos dropped but
    ``keep``; then ONNX's inference of the result (``model`` is changed in place and returned with it)."""
    g = model.graph
    _fold_constants(g)
    # keep only the nodes that feed a graph output; reorder topologically (stable)
    _prune_and_sort(g, source)
    del g.value_info[:]
    g.value_info.extend(keep)
    for out in g.output:  # a symbolic size says nothing collage can use, and an exporter's may be wrong ([1, seqlen]
        if out.type.HasField("tensor_type") and not is_static(out):  # declared, [20, 1, 8210] computed): the
            out.type.tensor_type.ClearField("shape")                 # inference sizes the output itself
    return model, _infer(model, source)


def _infer(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    try:
        # on a skeleton: inferring on the full model serialises every weight twice (7 s for VGG-19)
        return shape_inference.infer_shapes(skeleton(model), strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"{source}: shape inference failed: {str(e).strip().splitlines()[0]}") from e


def _loop_state_types(model: onnx.ModelProto, inferred: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Types of the Loop outputs that are carried state keeping its shape (the body writes it with the static
    shape it enters with) where ONNX's inference left them without a shape."""
    known = {vi.name: vi for vi in list(inferred.graph.input) + list(inferred.graph.value_info)}
    known.update({t.name: helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                  for t in model.graph.initializer})
    out: list[onnx.ValueInfoProto] = []
    for node in model.graph.node:
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue
        body = next(a.g for a in node.attribute if a.name == "body")
        for k, (init, res) in enumerate(zip(node.input[2:], node.output)):
            if not init or not res or (res in known and is_static(known[res])):
                continue
            entering, leaving = known.get(init), body.output[1 + k] if len(body.output) > 1 + k else None
            if entering is not None and leaving is not None and is_static(entering) and is_static(leaving) \
                    and static_dims(entering) == static_dims(leaving):
                out.append(helper.make_tensor_value_info(res, entering.type.tensor_type.elem_type,
                                                         static_dims(entering)))
    return out


def fix_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], source: str) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have the static sizes of ``shapes`` (or their own); a model from an
    unknown domain or opset, a symbolic size no override fixes, or an empty input is refused, naming the input."""
    model = copy_model(model)
    g = model.graph
    check_names(g, source)
    if not g.output:
        raise ModelError(f"{source}: the graph has no outputs, so there is nothing to compute; mark the tensors the "
                         "model should produce as graph outputs (graph.output) and save it again")
    check_initializer_data(g, source)
    _densify_sparse(g, source)
    check_serializable(model, source)  # before the inliner, which serializes the model
    model = _inline_functions(model, source)
    g = model.graph
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise ModelError(f"{source}: the model imports opset {o.version} of ai.onnx; the newest one the onnx "
                             f"package here knows is {newest} (install a newer onnx, or export the model at opset <= "
                             f"{newest})")
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
    shapes = {name: check_dims(name, dims, f"shape for input {name!r}") for name, dims in shapes.items()}
    for inp in real_inputs:
        if kind := not_a_tensor(inp):
            raise ModelError(f"{source}: input {inp.name!r} is {kind}, not a tensor; collage cuts, measures and runs "
                             "graphs of tensors only (export the model with tensor inputs)")
    named = _named_sizes(real_inputs, shapes)
    for inp in real_inputs:
        tt = inp.type.tensor_type
        if inp.name in shapes:
            dims = shapes[inp.name]
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
    _check_defined(g, source)
    _drop_size_hints(g)
    _name_sizes_in_subgraphs(g, named)
    unique_node_names(g, source)  # the original too: the reference runs it on ONNX Runtime
    return model


def _inline_functions(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """``model`` with its local functions inlined where nodes call them (ONNX's inliner, subgraphs included) and the
    domains only they used dropped from its opset imports; ``model`` itself when it has none."""
    if not model.functions:
        return model
    names = function_names(model)
    try:
        inlined = inliner.inline_local_functions(model)
    except Exception as e:
        raise ModelError(f"{source}: could not inline the model's local functions {names}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
    del inlined.functions[:]
    used = {n.domain for sub in all_graphs(inlined.graph) for n in sub.node}
    keep = [o for o in inlined.opset_import
            if o.domain in used or o.domain in KNOWN_DOMAINS or o.domain not in {f.domain for f in model.functions}]
    del inlined.opset_import[:]
    inlined.opset_import.extend(keep)
    return inlined


def function_names(model: onnx.ModelProto) -> tuple[str, ...]:
    """The model's local functions, ``domain::name``, sorted."""
    return tuple(sorted({f"{f.domain}::{f.name}" for f in model.functions}))


def called_functions(model: onnx.ModelProto) -> tuple[str, ...]:
    """The model's local functions that its graph calls (directly, from a subgraph, or from a function it calls),
    ``domain::name``, sorted: what inlining puts into the graph."""
    bodies = {(f.domain, f.name): f for f in model.functions}
    called: set[tuple[str, str]] = set()
    todo = [(n.domain, n.op_type) for sub in all_graphs(model.graph) for n in sub.node]
    while todo:
        key = todo.pop()
        if key in bodies and key not in called:
            called.add(key)
            todo += [(n.domain, n.op_type) for n in bodies[key].node]
    return tuple(sorted(f"{d}::{n}" for d, n in called))


def not_a_tensor(vi: onnx.ValueInfoProto) -> str | None:
    """What a value of another type than a tensor is, in words ('a sequence', 'a map' ...); None for a tensor or a
    value with no type."""
    kind = vi.type.WhichOneof("value")
    return {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional value",
            "sparse_tensor_type": "a sparse tensor"}.get(kind or "")


def _check_defined(g: onnx.GraphProto, source: str) -> None:
    """Refuse a graph output, or a tensor a node reads, that nothing in the graph defines (no input, initializer or
    node output), naming it, before inference (which would only say the tensors after it have no size)."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    for out in g.output:
        if out.name not in defined:
            raise ModelError(f"{source}: graph output {out.name!r} is not computed by any node, nor an input or "
                             "initializer; the model is malformed (run onnx.checker on it)")
    for node in g.node:
        for t in node_reads(node):
            if t not in defined:
                which = repr(node.name) if node.name else f"(unnamed, writing {list(node.output)})"
                raise ModelError(f"{source}: node {which} ({node.op_type}) reads {t!r}, which nothing in the graph "
                                 "defines (no input, initializer or node output); the model is malformed (run "
                                 "onnx.checker on it)")


def _drop_size_hints(g: onnx.GraphProto) -> None:
    """Drop what the file says of its tensors' sizes past its inputs (value infos, the outputs' dims; the outputs
    keep their element type): they are hints, ONNX's inference computes them again from the fixed input sizes, and
    an exporter's may hold the example's size where the input is symbolic. ONNX Runtime trusts them: a torch dynamo
    LSTM export declaring ``linear`` [1, 20, 5] (its example's 20 steps) for an input [1, 'Tx', 16] fails in ONNX
    Runtime at 24 steps ("Reshape 'gemm_input_reshape' ... {1,24,64} to {20,64}", a node its optimizer made from the
    hint), so the reference run of the model as read failed where the model itself is fine."""
    del g.value_info[:]
    inputs = {i.name: i for i in g.input}
    for out in g.output:
        if out.name in inputs:  # an input passed through is the input's size (ONNX's inference, left an output
            out.type.CopyFrom(inputs[out.name].type)  # of an input's name unsized, sized no other output either)
        elif out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")


def _named_sizes(inputs: Sequence[onnx.ValueInfoProto], shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The size ``--shape`` gives each symbolic dimension name of the inputs (``batch`` -> 1); a name given two
    different sizes is left out. ONNX's names mean one size throughout a graph."""
    seen: dict[str, set[int]] = {}
    for inp in inputs:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in shapes and len(dims) == len(shapes[inp.name]):
            for d, size in zip(dims, shapes[inp.name]):
                if d.dim_param:
                    seen.setdefault(d.dim_param, set()).add(int(size))
    return {k: v.pop() for k, v in seen.items() if len(v) == 1}


def _name_sizes_in_subgraphs(g: onnx.GraphProto, named: Mapping[str, int]) -> None:
    """Write the sizes fixed by ``--shape`` into the control-flow bodies' declared types: a torch dynamo ``If``
    declares its branches' outputs ``[batch, 1]``, which ONNX's inference keeps symbolic (the If's outputs with
    no static shape) though ``batch`` is fixed outside."""
    if not named:
        return
    for node in g.node:
        for sub in subgraphs(node):
            for vi in list(sub.input) + list(sub.output) + list(sub.value_info):
                for d in vi.type.tensor_type.shape.dim:
                    if d.dim_param in named:
                        d.dim_value = named[d.dim_param]  # clears dim_param (a oneof)
            _name_sizes_in_subgraphs(sub, named)


def fold(model: onnx.ModelProto, source: str) -> tuple[onnx.ModelProto, Folding]:
    """A copy of ``model`` (every input size fixed) with its shape computations and constant subgraphs folded by
    onnxslim (its constant folding alone: ``_FOLD_SKIPS``), and the :class:`Folding` record. Graph inputs and
    outputs keep their names; an input the folded model no longer reads stays an input. With nothing to fold, or
    should onnxslim fail (a warning, and ``Folding.error``), ``model`` itself is returned (``applied`` False)."""
    import onnxslim

    tool = f"onnxslim {getattr(onnxslim, '__version__', '?')}"
    t0 = time.perf_counter()
    n = len(model.graph.node)
    if not _foldable(model.graph):  # folding would return the model as it is, in 0.3-2 s
        return model, Folding(tool, n, n, time.perf_counter() - t0, applied=False)
    try:
        folded = onnxslim.slim(copy_model(model), skip_optimizations=_FOLD_SKIPS)
        if folded is None:
            raise RuntimeError("onnxslim returned no model")
    except Exception as e:  # onnxslim runs ONNX Runtime and onnx-graphsurgeon over the model: anything can fail
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else 'failed'}"
        log.warning("%s: folding the model with %s failed (%s); using it as exported", source, tool, error)
        return model, Folding(tool, n, n, time.perf_counter() - t0, applied=False, error=error)
    _keep_inputs(model, folded)
    _keep_order(model, folded)
    folding = Folding(tool, n, len(folded.graph.node), time.perf_counter() - t0)
    log.info("%s: folded with %s: %d -> %d nodes (%.2f s)", source, tool, folding.nodes_before,
             folding.nodes_after, folding.seconds)
    return folded, folding


def _foldable(g: onnx.GraphProto) -> bool:
    """Whether the graph has something to fold: a ``Shape`` or ``Size`` (static once the sizes are fixed), or a node
    that reads constants only (initializers, ``Constant`` outputs, or what such a node writes)."""
    consts = {t.name for t in g.initializer}
    for node in g.node:
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            return True
        if node.op_type == "Constant" or (node.input and all(not t or t in consts for t in node_reads(node))):
            if node.op_type != "Constant":
                return True
            consts.update(node.output)
    return False


def _keep_order(model: onnx.ModelProto, folded: onnx.ModelProto) -> None:
    """Put the folded model's nodes back in the model's order (onnxslim sorts them its own way), so that a model
    with nothing to fold keeps its node ids; a node is known by its outputs' names, which folding keeps."""
    where = {t: k for k, node in enumerate(model.graph.node) for t in node.output if t}
    nodes = list(folded.graph.node)
    order = sorted(range(len(nodes)), key=lambda k: (min((where.get(t, len(where)) for t in nodes[k].output if t),
                                                         default=len(where)), k))
    del folded.graph.node[:]
    folded.graph.node.extend(nodes[k] for k in order)


def _keep_inputs(model: onnx.ModelProto, folded: onnx.ModelProto) -> None:
    """Put back (in the model's order) the graph inputs folding dropped because nothing reads them any more (an
    input read only for its size): the folded model takes the same feeds as the model."""
    inits = {t.name for t in model.graph.initializer}
    have = {i.name: i for i in folded.graph.input}
    inputs = [have.pop(i.name, i) for i in model.graph.input if i.name not in inits]
    inputs += [i for i in have.values()]  # initializers listed as inputs, as the folded model has them
    del folded.graph.input[:]
    folded.graph.input.extend(inputs)


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
                             f"weights {node.input[1]!r} {w} take {w[0]}; fix the input shape (--shape) to match the "
                             "model")
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
