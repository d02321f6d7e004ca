"""A plan whose outputs differ from the ONNX Runtime reference beyond the tolerance gives way to the fastest single
backend whose outputs match, with a warning and a note naming the partition that diverged (before, the tune
ended there: "nothing is written", however long it had run). Only where no backend matches is the tune refused.

Made deterministic with real backends: ONNX Runtime on one thread (``onnxruntime.threads=1``) against OpenVINO
on two makes OpenVINO's whole model the plan on squeezenet (1.65 vs 3.06 ms here), and a tolerance of 0 makes its
last-bit differences a divergence (3.6e-07), while ONNX Runtime's outputs are the reference's bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import collage
from collage.backends import unavailable_reason
from collage.errors import NumericsError
from collage.plan import NoteKind, kind_of
from collage.search.candidates import Limits
from collage.tuner.checks import _reference_outputs


@pytest.fixture(autouse=True)
def _openvino() -> None:
    reason = unavailable_reason("openvino")
    if reason is not None:
        pytest.skip(f"openvino: {reason}")


def _tune(tmp_path, tolerance, backends=("openvino", "onnxruntime"), model="zoo:squeezenet"):
    return collage.tune(model, tmp_path / "out", backends=list(backends), db=str(tmp_path / "c.sqlite"),
                        limits=Limits(max_nodes=1), tolerance=tolerance, progress=False,
                        backend_options={"onnxruntime": {"threads": 1}} if "onnxruntime" in backends else {})


@pytest.mark.slow
def test_a_plan_that_diverges_gives_way_to_a_backend_that_matches(tmp_path, caplog) -> None:
    result = _tune(tmp_path, {"atol": 0.0, "rtol": 0.0})
    assert [p.backend for p in result.plan.partitions] == ["onnxruntime"]
    notes = [n for n in result.plan.notes if kind_of(n) == NoteKind.NUMERICS]
    assert len(notes) == 1 and "on openvino" in notes[0] and "diverges first" in notes[0], result.plan.notes
    assert any("numerics:" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert result.report["numerics"]["ok"] and result.report["numerics"]["max_abs_err"] == 0.0
    feeds = {"data_0": np.random.default_rng(3).random((1, 3, 224, 224)).astype(np.float32)}
    art = collage.load(tmp_path / "out")
    try:
        got = art.run(feeds)
    finally:
        art.close()
    from collage import zoo

    want = _reference_outputs(zoo.load_graph("zoo:squeezenet"), feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


def test_with_no_backend_that_matches_the_tune_is_refused(tmp_path) -> None:
    with pytest.raises(NumericsError, match=r"differ from the ONNX Runtime reference.*nothing is written"):
        _tune(tmp_path, {"atol": 0.0, "rtol": 0.0}, backends=("openvino",), model="zoo:tiny-mobilenetv2")
    assert not (tmp_path / "out").exists()
