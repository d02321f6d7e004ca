"""The light models of the ``onnx`` package made runnable: seeded weights, opset 17 (used by ``collage.zoo.catalog``).

``onnx/backend/test/data/light/`` holds real architectures (ResNet-50, DenseNet-121, Inception v1/v2,
ShuffleNet, SqueezeNet, VGG-19, ZFNet-512, AlexNet) whose large weights are ``ConstantOfShape`` nodes
fed by ``*__SHAPE`` initializers (the small weights keep real values). ``convert_light``:

* upgrades opset 9 / IR 3 to opset 17 / IR 8 (``_upgrade_to_17``: hand-written rules for the few ops
  whose form changed; ``onnx.version_converter`` would add a Constant node per Unsqueeze and reshapes
  around SqueezeNet's Softmax). One opset for every zoo model (LayerNormalization needs 17), recent
  enough for the TVM relax frontend, OpenVINO and ONNX Runtime, which all import every zoo model.
* turns every float weight (the stand-ins *and* the small real ones, so that they are consistent) into
  a seeded random initializer of the right shape, scaled by what reads it: He-normal for Conv/Gemm
  weights, BatchNormalization gamma ~ U(0.8, 1.2) (0.2x on a BN whose output feeds a residual
  ``Sum``/``Add``, so residual stacks stay O(1)), beta/mean ~ N(0, 0.05), var ~ U(0.8, 1.2) > 0,
  biases ~ N(0, 0.01); Unsqueeze/Reshape of a weight is folded into the weight; the ``ConstantOfShape``
  nodes and the weight graph inputs go.
* rescales the classifier feeding the final Softmax (one ONNX Runtime run on seeded N(0, 1) input) so
  that its logits have std 2: otherwise the Softmax saturates into the same one-hot for every input.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from collage.zoo.models import IR_VERSION, OPSET, tensor_rng

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _final_consumers(name: str,
                     consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> list[tuple[onnx.NodeProto, int]]:
    """Consumers of a weight, looking through Unsqueeze/Reshape/Identity (Caffe2's scale layers)."""
    out = []
    for node, idx in consumers.get(name, []):
        if node.op_type in ("Unsqueeze", "Reshape", "Identity", "Flatten") and idx == 0:
            out.extend(_final_consumers(node.output[0], consumers))
        else:
            out.append((node, idx))
    return out


def _feeds_residual(node: onnx.NodeProto, consumers: dict, weight_names: set[str]) -> bool:
    for c, _ in consumers.get(node.output[0], []):
        if c.op_type in ("Sum", "Add") and all(t not in weight_names for t in c.input):
            return True
    return False


def _light_weight(name: str, shape: tuple[int, ...], seed: int, consumers: dict, weight_names: set[str]) -> np.ndarray:
    rng = tensor_rng(seed, name)
    finals = _final_consumers(name, consumers)
    node, idx = finals[0] if finals else (None, -1)
    op = node.op_type if node is not None else ""
    n = int(np.prod(shape, dtype=np.int64))
    normal = rng.standard_normal(n, dtype=np.float32).reshape(shape)
    if op == "Conv" and idx == 1:
        fan_in = int(np.prod(shape[1:], dtype=np.int64)) or 1
        return normal * np.float32(np.sqrt(2.0 / fan_in))
    if op == "Gemm" and idx == 1:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if trans_b else shape[0]
        return normal * np.float32(np.sqrt(2.0 / fan_in))
    if op == "BatchNormalization":
        if idx == 1:
            gamma = rng.uniform(0.8, 1.2, shape).astype(np.float32)
            return gamma * np.float32(0.2) if _feeds_residual(node, consumers, weight_names) else gamma
        if idx == 4:
            return rng.uniform(0.8, 1.2, shape).astype(np.float32)
        return normal * np.float32(0.05)
    if op == "Mul":
        return rng.uniform(0.8, 1.2, shape).astype(np.float32)
    return normal * np.float32(0.01)  # biases (Conv/Gemm input 2), Add shifts, anything else


#: Ops of the light models whose opset-9 form means the same at opset 17 (attributes unchanged).
_SAME_AT_17 = frozenset({"Add", "AveragePool", "BatchNormalization", "Concat", "Conv", "Gemm", "GlobalAveragePool",
                         "LRN", "MaxPool", "Mul", "Relu", "Reshape", "Sum", "Transpose"})


def _upgrade_to_17(model: onnx.ModelProto) -> None:
    """Opset 9 -> 17 in place, keeping every tensor and node name (onnx.version_converter renames them).

    What changed between 9 and 17 for the ops these models use: Unsqueeze's ``axes`` became an input
    (13), Dropout's ``ratio`` became an input (12), Softmax went from "flatten to 2-D at ``axis``" to
    "along ``axis``" with default -1 (13): kept exact by writing ``axis`` and checking that every dim
    after it is 1 or it is the last. Every other op here means the same at 17.
    """
    g = model.graph
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
             for vi in list(inferred.graph.value_info) + list(inferred.graph.input)}
    read = {t for n in g.node for t in n.input} | {o.name for o in g.output}
    for node in g.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type in ("Unsqueeze", "Squeeze") and "axes" in attrs:
            name = f"{node.output[0]}__axes"
            g.initializer.append(numpy_helper.from_array(np.array(list(attrs["axes"].ints), np.int64), name))
            node.input.append(name)
            node.attribute.remove(attrs["axes"])
        elif node.op_type == "Dropout":
            if "ratio" in attrs:
                name = f"{node.output[0]}__ratio"
                g.initializer.append(numpy_helper.from_array(np.array(attrs["ratio"].f, np.float32), name))
                node.input.append(name)
                node.attribute.remove(attrs["ratio"])
            if len(node.output) > 1 and node.output[1] not in read:
                del node.output[1:]
        elif node.op_type == "Softmax":
            dims = ranks.get(node.input[0])
            axis = attrs["axis"].i if "axis" in attrs else 1
            if dims is None or not (axis in (-1, len(dims) - 1) or all(d == 1 for d in dims[axis + 1:])):
                raise NotImplementedError(f"Softmax {node.output[0]!r} on {dims}: opset-13 semantics differ")
            if "axis" not in attrs:
                node.attribute.append(helper.make_attribute("axis", axis))
        elif node.op_type not in _SAME_AT_17 and node.op_type != "ConstantOfShape":
            raise NotImplementedError(f"no opset 9 -> 17 rule for {node.op_type}")
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", OPSET))
    model.ir_version = IR_VERSION


def convert_light(arch: str, seed: int) -> onnx.ModelProto:
    """The light ``arch`` with seeded random weights at opset ``OPSET`` (see the module docstring)."""
    model = onnx.load(str(LIGHT_DIR / f"light_{arch}.onnx"))
    _upgrade_to_17(model)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    keep_nodes = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shapes[node.output[0]] = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        else:
            keep_nodes.append(node)
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT and t.name not in shapes and t.dims:
            shapes[t.name] = tuple(int(d) for d in t.dims)
    # Fold Unsqueeze/Reshape of a weight (Caffe2 scale layers, FC weights) into a weight of the new shape: ORT
    # warns about each one it cannot eliminate, and backends would each fold it anyway.
    folded = []
    for node in keep_nodes:
        if node.op_type == "Unsqueeze" and node.input[0] in shapes and node.input[1] in inits:
            axes = [int(a) for a in numpy_helper.to_array(inits[node.input[1]]).ravel()]
            shapes[node.output[0]] = np.expand_dims(np.zeros(shapes[node.input[0]], np.int8), axes).shape
        elif node.op_type == "Reshape" and node.input[0] in shapes and node.input[1] in inits:
            target = numpy_helper.to_array(inits[node.input[1]])
            shapes[node.output[0]] = np.zeros(shapes[node.input[0]], np.int8).reshape(target).shape
        else:
            folded.append(node)
    keep_nodes = folded
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in keep_nodes:
        for k, t in enumerate(node.input):
            consumers.setdefault(t, []).append((node, k))
    weight_names = set(shapes)
    used = {t for node in keep_nodes for t in node.input}
    del g.node[:]
    g.node.extend(keep_nodes)
    rest = [t for t in g.initializer if t.name in used and t.name not in shapes]
    del g.initializer[:]
    g.initializer.extend(rest)
    init_names = {t.name for t in rest}
    inputs = [i for i in g.input if i.name in used and i.name not in init_names and i.name not in shapes]
    del g.input[:]
    g.input.extend(inputs)
    del g.value_info[:]
    for name in sorted(weight_names & used):
        g.initializer.append(numpy_helper.from_array(
            _light_weight(name, shapes[name], seed, consumers, weight_names), name))
    g.name = arch
    model.producer_name = "collage.zoo"
    _calibrate_logits(model, seed)
    return model


def _calibrate_logits(model: onnx.ModelProto, seed: int, target_std: float = 2.0) -> None:
    """Rescale the classifier (the Gemm/Conv feeding the final Softmax) so that its logits have std
    ``target_std`` on N(0, 1) input: random weights otherwise give logits large enough to saturate the
    Softmax into the same one-hot output for every input."""
    import onnxruntime as ort

    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    last = producer.get(g.output[0].name)
    if last is None or last.op_type != "Softmax":
        return
    node = producer.get(last.input[0])
    while node is not None and node.op_type in ("Reshape", "Flatten", "Relu", "Dropout"):
        node = producer.get(node.input[0])
    if node is None or node.op_type not in ("Gemm", "Conv"):
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.append(helper.make_empty_tensor_value_info(node.output[0]))
    inp = g.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = tensor_rng(seed, "calibration").standard_normal(shape, dtype=np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    logits = sess.run(None, {inp.name: x})[0]
    del probe, sess
    std = float(np.std(logits))
    if not np.isfinite(std) or std == 0.0:
        return
    scale = np.float32(float(f"{target_std / std:.2g}"))  # rounded: same bytes on any CPU
    inits = {t.name: t for t in g.initializer}
    for name in node.input[1:3]:
        if name in inits:
            inits[name].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(inits[name]) * scale, name))
