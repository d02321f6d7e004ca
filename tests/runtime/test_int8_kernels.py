"""An int8 partition's error is judged on the int8 kernels of the CPU that tuned it: the manifest records which
(``int8_kernels``: VNNI/AMX dot products or AVX2 multiply-adds, collage.util.int8_kernels), and loading it on a CPU
that runs the other kind warns, naming the backend and both kinds. Measured: OpenVINO int8 on nudenet-320n
(trained weights) cos 0.999915 with this CPU's VNNI kernels, 0.999700 with AVX2's (results/demo/avx2-emulated.md):
a strict budget of cos 0.9999 met on one is missed on the other. A real tiny-resnet artifact, exported and loaded;
only /proc/cpuinfo is a stand-in (util.CPUINFO) to be the other CPU."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import collage
from collage import util, zoo
from collage.backends import get_backend, qdq
from collage.measure.accuracy import load_calibration
from collage.plan import Plan
from collage.tuner.export import export

needs_int8 = pytest.mark.skipif(qdq.cpu_int8_reason() is not None or get_backend("openvino").available() is not None,
                                reason=f"no int8 here: {qdq.cpu_int8_reason()}")


def _as_cpu(monkeypatch, tmp_path, flags: str) -> None:
    fake = tmp_path / f"cpuinfo-{flags.replace(' ', '-')}"
    fake.write_text(f"processor\t: 0\nmodel name\t: Other CPU\nflags\t\t: {flags}\n\n")
    monkeypatch.setattr(util, "CPUINFO", str(fake))


@pytest.fixture(scope="module")
def int8_artifact(tmp_path_factory):
    """tiny-resnet as one openvino-int8 partition, exported on this CPU."""
    d = tmp_path_factory.mktemp("int8-kernels")
    g = zoo.load_graph("zoo:tiny-resnet")
    ranges = qdq.save_ranges(qdq.calibrate(g.model, load_calibration(g, None).samples), d / "ranges.json")
    return export(g, Plan.single("openvino-int8", len(g)), d / "out",
                  backend_options={"openvino-int8": {"ranges": str(ranges)}})


@needs_int8
def test_the_manifest_records_the_int8_kernels_it_was_judged_on(int8_artifact):
    backends = json.loads((int8_artifact / "manifest.json").read_text())["backends"]
    assert backends["openvino-int8"]["int8_kernels"] == util.int8_kernels() is not None


@needs_int8
def test_loading_on_a_cpu_with_the_other_int8_kernels_warns(int8_artifact, monkeypatch, tmp_path, caplog):
    judged = util.int8_kernels()
    other = "fpu avx avx2 fma" if judged == "vnni" else "fpu avx2 avx512f avx512_vnni"
    _as_cpu(monkeypatch, tmp_path, other)
    with caplog.at_level(logging.WARNING, logger="collage"):
        collage.load(int8_artifact).close()
    warned = [r.getMessage() for r in caplog.records if "int8 kernels" in r.getMessage()]
    assert len(warned) == 1 and "'openvino-int8'" in warned[0] and "re-tune on this CPU class" in warned[0]
    assert ("VNNI / AMX" in warned[0]) and ("AVX2 (16-bit" in warned[0])
    assert not warned[0].startswith("collage: ")  # the CLI's handler adds the prefix


@needs_int8
def test_loading_on_a_cpu_of_the_same_kind_is_quiet(int8_artifact, monkeypatch, tmp_path, caplog):
    _as_cpu(monkeypatch, tmp_path, "fpu avx2 avx_vnni" if util.int8_kernels() == "vnni" else "fpu avx avx2")
    with caplog.at_level(logging.WARNING, logger="collage"):
        collage.load(int8_artifact).close()
    assert "int8 kernels" not in caplog.text


def test_an_fp32_backend_records_no_int8_kernels(tmp_path):
    g = zoo.load_graph("zoo:tiny-resnet")
    out = export(g, Plan.single("onnxruntime", len(g)), tmp_path / "out")
    assert "int8_kernels" not in json.loads((out / "manifest.json").read_text())["backends"]["onnxruntime"]


@pytest.mark.parametrize("cap, openvino", [("AVX2", "avx2"), ("avx512_core", "avx2"), ("AVX512_CORE_VNNI", "vnni"),
                                           ("", "vnni")])
def test_openvino_s_int8_kernels_follow_onednn_s_cap(cap, openvino, monkeypatch, tmp_path):
    """OpenVINO's CPU kernels are oneDNN's, capped by ONEDNN_MAX_CPU_ISA (benchmarks.isa_cap emulates an AVX2 CPU
    so): a tune under such a cap judges AVX2 int8 kernels and says so; ONNX Runtime's MLAS has no cap."""
    _as_cpu(monkeypatch, tmp_path, "fpu avx2 avx512f avx512_vnni")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert get_backend("openvino-int8").int8_kernels() == openvino
    assert get_backend("openvino-int8-bf16").int8_kernels() == openvino
    assert get_backend("onnxruntime-int8").int8_kernels() == "vnni"
    assert get_backend("openvino").int8_kernels() is None and get_backend("onnxruntime").int8_kernels() is None


@needs_int8
def test_the_report_says_which_int8_kernels_judged_it(int8_artifact):
    from collage.report.render import render_markdown

    head = render_markdown(int8_artifact).split("\n## ")[0]
    assert "int8 partitions (openvino-int8) were judged within the accuracy budget on" in head
    assert ("VNNI / AMX" if util.int8_kernels() == "vnni" else "AVX2 (16-bit") in head


@needs_int8
def test_an_artifact_quantized_with_7_bit_weights_loads_them_so_on_any_cpu(tmp_path, monkeypatch):
    """A tune on AVX2 int8 kernels quantizes with 7-bit weights (collage.backends.qdq.WEIGHT_BITS); the artifact
    records it and runs its partitions so wherever it loads, as judged (a VNNI CPU too)."""
    g = zoo.load_graph("zoo:tiny-resnet")
    ranges = qdq.save_ranges(qdq.calibrate(g.model, load_calibration(g, None).samples), tmp_path / "ranges.json")
    out = export(g, Plan.single("onnxruntime-int8", len(g)), tmp_path / "out",
                 backend_options={"onnxruntime-int8": {"ranges": str(ranges), "weight_bits": 7}})
    info = json.loads((out / "manifest.json").read_text())["backends"]["onnxruntime-int8"]
    assert info["version"].endswith("-w7") and info["settings"]["weight_bits"] == 7
    _as_cpu(monkeypatch, tmp_path, "fpu avx2 avx512f avx512_vnni")
    art = collage.load(out)  # the version check passes: the backend is rebuilt with weight_bits 7
    try:
        outputs = art.run(art.random_inputs())
        assert all(np.isfinite(v).all() for v in outputs.values())
    finally:
        art.close()
