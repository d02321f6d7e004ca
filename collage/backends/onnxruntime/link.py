"""Linked ONNX Runtime partitions: hand NCHWc-blocked tensors over between sessions.

At level ``all`` ONNX Runtime (CPU) runs convolutions in its blocked NCHWc layout and converts at the
edges of the graph: a ``com.microsoft.nchwc`` ``ReorderOutput`` (blocked -> NCHW) before a graph
output, a ``ReorderInput`` (NCHW -> blocked) after a graph input. When one model is cut into ORT
partitions that run one after another, every cut pays that pair although the whole model never
leaves the blocked layout (results/chains/chain.md: about 0.27 ms per ResNet-50 boundary).

``compile_linked`` (``OnnxRuntimeBackend.compile_linked`` delegates here) takes each partition's
ORT-optimised graph (the same optimisation ``compile`` does, residual routing included) and, for
every linked tensor T (produced by one partition, read by later ones, not in ``plain``):

* if the producer makes T with a trailing ``ReorderOutput`` (``channels_last`` 0, T read by no other
  node of the producer) and EVERY later partition that reads T reads it only through
  ``ReorderInput`` nodes (``channels_last`` 0), the producer drops its ``ReorderOutput`` and outputs
  the blocked tensor under the name T, and the readers drop their ``ReorderInput`` and read T
  directly;
* anything else (T in ``plain``, a reader that needs T in NCHW, no NCHWc at all, e.g. BERT) stays as
  it is.

The blocked tensor keeps T's name, so the code that stitches partitions together by name needs no
change; only its shape differs. How ORT stores it (checked by experiment, onnxruntime 1.32): the
tensor's shape is ``[N, C', H, W]`` with ``C'`` = C rounded up to the NCHWc block size (16 with
AVX-512, 8 with AVX2; asked from ORT itself, :func:`block_size`), and its memory is
``[N, C'/block, H, W, block]`` with the padding channels zero. To the caller the array is opaque: it
is only ever passed from the producer to its readers.

The rewritten graphs are already optimised; their sessions are created at level ``disable`` (level
``all`` would run the NCHWc transformer over the already-transformed graph), through
``OnnxRuntimeBackend.open_session`` and ``OrtCompiled`` (shared thread pool, IO binding). ``save`` writes
the rewritten graph, so a loaded artifact hands over in the blocked layout too. Partitions with no
linked tensor are compiled with ``backend.compile`` exactly as alone.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from collage.backends.base import Compiled
from collage.backends.onnxruntime.known_wrong import check_known_wrong
from collage.backends.onnxruntime.session import OrtCompiled, SessionSettings
from collage.errors import CollageError

if TYPE_CHECKING:
    import onnx  # link time only (imported where used): loading a linked artifact never imports onnx

log = logging.getLogger(__name__)

NCHWC_DOMAIN = "com.microsoft.nchwc"


class Linkable(SessionSettings, Protocol):
    """What the linker asks of ``OnnxRuntimeBackend``: its level, its own compile, its optimised forms and
    sessions built from an already-optimised model."""

    opt_level: str

    def compile(self, model: onnx.ModelProto) -> Compiled: ...

    def open_session(self, data: bytes | str, opt_level: str | None = None, quiet: bool = False) -> Any: ...

    def routed_form(self, model: onnx.ModelProto) -> bytes | None: ...

    def optimized_model(self, model: onnx.ModelProto) -> onnx.ModelProto: ...


@dataclass
class LinkPlan:
    """What ``link`` did: blocked shapes by tensor and the conversion nodes it removed."""

    blocked: dict[str, list[int]] = field(default_factory=dict)
    dropped_reorder_output: int = 0
    dropped_reorder_input: int = 0
    #: linked tensor names per model (its inputs and outputs that now carry the blocked layout)
    per_model: list[list[str]] = field(default_factory=list)


class LinkedOrtCompiled(OrtCompiled):
    """An ``OrtCompiled`` whose inputs/outputs in ``linked`` carry ORT's NCHWc-blocked layout (opaque)."""

    def __init__(self, backend: SessionSettings, session: Any, model: onnx.ModelProto | Path,
                 optimized: bytes | None = None, linked: Sequence[str] = ()) -> None:
        super().__init__(backend, session, model, optimized)
        self.linked = list(linked)

    def save(self, directory: Path) -> dict[str, Any]:
        entry = super().save(directory)
        entry["format"] = "onnx (optimised by onnxruntime, level all; linked tensors in NCHWc layout)"
        entry["linked"] = {"layout": "nchwc", "tensors": list(self.linked)}
        return entry


@functools.cache
def block_size() -> int:
    """ONNX Runtime's NCHWc block size on this CPU (the channel padding of a ``ReorderInput`` of 1 channel)."""
    import onnx
    from onnx import helper

    node = helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN, channels_last=0)
    graph = helper.make_graph([node], "nchwc_probe",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 1, 1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)])
    from collage.backends.onnxruntime.session import make_session

    shape = make_session(model).get_outputs()[0].shape
    if not isinstance(shape[1], int) or shape[1] < 1:
        raise CollageError(f"onnxruntime: cannot tell its NCHWc block size (ReorderInput of 1 channel gave {shape})")
    return int(shape[1])


def optimized_graph(backend: Linkable, model: onnx.ModelProto) -> onnx.ModelProto:
    """ORT's level-``all`` optimised graph of ``model``, residual routing applied as ``compile`` does."""
    import onnx

    routed = backend.routed_form(model)
    return onnx.load_from_string(routed) if routed is not None else backend.optimized_model(model)


def _channels_last(node: onnx.NodeProto) -> int:
    for a in node.attribute:
        if a.name == "channels_last":
            from onnx import helper

            return int(helper.get_attribute_value(a))
    return 0


def _is(node: onnx.NodeProto, op: str) -> bool:
    return node.domain == NCHWC_DOMAIN and node.op_type == op and _channels_last(node) == 0


def _readers(graph: onnx.GraphProto, name: str) -> list[onnx.NodeProto]:
    return [n for n in graph.node if name in n.input]


def _dims(value: onnx.ValueInfoProto) -> list[int] | None:
    from onnx import TensorProto

    tt = value.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
    if tt.elem_type != TensorProto.FLOAT or len(dims) != 4 or min(dims) < 1:
        return None
    return dims


def _producer_reorder(graph: onnx.GraphProto, name: str) -> onnx.NodeProto | None:
    """The trailing ``ReorderOutput`` making graph output ``name``, read by no node of the graph, else None."""
    makers = [n for n in graph.node if name in n.output]
    if len(makers) != 1 or not _is(makers[0], "ReorderOutput") or _readers(graph, name):
        return None
    blocked = makers[0].input[0]  # renamed to ``name``: it must be nothing else's and converted once only
    ends = {v.name for v in graph.input} | {v.name for v in graph.output}
    if blocked in ends or sum(n.op_type == "ReorderOutput" for n in _readers(graph, blocked)) != 1:
        return None
    return makers[0]


def _reader_reorders(graph: onnx.GraphProto, name: str) -> list[onnx.NodeProto] | None:
    """The ``ReorderInput`` nodes through which ``graph`` reads input ``name``; None if it reads it otherwise."""
    readers = _readers(graph, name)
    outputs = {o.name for o in graph.output}
    if not readers or name in outputs or any(not _is(n, "ReorderInput") or n.output[0] in outputs for n in readers):
        return None
    return readers


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for k, x in enumerate(node.input):
            if x == old:
                node.input[k] = new
        for k, x in enumerate(node.output):
            if x == old:
                node.output[k] = new


def _set_shape(values: Sequence[onnx.ValueInfoProto], name: str, shape: list[int]) -> None:
    for v in values:
        if v.name == name:
            dims = v.type.tensor_type.shape.dim
            for d, s in zip(dims, shape):
                d.Clear()
                d.dim_value = s


def link(graphs: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> LinkPlan:
    """Rewrite ORT-optimised ``graphs`` (run in this order) IN PLACE so linked tensors stay blocked (module doc)."""
    plain = set(plain)
    result = LinkPlan(per_model=[[] for _ in graphs])
    inputs = [{v.name for v in m.graph.input} - {t.name for t in m.graph.initializer} for m in graphs]
    block = None
    for k, producer in enumerate(graphs):
        for out in list(producer.graph.output):
            name = out.name
            dims = _dims(out)
            readers = [j for j in range(k + 1, len(graphs)) if name in inputs[j]]
            if name in plain or dims is None or not readers:
                continue
            reorder = _producer_reorder(producer.graph, name)
            if reorder is None:
                continue
            reads = {j: _reader_reorders(graphs[j].graph, name) for j in readers}
            if any(r is None for r in reads.values()):
                log.debug("onnxruntime: %r stays NCHW (a later partition reads it in NCHW)", name)
                continue
            block = block or block_size()
            shape = [dims[0], -(-dims[1] // block) * block, dims[2], dims[3]]
            blocked_in = reorder.input[0]
            producer.graph.node.remove(reorder)
            _rename(producer.graph, blocked_in, name)
            _set_shape(producer.graph.output, name, shape)
            result.dropped_reorder_output += 1
            result.per_model[k].append(name)
            for j, nodes in reads.items():
                g = graphs[j].graph
                for node in nodes:
                    g.node.remove(node)
                    _rename(g, node.output[0], name)
                    result.dropped_reorder_input += 1
                _set_shape(g.input, name, shape)
                result.per_model[j].append(name)
            result.blocked[name] = shape
    return result


def compile_linked(backend: Linkable, models: Sequence[onnx.ModelProto],
                   plain: Collection[str] = ()) -> list[Compiled]:
    """``Backend.compile_linked`` for ONNX Runtime CPU (module doc); unlinked partitions compile as alone."""
    for m in models:
        check_known_wrong(backend.name, m)
    if backend.name != "onnxruntime" or backend.opt_level != "all" or len(models) < 2:
        # NCHWc is the CPU provider's layout at level all only: otherwise nothing to hand over
        return [backend.compile(m) for m in models]
    graphs: list[onnx.ModelProto | None] = []
    for m in models:
        try:
            graphs.append(optimized_graph(backend, m))
        except Exception as e:  # noqa: BLE001 - compile() below reports a partition ORT cannot take
            log.debug("onnxruntime: cannot optimise %r for linking (%s)", m.graph.name, e)
            graphs.append(None)
    usable = [k for k, g in enumerate(graphs) if g is not None]
    plain = set(plain).union(*({v.name for v in m.graph.input} for m, g in zip(models, graphs) if g is None))
    plan = link([graphs[k] for k in usable], plain)
    linked = {k: plan.per_model[i] for i, k in enumerate(usable) if plan.per_model[i]}
    log.info("onnxruntime: linked %d tensors in NCHWc (%d ReorderOutput, %d ReorderInput dropped)",
             len(plan.blocked), plan.dropped_reorder_output, plan.dropped_reorder_input)
    out: list[OrtCompiled] = []
    for k, m in enumerate(models):
        if k not in linked:
            out.append(backend.compile(m))
            continue
        data = graphs[k].SerializeToString()
        try:
            session = backend.open_session(data, opt_level="disable")
        except Exception as e:  # noqa: BLE001
            raise CollageError(f"onnxruntime: the linked form of partition {m.graph.name!r} (tensors {linked[k]} in "
                               f"NCHWc) does not load: {e}; compile it with compile() instead") from e
        out.append(LinkedOrtCompiled(backend, session, m, data, linked[k]))
    return out
