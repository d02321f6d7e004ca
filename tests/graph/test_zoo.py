"""The zoo's models load and validate, and every random convex piece of them, extracted by the Graph IR
and run alone on ONNX Runtime, reproduces the full model's tensors; repeated blocks share a fingerprint.

Both the full model and the pieces run with ORT's graph optimizations off: the test is about what
``extract`` cuts, so the same kernels must see the same inputs (max abs diff <= 1e-5).
"""
from __future__ import annotations

import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from collage import zoo
from collage.errors import ModelError
from collage.graph.ir import Graph

FAST = ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert", "squeezenet", "shufflenet", "inception_v1",
        "inception_v2", "densenet121"]
SLOW = ["resnet50", "mobilenetv2"]
#: 240-575 MB models whose fully connected layers hold most of the weights: their pieces are drawn
#: among those carrying <= 32 MB of weights (a piece holding VGG-19's 400 MB fc6 costs seconds to
#: serialise and load, and the test would take minutes on two cores).
HEAVY_FC = ["bvlc_alexnet", "zfnet512", "vgg19"]
TOL = 1e-5


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def convex_closure(g: Graph, mask: int) -> int:
    """The smallest convex set holding ``mask``: add every node on a path between two of its nodes."""
    desc = anc = 0
    for i in g.ids(mask):
        desc |= g.desc_mask(i)
        anc |= g.anc_mask(i)
    return mask | (desc & anc)


def grow_convex(g: Graph, rng: random.Random, size: int) -> int:
    """A random connected convex set grown from a random seed node, one neighbour at a time."""
    mask = 1 << rng.randrange(len(g))
    for _ in range(4 * size):
        if bin(mask).count("1") >= size:
            break
        frontier = sorted({j for i in g.ids(mask) for j in list(g.dag.successors(i)) + list(g.dag.predecessors(i))
                           if not (mask >> j) & 1})
        if not frontier:
            break
        cand = mask | (1 << rng.choice(frontier))
        if g.is_convex(cand):
            mask = cand
    return mask


def weight_bytes(g: Graph, mask: int) -> int:
    names = {t for i in g.ids(mask) for t in g.reads(i) if g.is_weight(t)}
    return sum(g.tensor(t).nbytes for t in names)


def random_convex_sets(g: Graph, n: int, seed: int, max_size: int = 12,
                       max_weight_mb: float | None = None) -> list[int]:
    rng = random.Random(seed)
    sets: list[int] = []
    while len(sets) < n:
        if len(sets) >= 2 and rng.random() < 0.3:  # union of two earlier sets, made convex
            a, b = rng.sample(sets, 2)
            m = convex_closure(g, a | b)
            if bin(m).count("1") > 60:
                continue
        else:
            m = grow_convex(g, rng, rng.randint(1, max_size))
        assert g.is_convex(m), f"set {g.ids(m)} should be convex"
        if max_weight_mb is not None and weight_bytes(g, m) > max_weight_mb * 2**20:
            continue
        sets.append(m)
    return sets


def check_pieces(name: str, n_sets: int = 20, seed: int = 0, max_weight_mb: float | None = None) -> None:
    g = zoo.load_graph(f"zoo:{name}")
    g.validate()
    sets = random_convex_sets(g, n_sets, seed, max_weight_mb=max_weight_mb)
    needed: list[str] = []
    for m in sets:
        entering, leaving = g.boundary(m)
        needed += [t for t in entering + leaving if t not in g.inputs and t not in needed]
    feeds = zoo.random_inputs(g, seed=seed)
    full = _session(g.with_outputs(needed))
    values = dict(zip([o.name for o in full.get_outputs()], full.run(None, feeds)))
    values.update(feeds)
    for m in sets:
        piece = g.extract(m)
        onnx.checker.check_model(piece, full_check=True)
        entering, leaving = g.boundary(m)
        assert [i.name for i in piece.graph.input] == entering
        assert [o.name for o in piece.graph.output] == leaving
        outs = _session(piece).run(None, {t: values[t] for t in entering})
        for t, got in zip(leaving, outs):
            want = values[t]
            assert got.shape == want.shape and got.dtype == want.dtype, (name, g.ids(m), t)
            diff = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
            assert diff <= TOL, f"{name}: piece {g.ids(m)} output {t!r} differs by {diff}"


@pytest.mark.parametrize("name", FAST)
def test_pieces_reproduce_full_model(name: str) -> None:
    check_pieces(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_pieces_reproduce_full_model_big(name: str) -> None:
    check_pieces(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY_FC)
def test_pieces_reproduce_full_model_heavy_fc(name: str) -> None:
    check_pieces(name, max_weight_mb=32)


@pytest.mark.slow
def test_pieces_reproduce_bert_base() -> None:
    check_pieces("bert-base", n_sets=24, seed=1)


def test_names_and_resolve(tmp_path) -> None:
    names = zoo.names()
    for expected in ["resnet50", "mobilenetv2", "bert-base", "densenet121", "inception_v1", "inception_v2",
                     "shufflenet", "squeezenet", "vgg19", "zfnet512", "bvlc_alexnet", "tiny-resnet",
                     "tiny-mobilenetv2", "tiny-bert"]:
        assert expected in names
    path = zoo.resolve("zoo:tiny-resnet")
    assert path.endswith("tiny-resnet.onnx") and onnx.load(path).graph.node
    assert zoo.resolve(str(tmp_path / "x.onnx")) == str(tmp_path / "x.onnx")
    with pytest.raises(ModelError, match="tiny-bert"):  # the message lists the zoo
        zoo.resolve("zoo:no-such-model")


def test_build_is_deterministic_and_atomic(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COLLAGE_ZOO_CACHE", str(tmp_path / "a"))
    a = zoo.model_path("tiny-mobilenetv2").read_bytes()
    monkeypatch.setenv("COLLAGE_ZOO_CACHE", str(tmp_path / "b"))
    b = zoo.model_path("tiny-mobilenetv2")
    assert a == b.read_bytes()
    assert f"v{zoo.ZOO_VERSION}" in str(b)
    assert not [p for p in b.parent.iterdir() if p.suffix == ".tmp"]
    # a cached file is used as is, not rebuilt
    mtime = b.stat().st_mtime_ns
    zoo.model_path("tiny-mobilenetv2")
    assert b.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("name", ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert", "squeezenet", "inception_v1"])
def test_outputs_finite_and_informative(name: str) -> None:
    g = zoo.load_graph(f"zoo:{name}")
    sess = _session(g.model)
    a = sess.run(None, zoo.random_inputs(g, seed=0))
    b = sess.run(None, zoo.random_inputs(g, seed=1))
    for x, y in zip(a, b):
        assert np.isfinite(x).all()
        assert np.ptp(x) > 0, f"{name}: output is constant"
        assert not np.allclose(x, y), f"{name}: output ignores the input"


def test_tiny_models_have_the_full_models_op_kinds() -> None:
    from collage.zoo import light as zoo_light, models as zoo_models

    pairs = [("tiny-mobilenetv2", zoo_models.mobilenetv2(0)),
             ("tiny-bert", zoo_models.bert(0, zoo_models.Stack(layers=1, hidden=64, heads=4, ffn=128),
                                                                                              vocab=100))]
    for tiny, full in pairs:
        assert {n.op_type for n in zoo.load_model(tiny).graph.node} == {n.op_type for n in full.graph.node}
    light = onnx.load(str(zoo_light.LIGHT_DIR / "light_resnet50.onnx"))
    want = {n.op_type for n in light.graph.node} - {"ConstantOfShape"}
    assert {n.op_type for n in zoo.load_model("tiny-resnet").graph.node} == want


def test_light_models_are_upgraded_without_weight_inputs() -> None:
    m = zoo.load_model("squeezenet")
    assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert [i.name for i in m.graph.input] == ["data_0"]
    assert not any(n.op_type == "ConstantOfShape" for n in m.graph.node)
    onnx.checker.check_model(m, full_check=True)


def test_random_inputs_ranges() -> None:
    g = zoo.load_graph("zoo:tiny-bert")
    feeds = zoo.random_inputs(g, seed=3)
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    assert ids.dtype == np.int64 and ids.shape == (1, 16)
    vocab = g.tensor("embeddings.word_embeddings.weight").shape[0]
    assert ids.min() >= 0 and ids.max() < vocab
    assert set(np.unique(mask)) <= {0, 1} and mask[0, 0] == 1
    again = zoo.random_inputs(g, seed=3)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)
    img = zoo.random_inputs(zoo.load_graph("zoo:tiny-resnet"))
    assert img["data"].dtype == np.float32 and img["data"].shape == (1, 3, 64, 64)


# ------------------------------------------------------------------------------------ fingerprints
def _blocks_by_prefix(g: Graph, prefixes: list[str]) -> list[list[int]]:
    return [[i for i in range(len(g)) if g.op(i).name.startswith(p)] for p in prefixes]


def test_fingerprints_tiny_resnet() -> None:
    g = zoo.load_graph("zoo:tiny-resnet")
    b0, b1, b2 = _blocks_by_prefix(g, ["res2_0_", "res2_1_", "res2_2_"])
    assert len(b1) == len(b2) == 10 and all(g.is_convex(b) for b in (b0, b1, b2))
    assert g.fingerprint(b1) == g.fingerprint(b2)
    assert g.fingerprint(b0) != g.fingerprint(b1)  # projection shortcut, other input shape


def test_fingerprints_tiny_mobilenetv2() -> None:
    g = zoo.load_graph("zoo:tiny-mobilenetv2")
    b4, b5, b6 = _blocks_by_prefix(g, ["features.4.", "features.5.", "features.6."])
    assert g.fingerprint(b5) == g.fingerprint(b6)
    assert g.fingerprint(b4) != g.fingerprint(b5)  # stride 2, no residual


def _bert_layers(g: Graph, n: int) -> list[list[int]]:
    return _blocks_by_prefix(g, [f"encoder.layer.{k}." for k in range(n)])


def test_fingerprints_tiny_bert_layers() -> None:
    g = zoo.load_graph("zoo:tiny-bert")
    layers = _bert_layers(g, 2)
    assert all(len(b) > 20 and g.is_convex(b) for b in layers)
    assert g.fingerprint(layers[0]) == g.fingerprint(layers[1])
    # a piece of a layer is not the layer
    assert g.fingerprint(layers[0][:-1]) != g.fingerprint(layers[0])


@pytest.mark.slow
def test_fingerprints_bert_base_layers() -> None:
    g = zoo.load_graph("zoo:bert-base")
    prints = {g.fingerprint(b) for b in _bert_layers(g, 12)}
    assert len(prints) == 1


def _resnet50_blocks(g: Graph) -> dict[str, list[int]]:
    """ResNet-50's bottlenecks: the light model is written block after block, so a block is the id
    range from the first node reading one of its weights to the next block's first node."""
    starts: dict[str, int] = {}
    for i in range(len(g)):
        for t in g.reads(i):
            if g.is_weight(t) and t.startswith("gpu_0/res") and "_branch" in t:
                starts.setdefault(t[len("gpu_0/"):].split("_branch")[0], i)
    order = sorted(starts, key=starts.get)
    bounds = [starts[b] for b in order] + [next(i for i in range(len(g)) if g.op_type(i) == "AveragePool")]
    return {b: list(range(bounds[k], bounds[k + 1])) for k, b in enumerate(order)}


@pytest.mark.slow
def test_fingerprints_resnet50_stages() -> None:
    g = zoo.load_graph("zoo:resnet50")
    blocks = _resnet50_blocks(g)
    assert len(blocks) == 16
    for stage, n in (("res2", 3), ("res3", 4), ("res4", 6), ("res5", 3)):
        names = [f"{stage}_{k}" for k in range(n)]
        assert all(g.is_convex(blocks[b]) for b in names)
        prints = [g.fingerprint(blocks[b]) for b in names]
        assert len(set(prints[1:])) == 1, stage  # repeated bottlenecks share one fingerprint
        assert prints[0] != prints[1], stage     # the first one projects / strides
    assert g.fingerprint(blocks["res3_1"]) != g.fingerprint(blocks["res4_1"])  # other shapes


@pytest.mark.parametrize("name", ["tiny-resnet", "tiny-mobilenetv2", "tiny-bert", "squeezenet", "inception_v1"])
def test_every_node_reads_an_activation(name: str) -> None:
    """No node computes from weights alone (such a node would be a piece without inputs)."""
    g = zoo.load_graph(f"zoo:{name}")
    assert not [g.node_label(i) for i in range(len(g)) if not g.boundary([i])[0]]
