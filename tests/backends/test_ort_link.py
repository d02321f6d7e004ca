"""ONNX Runtime linked partitions (collage.backends.onnxruntime.link): NCHWc tensors handed over between sessions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import need_backends, residual_pieces, run_chain
from collage import zoo
from collage.backends import get_backend
from collage.backends.onnxruntime import link as ort_link
from collage.graph.ir import Graph

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def ort():
    need_backends("onnxruntime")
    return get_backend("onnxruntime")


def _reorders(compiled) -> int:
    """ReorderInput/ReorderOutput nodes in the graph a compiled partition's session was built from."""
    model = onnx.load_from_string(compiled._optimized) if compiled._optimized is not None else \
        ort_link.optimized_graph(compiled._backend, compiled._model)
    return sum(n.domain == ort_link.NCHWC_DOMAIN and n.op_type in ("ReorderInput", "ReorderOutput")
               for n in model.graph.node)


def _to_nchwc(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW -> ORT's NCHWc memory order, as an [N, C padded, H, W] array (what a linked tensor holds)."""
    n, c, h, w = x.shape
    cp = -(-c // block) * block
    padded = np.zeros((n, cp, h, w), x.dtype)
    padded[:, :c] = x
    return padded.reshape(n, cp // block, block, h, w).transpose(0, 1, 3, 4, 2).reshape(n, cp, h, w)


@pytest.fixture(scope="module")
def tiny_resnet(ort):
    graph = zoo.load_graph("zoo:tiny-resnet")
    parts = residual_pieces(graph)
    models = [graph.extract(p, name=f"tiny_resnet_piece{k}") for k, p in enumerate(parts)]
    if not any(n.domain == ort_link.NCHWC_DOMAIN for n in ort_link.optimized_graph(ort, models[1]).graph.node):
        pytest.skip("onnxruntime does not use its NCHWc layout on this CPU: nothing to link")
    return graph, parts, models, zoo.random_inputs(graph)


def test_linked_chain_matches_plain_chain_and_drops_every_pair(ort, tiny_resnet):
    graph, parts, models, feeds = tiny_resnet
    assert len(parts) == 5, [len(p) for p in parts]
    plain = [ort.compile(m) for m in models]
    linked = ort.compile_linked(models, plain=graph.outputs)
    want = run_chain(graph, parts, plain, feeds)
    got = run_chain(graph, parts, linked, feeds)
    for name in graph.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    # every one of the 4 boundaries lost its ReorderOutput + ReorderInput pair, nothing else changed
    assert sum(map(_reorders, plain)) - sum(map(_reorders, linked)) == 2 * (len(parts) - 1)
    handed = [graph.boundary(parts[k])[1][0] for k in range(len(parts) - 1)]
    assert all(isinstance(c, ort_link.LinkedOrtCompiled) for c in linked)
    assert linked[0].linked == handed[:1] and linked[-1].linked == handed[-1:]
    # a handed-over tensor really is in NCHWc memory order, not NCHW
    block = ort_link.block_size()
    for name in handed:
        assert not np.allclose(got[name], want[name]), name
        np.testing.assert_allclose(got[name], _to_nchwc(want[name], block), rtol=1e-4, atol=1e-5, err_msg=name)


def test_link_counts_on_optimised_graphs(ort, tiny_resnet):
    graph, parts, models, _ = tiny_resnet
    graphs = [ort_link.optimized_graph(ort, m) for m in models]
    plan = ort_link.link(graphs, plain=graph.outputs)
    assert (plan.dropped_reorder_output, plan.dropped_reorder_input) == (4, 4)
    assert sorted(plan.blocked) == sorted(graph.boundary(parts[k])[1][0] for k in range(4))
    again = ort_link.link(graphs, plain=graph.outputs)  # nothing left to link
    assert (again.dropped_reorder_output, again.dropped_reorder_input) == (0, 0)


def test_plain_tensors_stay_nchw(ort, tiny_resnet):
    graph, parts, models, feeds = tiny_resnet
    keep = graph.boundary(parts[1])[1][0]  # the tensor between pieces 1 and 2
    plain = [ort.compile(m) for m in models]
    linked = ort.compile_linked(models, plain=[*graph.outputs, keep])
    want = run_chain(graph, parts, plain, feeds)
    got = run_chain(graph, parts, linked, feeds)
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-4, atol=1e-5)  # NCHW, as the plain chain
    np.testing.assert_allclose(got[graph.outputs[0]], want[graph.outputs[0]], rtol=1e-4, atol=1e-5)
    assert keep not in linked[1].linked and keep not in linked[2].linked
    assert sum(map(_reorders, plain)) - sum(map(_reorders, linked)) == 2 * (len(parts) - 2)


def test_reader_in_nchw_blocks_the_link(ort, tiny_resnet):
    """A tensor also read by a later piece that takes it in NCHW (here: a Relu) stays NCHW for everyone."""
    graph, parts, models, feeds = tiny_resnet
    t = graph.boundary(parts[0])[1][0]
    side = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", [t], ["side_out"])], "side",
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, graph.tensor(t).shape)],
        [helper.make_tensor_value_info("side_out", TensorProto.FLOAT, graph.tensor(t).shape)]),
        opset_imports=[helper.make_opsetid("", 17)])
    compiled = ort.compile_linked([models[0], models[1], side], plain=graph.outputs)
    assert not isinstance(compiled[2], ort_link.LinkedOrtCompiled)
    assert t not in getattr(compiled[0], "linked", []) and t not in getattr(compiled[1], "linked", [])
    out0 = compiled[0].run(feeds)[t]
    np.testing.assert_allclose(compiled[2].run({t: out0})["side_out"], np.maximum(out0, 0))
    ref = ort.compile(models[0]).run(feeds)[t]
    np.testing.assert_allclose(out0, ref, rtol=1e-5, atol=1e-6)


def _padded_model() -> onnx.ModelProto:
    """x -> Conv(3->24) -> Relu -> t -> Conv(24->32) -> y: 24 channels pad to the block size (16 with AVX-512)."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((24, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 24, 3, 3)).astype(np.float32) * 0.1, "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["t"]),
             helper.make_node("Conv", ["t", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["y"])]
    graph = helper.make_graph(nodes, "padded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 20, 20])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_padded_channels(ort, tiny_resnet):  # tiny_resnet: skips where ORT has no NCHWc
    graph = Graph.load(_padded_model())
    models = [graph.extract([0, 1], name="a"), graph.extract([2, 3], name="b")]
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 20, 20)).astype(np.float32)}
    linked = ort.compile_linked(models, plain=["y"])
    plain = [ort.compile(m) for m in models]
    t_plain = np.array(plain[0].run(feeds)["t"], copy=True)
    t_linked = np.array(linked[0].run(feeds)["t"], copy=True)
    block = ort_link.block_size()
    assert linked[0].linked == ["t"] and t_linked.shape == (1, -(-24 // block) * block, 20, 20)
    np.testing.assert_array_equal(t_linked, _to_nchwc(t_plain, block))  # padding channels are zero
    np.testing.assert_allclose(linked[1].run({"t": t_linked})["y"], plain[1].run({"t": t_plain})["y"],
                               rtol=1e-4, atol=1e-5)


def test_model_without_nchwc_is_unchanged(ort):
    graph = zoo.load_graph("zoo:tiny-bert")
    ln = [i for i in range(len(graph)) if graph.op_type(i) == "LayerNormalization"]
    cut = ln[0]
    models = [graph.extract(list(range(cut + 1)), name="bert_a"),
              graph.extract(list(range(cut + 1, len(graph))), name="bert_b")]
    compiled = ort.compile_linked(models, plain=graph.outputs)
    assert not any(isinstance(c, ort_link.LinkedOrtCompiled) for c in compiled)
    assert all(c._optimized is None for c in compiled)  # exactly what compile() gives


_LOADER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    from collage.backends import get_backend
    d = Path(sys.argv[1])
    meta = json.loads((d / "meta.json").read_text())
    backend = get_backend("onnxruntime")
    env = dict(np.load(d / "feeds.npz"))
    for k, (entry, inputs) in enumerate(zip(meta["entries"], meta["inputs"])):
        c = backend.load(d / f"part{k}", entry)
        env.update({n: np.array(v, copy=True) for n, v in c.run({t: env[t] for t in inputs}).items()})
    np.savez(d / "out.npz", **env)
""")


def test_save_load_round_trip_in_fresh_process(ort, tiny_resnet, tmp_path):
    graph, parts, models, feeds = tiny_resnet
    linked = ort.compile_linked(models, plain=graph.outputs)
    want = run_chain(graph, parts, linked, feeds)
    entries = [c.save(tmp_path / f"part{k}") for k, c in enumerate(linked)]
    for k, (c, e) in enumerate(zip(linked, entries)):
        assert e["linked"]["tensors"] == c.linked
        saved = onnx.load(str(tmp_path / f"part{k}" / e["files"][0]))  # the linked form is what is saved
        assert not [n for n in saved.graph.node if n.op_type.startswith("Reorder") and set(n.input) & set(c.linked)]
        assert not [n for n in saved.graph.node if n.op_type.startswith("Reorder") and set(n.output) & set(c.linked)]
    (tmp_path / "meta.json").write_text(json.dumps(
        {"entries": entries, "inputs": [graph.boundary(p)[0] for p in parts]}))
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = dict(np.load(tmp_path / "out.npz"))
    for name in [*graph.outputs, graph.boundary(parts[1])[1][0]]:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_exported_all_ort_plan_is_linked_and_runs(ort, tiny_resnet, tmp_path):
    """collage.tuner.export.export compiles one backend's partitions together: the two-partition plan hands the
    tensor at the cut over in NCHWc, and the loaded artifact still computes what the whole model does."""
    from collage.tuner.export import export
    from collage.plan import Partition, Plan
    from collage.runtime.artifact import load

    graph, parts, _, feeds = tiny_resnet
    cut = parts[1][-1] + 1  # after the first residual block
    plan = Plan([Partition(tuple(range(cut)), "onnxruntime"), Partition(tuple(range(cut, len(graph))), "onnxruntime")])
    art = load(export(graph, plan, tmp_path / "art"))
    handed = graph.boundary(range(cut))[1]
    assert [p["entry"].get("linked", {}).get("tensors") for p in art.manifest["partitions"]] == [handed, handed]
    want = ort.compile(graph.model).run(feeds)
    got = art.run(feeds)
    for name in graph.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert art.boundary_overhead(feeds, repeat=2, warmup=1) is not None  # re-runs pieces on captured tensors
    # re-exporting the loaded partitions (what tune does with the verified ones) keeps them linked
    again = load(export(graph, plan, tmp_path / "again", compiled={p.index: p.compiled for p in art.partitions}))
    assert [p["entry"]["linked"]["tensors"] for p in again.manifest["partitions"]] == [handed, handed]
    np.testing.assert_allclose(again.run(feeds)[graph.outputs[0]], want[graph.outputs[0]], rtol=1e-4, atol=1e-5)


def test_exported_mixed_plan_keeps_tensors_read_by_another_backend_plain(ort, tiny_resnet, tmp_path):
    from collage.tuner.export import export
    from collage.plan import Partition, Plan
    from collage.runtime.artifact import load

    need_backends("openvino")
    graph, parts, _, feeds = tiny_resnet
    a, b = parts[0][-1] + 1, parts[1][-1] + 1
    plan = Plan([Partition(tuple(range(a)), "onnxruntime"), Partition(tuple(range(a, b)), "onnxruntime"),
                 Partition(tuple(range(b, len(graph))), "openvino")])
    art = load(export(graph, plan, tmp_path / "art"))
    first, second = graph.boundary(range(a))[1], graph.boundary(range(a, b))[1]
    linked = [p["entry"].get("linked", {}).get("tensors") for p in art.manifest["partitions"]]
    assert linked[:2] == [first, first]  # ORT -> ORT: blocked; ORT -> OpenVINO (second): NCHW
    assert not set(second) & set(linked[1])
    want = ort.compile(graph.model).run(feeds)
    got = art.run(feeds)
    for name in graph.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=name)
