"""The HTML report of a multi-partition artifact, looked at in headless Chromium (Debian's `chromium`):
no console errors, nothing wider than the page, no SVG text outside its picture. Skips, saying why, when
no chromium is installed (.ci/run installs it). Leaves a screenshot at $COLLAGE_REPORT_PNG when set."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from collage.report.render import render_html
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

# measures the page after layout and writes the numbers into it (only in the test's copy of the page)
PROBE = """<script>
const doc = document.documentElement;
const svgs = [...document.querySelectorAll('svg')].map(s => {
  const box = s.getBoundingClientRect(), vb = s.viewBox.baseVal;
  const texts = [...s.querySelectorAll('text')].map(t => t.getBBox());
  return {right: box.right, width: box.width, vbw: vb.width, vbh: vb.height,
          textRight: Math.max(0, ...texts.map(b => b.x + b.width)), textLeft: Math.min(...texts.map(b => b.x)),
          textBottom: Math.max(0, ...texts.map(b => b.y + b.height)), textTop: Math.min(...texts.map(b => b.y))};
});
document.body.insertAdjacentHTML('beforeend', '<pre id="probe">' + JSON.stringify(
  {client: doc.clientWidth, scroll: doc.scrollWidth, svgs}) + '</pre>');
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


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install -y chromium); "
                                             "the HTML report is not checked in a browser")
@pytest.mark.parametrize("parts", [3, 1, 12])
def test_report_in_headless_chromium(tmp_path, parts):
    art = export_mixed_plan(tmp_path / "art", parts=parts, report=REPORT)
    page = render_html(art)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH},1000"]
    dom = subprocess.run([*base, "--enable-logging=stderr", "--v=0", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    found = re.findall(r'<pre id="probe">(\{.*?)</pre>', dom.stdout, re.S)  # (the script's own text comes first)
    assert found, dom.stdout[-2000:]
    m = json.loads(found[-1].replace("&quot;", '"'))
    assert m["scroll"] <= m["client"], f"page wider than the window: {m['scroll']} > {m['client']} px"
    assert len(m["svgs"]) == 2  # graph + bar chart (with runner-ups, also for one partition)
    for svg in m["svgs"]:
        assert svg["right"] <= m["client"], svg
        assert svg["textRight"] <= svg["vbw"] + 0.5 and svg["textLeft"] >= -0.5, svg  # no clipped text (title)
        assert svg["textBottom"] <= svg["vbh"] + 0.5 and svg["textTop"] >= -0.5, svg
    used = max(s["right"] for s in m["svgs"]) / m["client"]
    print(f"widest picture ends at {max(s['right'] for s in m['svgs']):.0f} of {m['client']} px ({used:.0%})")
    shot = os.environ.get("COLLAGE_REPORT_PNG")
    if shot and parts > 1:
        subprocess.run([*base, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
