"""OpenVINO ``compile_linked``: partitions that hand tensors over in the CPU plugin's own form."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tests.helpers import layer_pieces, model_feeds, need_backends, residual_pieces, run_chain

from collage import zoo
from collage.backends import get_backend
from collage.errors import CollageError


@pytest.fixture(autouse=True)
def _openvino():
    need_backends("openvino")


def _bf16() -> None:
    from collage.tuner.precision.tuner import cpu_bf16_reason

    reason = cpu_bf16_reason()
    if reason:
        pytest.skip(f"no native bf16 on this CPU: {reason}")


def _setup(model: str, cuts=residual_pieces):
    graph = zoo.load_graph(f"zoo:{model}")
    parts = cuts(graph)
    models = [graph.extract(p, name=f"{model}_piece{k}") for k, p in enumerate(parts)]
    return graph, parts, models, model_feeds(graph.model)


def _linked(compiled) -> set[str]:
    return {t for c in compiled for t in getattr(c, "linked", {})}


def _boundaries(graph, parts) -> set[str]:
    out = set()
    for k, ids in enumerate(parts):
        _, leaving = graph.boundary(ids)
        later = {t for p in parts[k + 1:] for t in graph.boundary(p)[0]}
        out |= {t for t in leaving if t in later and t not in graph.outputs}
    return out


def test_fp32_linked_chain_equals_plain_chain_with_nhwc_boundaries():
    from collage.backends.openvino.link import COPY_SUFFIX, LinkedOVCompiled, conversion_count

    graph, parts, models, feeds = _setup("tiny-resnet")
    backend = get_backend("openvino")
    plain_c = [backend.compile(m) for m in models]
    linked_c = backend.compile_linked(models, plain=set(graph.outputs))
    plain = run_chain(graph, parts, plain_c, feeds)
    linked = run_chain(graph, parts, linked_c, feeds)
    bounds = _boundaries(graph, parts)
    hand = _linked(linked_c)
    # every boundary between convolutions is linked; the one into the NCHW pooling head stays plain
    assert hand <= bounds and len(hand) == len(bounds) - 1, (hand, bounds)
    for t in bounds:
        n, c, h, w = graph.tensor(t).shape
        if t in hand:  # handed over channels-last, same values
            assert linked[t].shape == (n, h, w, c) and linked[t].dtype == np.float32, (t, linked[t].shape)
            np.testing.assert_allclose(linked[t].transpose(0, 3, 1, 2), plain[t], rtol=1e-4, atol=1e-5, err_msg=t)
        else:
            assert linked[t].shape == (n, c, h, w)
            np.testing.assert_allclose(linked[t], plain[t], rtol=1e-4, atol=1e-5, err_msg=t)
    for t in graph.outputs:
        assert linked[t].shape == plain[t].shape
        np.testing.assert_allclose(linked[t], plain[t], rtol=1e-4, atol=1e-5, err_msg=t)
    assert sum(isinstance(c, LinkedOVCompiled) for c in linked_c) == len(hand) + 1
    # the Reorder pair at each linked boundary is gone: at most one copy per boundary is left
    plain_n, linked_n = sum(map(conversion_count, plain_c)), sum(map(conversion_count, linked_c))
    assert linked_n <= plain_n - len(hand), (plain_n, linked_n)
    # the residual blocks' outputs (conv + fused sum) leave through the 1x1 copy, merged with the layout change
    copies = [op.get_friendly_name() for c in linked_c for op in c._compiled.get_runtime_model().get_ordered_ops()
              if op.get_friendly_name().endswith(COPY_SUFFIX)]
    assert sorted(copies) == sorted(f"{t}{COPY_SUFFIX}" for t in hand if t.startswith("res")), copies


def test_linked_inputs_are_read_not_written():
    graph, parts, models, feeds = _setup("tiny-resnet")
    backend = get_backend("openvino")
    linked_c = backend.compile_linked(models, plain=set(graph.outputs))
    env = dict(feeds)
    for ids, c in zip(parts, linked_c):
        entering, _ = graph.boundary(ids)
        before = {t: np.array(env[t], copy=True) for t in entering}
        env.update({k: np.array(v, copy=True) for k, v in c.run({t: env[t] for t in entering}).items()})
        for t in entering:  # a residual sum computed in place must not land in the caller's array
            np.testing.assert_array_equal(env[t], before[t], err_msg=t)


def test_bf16_linked_boundaries_are_nhwc_bf16_and_cheaper():
    from collage.backends.openvino.link import LinkedOVCompiled, conversion_count

    _bf16()
    graph, parts, models, feeds = _setup("tiny-resnet")
    backend = get_backend("openvino", precision="bf16")
    plain_c = [backend.compile(m) for m in models]
    linked_c = backend.compile_linked(models, plain=set(graph.outputs))
    plain = run_chain(graph, parts, plain_c, feeds)
    linked = run_chain(graph, parts, linked_c, feeds)
    bounds = _linked(linked_c)
    # every boundary is linked, the one into the pooling head too (in bf16 its Reorder converts anyway)
    assert bounds == _boundaries(graph, parts), bounds
    for t in bounds:
        n, c, h, w = graph.tensor(t).shape
        assert linked[t].shape == (n, h, w, c) and linked[t].dtype == np.uint16, (t, linked[t].shape, linked[t].dtype)
        # the raw bits are the bf16 values of the plain chain's NCHW tensor, channels last
        as_f32 = (linked[t].astype(np.uint32) << 16).view(np.float32).transpose(0, 3, 1, 2)
        np.testing.assert_allclose(as_f32, plain[t], rtol=2e-2, atol=2e-2, err_msg=t)
    for t in graph.outputs:  # plain tensors keep the ONNX form
        assert linked[t].dtype == np.float32 and linked[t].shape == plain[t].shape
        np.testing.assert_allclose(linked[t], plain[t], rtol=2e-2, atol=2e-3, err_msg=t)
    assert all(isinstance(c, LinkedOVCompiled) for c in linked_c)
    assert sum(map(conversion_count, linked_c)) <= sum(map(conversion_count, plain_c)) - len(bounds)
    # a float array fed where the bf16 bits are expected is refused, not cast
    ids = parts[1]
    entering = graph.boundary(ids)[0]
    bad = {t: linked[t].astype(np.float32) for t in entering}
    with pytest.raises(CollageError, match="bf16"):
        linked_c[1].run(bad)


def test_plain_names_stay_onnx_form():
    _bf16()
    graph, parts, models, feeds = _setup("tiny-resnet")
    backend = get_backend("openvino", precision="bf16")
    first = sorted(_boundaries(graph, parts[:2]))
    linked_c = backend.compile_linked(models, plain={*graph.outputs, *first})
    env = run_chain(graph, parts, linked_c, feeds)
    for t in first:
        assert env[t].dtype == np.float32 and env[t].shape == graph.tensor(t).shape, t
    assert linked_c[0].__class__.__name__ == "OVCompiled"  # nothing of piece 0 is linked


_LOADER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    from collage.backends import get_backend
    d = Path(sys.argv[1])
    meta = json.loads((d / "meta.json").read_text())
    backend = get_backend(meta["backend"], **meta["options"])
    env = dict(np.load(d / "feeds.npz"))
    for k, (entry, entering) in enumerate(meta["parts"]):
        c = backend.load(d / f"part{k}", entry)
        env.update({n: np.array(v, copy=True) for n, v in c.run({t: env[t] for t in entering}).items()})
    np.savez(d / "out.npz", **{t: env[t] for t in meta["keep"]})
""")


@pytest.mark.parametrize("name", ["openvino-bf16", "openvino"])
def test_linked_save_load_in_fresh_process(name, tmp_path):
    if name == "openvino-bf16":
        _bf16()
    graph, parts, models, feeds = _setup("tiny-resnet")
    backend = get_backend(name)
    linked_c = backend.compile_linked(models, plain=set(graph.outputs))
    keep = sorted({*graph.outputs, *_boundaries(graph, parts)})
    env = run_chain(graph, parts, linked_c, feeds)
    metas = []
    for k, (ids, c) in enumerate(zip(parts, linked_c)):
        entry = c.save(tmp_path / f"part{k}")
        for f in entry["files"]:
            assert (tmp_path / f"part{k}" / f).is_file(), f
        metas.append([entry, graph.boundary(ids)[0]])
    assert any(m[0].get("linked") for m in metas), metas
    meta = {"backend": name, "options": backend.options, "parts": metas, "keep": keep}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = dict(np.load(tmp_path / "out.npz"))
    for t in keep:
        assert got[t].dtype == env[t].dtype and got[t].shape == env[t].shape, t
        np.testing.assert_allclose(got[t], env[t], rtol=1e-5, atol=1e-6, err_msg=t)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_bert_pieces_without_convolutions_still_work(precision):
    if precision == "bf16":
        _bf16()
    graph, parts, models, feeds = _setup("tiny-bert", layer_pieces)
    backend = get_backend("openvino", precision=precision)
    plain = run_chain(graph, parts, [backend.compile(m) for m in models], feeds)
    linked = run_chain(graph, parts, backend.compile_linked(models, plain=set(graph.outputs)), feeds)
    for t in graph.outputs:
        np.testing.assert_allclose(linked[t], plain[t], rtol=1e-4, atol=1e-5, err_msg=t)
