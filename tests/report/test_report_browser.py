"""The HTML report of a multi-partition artifact, looked at in headless Chromium (Debian's `chromium`):
no console errors, nothing wider than the page, no SVG text outside its picture or its partition's box, in
each of several fonts (FONTS: SVG text is laid out in the viewer's fonts; issue #37). Skips, saying why, when
no chromium is installed (.ci/run installs it). Leaves a screenshot at $COLLAGE_REPORT_PNG when set.
(tests/report/test_report.py checks the same by the width estimate, without a browser.)"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from collage.report.render import html_page, render_html
from collage.report.svg import MIN_CONTRAST, colour_pair, contrast
from tests.helpers import export_mixed_plan

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
WIDTH = 1280

REPORT = {"model": "tiny-resnet", "target": "cpu", "baselines": {"onnxruntime": 0.52, "openvino": 0.49},
          "plan_ms": 0.45, "predicted_ms": 0.5,
          "numerics": {"max_abs_err": 1e-6, "tolerance": {"atol": 1e-4, "rtol": 1e-3}, "ok": True,
                       "per_output": {"softmax": 1e-6}},
          "coverage": {"distinct": 308, "with_cost": 120, "reused": 20, "measured_now": 100, "failed": 0,
                       "unmeasured": 188, "budget_s": 10.0, "budget_cut": True, "unmeasured_nodes": [2, 38],
                       "refinement": {"requested": 4, "ran": 0, "why_none": "the plan was cut short"}},
          "precision": {"budget_text": "cos>=0.999, rel<=0.01", "calibration": {"source": "random", "samples": 4,
                                                                                  "random": True},
                        "end_to_end": {"rel": 2e-3, "cos": 0.99999, "finite": True, "within_budget": True},
                        "rounds": [{"lambda": 0.0, "low_partitions": 1, "predicted_ms": 0.4, "ok": True,
                                    "error": {"rel": 2e-3, "cos": 0.99999}}]},
          "notes": ["hand-made plan for the browser test"]}

#: fonts the page is measured in: the browser's sans-serif; DejaVu Sans (Debian's sans-serif, wide), DejaVu
#: Sans Mono (wider still); a family that does not exist (the browser falls back to its standard font)
FONTS = ["", "DejaVu Sans", "DejaVu Sans Mono", "No Such Font"]

# measures the page after layout in each of FONTS (set on everything by an injected style) and writes the
# numbers into it (only in the test's copy of the page)
PROBE = """<style id="font"></style><script>
const doc = document.documentElement, out = {};
const extent = bs => ({right: Math.max(0, ...bs.map(b => b.x + b.width)), left: Math.min(...bs.map(b => b.x)),
                       bottom: Math.max(0, ...bs.map(b => b.y + b.height)), top: Math.min(...bs.map(b => b.y))});
for (const font of FONTS_JSON) {
  document.getElementById('font').textContent = font ? `*, svg * {font-family: "${font}" !important}` : '';
  const svgs = [...document.querySelectorAll('svg')].map(s => {
    const box = s.getBoundingClientRect(), vb = s.viewBox.baseVal;
    const boxes = [...s.querySelectorAll('g')].filter(g => g.querySelector('rect')).map(g => {
      const r = g.querySelector('rect').getBBox();
      return {rect: {x: r.x, y: r.y, width: r.width, height: r.height},
              text: extent([...g.querySelectorAll('text')].map(t => t.getBBox()))};
    });
    return {right: box.right, width: box.width, vbw: vb.width, vbh: vb.height, boxes,
            text: extent([...s.querySelectorAll('text')].map(t => t.getBBox()))};
  });
  out[font] = {client: doc.clientWidth, scroll: doc.scrollWidth, svgs};
}
document.body.insertAdjacentHTML('beforeend', '<pre id="probe">' + JSON.stringify(out) + '</pre>');
</script>"""


def test_backend_colours_read_and_group_by_family():
    names = ["onnxruntime", "onnxruntime-cuda", "openvino", "openvino-bf16", "openvino-fp16", "openvino-int8",
             "tvm", "tensorrt", "torch", "someother-int4"]
    for b in names:
        fill, text = colour_pair(b)
        assert contrast(fill, text) >= MIN_CONTRAST, (b, fill, text, contrast(fill, text))
    fills = [colour_pair(b)[0] for b in names]
    assert len(set(fills)) == len(fills)

    def hue(c: str) -> float:
        import colorsys
        return colorsys.rgb_to_hls(*(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)))[0]
    ov = hue(colour_pair("openvino")[0])
    for v in ("openvino-bf16", "openvino-fp16", "openvino-int8"):  # a shade of openvino, not another hue
        assert abs(hue(colour_pair(v)[0]) - ov) < 0.03, v
    assert abs(hue(colour_pair("onnxruntime")[0]) - ov) > 0.1


def _long_names(art: Path) -> dict:
    """The artifact's manifest and report with long names: model, backends (one with no place to break),
    tensors."""
    m = json.loads((art / "manifest.json").read_text())
    backends = ["openvino-int8-bf16", "onnxruntime-cuda-graph-capture-with-io-binding",
                "abackendnamewithnoplacetobreakitatallanywhereinit"]
    tensors = {t for p in m["partitions"] for t in (*p["inputs"], *p["outputs"])}
    rename = {t: f"{t}/a_rather_long_tensor_name_from_an_exporter:0" for t in tensors}
    for k, p in enumerate(m["partitions"]):
        p["backend"] = backends[k % len(backends)]
        p["runner_up"] = [backends[(k + 1) % len(backends)], p["runner_up"][1]] if p.get("runner_up") else None
        p["inputs"], p["outputs"] = [rename[t] for t in p["inputs"]], [rename[t] for t in p["outputs"]]
    m["tensors"] = {rename.get(t, t): {**v, "name": rename.get(t, t)} for t, v in (m.get("tensors") or {}).items()}
    model = "a_model_exported_from_a_long_path_" * 4
    return {"manifest": m, "report": {**REPORT, "model": model, "baselines": {b: 0.5 for b in backends}}}


def _measure(tmp_path: Path, page: str) -> dict:
    """The probe's numbers of ``page`` in headless Chromium, by font (FONTS)."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE.replace("FONTS_JSON", json.dumps(FONTS)) + "</body>"))
    dom = subprocess.run([*_chromium(tmp_path), "--enable-logging=stderr", "--v=0", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    found = re.findall(r'<pre id="probe">(\{.*?)</pre>', dom.stdout, re.S)  # (the script's own text comes first)
    assert found, dom.stdout[-2000:]
    return json.loads(html.unescape(found[-1]))


def _chromium(tmp_path: Path) -> list[str]:
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH},1000"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install -y chromium); "
                                             "the HTML report is not checked in a browser")
@pytest.mark.parametrize("parts", [3, 1, 12, "long names"])
def test_report_in_headless_chromium(tmp_path, parts):
    """In every font of FONTS: nothing wider than the window, every SVG text inside its picture, the text of
    every partition's box inside the box."""
    art = export_mixed_plan(tmp_path / "art", parts=3 if parts == "long names" else parts, report=REPORT)
    page = html_page(_long_names(art)) if parts == "long names" else render_html(art).read_text()
    by_font = _measure(tmp_path, page)
    assert len({round(m["svgs"][0]["text"]["right"]) for m in by_font.values()}) > 1  # the fonts did change
    for font, m in by_font.items():
        assert m["scroll"] <= m["client"], f"{font!r}: page wider than the window: {m['scroll']} > {m['client']} px"
        assert len(m["svgs"]) == 2  # graph + bar chart (with runner-ups, also for one partition)
        for svg in m["svgs"]:
            t = svg["text"]
            assert svg["right"] <= m["client"], (font, svg)
            assert t["right"] <= svg["vbw"] + 0.5 and t["left"] >= -0.5, (font, t, svg["vbw"])  # no clipped text
            assert t["bottom"] <= svg["vbh"] + 0.5 and t["top"] >= -0.5, (font, t, svg["vbh"])
            for box in svg["boxes"]:
                r, bt = box["rect"], box["text"]
                assert r["x"] <= bt["left"] and bt["right"] <= r["x"] + r["width"], (font, box)
                assert r["y"] <= bt["top"] and bt["bottom"] <= r["y"] + r["height"], (font, box)
        print(f"{font or 'sans-serif'}: widest picture ends at {max(s['right'] for s in m['svgs']):.0f} of "
              f"{m['client']} px")
    shot = os.environ.get("COLLAGE_REPORT_PNG")
    if shot and parts == 3:
        subprocess.run([*_chromium(tmp_path), f"--screenshot={shot}", (art / "report.html").as_uri()],
                       capture_output=True, timeout=120, check=True)
