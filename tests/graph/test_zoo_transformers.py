"""The transformer-family zoo models (ViT-B/16, GPT-2 small, ConvNeXt-T, Whisper-tiny encoder).

Fast: each builder at a small config is checker-valid, every node reads an activation, and its output
is finite, informative and depends on the input. Slow: the full models (5-6 s to build each, up to a
second per run here) pass the checker and agree between ONNX Runtime and OpenVINO fp32 (1e-3 of the
output's largest magnitude).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from collage import zoo
from collage.graph.ir import Graph
from collage.zoo import models as zoo_models
from collage.zoo.models import Stack

SMALL = {
    "vit": lambda s: zoo_models.vit(s, Stack(layers=2, hidden=64, heads=4, ffn=128), size=32, patch=8, classes=10,
                                    name="vit-small"),
    "gpt2": lambda s: zoo_models.gpt2(s, Stack(layers=2, hidden=64, heads=4, ffn=256), seq=16, vocab=100,
                                      name="gpt2-small-test"),
    "convnext": lambda s: zoo_models.convnext(s, depths=(1, 1, 2, 1), dims=(8, 16, 32, 64), size=64, classes=10,
                                              name="convnext-small"),
    "whisper": lambda s: zoo_models.whisper_encoder(s, mels=16, frames=64,
                                                    stack=Stack(layers=2, hidden=64, heads=4, ffn=256),
                                                    name="whisper-small"),
}
NEW = ["vit-b16", "gpt2-small", "convnext-t", "whisper-tiny-encoder"]


def _run_ort(model: onnx.ModelProto, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_small_configs_valid_and_informative(kind: str, tmp_path) -> None:
    model = SMALL[kind](7)
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = Graph.load(str(path))
    assert not [g.node_label(i) for i in range(len(g)) if not g.boundary([i])[0]], "a node computes from weights alone"
    a = _run_ort(g.model, zoo.random_inputs(g, seed=0))
    b = _run_ort(g.model, zoo.random_inputs(g, seed=1))
    for x, y in zip(a, b):
        assert np.isfinite(x).all() and np.ptp(x) > 0
        assert not np.allclose(x, y), f"{kind}: output ignores the input"


def test_gpt2_is_causal(tmp_path) -> None:
    """Changing the last token changes only the last position's hidden state."""
    model = SMALL["gpt2"](3)
    ids = np.arange(16, dtype=np.int64).reshape(1, 16)
    other = ids.copy()
    other[0, -1] = 99
    (a,) = _run_ort(model, {"input_ids": ids})
    (b,) = _run_ort(model, {"input_ids": other})
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], atol=1e-6)
    assert not np.allclose(a[:, -1], b[:, -1])


def test_new_models_registered() -> None:
    for name in NEW:
        assert name in zoo.names()
    assert zoo.ZOO_VERSION == 4  # existing models did not change


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_full_models_agree_on_ort_and_openvino(name: str) -> None:
    from collage.backends import get_backend, unavailable_reason

    if unavailable_reason("openvino"):
        pytest.skip(unavailable_reason("openvino"))
    path = zoo.model_path(name)
    onnx.checker.check_model(str(path), full_check=True)
    g = zoo.load_graph(f"zoo:{name}")
    assert not [g.node_label(i) for i in range(len(g)) if not g.boundary([i])[0]]
    feeds = zoo.random_inputs(g, seed=0)
    ref = {k: np.array(v) for k, v in get_backend("onnxruntime").compile(g.model).run(feeds).items()}
    got = get_backend("openvino").compile(g.model).run(feeds)
    for k, want in ref.items():
        assert np.isfinite(want).all() and np.ptp(want) > 0
        rel = float(np.max(np.abs(np.asarray(got[k]) - want)) / np.max(np.abs(want)))
        assert rel <= 1e-3, f"{name}: {k} differs by {rel:.2e} of its largest magnitude"
