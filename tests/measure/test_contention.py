"""Other processes' load while a tune measures (collage.measure.contention): the kernel's counters, real
processes. A busy process that is not ours shows as other load; a busy child of ours (a measuring worker) is
counted as our own; a tune writes the figures to report.json and says when the machine was busy."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from collage.measure import contention
from collage.measure.contention import ContentionSampler, Sample, others_cpus, own_s, sample
from collage.util import usable_cpus
from collage.report.coverage import busy_line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux only)")

SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass"


def test_a_busy_child_is_ours():
    """A live child's CPU time (a worker measuring) counts as this process's own, not as other load (once a child
    exits and is reaped its time is in our cutime anyway; a worker lives through the tune)."""
    before = own_s()
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(s=4.0)])
    try:
        time.sleep(2.0)
        mine, wall = own_s() - before, time.monotonic() - t0
        assert child.poll() is None  # still spinning: its time is read from /proc, not from our cutime
    finally:
        child.kill()
        child.wait()
    assert mine >= 0.4 * wall  # it spun for most of it (however loaded the machine)


def test_a_busy_process_that_is_not_ours_is_other_load():
    """A process reparented away from us (the shell that started it exits) spinning for 3 s: at least 0.7 CPUs of
    other load over 2 s of it (more where the machine is busier still: other load only adds)."""
    cpus = usable_cpus()
    subprocess.run(["sh", "-c", f"'{sys.executable}' -c '{SPIN.format(s=3.0)}' >/dev/null 2>&1 &"], check=True)
    time.sleep(0.3)
    a = sample(cpus)
    time.sleep(2.0)
    b = sample(cpus)
    assert a is not None and b is not None
    assert others_cpus(a, b) >= 0.7


def test_phases_and_the_busiest_window():
    s = ContentionSampler(window=2, cpus={0, 1})
    own = 0.0
    # (seconds, other load in CPUs, phase the sample ends): 1 s steps
    steps = [(0.0, "measuring"), (0.2, "measuring"), (1.6, "measuring"), (1.8, "verification"), (0.0, "export")]
    t = busy = 0.0
    s.samples.append((Sample(t, busy, own), ""))
    for load, phase in steps:
        t, busy, own = t + 1.0, busy + load + 0.5, own + 0.5  # we use half a CPU throughout
        s.samples.append((Sample(t, busy, own), phase))
    assert s.by_phase() == {"measuring": pytest.approx(0.6), "verification": 1.8, "export": 0.0}
    peak, phase = s.busiest() or (None, None)
    assert peak == pytest.approx(1.7) and phase == "verification"  # the 2 s window ending in verification
    rep = s.report()
    assert rep is not None and rep["cpus"] == 2 and rep["window_s"] == 2.0


def test_the_busy_line_names_the_load_and_the_step():
    assert busy_line(None) is None
    assert busy_line({"cpus": 2, "by_phase": {}, "peak_cpus": 0.4, "peak_phase": "measuring", "window_s": 5}) is None
    line = busy_line({"cpus": 2, "by_phase": {}, "peak_cpus": 0.9, "peak_phase": "measuring", "window_s": 5})
    assert line is not None and "0.9 of the 2 CPU(s)" in line and "during measuring" in line
    assert busy_line({"cpus": 16, "by_phase": {}, "peak_cpus": 3.0, "peak_phase": "search", "window_s": 5}) is None
    assert busy_line({"cpus": 16, "by_phase": {}, "peak_cpus": 4.5, "peak_phase": "search", "window_s": 5})


def test_a_tune_reports_other_load_and_says_when_the_machine_was_busy(tmp_path, monkeypatch, caplog):
    """A real tune: report.json's time.others has the CPUs and each step's mean; with the threshold at 0 (every
    machine busy) the tune warns (a collage logger: `collage: warning: ...` on the terminal) and `collage report`
    shows the line."""
    import jsonschema

    from collage.report import coverage
    from collage.report.model import schema
    from collage.report.render import render_markdown
    from collage.search.candidates import Limits
    from collage.tuner.job import tune

    monkeypatch.setattr(contention, "INTERVAL_S", 0.2)
    monkeypatch.setattr(ContentionSampler, "interval_s", 0.2)
    monkeypatch.setattr(coverage, "BUSY_SHARE", 0.0)
    monkeypatch.setattr(coverage, "BUSY_FLOOR", 0.0)
    out = tmp_path / "art"
    with caplog.at_level("WARNING"):
        tune("zoo:tiny-resnet", out, backends=["onnxruntime", "openvino"], db=str(tmp_path / "c.sqlite"),
             limits=Limits(max_nodes=1), progress=False)
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, schema())
    others = report["time"]["others"]
    assert others["cpus"] == len(usable_cpus()) and "measuring" in others["by_phase"]
    assert any(r.getMessage().startswith("the machine was busy") and r.name.startswith("collage.")
               for r in caplog.records)
    assert "The machine was busy" in render_markdown(out)


def test_marks_milliseconds_apart_are_no_window():
    """Phases marked 15 ms apart: one 10 ms clock tick of another process there read as 0.66 CPUs, the busiest
    "window" of a quiet tune (shufflenet's, this session). The busiest window spans window x interval seconds."""
    s = ContentionSampler(window=5, interval_s=1.0, cpus={0, 1})
    s.samples = [(Sample(0.0, 0.0, 0.0), ""), (Sample(0.015, 0.01, 0.0), "support checks")]
    t = 0.015
    for k in range(10):  # then 10 quiet seconds: 0.02 CPUs of others
        t += 1.0
        s.samples.append((Sample(t, 0.01 + 0.02 * (k + 1), 0.0), "measuring"))
    peak, phase = s.busiest() or (None, None)
    assert peak is not None and peak < 0.1 and phase == "measuring"
