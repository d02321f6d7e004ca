"""The Graph IR: an ONNX model as a DAG of nodes that can be cut into runnable pieces.

A ``Graph`` wraps one shape-inferred ONNX model. Its contract, so that nobody has to read the
builder to know what it holds:

* **Nodes** are the model's ONNX nodes, keyed by ``int`` ids ``0 .. len(graph)-1`` in a stable
  topological order (the model's own order wherever it already was topological). ``Constant`` nodes
  are folded into initializers at load and nodes whose outputs reach no graph output are dropped, so
  every node id is real work. ``graph.dag.nodes[i]["op"]`` is the ``onnx.NodeProto``.
* **Edges** ``(i, j)`` of ``graph.dag`` exist when node ``j`` reads a tensor that node ``i``
  writes. Edge attributes: ``tensor`` (the first such tensor's name), ``tensors`` (all of them, a
  tuple), ``dtype`` (numpy dtype of ``tensor``) and ``shape`` (tuple of ints).
* **Tensors** are named as in the model. ``graph.tensor(name)`` gives a ``TensorInfo`` (static shape,
  dtype) for every graph input, initializer and node output; a model whose shapes cannot all be made
  static is refused at load with the tensor named and the ``--shape`` override to pass.
* Initializers and graph inputs are not nodes. A node set's boundary (``boundary(nodes)``) is the
  non-initializer tensors entering it and the tensors leaving it (read outside it, or graph outputs).
* Node sets are given as any iterable of ids; bit masks (``1 << id``) are used internally and offered
  to the search (``mask``, ``desc_mask``, ``anc_mask``).

``extract(nodes)`` returns a standalone, checker-valid model of a node set carrying exactly the
initializers it reads; it never re-serialises the whole model. ``fingerprint(nodes)`` hashes what
determines latency (op types, attributes, shapes, dtypes, wiring, small integer constants), not
weight values nor tensor names, so structurally identical blocks share a fingerprint. ``digest()`` is the
sha256 of the whole model as the Graph holds it: what tells this model from another of the same structure
(the cost DB keeps a failure the file caused, not its structure, under it).

Reading the file and bringing the model into this form (shape overrides, folding what the fixed sizes
make constant, pruning, sorting, shape inference) is :mod:`collage.graph.load`; node ids number the folded
model (``graph.model``), and ``graph.original_model`` is the model as read with its sizes fixed.

A node with a subgraph (``If``, ``Loop``, ``Scan``: ``is_control_flow``) is one node: it reads the tensors
of the outer graph its bodies use (``reads``), which are edges of the DAG and inputs of an extracted piece;
the search makes it a candidate of its own, never grown into a larger one (only the whole graph and
the coarse ranges of :mod:`collage.search.ranges` hold it beside other nodes).
"""
from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from onnx import helper, numpy_helper

from collage.errors import ModelError
from collage.graph.contrib import ONNX_DOMAINS, SIZED_DOMAINS
from collage.graph.load import copy_model, node_reads, not_a_tensor, prepare_model, read_model, skeleton
from collage.graph.model_checks import check_dims

#: Integer initializers up to this many elements are treated as structure (shapes, axes) and enter
#: the fingerprint; larger or floating-point ones are weights and do not.
_SMALL_CONST = 64


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # exact; np.prod took 4 us a call (10^6 calls a tune)

    @property
    def elem_type(self) -> int:
        return helper.np_dtype_to_tensor_dtype(self.dtype)

    def value_info(self, name: str | None = None) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name or self.name, self.elem_type, list(self.shape))


def parse_shapes(specs: Iterable[str], option: str = "--shape") -> dict[str, tuple[int, ...]]:
    """Parse ``name=1,3,224,224`` overrides (the CLI's ``--shape``; ``option`` names it in messages) into a dict;
    each dimension a whole number from 1 to int64's largest (:func:`collage.graph.model_checks.check_dims`)."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        if not isinstance(spec, str):
            raise ModelError(f"bad {option} {spec!r}: expected a text NAME=D1,D2,... (for example input=1,3,224,224)")
        name, sep, dims = spec.rpartition("=")
        if not sep or not name:
            raise ModelError(f"bad {option} {spec!r}: expected NAME=D1,D2,... (for example input=1,3,224,224)")
        try:
            parsed = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise ModelError(f"bad {option} {spec!r}: dimensions must be integers") from None
        if not parsed:
            raise ModelError(f"bad {option} {spec!r}: no dimensions (expected NAME=D1,D2,...)")
        out[name] = check_dims(name, parsed, f"{option} {spec!r}")
    return out


class Graph:
    """An ONNX model as a DAG of nodes (see the module docstring for the full contract)."""

    def __init__(self, model: onnx.ModelProto, *, source: str = "<model>",
                 shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        self.source = source
        prepared = prepare_model(model, dict(shapes or {}), source)
        self.model = prepared.model
        #: the model as read with the input sizes fixed, nothing folded: what the numerics are checked against
        #: (``self.model`` itself where nothing was folded: ``self.folding.applied`` False)
        self.original_model = prepared.original
        #: what load-time folding did (``collage.graph.load.Folding``; report.json's ``load`` section)
        self.folding = prepared.folding
        g = self.model.graph
        self.initializers: dict[str, onnx.TensorProto] = {t.name: t for t in g.initializer}
        self.inputs: list[str] = [i.name for i in g.input if i.name not in self.initializers]
        self.outputs: list[str] = [o.name for o in g.output]
        self.opset_import = list(self.model.opset_import)
        self._digest: str | None = None
        self._fingerprints: dict[tuple[int, ...], str] = {}  # fingerprint() of a node set, once computed
        self._boundaries: dict[tuple[int, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}  # boundary()'s
        self._pieces: dict[tuple[str, str], bytes] = {}  # fingerprint parts, once made (_piece)
        self._node_pieces: dict[int, bytes] = {}
        self._tensors: dict[str, TensorInfo] = {}
        self._collect_tensor_info()
        self._build_dag()

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, source: str | os.PathLike | onnx.ModelProto,
             shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
        """Load from a path or a ModelProto; ``shapes`` fixes symbolic input dimensions."""
        model, name = read_model(source)
        return cls(model, source=name, shapes=shapes)

    def _collect_tensor_info(self) -> None:
        g = self.model.graph
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            info = _tensor_info(vi)
            if info is not None:
                self._tensors[vi.name] = info
        for t in g.initializer:
            self._tensors[t.name] = TensorInfo(t.name, np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)),
                                               tuple(int(d) for d in t.dims))
        read = {t for node in g.node for t in node_reads(node)} | {o.name for o in g.output}
        kinds = {vi.name: not_a_tensor(vi) for vi in list(g.value_info) + list(g.output)}
        for node in g.node:
            for out in node.output:
                if out and out in read and out not in self._tensors:
                    if kinds.get(out):
                        hint = ("skl2onnx writes ZipMap unless converted with options={id(model): {'zipmap': False}}"
                                if node.op_type == "ZipMap" else
                                "export the model without sequence, map or optional values")
                        raise ModelError(
                            f"{self.source}: value {out!r} (output of node {node.name or node.op_type!r}, "
                            f"{node.op_type}) is {kinds[out]}, not a tensor; collage cuts, measures and "
                            f"runs graphs of tensors only ({hint})")
                    static = all(i in self._tensors for i in self.inputs)
                    contrib = node.domain not in SIZED_DOMAINS
                    knows = "does not size" if node.domain in ONNX_DOMAINS else "does not know"
                    why = (f"ONNX {knows} {node.domain} op {node.op_type}, and ONNX Runtime, run on the node "
                           "alone, gave no size that holds for any values (its output size depends on the values it "
                           "reads, or it failed on inputs of these sizes)" if contrib else
                           f"ONNX's shape inference could not follow {node.op_type}: its output size depends on values "
                           "it reads (as TopK's k, NonZero or Range do), or ONNX does not know the op")
                    raise ModelError(
                        f"{self.source}: tensor {out!r} (output of node {node.name or node.op_type!r}) has no static "
                        "shape after inference; " + (
                            f"every graph input has one, so {why}; collage needs a static shape for every tensor (a "
                            "size read from an input can be made a constant)" if static else
                            "fix symbolic input dims with --shape NAME=D1,D2,..."))

    def _build_dag(self) -> None:
        g = self.model.graph
        self.dag = nx.DiGraph()
        self._producer: dict[str, int] = {}
        self._consumers: dict[str, list[int]] = {}
        self._reads: list[list[str]] = []
        self._ops: list[onnx.NodeProto] = list(g.node)
        for i, node in enumerate(g.node):
            self.dag.add_node(i, op=node)
            for t in node.output:
                if t:
                    self._producer[t] = i
            reads = node_reads(node)
            self._reads.append(reads)
            for t in reads:
                self._consumers.setdefault(t, []).append(i)
                src = self._producer.get(t)
                if src is None:
                    continue
                if self.dag.has_edge(src, i):
                    self.dag.edges[src, i]["tensors"] += (t,)
                else:
                    info = self._tensors[t]
                    self.dag.add_edge(src, i, tensor=t, tensors=(t,), dtype=info.dtype, shape=info.shape)
        n = len(g.node)
        self._desc = [0] * n
        self._anc = [0] * n
        for i in reversed(range(n)):
            m = 0
            for j in self.dag.successors(i):
                m |= (1 << j) | self._desc[j]
            self._desc[i] = m
        for i in range(n):
            m = 0
            for j in self.dag.predecessors(i):
                m |= (1 << j) | self._anc[j]
            self._anc[i] = m

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return self.dag.number_of_nodes()

    @property
    def name(self) -> str:
        return self.model.graph.name or Path(self.source).stem

    def op(self, i: int) -> onnx.NodeProto:
        return self._ops[i]  # the dag's "op" (a list: millions of lookups in a large graph's tune)

    def op_type(self, i: int) -> str:
        return self._ops[i].op_type

    def node_label(self, i: int) -> str:
        node = self.op(i)
        return f"#{i} {node.op_type}" + (f" {node.name!r}" if node.name else "")

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self._tensors[name]
        except KeyError:
            raise ModelError(f"{self.source}: no tensor named {name!r}") from None

    def reads(self, i: int) -> list[str]:
        """Tensors node ``i`` reads (its inputs, and outer-scope names its subgraphs use)."""
        return self._reads[i]

    def is_control_flow(self, i: int) -> bool:
        """Node ``i`` has a subgraph (If, Loop, Scan, or any op with a graph attribute): one node to the search."""
        return has_subgraph(self.op(i))

    def producer(self, tensor: str) -> int | None:
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> list[int]:
        return self._consumers.get(tensor, [])

    def is_weight(self, tensor: str) -> bool:
        return tensor in self.initializers

    # bitsets -----------------------------------------------------------
    @staticmethod
    def mask(nodes: Iterable[int]) -> int:
        m = 0
        for i in nodes:
            m |= 1 << i
        return m

    @staticmethod
    def ids(mask: int) -> list[int]:
        out = []
        while mask:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
        return out

    def desc_mask(self, i: int) -> int:
        """Bitset of every node reachable from node ``i`` (``i`` excluded)."""
        return self._desc[i]

    def anc_mask(self, i: int) -> int:
        """Bitset of every node from which node ``i`` is reachable (``i`` excluded)."""
        return self._anc[i]

    def is_convex(self, nodes: Iterable[int]) -> bool:
        """True when no path leaves the set and comes back into it."""
        s = nodes if isinstance(nodes, int) else self.mask(nodes)
        outside_reach = 0
        for i in self.ids(s):
            for j in self.dag.successors(i):
                if not (s >> j) & 1:
                    outside_reach |= (1 << j) | self._desc[j]
        return outside_reach & s == 0

    def is_connected(self, nodes: Iterable[int]) -> bool:
        ids = self.ids(nodes) if isinstance(nodes, int) else sorted(set(nodes))
        return bool(ids) and nx.is_weakly_connected(self.dag.subgraph(ids))

    def boundary(self, nodes: Iterable[int]) -> tuple[list[str], list[str]]:
        """(tensors entering the set, tensors leaving it), deterministic order; weights not included. Computed once
        per node set (the fingerprint and the features of each candidate both need it)."""
        ids = self.ids(nodes) if isinstance(nodes, int) else sorted(set(nodes))
        memo = tuple(ids)
        known = self._boundaries.get(memo)
        if known is not None:
            return list(known[0]), list(known[1])
        inside = set(ids)
        seen: set[str] = set()
        entering: list[str] = []
        weights, producer = self.initializers, self._producer
        for i in ids:
            for t in self._reads[i]:
                if t in seen:
                    continue
                seen.add(t)
                if t not in weights and ((src := producer.get(t)) is None or src not in inside):
                    entering.append(t)
        graph_outputs = set(self.outputs)
        leaving: list[str] = []
        consumers = self._consumers
        for i in ids:
            for t in self.op(i).output:
                if t and (t in graph_outputs or any(c not in inside for c in consumers.get(t, ()))):
                    leaving.append(t)
        self._boundaries[memo] = (tuple(entering), tuple(leaving))
        return entering, leaving

    # ------------------------------------------------------------------ cutting
    def extract(self, nodes: Iterable[int], name: str | None = None) -> onnx.ModelProto:
        """A standalone, checker-valid model of the node set (see the module docstring)."""
        ids = self.ids(nodes) if isinstance(nodes, int) else sorted(set(nodes))
        if not ids:
            raise ModelError("extract() needs at least one node")
        bad = [i for i in ids if i < 0 or i >= len(self)]
        if bad:
            raise ModelError(f"{self.source}: no node with id {bad[0]} (the graph has {len(self)} nodes)")
        entering, leaving = self.boundary(ids)
        weights: list[onnx.TensorProto] = []
        seen: set[str] = set()
        for i in ids:
            for t in self._reads[i]:
                if t in self.initializers and t not in seen:
                    seen.add(t)
                    weights.append(self.initializers[t])
        graph = helper.make_graph(
            [self.op(i) for i in ids],
            name or f"{self.name}_part",
            [self._tensors[t].value_info() for t in entering],
            [self._tensors[t].value_info() for t in leaving],
            initializer=weights,
        )
        model = helper.make_model(graph, opset_imports=self.opset_import, producer_name="collage")
        model.ir_version = self.model.ir_version
        return model

    def fingerprint(self, nodes: Iterable[int]) -> str:
        """Stable hash of what determines the latency of a node set (see the module docstring); computed once
        per node set (the candidates step, guided measuring and the measuring job each ask for every one:
        143,388 candidates of inception_v2)."""
        ids = self.ids(nodes) if isinstance(nodes, int) else sorted(set(nodes))
        memo = tuple(ids)
        known = self._fingerprints.get(memo)
        if known is not None:
            return known
        entering, leaving = self.boundary(ids)
        local: dict[str, str] = {t: f"in{k}" for k, t in enumerate(entering)}
        piece = self._piece
        parts = [piece("in", t) for t in entering]
        for k, i in enumerate(ids):
            node = self.op(i)
            parts.append(self._node_piece(i))
            for t in self._reads[i]:
                if t in local:
                    parts.append(piece("ref", local[t]))
                elif t in self.initializers:
                    parts.append(piece("const", t))
                else:  # cannot happen for a valid boundary; keep the hash total
                    parts.append(piece("ext", t))
            for j, t in enumerate(node.output):
                if t:
                    local[t] = f"n{k}.{j}"
                    parts.append(piece("out", t))
        parts.append(_part(("leaving", tuple(local[t] for t in leaving))))
        h = hashlib.sha256(b"".join(parts))
        self._fingerprints[memo] = fp = h.hexdigest()[:24]
        return fp

    def _piece(self, kind: str, name: str) -> bytes:
        """One part of a fingerprint: a tensor entering (``in``) or made (``out``), a weight (``const``), a
        reference to a tensor of the set (``ref``, by its local name), made once per kind and name: a graph's node
        sets repeat the same parts many times over (inception_v2: 71,694 node sets)."""
        known = self._pieces.get((kind, name))
        if known is None:
            if kind == "in":
                info = self._tensors[name]
                known = _part(("in", info.dtype.str, info.shape))
            elif kind == "out":
                out = self._tensors.get(name)  # None: an output nothing reads (Dropout's mask)
                known = _part(("out", out.dtype.str if out else None, out.shape if out else None))
            elif kind == "const":
                known = _part(("const", *self._const_key(name)))
            else:
                known = _part((kind, name))
            self._pieces[(kind, name)] = known
        return known

    def _node_piece(self, i: int) -> bytes:
        """Node ``i``'s op and attributes as a fingerprint part, made once per node."""
        known = self._node_pieces.get(i)
        if known is None:
            node = self.op(i)
            known = self._node_pieces[i] = _part(("node", node.domain, node.op_type, _attrs_key(node)))
        return known

    def digest(self) -> str:
        """sha256 (hex) of the model as this Graph holds it (its file after loading and ``--shape``), computed once."""
        if self._digest is None:
            self._digest = hashlib.sha256(self.model.SerializeToString(deterministic=True)).hexdigest()
        return self._digest

    def _const_key(self, name: str) -> tuple:
        t = self.initializers[name]
        info = self._tensors[name]
        small_int = info.dtype.kind in "iub" and int(np.prod(info.shape, dtype=np.int64)) <= _SMALL_CONST
        if small_int:
            return info.dtype.str, info.shape, tuple(numpy_helper.to_array(t).ravel().tolist())
        return info.dtype.str, info.shape

    def with_outputs(self, tensors: Sequence[str]) -> onnx.ModelProto:
        """The whole model with extra tensors exposed as outputs (for reference runs)."""
        model = copy_model(self.model)
        have = {o.name for o in model.graph.output}
        for t in tensors:
            if t not in have:
                model.graph.output.append(self._tensors[t].value_info())
                have.add(t)
        return model

    # ------------------------------------------------------------------ checking
    def validate(self) -> None:
        """Check the invariants; raise ModelError with a message that says how to fix what is wrong."""
        if not nx.is_directed_acyclic_graph(self.dag):
            cycle = nx.find_cycle(self.dag)
            raise ModelError(f"{self.source}: graph has a cycle through nodes {[u for u, _ in cycle]}; "
                             "ONNX graphs must be acyclic (re-export the model)")
        for u, v in self.dag.edges:
            if u >= v:
                raise ModelError(f"{self.source}: edge {u}->{v} breaks topological ids (internal error: "
                                 "rebuild the Graph with Graph.load)")
        for t in self.inputs + self.outputs:
            if t not in self._tensors:
                raise ModelError(f"{self.source}: graph input/output {t!r} has no type or shape; "
                                 f"pass --shape {t}=D1,D2,...")
        for t in self.outputs:
            if t in self.initializers and self._producer.get(t) is None and t not in self.inputs:
                raise ModelError(f"{self.source}: graph output {t!r} is a constant (an initializer, or a Constant "
                                 "node folded into one), which no node computes: collage's artifacts compute their "
                                 "outputs; drop it from the outputs or feed it through an Identity node")
        defined = set(self.inputs) | set(self.initializers)
        for i in range(len(self)):
            for t in self._reads[i]:
                if t not in defined and self._producer.get(t, len(self)) >= i:
                    raise ModelError(f"{self.source}: {self.node_label(i)} reads {t!r}, which nothing defines "
                                     "before it; the model is malformed (run onnx.checker on it)")
            defined.update(o for o in self.op(i).output if o)
        for u, v, data in self.dag.edges(data=True):
            if any(d < 0 for d in data["shape"]):
                raise ModelError(f"{self.source}: tensor {data['tensor']!r} between {self.node_label(u)} and "
                                 f"{self.node_label(v)} has no static shape; pass --shape overrides")
        try:
            onnx.checker.check_model(skeleton(self.model))
        except onnx.checker.ValidationError as e:
            raise ModelError(f"{self.source}: ONNX checker: {str(e).strip().splitlines()[0]}") from e

    def summary(self) -> str:
        return f"{self.name}: {len(self)} nodes, {len(self.initializers)} initializers"


# ---------------------------------------------------------------------- helpers
def _tensor_info(vi: onnx.ValueInfoProto) -> TensorInfo | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if tt.elem_type == 0 or not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return TensorInfo(vi.name, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)), tuple(dims))


def has_subgraph(node: onnx.NodeProto) -> bool:
    """True for a node with a graph attribute (If, Loop, Scan ...)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _subgraph_key(g: onnx.GraphProto) -> tuple:
    """What of a subgraph (an If branch, a Loop body) determines latency, without tensor names: its inputs' and
    outputs' types, each node's op, attributes (nested subgraphs likewise) and wiring (a name local to the subgraph
    by where it was defined, an outer-scope name by the order of first use), and its small integer constants."""
    local: dict[str, str] = {}
    outer: dict[str, str] = {}
    items: list[tuple] = []
    for k, vi in enumerate(g.input):
        local[vi.name] = f"in{k}"
        items.append(("in", vi.type.SerializeToString()))
    for k, t in enumerate(g.initializer):
        local[t.name] = f"c{k}"
        arr = numpy_helper.to_array(t)
        small = arr.dtype.kind in "iub" and arr.size <= _SMALL_CONST
        items.append(("const", arr.dtype.str, arr.shape, arr.ravel().tolist() if small else None))
    for n, node in enumerate(g.node):
        refs = [local.get(t) or outer.setdefault(t, f"outer{len(outer)}") if t else "" for t in node.input]
        items.append(("node", node.domain, node.op_type, _attrs_key(node), tuple(refs)))
        for j, t in enumerate(node.output):
            local[t] = f"n{n}.{j}"
    items.append(("out", tuple((local.get(o.name, "?"), o.type.SerializeToString()) for o in g.output)))
    return tuple(items)


def _part(parts: tuple) -> bytes:
    """A fingerprint's hashed form of ``parts``: its repr, NUL-terminated (the digests in every cost DB are of these
    bytes: changing them orphans every stored measurement)."""
    return repr(parts).encode() + b"\x00"


def _attrs_key(node: onnx.NodeProto) -> tuple:
    items = []
    for a in sorted(node.attribute, key=lambda a: a.name):
        if a.type == onnx.AttributeProto.GRAPH:
            items.append((a.name, "graph", _subgraph_key(a.g)))
        elif a.type == onnx.AttributeProto.GRAPHS:
            items.append((a.name, "graphs", tuple(_subgraph_key(g) for g in a.graphs)))
        elif a.type == onnx.AttributeProto.TENSOR:
            arr = numpy_helper.to_array(a.t)
            items.append((a.name, arr.dtype.str, arr.shape, arr.ravel()[:_SMALL_CONST].tolist()))
        else:
            items.append((a.name, str(helper.get_attribute_value(a))))
    return tuple(items)
