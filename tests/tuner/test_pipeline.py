"""The tune's pipeline (issue #39): the output folder is inspected (its checksums read) once per tune, and a
TuneResult computes its summary once."""
from __future__ import annotations

from collage.search.candidates import Limits

BACKENDS = ["onnxruntime", "openvino"]


def test_the_output_folder_is_checked_once_per_tune(tmp_path, monkeypatch):
    """run_tune inspects OUT before measuring and hands that OutputLocation to the export (before, the export
    inspected OUT again, reading every listed file's checksum a second time)."""
    from pathlib import Path

    from collage.tuner import export, outdir
    from collage.tuner.job import tune

    calls = []
    real = outdir.inspect_output

    def counted(out_dir, **kw):
        calls.append(Path(out_dir).resolve())
        return real(out_dir, **kw)

    monkeypatch.setattr(outdir, "inspect_output", counted)
    monkeypatch.setattr(export, "inspect_output", counted)  # the name the export module calls
    db = str(tmp_path / "c.sqlite")
    out = tmp_path / "out"
    tune("zoo:tiny-resnet", out, backends=BACKENDS, db=db, limits=Limits(max_nodes=1), progress=False)
    tune("zoo:tiny-resnet", out, backends=BACKENDS, db=db, limits=Limits(max_nodes=1), progress=False)  # over it
    assert [c for c in calls if c == out.resolve()] == [out.resolve()] * 2  # once a tune (scratch exports aside)
    assert (out / "manifest.json").exists()


def test_a_tune_result_computes_its_summary_once(monkeypatch, tmp_path):
    from collage.plan import Plan
    from collage.tuner import result

    calls = []
    real = result.tune_summary

    def counted(res):
        calls.append(res)
        return real(res)

    monkeypatch.setattr(result, "tune_summary", counted)
    res = result.TuneResult(tmp_path, Plan.single("onnxruntime", 3, 1.0), 1.0, {"onnxruntime": 1.0},
                            {"model": "m", "target": "cpu", "backends": ["onnxruntime"]})
    assert (res.model, res.target, res.backends, res.speedup) == ("m", "cpu", ["onnxruntime"], 1.0)
    assert res.predicted_ms == 1.0 and res.notes == [] and res.coverage is None and res.numerics is None
    assert len(calls) == 1
    assert res.to_dict()["model"] == "m" and len(calls) == 2  # to_dict: a new dict each call
