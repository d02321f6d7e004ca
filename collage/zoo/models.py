"""The models the project writes itself with ``onnx.helper`` (used by ``collage.zoo.catalog``).

MobileNetV2 (torchvision layout, BatchNorm folded into Conv as ``torch.onnx.export`` does in eval mode,
ReLU6 as Clip, depthwise group convs, residual Adds), BERT-base (HuggingFace export layout: Gather
word embeddings + position + token type, LayerNormalization, Erf GELU, additive mask ``(1 - mask) * -10000``
before Softmax, pooler), the tiny variants with the same op kinds and repeated identical blocks, and the
transformer family at their public configs: ViT-B/16, GPT-2 small (causal mask), ConvNeXt-T, Whisper-tiny's encoder.
Weights are seeded (``tensor_rng``: one generator per tensor name). The light models are in ``zoo_light``.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="collage.zoo")
        model.ir_version = IR_VERSION
        return model


@dataclass(frozen=True)
class ConvShape:
    """A square 2-D convolution: ``cin`` -> ``cout`` channels, ``k`` x ``k`` kernel (padded ``k // 2``), ``stride``,
    ``groups``."""

    cin: int
    cout: int
    k: int
    stride: int = 1
    groups: int = 1


# ---- ResNet (Caffe2 layout, like the light ResNet-50: Conv, BatchNormalization, Relu, Sum)
def _conv_bn(b: Builder, x: str, name: str, shape: ConvShape, relu: bool, residual_gamma: bool = False) -> str:
    cin, cout, k, stride = shape.cin, shape.cout, shape.k, shape.stride
    w = b.weight(f"{name}_w", [cout, cin, k, k], np.sqrt(2.0 / (cin * k * k)))
    y = b.op("Conv", [x, w], name, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    gamma = (0.16, 0.24) if residual_gamma else (0.8, 1.2)
    y = b.op("BatchNormalization",
             [y, b.uniform(f"{name}_bn_s", [cout], *gamma), b.weight(f"{name}_bn_b", [cout], 0.05),
              b.weight(f"{name}_bn_rm", [cout], 0.05), b.uniform(f"{name}_bn_riv", [cout], 0.8, 1.2)],
             f"{name}_bn", epsilon=1e-5)
    return b.op("Relu", [y], f"{name}_relu") if relu else y


def _bottleneck(b: Builder, x: str, name: str, cin: int, mid: int, cout: int, stride: int) -> str:
    y = _conv_bn(b, x, f"{name}_branch2a", ConvShape(cin, mid, 1), True)
    y = _conv_bn(b, y, f"{name}_branch2b", ConvShape(mid, mid, 3, stride), True)
    y = _conv_bn(b, y, f"{name}_branch2c", ConvShape(mid, cout, 1), False, residual_gamma=True)
    short = x if (cin == cout and stride == 1) else _conv_bn(b, x, f"{name}_branch1", ConvShape(cin, cout, 1, stride),
                                                             False, residual_gamma=True)
    return b.op("Relu", [b.op("Sum", [y, short], f"{name}_sum")], f"{name}_out")


def tiny_resnet(seed: int) -> onnx.ModelProto:
    """Stem + 3 bottlenecks (one projecting, two identical) + head, 1x3x64x64, same ops as ResNet-50."""
    b = Builder(seed)
    x = "data"
    y = _conv_bn(b, x, "conv1", ConvShape(3, 16, 7, 2), True)
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


def _conv(b: Builder, x: str, name: str, shape: ConvShape, relu6: bool = True, gain: float = 2.0) -> str:
    cin, cout, k, stride, groups = shape.cin, shape.cout, shape.k, shape.stride, shape.groups
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
    y = _conv(b, x, "features.0", ConvShape(3, 32, 3, 2))
    cin, idx = 32, 1
    for t, c, n, s in setting:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            name = f"features.{idx}"
            h = y
            if t != 1:
                h = _conv(b, h, f"{name}.expand", ConvShape(cin, hidden, 1))
            h = _conv(b, h, f"{name}.dw", ConvShape(hidden, hidden, 3, stride, groups=hidden))
            # linear bottleneck: no activation; a small gain keeps the residual stream O(1)
            h = _conv(b, h, f"{name}.project", ConvShape(hidden, c, 1), relu6=False, gain=0.5)
            y = b.op("Add", [y, h], f"{name}.add") if stride == 1 and cin == c else h
            cin, idx = c, idx + 1
    y = _conv(b, y, f"features.{idx}", ConvShape(cin, last, 1))
    y = b.op("GlobalAveragePool", [y], "avgpool")
    y = b.op("Flatten", [y], "flatten", axis=1)
    y = b.op("Gemm", [y, b.weight("classifier.weight", [classes, last], np.sqrt(1.0 / last)),
                      b.weight("classifier.bias", [classes], 0.01)], "logits", transB=1)
    name = "tiny-mobilenetv2" if tiny else "mobilenetv2"
    return b.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, classes])])


@dataclass(frozen=True)
class Stack:
    """A transformer stack's shape: ``layers`` layers of width ``hidden``, ``heads`` attention heads, an MLP of
    ``ffn``."""

    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072


#: BERT-base, ViT-B/16 and GPT-2 small share this shape.
BASE = Stack()
TINY_BERT = Stack(layers=2, hidden=64, heads=4, ffn=256)
WHISPER_TINY = Stack(layers=4, hidden=384, heads=6, ffn=4 * 384)


# ---- BERT (HuggingFace export layout at opset 17)
def bert(seed: int, stack: Stack = BASE, seq: int = 128, vocab: int = 30522, name: str = "bert-base",
         pair_mask: bool = False) -> onnx.ModelProto:
    """BERT encoder. The additive mask is the usual key-padding one, ``(1 - mask) * -10000`` [1, 1, 1, seq],
    or with ``pair_mask`` a query x key one at float32's lowest value [1, 1, seq, seq] (``_pair_mask``)."""
    b = Builder(seed)
    layers, hidden, heads, ffn = stack.layers, stack.hidden, stack.heads, stack.ffn
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
    return bert(seed, TINY_BERT, seq=16, vocab=1000, name="tiny-bert")


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
    return bert(seed, TINY_BERT, seq=16, vocab=1000, name="tiny-bert-masked", pair_mask=True)


# ---- transformer-family models (public configs; seeded weights; every node reads an activation)
def _dense(b: Builder, x: str, name: str, cin: int, cout: int, std: float = 0.02, bias: bool = True) -> str:
    """x @ W (+ bias): a torch Linear as exporters write it for 3-D activations (MatMul, Add)."""
    y = b.op("MatMul", [x, b.weight(f"{name}.weight", [cin, cout], std)], f"{name}.matmul")
    return b.op("Add", [y, b.weight(f"{name}.bias", [cout], std)], f"{name}.add") if bias else y


def _gelu_erf(b: Builder, h: str, name: str) -> str:
    g = b.op("Erf", [b.op("Div", [h, b.const(np.float32(np.sqrt(2.0)))], f"{name}.div")], f"{name}.erf")
    g = b.op("Mul", [h, b.op("Add", [g, b.const(np.float32(1.0))], f"{name}.add")], f"{name}.mul")
    return b.op("Mul", [g, b.const(np.float32(0.5))], name)


def _gelu_tanh(b: Builder, h: str, name: str) -> str:
    """GPT-2's ``gelu_new``: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = b.op("Pow", [h, b.const(np.float32(3.0))], f"{name}.pow")
    inner = b.op("Add", [h, b.op("Mul", [cube, b.const(np.float32(0.044715))], f"{name}.mul_c")], f"{name}.add_x")
    t = b.op("Tanh", [b.op("Mul", [inner, b.const(np.float32(np.sqrt(2.0 / np.pi)))], f"{name}.mul_s")], f"{name}.tanh")
    g = b.op("Mul", [h, b.op("Add", [t, b.const(np.float32(1.0))], f"{name}.add_1")], f"{name}.mul")
    return b.op("Mul", [g, b.const(np.float32(0.5))], name)


def _ln(b: Builder, x: str, name: str, hidden: int, eps: float) -> str:
    return b.op("LayerNormalization", [x, b.uniform(f"{name}.weight", [hidden], 0.8, 1.2),
                                       b.weight(f"{name}.bias", [hidden], 0.05)], name, axis=-1, epsilon=eps)


@dataclass(frozen=True)
class LayerSpec:
    """One pre-LN layer of a ``stack`` over ``seq`` tokens (``_pre_ln_layer``): LayerNorm ``eps``, weights of
    ``std``, its ``gelu`` (a builder function), an additive attention ``mask`` (a tensor name, or None) and
    whether the k projection has a bias."""

    stack: Stack
    seq: int
    eps: float
    std: float = 0.02
    gelu: Callable[[Builder, str, str], str] = _gelu_erf
    mask: str | None = None
    k_bias: bool = True


def _self_attention(b: Builder, y: str, p: str, spec: LayerSpec) -> str:
    """Multi-head self-attention as HF exports it: q, k, v projections, [1, heads, seq, head] split,
    scores / sqrt(head) (+ additive mask), Softmax, context, merge, output projection."""
    seq, hidden, heads, std, mask = spec.seq, spec.stack.hidden, spec.stack.heads, spec.std, spec.mask
    head = hidden // heads
    split = b.const(np.array([1, seq, heads, head], np.int64))
    merge = b.const(np.array([1, seq, hidden], np.int64))
    q = b.op("Transpose",
             [b.op("Reshape", [_dense(b, y, f"{p}.q_proj", hidden, hidden, std), split], f"{p}.q.reshape")],
             f"{p}.q.transpose", perm=[0, 2, 1, 3])
    k = b.op("Transpose", [b.op("Reshape", [_dense(b, y, f"{p}.k_proj", hidden, hidden, std, bias=spec.k_bias), split],
                                f"{p}.k.reshape")], f"{p}.k.transpose", perm=[0, 2, 3, 1])
    v = b.op("Transpose",
             [b.op("Reshape", [_dense(b, y, f"{p}.v_proj", hidden, hidden, std), split], f"{p}.v.reshape")],
             f"{p}.v.transpose", perm=[0, 2, 1, 3])
    s = b.op("Div", [b.op("MatMul", [q, k], f"{p}.scores"), b.const(np.float32(np.sqrt(head)))], f"{p}.scores.scale")
    if mask is not None:
        s = b.op("Add", [s, mask], f"{p}.scores.mask")
    s = b.op("Softmax", [s], f"{p}.probs", axis=-1)
    c = b.op("MatMul", [s, v], f"{p}.context")
    c = b.op("Reshape", [b.op("Transpose", [c], f"{p}.context.transpose", perm=[0, 2, 1, 3]), merge],
             f"{p}.context.reshape")
    return _dense(b, c, f"{p}.out_proj", hidden, hidden, std)


def _pre_ln_layer(b: Builder, y: str, p: str, spec: LayerSpec) -> str:
    """A pre-LayerNorm transformer layer (ViT, GPT-2, Whisper): y + attn(LN(y)), then + MLP(LN(.))."""
    hidden, ffn, eps, std = spec.stack.hidden, spec.stack.ffn, spec.eps, spec.std
    a = _self_attention(b, _ln(b, y, f"{p}.ln_1", hidden, eps), f"{p}.attn", spec)
    y = b.op("Add", [y, a], f"{p}.attn.residual")
    h = _dense(b, _ln(b, y, f"{p}.ln_2", hidden, eps), f"{p}.mlp.fc1", hidden, ffn, std)
    h = _dense(b, spec.gelu(b, h, f"{p}.mlp.gelu"), f"{p}.mlp.fc2", ffn, hidden, std)
    return b.op("Add", [y, h], f"{p}.mlp.residual")


def vit(seed: int, stack: Stack = BASE, size: int = 224, patch: int = 16, classes: int = 1000,
        name: str = "vit-b16") -> onnx.ModelProto:
    """ViT-B/16 (google/vit-base-patch16-224 config): 16x16 patch Conv, class token, learned position
    embeddings, 12 pre-LN layers (LayerNorm eps 1e-12, Erf GELU), final LN, classifier on the class token."""
    b = Builder(seed)
    hidden = stack.hidden
    x = "pixel_values"
    grid = size // patch
    seq = grid * grid + 1
    y = b.op("Conv", [x, b.weight("patch_embed.weight", [hidden, 3, patch, patch], np.sqrt(1.0 / (3 * patch * patch))),
                      b.weight("patch_embed.bias", [hidden], 0.02)], "patch_embed", kernel_shape=[patch, patch],
             strides=[patch, patch])
    y = b.op("Reshape", [y, b.const(np.array([1, hidden, grid * grid], np.int64))], "patch_embed.flatten")
    y = b.op("Transpose", [y], "patch_embed.transpose", perm=[0, 2, 1])
    y = b.op("Concat", [b.weight("cls_token", [1, 1, hidden], 0.02), y], "embeddings.cat_cls", axis=1)
    y = b.op("Add", [y, b.weight("position_embeddings", [1, seq, hidden], 0.02)], "embeddings.add_pos")
    spec = LayerSpec(stack, seq, eps=1e-12)
    for li in range(stack.layers):
        y = _pre_ln_layer(b, y, f"encoder.layer.{li}", spec)
    y = _ln(b, y, "layernorm", hidden, 1e-12)
    cls = b.op("Gather", [y, b.const(np.int64(0))], "pooler.cls", axis=1)
    logits = b.op("Gemm", [cls, b.weight("classifier.weight", [classes, hidden], 0.02),
                           b.weight("classifier.bias", [classes], 0.01)], "logits", transB=1)
    return b.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, classes])])


def gpt2(seed: int, stack: Stack = BASE, seq: int = 128, vocab: int = 50257,
         name: str = "gpt2-small") -> onnx.ModelProto:
    """GPT-2 small decoder stack (HF gpt2 config): token Gather + learned positions, 12 pre-LN layers with a
    causal mask (an additive [1, 1, seq, seq] constant, -10000 above the diagonal), ``gelu_new`` MLP of
    ``stack.ffn`` (4 x hidden), final ``ln_f``; output the last hidden state (the tied LM head is left out)."""
    b = Builder(seed)
    hidden = stack.hidden
    ids = "input_ids"
    y = b.op("Gather", [b.weight("wte.weight", [vocab, hidden], 0.02), ids], "wte", axis=0)
    y = b.op("Add", [y, b.weight("wpe.slice", [1, seq, hidden], 0.01)], "wpe.add")
    causal = np.triu(np.full((seq, seq), -10000.0, np.float32), k=1).reshape(1, 1, seq, seq)
    spec = LayerSpec(stack, seq, eps=1e-5, gelu=_gelu_tanh, mask=b.const(causal))
    for li in range(stack.layers):
        y = _pre_ln_layer(b, y, f"h.{li}", spec)
    y = _ln(b, y, "ln_f", hidden, 1e-5)
    return b.model(name, [helper.make_tensor_value_info(ids, TensorProto.INT64, [1, seq])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, seq, hidden])])


def convnext(seed: int, depths: Sequence[int] = (3, 3, 9, 3), dims: Sequence[int] = (96, 192, 384, 768),
             size: int = 224, classes: int = 1000, name: str = "convnext-t") -> onnx.ModelProto:
    """ConvNeXt-T (facebook/convnext-tiny-224 config): 4x4 stride-4 stem + channels-first LayerNorm,
    blocks of 7x7 depthwise Conv -> NHWC LayerNorm (eps 1e-6) -> Linear 4x -> GELU -> Linear -> layer
    scale -> residual, LN + 2x2 stride-2 Conv between stages, global pool, LN, classifier. A
    channels-first LayerNorm is written as Transpose -> LayerNormalization -> Transpose."""
    b = Builder(seed)
    x = "pixel_values"

    def ln_cf(t: str, name: str, dim: int) -> str:
        t = b.op("Transpose", [t], f"{name}.to_nhwc", perm=[0, 2, 3, 1])
        t = _ln(b, t, name, dim, 1e-6)
        return b.op("Transpose", [t], f"{name}.to_nchw", perm=[0, 3, 1, 2])

    def conv(t: str, name: str, cin: int, cout: int, k: int, stride: int, pad: int, groups: int = 1) -> str:
        w = b.weight(f"{name}.weight", [cout, cin // groups, k, k], np.sqrt(1.0 / ((cin // groups) * k * k)))
        return b.op("Conv", [t, w, b.weight(f"{name}.bias", [cout], 0.02)], name, kernel_shape=[k, k],
                    strides=[stride, stride], pads=[pad] * 4, group=groups)

    y = ln_cf(conv(x, "stem.conv", 3, dims[0], 4, 4, 0), "stem.ln", dims[0])
    for si, (depth, dim) in enumerate(zip(depths, dims)):
        if si > 0:
            y = conv(ln_cf(y, f"stages.{si}.downsample.ln", dims[si - 1]), f"stages.{si}.downsample.conv",
                     dims[si - 1], dim, 2, 2, 0)
        for bi in range(depth):
            p = f"stages.{si}.blocks.{bi}"
            h = conv(y, f"{p}.dwconv", dim, dim, 7, 1, 3, groups=dim)
            h = b.op("Transpose", [h], f"{p}.to_nhwc", perm=[0, 2, 3, 1])
            h = _ln(b, h, f"{p}.norm", dim, 1e-6)
            h = _dense(b, h, f"{p}.pwconv1", dim, 4 * dim, np.sqrt(1.0 / dim))
            h = _gelu_erf(b, h, f"{p}.gelu")
            h = _dense(b, h, f"{p}.pwconv2", 4 * dim, dim, np.sqrt(1.0 / (4 * dim)))
            h = b.op("Mul", [h, b.uniform(f"{p}.gamma", [dim], 0.1, 0.3)], f"{p}.layer_scale")
            h = b.op("Transpose", [h], f"{p}.to_nchw", perm=[0, 3, 1, 2])
            y = b.op("Add", [y, h], f"{p}.residual")
    y = b.op("GlobalAveragePool", [y], "pool")
    y = b.op("Flatten", [y], "flatten", axis=1)
    y = _ln(b, y, "head.norm", dims[-1], 1e-6)
    y = b.op("Gemm",
             [y, b.weight("head.fc.weight", [classes, dims[-1]], 0.02), b.weight("head.fc.bias", [classes], 0.01)],
             "logits", transB=1)
    return b.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, classes])])


def whisper_encoder(seed: int, mels: int = 80, frames: int = 3000, stack: Stack = WHISPER_TINY,
                    name: str = "whisper-tiny-encoder") -> onnx.ModelProto:
    """Whisper-tiny's encoder (openai/whisper-tiny config): log-mel [1, 80, 3000] -> Conv1d k3 + GELU ->
    Conv1d k3 stride 2 + GELU -> [1, 1500, 384] + positions, 4 pre-LN layers (6 heads, k projection
    without bias, FFN 1536, Erf GELU), final LayerNorm."""
    b = Builder(seed)
    hidden = stack.hidden
    x = "input_features"
    seq = frames // 2
    y = b.op("Conv", [x, b.weight("conv1.weight", [hidden, mels, 3], np.sqrt(1.0 / (mels * 3))),
                      b.weight("conv1.bias", [hidden], 0.02)], "conv1", kernel_shape=[3], pads=[1, 1])
    y = _gelu_erf(b, y, "conv1.gelu")
    y = b.op("Conv", [y, b.weight("conv2.weight", [hidden, hidden, 3], np.sqrt(1.0 / (hidden * 3))),
                      b.weight("conv2.bias", [hidden], 0.02)], "conv2", kernel_shape=[3], pads=[1, 1], strides=[2])
    y = _gelu_erf(b, y, "conv2.gelu")
    y = b.op("Transpose", [y], "conv2.transpose", perm=[0, 2, 1])
    y = b.op("Add", [y, b.weight("embed_positions.weight", [1, seq, hidden], 0.1)], "embed_positions.add")
    spec = LayerSpec(stack, seq, eps=1e-5, k_bias=False)
    for li in range(stack.layers):
        y = _pre_ln_layer(b, y, f"layers.{li}", spec)
    y = _ln(b, y, "layer_norm", hidden, 1e-5)
    return b.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, mels, frames])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, seq, hidden])])
