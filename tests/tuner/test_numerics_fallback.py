"""A plan whose outputs differ from the ONNX Runtime reference beyond the tolerance gives way to the fastest single
backend whose outputs match, with a warning and a note naming the partition that diverged (before, the tune
ended there: "nothing is written", however long it had run). Only where no backend matches is the tune refused.

Real backends and real numerics; a tolerance of 0 makes OpenVINO's last-bit differences from ONNX Runtime a
divergence (3.6e-07 on squeezenet), while ONNX Runtime's outputs are the reference's bit for bit. The step test
fixes which backend the verification found faster (its ms are the step's input); the end-to-end tune makes
OpenVINO the faster with ONNX Runtime on one thread (1.65 vs 3.06 ms on squeezenet here, alone on the machine).
"""
from __future__ import annotations

import numpy as np
import pytest

from collage.backends import unavailable_reason
from collage.errors import NumericsError
from collage.plan import NoteKind, Plan, kind_of
from collage.tuner.checks import _reference_outputs


@pytest.fixture(autouse=True)
def _openvino() -> None:
    reason = unavailable_reason("openvino")
    if reason is not None:
        pytest.skip(f"openvino: {reason}")


def _step(tmp_path, backends, baselines):
    """The numerics step on zoo:tiny-mobilenetv2 whose verified plan is OpenVINO on the whole model, the
    verification having measured ``baselines`` (ms)."""
    from collage.tuner.context import open_context
    from collage.tuner.options import TuneOptions
    from collage.tuner.records import Measured, Searched, Verified
    from collage.tuner.steps import finish
    from collage.tuner.stitching import fill_boundaries

    options = TuneOptions(backends=tuple(backends), db=str(tmp_path / "c.sqlite"), progress=False,
                          tolerance={"atol": 0.0, "rtol": 0.0})
    (tmp_path / "work").mkdir()
    ctx = open_context("zoo:tiny-mobilenetv2", options, tmp_path / "work")
    plan = fill_boundaries(ctx.graph, Plan.single("openvino", len(ctx.graph), baselines["openvino"]))
    verified = Verified(plan, baselines["openvino"], None, dict(baselines), dict(baselines), plan_key="openvino")
    searched = Searched(plan, {}, {}, {}, 0, 0.0, plan, None, None)
    return ctx, finish.numerics(ctx, verified, searched, Measured({}, {}, 0))


def test_the_numerics_step_gives_way_to_the_fastest_backend_that_matches(tmp_path, caplog) -> None:
    ctx, (final, checked) = _step(tmp_path, ["openvino", "onnxruntime"], {"openvino": 1.0, "onnxruntime": 2.0})
    assert [p.backend for p in final.plan.partitions] == ["onnxruntime"] and final.plan_ms == 2.0
    notes = [n for n in final.plan.notes if kind_of(n) == NoteKind.NUMERICS]
    assert len(notes) == 1 and "partition 0 on openvino" in notes[0] and "diverges first" in notes[0], notes
    assert any("numerics:" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    got = checked.artifact.run(dict(ctx.feeds))
    for name, want in _reference_outputs(ctx.graph, ctx.feeds).items():
        np.testing.assert_array_equal(got[name], want)


def test_with_no_other_backend_the_numerics_step_refuses(tmp_path) -> None:
    with pytest.raises(NumericsError, match=r"differ from the ONNX Runtime reference.*nothing is written"):
        _step(tmp_path, ["openvino"], {"openvino": 1.0})


@pytest.mark.slow
def test_a_tune_whose_plan_diverges_ends_with_one_that_matches(tmp_path) -> None:
    """The real command (its own process: ONNX Runtime on one thread cannot join this one's pool of two)."""
    import json

    from tests.commands.test_bad_inputs import _cli

    proc = _cli(tmp_path, ["tune", "zoo:squeezenet", "-o", str(tmp_path / "out"), "--backends", "openvino,onnxruntime",
                           "--backend-option", "onnxruntime.threads=1", "--atol", "0", "--rtol", "0",
                           "--max-nodes", "1", "--db", str(tmp_path / "c.sqlite")],
                timeout=600)  # every squeezenet candidate measured: over 120 s on an AVX2-only Zen 1 beside a test
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [p["backend"] for p in manifest["partitions"]] == ["onnxruntime"], manifest["partitions"]
    notes = [n for n in report["notes"] if n.startswith("numerics:")]
    base = report["baselines"]
    if base["openvino"] < base["onnxruntime"]:  # as alone on the machine: OpenVINO led, and its outputs differ
        assert len(notes) == 1 and "on openvino" in notes[0] and "collage: warning: numerics:" in proc.stderr
    # the artifact's outputs against the reference, by the tune (its one-thread ONNX Runtime cannot load here)
    assert report["numerics"]["ok"] and report["numerics"]["max_abs_err"] == 0.0
