"""The report: tables, Markdown, HTML with the graph picture, CLI. Mostly on synthetic manifests (fast)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from collage.report.render import baselines_table, partition_table, render_html, render_markdown, summary
from collage.report.svg import colour_pair, render_bars, render_svg
from collage.util import sha256_file

SVG = "{http://www.w3.org/2000/svg}"


def _manifest(n_parts: int = 3, nodes_per: int = 4, backends=("onnxruntime", "openvino")) -> dict:
    parts, prev, nid = [], ["x"], 0
    for k in range(n_parts):
        outs = [f"t{k}"] + ([f"s{k}"] if k % 4 == 0 else [])
        ins = prev + ([f"s{k - 2}"] if k % 4 == 2 else [])
        ops = (["Conv", "Relu", "Add"] * nodes_per)[:nodes_per]
        parts.append({"index": k, "backend": backends[k % len(backends)], "dir": f"partitions/{k:03d}",
                      "nodes": list(range(nid, nid + nodes_per)), "ops": ops, "inputs": ins, "outputs": outs,
                      "entry": {"files": ["f"]}, "files": [], "cost_ms": 1.0 + k,
                      "runner_up": [backends[(k + 1) % len(backends)], 2.0 + k]})
        nid += nodes_per
        prev = [f"t{k}"]
    return {"format_version": 1, "collage_version": "0.1.0", "target": "cpu",
            "model": {"name": "synthetic", "nodes": nid}, "backends": {b: {"version": "v"} for b in backends},
            "inputs": [{"name": "x", "shape": [1], "dtype": "float32"}],
            "outputs": [{"name": prev[0], "shape": [1], "dtype": "float32"}], "partitions": parts}


REPORT = {"model": "synthetic", "target": "cpu", "baselines": {"onnxruntime": 7.5, "openvino": 6.0, "tvm": None},
          "plan_ms": 5.0, "predicted_ms": 4.8,
          "numerics": {"max_abs_err": 2e-6, "tolerance": 1e-4, "per_output": {"t2": 2e-6}},
          "boundary_overhead_ms": {"stitched_ms": 5.0, "parts_ms": [1, 2, 1.9], "total_ms": 0.1,
                                   "mean_per_boundary_ms": 0.05, "boundaries": 2},
          "notes": ["never worse: checked against openvino"]}


def _write(tmp_path: Path, manifest: dict, report: dict) -> Path:
    """The artifact folder: the manifest, the report and each partition's file ("f", its checksum listed:
    ``collage report`` checks an artifact's files as ``collage run`` does)."""
    d = tmp_path / "art"
    d.mkdir()
    for part in manifest["partitions"]:
        (d / part["dir"]).mkdir(parents=True)
        (d / part["dir"] / "f").write_bytes(b"a partition")
        part["files"] = [{"name": "f", "sha256": sha256_file(d / part["dir"] / "f"), "bytes": 11}]
    (d / "manifest.json").write_text(json.dumps(manifest))
    (d / "report.json").write_text(json.dumps(report))
    return d


def test_partition_table_backends_and_shares():
    df = partition_table(_manifest(3))
    assert list(df["backend"]) == ["onnxruntime", "openvino", "onnxruntime"]
    assert list(df["ops"]) == [4, 4, 4] and df["op_types"][0] == "Conv×2, Relu, Add"
    assert df["share_pct"].sum() == pytest.approx(100.0)
    assert list(df["share_pct"].round(2)) == [pytest.approx(100 / 6, abs=0.01), pytest.approx(200 / 6, abs=0.01),
                                              pytest.approx(50.0)]
    assert list(df["runner_up"]) == ["openvino", "onnxruntime", "openvino"] and df["runner_up_ms"][1] == 3.0


def test_unknown_costs_do_not_break_the_table():
    m = _manifest(2)
    m["partitions"][1]["cost_ms"] = None
    m["partitions"][1]["runner_up"] = None
    df = partition_table(m)
    assert df["share_pct"][0] == pytest.approx(100.0) and np.isnan(df["share_pct"][1])


def test_baselines_table_and_summary():
    src = {"manifest": _manifest(3), "report": REPORT}
    df = baselines_table(src)
    assert list(df["backend"]) == ["collage plan", "openvino", "onnxruntime", "tvm"]
    assert df.set_index("backend")["plan_speedup"]["onnxruntime"] == pytest.approx(1.5)
    assert df.set_index("backend")["error"]["tvm"] == "failed"
    s = summary(src)
    assert s["best_baseline"] == "openvino" and s["speedup"] == pytest.approx(1.2)
    assert s["sum_parts_ms"] == pytest.approx(6.0) and s["overhead_per_boundary_ms"] == pytest.approx(0.05)
    # the plain-number form of boundary_overhead_ms works too
    s2 = summary(src, {**REPORT, "boundary_overhead_ms": 0.07})
    assert s2["overhead_per_boundary_ms"] == pytest.approx(0.07) and s2["boundaries"] == 2


def test_markdown(tmp_path):
    d = _write(tmp_path, _manifest(3), REPORT)
    md = render_markdown(d)
    assert md.startswith("# collage report: synthetic on cpu")
    assert "| 1 | openvino | 4 |" in md and "| 0 | onnxruntime | 4 |" in md
    assert "| # | backend | ops | op types | ms | runner-up | runner-up ms | share of time % |" in md
    assert "best single backend openvino 6.000 ms (the plan is 1.20x faster)" in md
    assert "max abs error 2e-06 (tolerance 0.0001: ok)" in md
    assert "- never worse: checked against openvino" in md
    assert "predicted by the search (parts + transitions): 4.800 ms" in md
    assert "0.050 ms per boundary over 2 boundaries" in md


def test_numerics_exceeded_is_flagged(tmp_path):
    d = _write(tmp_path, _manifest(2), {**REPORT, "numerics": {"max_abs_err": 0.5, "tolerance": 1e-3}})
    assert "EXCEEDED" in render_markdown(d)
    assert '<span class="bad">EXCEEDED</span>' in render_html(d).read_text()


def test_html_with_svg_picture(tmp_path):
    d = _write(tmp_path, _manifest(6), REPORT)
    page = render_html(d)
    assert page == d / "report.html"
    text = page.read_text()
    svg = text[text.index("<svg"):text.index("</svg>") + 6]
    root = ET.fromstring(svg)  # well-formed
    rects = root.iter(f"{SVG}rect")
    fills = [r.get("fill") for r in rects]
    assert fills.count(colour_pair("openvino")[0]) >= 3 + 12 + 1  # blocks + node squares + legend
    assert "openvino: 3 partition(s), 12 node(s)" in text and "onnxruntime: 3 partition(s), 12 node(s)" in text
    paths = [p for p in root.iter(f"{SVG}path") if p.get("marker-end")]
    assert len(paths) == 5 + 1  # chain edges + the skip edge s0 -> partition 2 (and s4 -> none: 6 parts)
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("font-size") == "9"]
    assert len(labels) == len(paths) and "s0" in labels  # every arrow labelled with its tensor
    assert "never worse" in text and "<table" in text


@pytest.mark.parametrize("n_parts,nodes_per", [(40, 10), (3, 300)])
def test_large_graph_picture_stays_bounded(n_parts, nodes_per):
    m = _manifest(n_parts, nodes_per)
    svg = render_svg(m)  # (how long it takes: not a unit test's business)
    root = ET.fromstring(svg)
    width, height = float(root.get("width")), float(root.get("height"))
    assert width <= 2000 and height <= 6000, (width, height)
    titles = [t.text for t in root.iter(f"{SVG}title") if t.text and t.text.startswith("#")]
    assert len(titles) == n_parts * nodes_per  # every node drawn once


def test_cli_formats(tmp_path, capsys):
    from collage.cli import main
    d = _write(tmp_path, _manifest(3), REPORT)
    assert main(["report", str(d)]) == 0
    out = capsys.readouterr()
    assert "| 1 | openvino |" in out.out and "report.html" in out.err and (d / "report.html").is_file()
    assert main(["report", str(d), "--format", "csv"]) == 0
    csv = capsys.readouterr().out.splitlines()
    assert csv[0].startswith("partition,backend,ops,op_types,ms") and len(csv) == 4
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such artifact" in capsys.readouterr().err


def test_report_of_a_real_exported_artifact(tmp_path):
    from collage.backends import get_backend
    for name in ("onnxruntime", "openvino"):
        if get_backend(name).available():
            pytest.skip(f"{name} unavailable")
    from collage.tuner.export import export
    from collage.graph.ir import Graph
    from collage.plan import Partition, Plan
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("MatMul", ["r", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=[w])
    graph = Graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    plan = Plan([Partition((0, 1), "openvino", 0.03, ("onnxruntime", 0.04)), Partition((2,), "onnxruntime", 0.01)])
    out = export(graph, plan, tmp_path / "a", report={"plan_ms": 0.05, "baselines": {"onnxruntime": 0.045}})
    df = partition_table(out)
    assert list(df["backend"]) == ["openvino", "onnxruntime"] and list(df["ops"]) == [2, 1]
    assert df["op_types"][0] == "MatMul, Relu" and df["share_pct"].sum() == pytest.approx(100.0)
    assert "openvino" in render_html(out).read_text()


def test_tolerance_as_atol_rtol_and_explicit_verdict(tmp_path):
    num = {"max_abs_err": 3e-3, "tolerance": {"atol": 1e-4, "rtol": 1e-3}, "ok": False,
           "per_output": {"y": {"max_abs_err": 3e-3}}}
    d = _write(tmp_path, _manifest(2), {**REPORT, "numerics": num})
    md = render_markdown(d)
    assert "max abs error 0.003 (tolerance atol 0.0001, rtol 0.001: EXCEEDED)" in md and "| y | 0.003 |" in md
    num["ok"] = True
    (d / "report.json").write_text(json.dumps({**REPORT, "numerics": num}))
    assert "rtol 0.001: ok)" in render_markdown(d)


# ---------------------------------------------------------------------- text fits its picture, in any font
LONG_BACKENDS = ("openvino-int8-bf16", "onnxruntime-cuda-graph-capture-with-io-binding",
                 "abackendnamewithnoplacetobreakitatallanywhereinit")


def _long_manifest(n_parts: int) -> dict:
    """``_manifest`` with long backend and tensor names, every tensor's shape recorded."""
    m = _manifest(n_parts, backends=LONG_BACKENDS)
    rename = {t: f"{t}/a_rather_long_tensor_name_from_an_exporter:0" for p in m["partitions"]
              for t in (*p["inputs"], *p["outputs"])}
    for p in m["partitions"]:
        p["inputs"], p["outputs"] = [rename[t] for t in p["inputs"]], [rename[t] for t in p["outputs"]]
    m["tensors"] = {t: {"name": t, "shape": [1, 2, 3, 4, 5, 6, 7, 8], "dtype": "float32"} for t in rename.values()}
    return m


def _lines(root: ET.Element):
    """(line, font size, left, right, baseline, the box it is in or None) of every line of text in an SVG,
    its extent by the conservative width estimate."""
    from collage.report.textfit import text_width
    boxes = {t: g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g") for t in g.iter(f"{SVG}text")}
    for t in root.iter(f"{SVG}text"):
        size = float(t.get("font-size") or root.get("font-size"))
        x, y = float(t.get("x")), float(t.get("y"))
        for k, (line, dy) in enumerate([(t.text or "", 0.0)] + [(s.text or "", float(s.get("dy"))) for s in t]):
            x, y = (float(t[k - 1].get("x")) if k else x), y + dy
            w = text_width(line, size)
            left = {"start": x, "middle": x - w / 2, "end": x - w}[t.get("text-anchor", "start")]
            yield line, size, left, left + w, y, boxes.get(t)


def _assert_text_fits(svg: str) -> int:
    """Every line of ``svg``'s text inside the picture (and its box) by the estimate; the number of lines."""
    root = ET.fromstring(svg)
    width, height = float(root.get("width")), float(root.get("height"))
    n = 0
    for line, size, left, right, base, box in _lines(root):
        assert left >= 0 and right <= width, (line, left, right, width)
        assert base - size >= 0 and base + 0.3 * size <= height, (line, base, height)
        if box is not None:
            bx, by, bw, bh = (float(box.get(a)) for a in ("x", "y", "width", "height"))
            assert bx <= left and right <= bx + bw and by <= base - size and base + 0.3 * size <= by + bh, \
                (line, left, right, base, box.attrib)
        n += 1
    return n


@pytest.mark.parametrize("manifest", [_manifest(1), _manifest(3), _manifest(12), _manifest(40, 10),
                                      _long_manifest(1), _long_manifest(3), _long_manifest(12)],
                         ids=["1", "3", "12", "40", "long-1", "long-3", "long-12"])
def test_every_line_of_text_fits_its_picture_in_any_font(manifest):
    """The graph and the bar chart, by the width estimate that bounds DejaVu Sans / Mono / Serif and
    Liberation (browser-free; tests/report/test_report_browser.py looks in Chromium with those fonts).
    Issue #37: the graph's subtitle ran to 662 px of a 600 px picture in DejaVu Sans."""
    assert _assert_text_fits(render_svg(manifest)) > 0
    assert _assert_text_fits(render_bars(partition_table(manifest).to_dict("records"))) > 0


def test_width_estimate_bounds_the_widest_common_font():
    """text_width is at least what Chromium measures (canvas measureText, 11 px) in the widest of DejaVu Sans,
    DejaVu Sans Bold, DejaVu Sans Mono, DejaVu Serif Bold, Liberation Sans Bold for these lines."""
    from collage.report.textfit import text_width
    measured = {"box width: measured ms of the partition; arrows: tensors handed from one partition to the "
                "next, with shape and size": 761.6,  # DejaVu Sans Mono (DejaVu Sans: 641.8)
                "#12 openvino-int8-bf16": 147.0,  # DejaVu Sans Bold
                "All 40 nodes in topological order (a dark tick marks where a partition starts)": 516.6,
                "runner-up onnxruntime-cuda 12.345 ms (1.20× the chosen)": 369.8,
                "MMMM WWWW mmmm wwww @@%%": 240.8}  # DejaVu Serif Bold
    for text, px in measured.items():
        assert px <= text_width(text, 11) <= 1.3 * px, (text, text_width(text, 11), px)


@pytest.mark.parametrize("text,width", [("box width: measured ms of the partition; arrows: tensors handed", 200),
                                        ("#3 onnxruntime-cuda-graph-capture-with-io-binding", 120),
                                        ("abackendnamewithnoplacetobreakitatallanywhereinit", 90), ("", 50)])
def test_wrap_keeps_the_text_and_fits_each_line(text, width):
    from collage.report.textfit import text_width, wrap
    lines = wrap(text, width, 11)
    assert all(text_width(s, 11) <= width for s in lines), lines
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    cut = wrap(text, width, 11, max_lines=2)
    assert len(cut) <= 2 and all(text_width(s, 11) <= width for s in cut)
    assert cut[-1].endswith("…") == (len(lines) > 2)
