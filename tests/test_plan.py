"""Plan data: notes are records with a kind (issue #39): what the tune filters on; plan.json keeps it, and a
plan.json from before kinds (notes as plain strings) still loads."""
from __future__ import annotations

import copy
import json
import pickle

import pytest

from collage.plan import Note, NoteKind, Partition, Plan, kind_of


def test_a_note_is_its_text_with_a_kind():
    note = Note(NoteKind.REFINED, "refined by 3 measured trials: 2.000 -> 1.500 ms")
    assert note == "refined by 3 measured trials: 2.000 -> 1.500 ms" and note.kind is NoteKind.REFINED
    assert json.dumps([note]) == json.dumps([note.text])  # report.json's notes stay sentences
    assert f"{note}" == note.text and type(note.text) is str
    for again in (pickle.loads(pickle.dumps(note)), copy.deepcopy(note)):
        assert again == note and again.kind is NoteKind.REFINED
    with pytest.raises(AttributeError):
        note.kind = NoteKind.OTHER  # type: ignore[misc]
    with pytest.raises(ValueError):
        Note("no such kind", "text")
    assert kind_of("a plain string") is NoteKind.OTHER and kind_of(note) is NoteKind.REFINED


def test_plan_json_keeps_the_kinds():
    plan = Plan([Partition((0, 1), "onnxruntime", 1.0)], 1.0,
                [Note(NoteKind.TRANSITIONS, "transitions between backends: 0.1 ms"), "made without a kind"])
    assert [n.kind for n in plan.notes] == [NoteKind.TRANSITIONS, NoteKind.OTHER]  # a plain string: other
    d = json.loads(plan.to_json())
    assert d["notes"] == [{"kind": "transitions", "text": "transitions between backends: 0.1 ms"},
                          {"kind": "other", "text": "made without a kind"}]
    back = Plan.from_json(json.dumps(d))
    assert back == plan and [n.kind for n in back.notes] == [NoteKind.TRANSITIONS, NoteKind.OTHER]


def test_an_old_plan_json_with_string_notes_still_loads():
    """plan.json as collage wrote it before notes had kinds (and a kind a newer collage may add)."""
    old = {"partitions": [{"nodes": [0, 1], "backend": "openvino", "cost_ms": 1.0, "runner_up": None,
                           "inputs": ["x"], "outputs": ["y"], "fingerprint": "f"}],
           "predicted_ms": 1.0, "notes": ["never worse: fell back to openvino", {"kind": "future", "text": "t"}],
           "model_sha256": "abc"}
    plan = Plan.from_dict(old)
    assert plan.notes == ["never worse: fell back to openvino", "t"]
    assert [n.kind for n in plan.notes] == [NoteKind.OTHER, NoteKind.OTHER]
    assert Plan.from_dict({"partitions": []}).notes == []
