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


def _tune_with(out, db, during):
    """A tiny tune over OUT with ``during(out)`` run after OUT was inspected, right before the export writes."""
    import importlib

    from collage.tuner.job import tune

    export_module = importlib.import_module("collage.tuner.export")
    real = export_module.export

    from collage.tuner.outdir import OutputLocation

    def export_after(*args, **kwargs):
        if isinstance(args[2], OutputLocation):  # the final export (the scratch ones get a path)
            during(args[2].out)
        return real(*args, **kwargs)

    import pytest
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(export_module, "export", export_after)  # the name finish.write imports
        return tune("zoo:tiny-resnet", out, backends=BACKENDS, db=db, limits=Limits(max_nodes=1), progress=False)


def test_a_file_the_user_adds_during_a_tune_is_kept(tmp_path):
    """OUT is inspected once before measuring; a file added to the old artifact while the tune ran is carried
    over too (the export sees OUT changed since and inspects it again)."""
    db, out = str(tmp_path / "c.sqlite"), tmp_path / "out"
    _tune_with(out, db, lambda o: None)
    _tune_with(out, db, lambda o: (o / "NOTES.md").write_text("mine"))
    assert (out / "NOTES.md").read_text() == "mine"
    assert (out / "manifest.json").exists()


def test_a_listed_file_changed_during_a_tune_stops_the_replacement(tmp_path):
    """A file of the old artifact changed while the tune ran (someone else's edit): OUT is no longer collage's
    artifact as it wrote it, so it is not replaced and the edit is not lost."""
    import pytest

    from collage.errors import ArtifactError

    db, out = str(tmp_path / "c.sqlite"), tmp_path / "out"
    _tune_with(out, db, lambda o: None)
    part = next(p for p in sorted((out / "partitions").rglob("*")) if p.is_file())
    with pytest.raises(ArtifactError, match="not a collage artifact as collage wrote it"):
        _tune_with(out, db, lambda o: part.write_bytes(b"edited"))
    assert part.read_bytes() == b"edited"
