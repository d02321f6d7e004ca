"""The tune drops or rewrites a plan's notes by their kind, never by their wording (issue #39): each site that
filtered notes by a prefix, given a note whose words and kind disagree."""
from __future__ import annotations

import onnx

from collage.graph.ir import Graph
from collage.plan import Note, NoteKind, Partition, Plan
from tests.helpers import chain_model

LOOKS_LIKE = "transitions between backends: refined by precision: "  # every old prefix, kind other


def test_repricing_rewrites_the_transitions_note_only():
    from collage.tuner.stitching import priced_as

    plan = Plan([Partition((0,), "onnxruntime", 1.0), Partition((1,), "openvino", 1.0)], 2.5,
                [Note(NoteKind.TRANSITIONS, "worded otherwise"), Note(NoteKind.OTHER, LOOKS_LIKE + "kept")])
    priced = priced_as(plan, [2.0, 2.0])
    assert priced.notes[0] == "transitions between backends: 0.500 ms of the predicted 4.500 ms"
    assert priced.notes[0].kind is NoteKind.TRANSITIONS and priced.notes[1] == LOOKS_LIKE + "kept"


def test_the_precision_notes_are_replaced_by_kind():
    from collage.tuner.precision.budgeted import PrecisionOutcome
    from collage.tuner.precision.tuner import PrecisionTuner

    tuner = object.__new__(PrecisionTuner)
    outcome = PrecisionOutcome(notes=(Note(NoteKind.PRECISION, "an earlier outcome"),
                                      Note(NoteKind.ACCURACY, "judged on random"),
                                      Note(NoteKind.OTHER, LOOKS_LIKE + "kept")))
    notes = tuner.use_whole_model(outcome, "openvino-bf16", "precision: the whole model").notes
    assert list(notes) == ["judged on random", LOOKS_LIKE + "kept", "precision: the whole model"]
    assert notes[-1].kind is NoteKind.PRECISION


def test_never_worse_drops_the_refined_note_by_kind():
    from collage.tuner.context import JobContext
    from collage.tuner.records import Measured, Searched, Verified
    from collage.tuner.steps.verify import never_worse

    graph = Graph.load(onnx.shape_inference.infer_shapes(chain_model(2, width=8)))
    ctx = JobContext(graph, type("O", (), {"progress": False})(), None, None, [], [], {}, {}, None, None, 0.0, 0.0)
    plan = Plan([Partition((0,), "onnxruntime", 1.0), Partition((1,), "openvino", 1.0)], 2.0,
                [Note(NoteKind.REFINED, "worded otherwise"), Note(NoteKind.REFINEMENT, LOOKS_LIKE + "kept")])
    searched = Searched(plan, {}, {}, {}, 1, 0.0, plan, None, None)
    out = never_worse(ctx, Verified(plan, 3.0, None, {"onnxruntime": 1.0}, {"onnxruntime": 1.0}), searched,
                      Measured({}, {}, 0))
    assert out.plan.partitions[0].backend == "onnxruntime" and len(out.plan.notes) == 2
    assert out.plan.notes[0] == LOOKS_LIKE + "kept" and out.plan.notes[1].kind is NoteKind.NEVER_WORSE
