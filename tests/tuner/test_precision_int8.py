"""INT8 variants (onnxruntime-int8, openvino-int8, openvino-int8-bf16): QDQ of any cut with ranges calibrated
once per model (collage.backends.qdq), in the budgeted search (collage.tuner.precision)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from collage import util
from collage.backends import backend_names, get_backend, qdq
from collage.measure.accuracy import Budget, ErrorStore, load_calibration, reference_runs, run_error
from collage.graph.ir import Graph
from collage.search.candidates import Limits, enumerate_candidates

INT8 = ["onnxruntime-int8", "openvino-int8", "openvino-int8-bf16"]


def _int8_reason() -> str | None:
    return qdq.cpu_int8_reason() or get_backend("openvino").available()


needs_int8 = pytest.mark.skipif(_int8_reason() is not None, reason=f"no int8 here: {_int8_reason()}")
needs_bf16 = pytest.mark.skipif(get_backend("openvino-bf16").available() is not None,
                                reason=f"no bf16 here: {get_backend('openvino-bf16').available()}")


def tuned_bits(name: str) -> int:
    """The weight bits a tune quantizes ``name`` with on this CPU (collage.tuner.precision.tuner.prepare_int8)."""
    return qdq.tuned_weight_bits(get_backend(name))

#: each int8 variant on a whole tiny zoo model vs ONNX Runtime fp32, 2 seeded random samples (measured
#: rel 0.012-0.020, cos >= 0.9993; bf16 for the rest adds < 0.004 rel)
TOLERANCE = Budget(min_cos=0.998, max_rel=0.05)


def _ranges(graph: Graph, tmp_path) -> tuple[str, object]:
    calib = load_calibration(graph, None)
    return str(qdq.save_ranges(qdq.calibrate(graph.model, calib.samples), tmp_path / "ranges.json")), calib


def test_int8_variants_are_named_apart_and_not_listed():
    names = backend_names("cpu")
    for name in INT8:
        assert name not in names  # a variant: only when named, under --accuracy
        b = get_backend(name)
        assert b.precision.startswith("int8") and b.name == name
    versions = {get_backend(n).version() for n in [*INT8, "onnxruntime", "openvino"]}
    assert len(versions) == 5  # own cost, support and error keys
    assert get_backend("openvino-int8-bf16").precision == "int8+bf16"


def test_int8_availability_follows_cpu_flags(monkeypatch, tmp_path):
    def cpu(name: str, flags: str) -> None:
        fake = tmp_path / name
        fake.write_text(f"processor : 0\nflags : {flags}\n\nprocessor : 1\nflags : avx2\n")
        monkeypatch.setattr(util, "CPUINFO", str(fake))

    cpu("old", "fpu sse sse4_2 avx")
    why = qdq.cpu_int8_reason()
    assert why is not None and "avx2" in why
    # an AVX2-only CPU (issue 40: the AMD EPYC VM) runs both runtimes' int8 kernels: offered, measured, judged
    cpu("avx2", "fpu sse avx avx2 fma")
    assert qdq.cpu_int8_reason() is None
    cpu("amx", "fpu avx512f avx512_vnni amx_int8")
    assert qdq.cpu_int8_reason() is None
    monkeypatch.setattr(util, "CPUINFO", str(tmp_path / "missing"))
    assert "cannot read" in (qdq.cpu_int8_reason() or "")


def test_int8_compile_without_ranges_says_what_to_do():
    from collage import zoo
    from collage.errors import CompileError

    g = zoo.load_graph("zoo:tiny-resnet")
    with pytest.raises(CompileError, match="no calibrated int8 ranges"):
        get_backend("onnxruntime-int8").compile(g.model)


@needs_int8
@pytest.mark.parametrize("model", ["tiny-resnet", "tiny-bert"])
def test_each_int8_variant_vs_fp32_within_tolerance(model, tmp_path):
    from collage import zoo

    g = zoo.load_graph(f"zoo:{model}")
    path, calib = _ranges(g, tmp_path)
    refs = reference_runs(g, calib)
    q = qdq.quantize(g.model, qdq.load_ranges(path))
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) > 3  # really quantized
    for name in INT8:
        b = get_backend(name, ranges=path, weight_bits=tuned_bits(name))
        err = run_error(b.compile(g.model).run, calib, refs, g.outputs)
        assert err.finite and TOLERANCE.allows(err), f"{name} on {model}: {err.describe()}"
        assert err.rel > 1e-4, f"{name} on {model} matches fp32 exactly: not int8?"


@needs_int8
@pytest.mark.parametrize("name", INT8)
def test_int8_quantizes_a_model_below_opset_13(name, tmp_path):
    """A Paddle2ONNX export at opset 11/12 (ppocr-cls, PP-OCRv4): DequantizeLinear has no ``axis`` before opset 13,
    so its weights are quantized per tensor (qdq2 wrote per-channel ones and both runtimes refused the model)."""
    g = _conv_opset11()
    path, calib = _ranges(g, tmp_path)
    q = qdq.quantize(g.model, qdq.load_ranges(path))
    assert any(n.op_type == "DequantizeLinear" for n in q.graph.node)
    assert not any(a.name == "axis" for n in q.graph.node if n.op_type == "DequantizeLinear" for a in n.attribute)
    b = get_backend(name, ranges=path, weight_bits=tuned_bits(name))
    err = run_error(b.compile(g.model).run, calib, reference_runs(g, calib), g.outputs)
    assert err.finite and TOLERANCE.allows(err), f"{name} at opset 11: {err.describe()}"


@needs_int8
@pytest.mark.parametrize("name", INT8)
def test_two_adjacent_int8_partitions_give_the_same_outputs_as_one(name, tmp_path):
    from collage import zoo
    from collage.search.ranges import narrow_cuts

    g = zoo.load_graph("zoo:tiny-resnet")
    path, calib = _ranges(g, tmp_path)
    n = len(g)
    # a cut whose boundary tensor a Conv reads: quantized on both sides of the cut
    cut = next(c for c in sorted(narrow_cuts(g)) if c > n // 3
               and any(g.op_type(i) == "Conv" for i in range(c, n) for t in g.boundary(range(c, n))[0]
                       if t in g.reads(i)))
    b = get_backend(name, ranges=path)
    whole, first, second = b.compile(g.model), b.compile(g.extract(range(cut))), b.compile(g.extract(range(cut, n)))
    for feeds in calib.samples:
        one = {k: np.array(v, copy=True) for k, v in whole.run(feeds).items()}
        env = dict(feeds)
        env.update({k: np.array(v, copy=True) for k, v in first.run({t: feeds[t] for t in first.input_names}).items()})
        two = second.run({t: env[t] for t in second.input_names})
        for o in g.outputs:
            np.testing.assert_allclose(two[o], one[o], rtol=0, atol=1e-6 * float(np.abs(one[o]).max()))


@needs_int8
@needs_bf16
def test_int8_candidate_over_budget_is_never_chosen(tmp_path):
    """int8 priced 10x faster than anything, its measured errors over the budget (bf16's within it): no int8
    partition in the plan; every lower-precision partition chosen is within budget on its own, end to end too."""
    from collage import zoo
    from collage.measure.connect import get_db
    from collage.tuner.precision.tuner import PrecisionSettings, PrecisionTuner

    g = zoo.load_graph("zoo:tiny-resnet")
    names = ["onnxruntime", "openvino-bf16", *INT8]
    bks = [get_backend(n) for n in names]
    db = get_db(tmp_path / "costs.sqlite")
    tuner = PrecisionTuner.setup(g, bks, PrecisionSettings("rel=0.008", db=db, work=tmp_path, progress=False))
    assert tuner.int8["calibration_runs"] == 1
    supports = {b.name: {i: True for i in range(len(g))} for b in bks}
    cands = [c for c in enumerate_candidates(g, supports, Limits(max_nodes=1))
             if c.backend not in INT8 or qdq.has_quantizable_op([g.op_type(i) for i in c.nodes])]
    whole = tuple(range(len(g)))
    from collage.search.candidates import Candidate

    cands += [Candidate(whole, n) for n in names]
    speed = {"onnxruntime": 1.0, "openvino-bf16": 0.5, **{n: 0.1 for n in INT8}}
    costs = {c: len(c.nodes) * speed[c.backend] + 0.01 for c in cands}
    plan, out = tuner.search(costs, None)
    budget = Budget(None, 0.008)
    int8_errs = [e for c, e in tuner.errors.items() if c.backend in INT8]
    assert int8_errs and any(not budget.allows(e) for e in int8_errs)
    for p in plan.partitions:
        c = Candidate(tuple(p.nodes), p.backend)
        if p.backend in INT8:
            assert budget.allows(tuner.errors[c]), f"int8 partition over budget chosen: {c}"
    assert all(p.backend not in INT8 or len(p.nodes) < len(g) for p in plan.partitions)  # whole int8 is over
    assert out.final_error is None or (out.final_error.finite and budget.allows(out.final_error))
    assert not math.isnan(plan.predicted_ms or 0.0)


@needs_int8
def test_second_tune_reuses_ranges_and_errors(tmp_path, monkeypatch):
    from collage.tuner.job import tune
    from tests.helpers import chain_model

    opts = dict(backends=["onnxruntime", "openvino-int8"], accuracy="cos=0.99,rel=0.05", limits=Limits(max_nodes=2),
                db=tmp_path / "costs.sqlite", progress=False)
    first = tune(chain_model(4), tmp_path / "a", **opts)
    rep = json.loads((first.out_dir / "report.json").read_text())
    i8 = rep["precision"]["int8"]
    assert i8["calibration_runs"] == 1 and i8["tensors"] == 5  # x and the four MatMul outputs
    assert rep["precision"]["calibration"] == {**rep["precision"]["calibration"], "samples": 2, "random": True}
    assert all("precision" in p and "rel" in p for p in rep["precision"]["partitions"])
    from collage.measure.connect import get_db

    errors_before = ErrorStore(get_db(tmp_path / "costs.sqlite")).count()
    assert errors_before > 0

    def no_calibration(*a, **k):
        raise AssertionError("calibrated again")

    monkeypatch.setattr(qdq, "calibrate", no_calibration)
    second = tune(chain_model(4), tmp_path / "b", **opts)
    rep2 = json.loads((second.out_dir / "report.json").read_text())
    assert rep2["precision"]["int8"]["calibration_runs"] == 0 and rep2["precision"]["int8"]["reused"] is True
    assert ErrorStore(get_db(tmp_path / "costs.sqlite")).count() == errors_before  # no error measured again


def _conv_opset11() -> Graph:
    """One Conv (3 -> 8 channels, 3x3) and a Relu at opset 11: weights per tensor, N(0, 0.2)."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], rng.normal(0, 0.2, 8 * 27).astype(np.float32).tolist())
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "opset11", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    onnx.checker.check_model(model)
    return Graph(model)


@pytest.mark.parametrize("name", ["onnxruntime-int8", "openvino-int8"])
def test_weight_bits_is_a_keyed_option_that_leaves_8_bit_keys_as_they_were(name):
    if name.startswith("openvino") and get_backend("openvino").available():
        pytest.skip(f"openvino: {get_backend('openvino').available()}")
    eight, seven = get_backend(name), get_backend(name, weight_bits=7)
    assert eight.weight_bits == 8 and "weight_bits" not in eight.options and not eight.version().endswith("-w8")
    assert seven.version() == eight.version() + "-w7" and seven.options["weight_bits"] == 7
    with pytest.raises(ValueError, match="weight_bits must be one of"):
        get_backend(name, weight_bits=4)


@needs_int8
@pytest.mark.skipif(util.int8_kernels() != "avx2", reason="needs a CPU whose int8 kernels are AVX2's (no VNNI/AMX): "
                    f"this one's are {util.int8_kernels()!r}")
def test_avx2_int8_kernels_saturate_8_bit_weights_and_not_7_bit_ones(tmp_path):
    """AVX2 multiply-adds uint8 x int8 pairs into int16: 255 x 127 x 2 > 32767 saturates, 255 x 63 x 2 does not. On
    an AVX2-only Zen 1 ONNX Runtime int8 was rel 0.398 off fp32 with 8-bit weights, 0.016 with 7-bit ones."""
    g = _conv_opset11()
    path, calib = _ranges(g, tmp_path)
    refs = reference_runs(g, calib)
    errs = {bits: run_error(get_backend("onnxruntime-int8", ranges=path, weight_bits=bits).compile(g.model).run,
                            calib, refs, g.outputs) for bits in (8, 7)}
    assert not TOLERANCE.allows(errs[8]), errs[8].describe()  # saturated: what a tune here used to judge
    assert TOLERANCE.allows(errs[7]), errs[7].describe()


@pytest.mark.parametrize("kernels, bits", [("avx2", 7), ("vnni", 8)])
def test_a_tune_quantizes_with_7_bit_weights_where_the_int8_kernels_are_avx2(kernels, bits, tmp_path, monkeypatch):
    from collage.backends.onnxruntime.int8 import OnnxRuntimeInt8Backend
    from collage.measure.connect import get_db
    from collage.tuner.precision.tuner import prepare_int8

    monkeypatch.setattr(OnnxRuntimeInt8Backend, "int8_kernels", lambda self: kernels)
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path / "cache"))
    g = _conv_opset11()
    b = get_backend("onnxruntime-int8")
    opts: dict = {}
    prepare_int8(g, load_calibration(g, None), get_db(tmp_path / "c.sqlite"), [b], opts, progress=False)
    assert b.weight_bits == bits and opts["onnxruntime-int8"].get("weight_bits", 8) == bits
    assert get_backend("onnxruntime-int8", **opts["onnxruntime-int8"]).version() == b.version()


def test_7_bit_weights_are_checked_after_quantizing(monkeypatch):
    """A quantizer that ignored reduce_range (an older onnxruntime) would give a -w7 key 8-bit weights: refused."""
    from onnxruntime.quantization import qdq_quantizer

    from collage.errors import CompileError

    g = _conv_opset11()
    ranges = qdq.calibrate(g.model, load_calibration(g, None).samples)
    q = qdq.quantize(g.model, ranges, weight_bits=7)
    peak = max(int(np.abs(onnx_array(t)).max()) for t in q.graph.initializer if t.data_type == 3)  # INT8
    assert peak <= 64
    real = qdq_quantizer.QDQQuantizer.__init__

    def ignores_reduce_range(self, model, per_channel, reduce_range, *a, **k):
        real(self, model, per_channel, False, *a, **k)

    monkeypatch.setattr(qdq_quantizer.QDQQuantizer, "__init__", ignores_reduce_range)
    with pytest.raises(CompileError, match="ignored reduce_range"):
        qdq.quantize(g.model, ranges, weight_bits=7)
    with pytest.raises(ValueError, match="weight_bits must be one of"):
        qdq.quantize(g.model, ranges, weight_bits=6)


def onnx_array(t):
    from onnx import numpy_helper

    return numpy_helper.to_array(t).astype(np.int16)
