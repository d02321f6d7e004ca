"""The models the project writes itself with ``onnx.helper`` (used by ``collage.zoo.catalog``).

MobileNetV2 (torchvision layout, BatchNorm folded into Conv as ``torch.onnx.export`` does in eval mode,
ReLU6 as Clip, depthwise group convs, residual Adds), BERT-base (HuggingFace export layout: Gather
word embeddings + position + token type, LayerNormalization, Erf GELU, additive mask ``(1 - mask) * -10000``
before Softmax, pooler), and the tiny variants with the same op kinds and repeated identical blocks.
Weights are seeded (``tensor_rng``: one generator per tensor name). The light models are in ``zoo_light``.
"""
from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The opset every zoo model is written at (LayerNormalization is opset 17).
OPSET = 17
IR_VERSION = 8


def tensor_rng(seed: int, name: str) -> np.random.Generator:
    """One generator per tensor, so a tensor's values depend only on (seed, its name)."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


# ---------------------------------------------------------------------------------------- built
class Builder:
    """Accumulates nodes and seeded initializers; tensors get readable, unique names."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}

    def fresh(self, base: str) -> str:
        k = self._count.get(base, 0)
        self._count[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def weight(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        n = int(np.prod(shape, dtype=np.int64))
        arr = tensor_rng(self.seed, name).standard_normal(n, dtype=np.float32).reshape(tuple(shape))
        arr *= np.float32(std)
        if mean:
            arr += np.float32(mean)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        arr = tensor_rng(self.seed, name).uniform(low, high, tuple(shape)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(self, value: np.ndarray | float | int | Sequence[int], dtype=None) -> str:
        """A shared constant (shape vectors, scalars): one initializer per distinct value."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            name = self.fresh("const")
            self.inits.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return self._consts[key]

    def op(self, op_type: str, inputs: Sequence[str], name: str, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.fresh(name if i == 0 else f"{name}:{i}") for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="collage.zoo")
        model.ir_version = IR_VERSION
        return model


# ---- ResNet (Caffe2 layout, like the light ResNet-50: Conv, BatchNormalization, Relu, Sum)
def _conv_bn(b: Builder, x: str, name: str, cin: int, cout: int, k: int, stride: int, relu: bool,
             residual_gamma: bool = False) -> str:
    w = b.weight(f"{name}_w", [cout, cin, k, k], np.sqrt(2.0 / (cin * k * k)))
    y = b.op("Conv", [x, w], name, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    gamma = (0.16, 0.24) if residual_gamma else (0.8, 1.2)
    y = b.op("BatchNormalization", [y, b.uniform(f"{name}_bn_s", [cout], *gamma), b.weight(f"{name}_bn_b", [cout], 0.05),
                                    b.weight(f"{name}_bn_rm", [cout], 0.05), b.uniform(f"{name}_bn_riv", [cout], 0.8, 1.2)],
             f"{name}_bn", epsilon=1e-5)
    return b.op("Relu", [y], f"{name}_relu") if relu else y


def _bottleneck(b: Builder, x: str, name: str, cin: int, mid: int, cout: int, stride: int) -> str:
    y = _conv_bn(b, x, f"{name}_branch2a", cin, mid, 1, 1, True)
    y = _conv_bn(b, y, f"{name}_branch2b", mid, mid, 3, stride, True)
    y = _conv_bn(b, y, f"{name}_branch2c", mid, cout, 1, 1, False, residual_gamma=True)
    short = x if (cin == cout and stride == 1) else _conv_bn(b, x, f"{name}_branch1", cin, cout, 1, stride, False,
                                                             residual_gamma=True)
    return b.op("Relu", [b.op("Sum", [y, short], f"{name}_sum")], f"{name}_out")


def tiny_resnet(seed: int) -> onnx.ModelProto:
    """Stem + 3 bottlenecks (one projecting, two identical) + head, 1x3x64x64, same ops as ResNet-50."""
    b = Builder(seed)
    x = "data"
    y = _conv_bn(b, x, "conv1", 3, 16, 7, 2, True)
    y = b.op("MaxPool", [y], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = _bottleneck(b, y, "res2_0", 16, 8, 32, 1)
    y = _bottleneck(b, y, "res2_1", 32, 8, 32, 1)
    y = _bottleneck(b, y, "res2_2", 32, 8, 32, 1)
    y = b.op("AveragePool", [y], "pool5", kernel_shape=[16, 16], strides=[1, 1])
    y = b.op("Reshape", [y, b.const([1, 32], np.int64)], "flatten")
    y = b.op("Gemm", [y, b.weight("pred_w", [10, 32], np.sqrt(2.0 / 32)), b.weight("pred_b", [10], 0.01)],
             "pred", transB=1)
    y = b.op("Softmax", [y], "softmax", axis=1)
    return b.model("tiny-resnet", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 64, 64])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 10])])


# ---- MobileNetV2 (torchvision layout, BatchNorm folded into Conv as torch.onnx.export does in eval)
_MBV2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
_MBV2_TINY = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2)]


def _conv(b: Builder, x: str, name: str, cin: int, cout: int, k: int, stride: int, groups: int = 1,
          relu6: bool = True, gain: float = 2.0) -> str:
    fan_in = (cin // groups) * k * k
    w = b.weight(f"{name}.weight", [cout, cin // groups, k, k], np.sqrt(gain / fan_in))
    bias = b.weight(f"{name}.bias", [cout], 0.01)
    y = b.op("Conv", [x, w, bias], name, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4,
             group=groups)
    if relu6:
        y = b.op("Clip", [y, b.const(np.float32(0.0)), b.const(np.float32(6.0))], f"{name}.relu6")
    return y


def mobilenetv2(seed: int, tiny: bool = False) -> onnx.ModelProto:
    b = Builder(seed)
    size, setting, last, classes = (64, _MBV2_TINY, 128, 10) if tiny else (224, _MBV2, 1280, 1000)
    x = "input"
    y = _conv(b, x, "features.0", 3, 32, 3, 2)
    cin, idx = 32, 1
    for t, c, n, s in setting:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            name = f"features.{idx}"
            h = y
            if t != 1:
                h = _conv(b, h, f"{name}.expand", cin, hidden, 1, 1)
            h = _conv(b, h, f"{name}.dw", hidden, hidden, 3, stride, groups=hidden)
            # linear bottleneck: no activation; a small gain keeps the residual stream O(1)
            h = _conv(b, h, f"{name}.project", hidden, c, 1, 1, relu6=False, gain=0.5)
            y = b.op("Add", [y, h], f"{name}.add") if stride == 1 and cin == c else h
            cin, idx = c, idx + 1
    y = _conv(b, y, f"features.{idx}", cin, last, 1, 1)
    y = b.op("GlobalAveragePool", [y], "avgpool")
    y = b.op("Flatten", [y], "flatten", axis=1)
    y = b.op("Gemm", [y, b.weight("classifier.weight", [classes, last], np.sqrt(1.0 / last)),
                      b.weight("classifier.bias", [classes], 0.01)], "logits", transB=1)
    name = "tiny-mobilenetv2" if tiny else "mobilenetv2"
    return b.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, classes])])


# ---- BERT (HuggingFace export layout at opset 17)
def bert(seed: int, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128,
         vocab: int = 30522, name: str = "bert-base", pair_mask: bool = False) -> onnx.ModelProto:
    """BERT encoder. The additive mask is the usual key-padding one, ``(1 - mask) * -10000`` [1, 1, 1, seq],
    or with ``pair_mask`` a query x key one at float32's lowest value [1, 1, seq, seq] (``_pair_mask``)."""
    b = Builder(seed)
    head = hidden // heads
    std = 0.02
    ids, mask = "input_ids", "attention_mask"
    emb = b.op("Gather", [b.weight("embeddings.word_embeddings.weight", [vocab, hidden], std), ids],
               "embeddings.word", axis=0)
    # positions 0..seq-1 are fixed, so their embeddings are a [1, seq, hidden] weight (what exporters
    # constant-fold the position Gather into; an input-less Gather node would be a piece with no inputs)
    pos = b.weight("embeddings.position_embeddings.slice", [1, seq, hidden], std)
    tok = b.weight("embeddings.token_type_embeddings.row0", [hidden], std)
    y = b.op("Add", [b.op("Add", [emb, pos], "embeddings.add_pos"), tok], "embeddings.add_type")
    y = _layernorm(b, y, "embeddings.LayerNorm", hidden)
    # additive mask: (1 - mask) * -10000, shaped [1, 1, 1, seq], computed once and read by every layer
    if pair_mask:
        m = _pair_mask(b, mask)
    else:
        m = b.op("Cast", [mask], "mask.cast", to=TensorProto.FLOAT)
        m = b.op("Sub", [b.const(np.float32(1.0)), m], "mask.invert")
        m = b.op("Mul", [m, b.const(np.float32(-10000.0))], "mask.scale")
        m = b.op("Unsqueeze", [m, b.const(np.array([1, 2], np.int64))], "mask.add")
    split_shape = b.const(np.array([1, seq, heads, head], np.int64))
    merge_shape = b.const(np.array([1, seq, hidden], np.int64))
    for li in range(layers):
        p = f"encoder.layer.{li}"

        def dense(x: str, name: str, cin: int, cout: int) -> str:
            mm = b.op("MatMul", [x, b.weight(f"{name}.weight", [cin, cout], std)], f"{name}.matmul")
            return b.op("Add", [mm, b.weight(f"{name}.bias", [cout], std)], f"{name}.add")

        q = b.op("Transpose", [b.op("Reshape", [dense(y, f"{p}.attention.self.query", hidden, hidden), split_shape],
                                    f"{p}.q.reshape")], f"{p}.q.transpose", perm=[0, 2, 1, 3])
        k = b.op("Transpose", [b.op("Reshape", [dense(y, f"{p}.attention.self.key", hidden, hidden), split_shape],
                                    f"{p}.k.reshape")], f"{p}.k.transpose", perm=[0, 2, 3, 1])
        v = b.op("Transpose", [b.op("Reshape", [dense(y, f"{p}.attention.self.value", hidden, hidden), split_shape],
                                    f"{p}.v.reshape")], f"{p}.v.transpose", perm=[0, 2, 1, 3])
        s = b.op("MatMul", [q, k], f"{p}.scores")
        s = b.op("Div", [s, b.const(np.float32(np.sqrt(head)))], f"{p}.scores.scale")
        s = b.op("Add", [s, m], f"{p}.scores.mask")
        s = b.op("Softmax", [s], f"{p}.probs", axis=-1)
        c = b.op("MatMul", [s, v], f"{p}.context")
        c = b.op("Reshape", [b.op("Transpose", [c], f"{p}.context.transpose", perm=[0, 2, 1, 3]), merge_shape],
                 f"{p}.context.reshape")
        a = dense(c, f"{p}.attention.output.dense", hidden, hidden)
        y = _layernorm(b, b.op("Add", [a, y], f"{p}.attention.residual"), f"{p}.attention.output.LayerNorm", hidden)
        h = dense(y, f"{p}.intermediate.dense", hidden, ffn)
        g = b.op("Erf", [b.op("Div", [h, b.const(np.float32(np.sqrt(2.0)))], f"{p}.gelu.div")], f"{p}.gelu.erf")
        g = b.op("Mul", [h, b.op("Add", [g, b.const(np.float32(1.0))], f"{p}.gelu.add")], f"{p}.gelu.mul")
        g = b.op("Mul", [g, b.const(np.float32(0.5))], f"{p}.gelu")
        o = dense(g, f"{p}.output.dense", ffn, hidden)
        y = _layernorm(b, b.op("Add", [o, y], f"{p}.output.residual"), f"{p}.output.LayerNorm", hidden)
    out = b.op("Identity", [y], "last_hidden_state")
    cls = b.op("Gather", [y, b.const(np.int64(0))], "pooler.cls", axis=1)
    pooled = b.op("Gemm", [cls, b.weight("pooler.dense.weight", [hidden, hidden], std),
                           b.weight("pooler.dense.bias", [hidden], std)], "pooler.dense", transB=1)
    pooled = b.op("Tanh", [pooled], "pooler_output")
    return b.model(name, [helper.make_tensor_value_info(ids, TensorProto.INT64, [1, seq]),
                          helper.make_tensor_value_info(mask, TensorProto.INT64, [1, seq])],
                   [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, hidden]),
                    helper.make_tensor_value_info(pooled, TensorProto.FLOAT, [1, hidden])])


def _layernorm(b: Builder, x: str, name: str, hidden: int) -> str:
    return b.op("LayerNormalization", [x, b.uniform(f"{name}.weight", [hidden], 0.8, 1.2),
                                       b.weight(f"{name}.bias", [hidden], 0.05)], name, axis=-1, epsilon=1e-12)


def tiny_bert(seed: int) -> onnx.ModelProto:
    return bert(seed, layers=2, hidden=64, heads=4, ffn=256, seq=16, vocab=1000, name="tiny-bert")


def _pair_mask(b: Builder, mask: str) -> str:
    """(1 - mask_q * mask_k) * float32's lowest, [1, 1, seq, seq]: the rows of padded queries are fully masked.

    In fp32 a fully masked row's scores all sit at ~-3.4e38 and its softmax is uniform (finite, unused).
    In OpenVINO bf16 the fused attention converts the mask to bf16, where -3.4028235e38 rounds to -inf;
    a row of -inf has a NaN softmax, and the NaN reaches every output through the next layer.
    """
    m = b.op("Cast", [mask], "mask.cast", to=TensorProto.FLOAT)
    mq = b.op("Unsqueeze", [m, b.const(np.array([1, 3], np.int64))], "mask.query")
    mk = b.op("Unsqueeze", [m, b.const(np.array([1, 2], np.int64))], "mask.key")
    pair = b.op("Mul", [mq, mk], "mask.pair")
    inv = b.op("Sub", [b.const(np.float32(1.0)), pair], "mask.invert")
    return b.op("Mul", [inv, b.const(np.float32(np.finfo(np.float32).min))], "mask.add")


def bert_masked(seed: int) -> onnx.ModelProto:
    """BERT-base with a query x key padding mask at float32's lowest value (HF style): all-bf16 gives NaN."""
    return bert(seed, name="bert-base-masked", pair_mask=True)


def tiny_bert_masked(seed: int) -> onnx.ModelProto:
    """tiny-bert with a query x key padding mask at float32's lowest value (HF style): all-bf16 gives NaN."""
    return bert(seed, layers=2, hidden=64, heads=4, ffn=256, seq=16, vocab=1000, name="tiny-bert-masked",
                pair_mask=True)
