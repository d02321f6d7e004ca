"""Hand-over between OpenVINO partitions in the CPU plugin's own form (``OpenVINOBackend.compile_linked``).

The CPU plugin computes convolutions channels-last (``acdb``, i.e. NHWC in memory) on AVX-512/AMX
CPUs, and in ``bf16`` precision it keeps them in bf16. A partition boundary in the ONNX form (NCHW,
f32) therefore costs a conversion pair: a ``Reorder`` out of the internal form at the end of one
partition and another one back into it at the start of the next. A *linked* tensor is instead declared
(``openvino.preprocess.PrePostProcessor``) as an NHWC tensor of the hand-over element type on both
sides (f32 for fp32, bf16 for bf16, carried in numpy as its raw ``uint16`` bits), so its numpy shape is
``(N, H, W, C)``. The plugin then merges the layout ``Transpose`` into a no-op ("fake") ``Reorder``:

* at the consumer's input, always;
* at the producer's output, unless the tensor comes out of a convolution with a fused residual sum (how
  every ResNet block ends): the plugin's ``MergeTransposeAndReorder`` pass refuses that case (a
  workaround in the plugin), and the boundary would cost a Transpose plus a Reorder, more than the
  plain form. A 1x1 MaxPool (stride 1, exact: the max of one value) between them makes the merge
  happen, for one plain copy in the plugin's layout. In bf16 the precision change already plays that
  part.

What to link is decided by compiling (:class:`_Linker`): every model is compiled plain and with its
links (a producer whose runtime graph keeps a Transpose also with the copy) and the conversion nodes
left in the runtime graphs (:func:`conversion_count`) decide; a link is dropped where a model gains
nothing from it and dropping it lowers the total, e.g. the input of ResNet's pooling head in fp32,
which the plugin computes in NCHW. Compiling a linked sequence so takes 2-3x a plain compile.

On ResNet-50 cut into 18 pieces linking takes the conversions' time to about 0 in fp32 (results/chains/chain.md;
the plugin's PERF_COUNT figures: about half the conversion nodes remain, the 1x1 copies), and in bf16 the
linked chain equals the whole bf16 model bit for bit (the plain chain does not: the plugin keeps the op
in front of a graph output in f32).

Only feature maps are linked (rank-4 float tensors of static shape with C > 1 and H * W > 1); other
tensors, the inputs of the whole sequence and the names in ``plain`` keep the ONNX form. The artifact is
the IR after the PrePostProcessor, so ``OpenVINOBackend.load`` runs the linked form as it is.
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

import onnx

from collage.backends.openvino.compiled import ModelReader, OVCompiled, openvino_module, port_indices
from collage.backends.openvino.inexact import check_exact
from collage.util import sha256_bytes

log = logging.getLogger(__name__)

#: Element type (``openvino.Type`` attribute) a linked tensor is handed over in, per backend precision;
#: a precision not listed links nothing (fp16: not measured).
HANDOVER_TYPES = {"fp32": "f32", "bf16": "bf16"}

#: Suffix of the friendly name of the 1x1 MaxPool copy inserted in front of a linked output.
COPY_SUFFIX = "/collage_handover_copy"


class Linkable(ModelReader, Protocol):
    """What the linker asks of ``OpenVINOBackend``: its precision, its own compile, the plugin's compile of
    a read model and its error for a compile that failed."""

    precision: str

    def compile(self, model: onnx.ModelProto) -> OVCompiled: ...

    def compile_model(self, model: Any) -> Any: ...

    def raise_compile_error(self, model: onnx.ModelProto, error: BaseException, what: str = "compile") -> NoReturn: ...


def linked_names(models: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> set[str]:
    """Tensors some model outputs and a later model reads, minus ``plain`` and anything but an NCHW
    feature map (float, static shape, C > 1, H * W > 1: what the plugin computes channels-last)."""
    produced: dict[str, onnx.ValueInfoProto] = {}
    out: set[str] = set()
    plain = set(plain)
    for m in models:
        inits = {t.name for t in m.graph.initializer}
        for i in m.graph.input:
            if i.name in produced and i.name not in inits and i.name not in plain and _is_feature_map(produced[i.name]):
                out.add(i.name)
        for o in m.graph.output:
            produced.setdefault(o.name, o)
    return out


def _is_feature_map(info: onnx.ValueInfoProto) -> bool:
    t = info.type.tensor_type
    if t.elem_type != onnx.TensorProto.FLOAT or not t.HasField("shape") or len(t.shape.dim) != 4:
        return False
    if not all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim):
        return False
    _, c, h, w = (d.dim_value for d in t.shape.dim)
    return c > 1 and h * w > 1  # not e.g. BERT's [1, 1, 1, S] attention mask


class LinkedOVCompiled(OVCompiled):
    """An OpenVINO partition whose linked inputs/outputs are in the hand-over form.

    Same fast call path as :class:`OVCompiled`; ``linked`` maps each linked tensor name to its form,
    e.g. ``{"r35": "NHWC f32"}``. The arrays it returns for linked names are opaque: pass them on to the
    next linked partition unchanged, do not read them as NCHW tensors.
    """

    _source: onnx.ModelProto

    def __init__(self, backend: ModelReader, compiled: Any, source: onnx.ModelProto, model: Any,
                 linked: dict[str, str], input_names: list[str], output_names: list[str]) -> None:
        super().__init__(backend, compiled, source, input_names, output_names)
        self._ov_model = model
        self.linked = dict(linked)

    def _ir(self) -> tuple[Any, str]:
        """The IR after the PrePostProcessor (the linked form), named by the source and its links."""
        key = self._source.SerializeToString() + repr(sorted(self.linked.items())).encode()
        return self._ov_model, f"openvino-linked-{sha256_bytes(key)[:16]}"

    def save(self, directory: Path) -> dict[str, Any]:
        entry = super().save(directory)
        entry["linked"] = self.linked
        return entry


def compile_linked(backend: Linkable, models: Sequence[onnx.ModelProto],
                   plain: Collection[str] = ()) -> list[OVCompiled]:
    """``Backend.compile_linked`` for OpenVINO (see the module docstring)."""
    for m in models:  # element types the plugin computes inexactly are refused before anything compiles
        check_exact(backend.name, m)
    element = HANDOVER_TYPES.get(backend.precision)
    if element is None:
        return [backend.compile(m) for m in models]
    linker = _Linker(backend, models, element)
    links = linker.choose(linked_names(models, plain))
    out: list[OVCompiled] = []
    form = f"NHWC {element}"
    for k, m in enumerate(models):
        ins, outs = _names(m)
        mine = [n for n in ins + outs if n in links]
        _, model, compiled = linker.best(k, frozenset(mine))
        if not mine:  # compiled from the ONNX model as ``backend.compile`` does
            out.append(OVCompiled(backend, compiled, m, ins, outs))
            continue
        log.debug("%s: %s handed over as %s", m.graph.name, mine, form)
        out.append(LinkedOVCompiled(backend, compiled, m, model, {n: form for n in mine}, ins, outs))
    return out


def _names(m: onnx.ModelProto) -> tuple[list[str], list[str]]:
    inits = {t.name for t in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits], [o.name for o in m.graph.output]


class _Linker:
    """Chooses the linked tensors by compiling: each model is compiled plain and with its links, and the
    conversion nodes left in the runtime graphs (``conversion_count``) decide. Compiles are cached."""

    def __init__(self, backend: Linkable, models: Sequence[onnx.ModelProto], element: str) -> None:
        self.backend, self.models, self.element = backend, models, element
        self._cache: dict[tuple[int, frozenset[str]], tuple[int, Any, Any]] = {}

    def best(self, k: int, links: frozenset[str]) -> tuple[int, Any, Any]:
        """(conversion count, ov.Model, CompiledModel) of model ``k`` with ``links`` (a subset of its
        inputs/outputs); a linked output behind a conv + fused sum gets the 1x1 copy when that is cheaper."""
        key = (k, links)
        if key not in self._cache:
            m = self.models[k]
            ins, outs = _names(m)
            try:
                model = _linked_model(self.backend, m, ins, outs, set(links), self.element, copy=False)
                compiled = self.backend.compile_model(model)
                best = (conversion_count(compiled), model, compiled)
                if any(n in links for n in outs) and _runtime_count(compiled, ("Transpose",)):
                    model = _linked_model(self.backend, m, ins, outs, set(links), self.element, copy=True)
                    compiled = self.backend.compile_model(model)
                    best = min(best, (conversion_count(compiled), model, compiled), key=lambda x: x[0])
            except Exception as e:  # noqa: BLE001 - classified by the base class
                self.backend.raise_compile_error(m, e, what="compile (linked)")
            self._cache[key] = best
        return self._cache[key]

    def count(self, k: int, keep: set[str]) -> int:
        ins, outs = _names(self.models[k])
        return self.best(k, frozenset(n for n in ins + outs if n in keep))[0]

    def choose(self, candidates: set[str]) -> set[str]:
        """Drop links while a model keeps as many conversions linked as plain (a model computing in NCHW,
        such as a pooling head, or one that would convert a bf16 input back to f32) and dropping one of
        its links lowers the total over the models that tensor touches; ties go to the plain form."""
        keep = set(candidates)
        touching: dict[str, list[int]] = {}
        for k, m in enumerate(self.models):
            ins, outs = _names(m)
            for n in ins + outs:
                if n in keep:
                    touching.setdefault(n, []).append(k)
        while True:
            bad = [k for k, m in enumerate(self.models)
                   if any(n in keep for n in sum(_names(m), [])) and self.count(k, keep) >= self.count(k, set())]
            tensors = sorted({n for k in bad for n in sum(_names(self.models[k]), []) if n in keep})
            if not tensors:
                return keep
            deltas = {n: sum(self.count(k, keep - {n}) - self.count(k, keep) for k in touching[n]) for n in tensors}
            name = min(tensors, key=lambda n: deltas[n])
            if deltas[name] > 0:
                return keep
            log.debug("%s stays plain (conversions %+d)", name, deltas[name])
            keep.discard(name)


def _linked_model(backend: Linkable, m: onnx.ModelProto, ins: list[str], outs: list[str],
                  links: set[str], element: str, copy: bool) -> Any:
    """``m`` read by OpenVINO with its linked inputs/outputs declared NHWC ``element`` (``copy``: a 1x1
    MaxPool in front of each linked output)."""
    ov = openvino_module()
    from openvino import opset13 as ops
    from openvino.preprocess import PrePostProcessor

    model = backend.read_model(m.SerializeToString())
    if not links:
        return model
    out_ports = port_indices(model.outputs, outs, "output")
    if copy:
        for name, k in zip(outs, out_ports):
            if name in links:
                result = model.outputs[k].get_node()
                src = result.input_value(0)
                pool = ops.max_pool(src, [1, 1], [1, 1], [0, 0], [0, 0], [1, 1])
                pool.set_friendly_name(f"{name}{COPY_SUFFIX}")
                names = src.get_names()
                src.set_names(set())
                pool.output(0).set_names(names)
                result.input(0).replace_source_output(pool.output(0))
        model.validate_nodes_and_infer_types()
    etype = getattr(ov.Type, element)
    ppp = PrePostProcessor(model)
    for name, k in zip(ins, port_indices(model.inputs, ins, "input")):
        if name in links:
            info = ppp.input(k)
            info.tensor().set_layout(ov.Layout("NHWC")).set_element_type(etype)
            info.model().set_layout(ov.Layout("NCHW"))
    for name, k in zip(outs, out_ports):
        if name in links:
            info = ppp.output(k)
            info.model().set_layout(ov.Layout("NCHW"))
            info.tensor().set_layout(ov.Layout("NHWC")).set_element_type(etype)
    return ppp.build()


def _runtime_count(compiled: Any, kinds: tuple[str, ...], copies: bool = False) -> int:
    n = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        kind = rt["layerType"].astype(str) if "layerType" in rt else ""
        name = op.get_friendly_name()
        if not name.endswith("_fake") and (kind in kinds or (copies and name.endswith(COPY_SUFFIX))):
            n += 1
    return n


def conversion_count(compiled: OVCompiled | Any) -> int:
    """Layout/precision conversions (Reorder, Transpose, Convert nodes, and hand-over copies) the plugin
    kept in the runtime graph of ``compiled`` (an ``OVCompiled`` or an ``openvino.CompiledModel``), not
    counting the merged no-op ("fake") Reorders."""
    return _runtime_count(getattr(compiled, "_compiled", compiled), ("Reorder", "Transpose", "Convert"), copies=True)


__all__ = ["COPY_SUFFIX", "HANDOVER_TYPES", "LinkedOVCompiled", "compile_linked", "conversion_count",
           "linked_names"]
