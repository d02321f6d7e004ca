"""A multi-size artifact: one plan per tuned input size, the original model for any other size.

Written by :mod:`collage.tuner.sizes` (``collage tune --shape x=1,3,48,{160,320,640}``)::

    out/
      manifest.json          {"kind": "multi-size", ...} (below)
      sizes/000/             an ordinary artifact (collage.tuner.export) tuned for the first size set
      sizes/001/             ... one per size set
      dynamic/model.onnx     the original model with its dynamic dimensions (sizes that were not tuned)

manifest.json::

    {"format_version": 2, "kind": "multi-size", "collage_version": ..., "created": ..., "target": "cpu",
     "model": {"name": ..., "source": ..., "sha256": ..., "sha256_of": ...},
     "sizes": [{"dir": "sizes/000", "inputs": {"x": [1, 3, 48, 160]}}, ...],    # every input's full shape
     "dynamic": {"dir": "dynamic", "files": [{"name": "model.onnx", "sha256": ..., "bytes": ...}],
                 "inputs": [{"name": "x", "shape": [1, 3, 48, "W"], "dtype": "float32"}],  # symbols by name
                 "outputs": [...]}}

``format_version`` 2 so that a collage from before multi-size artifacts refuses one by saying to upgrade;
its sub-artifacts are format 1. :func:`load_multi_size` (what ``collage.load`` returns for such a manifest)
checks every sub-artifact as ``load`` does and the dynamic model's checksum before anything runs;
:class:`MultiSizeArtifact` has the API of :class:`collage.runtime.artifact.Artifact` and runs the plan tuned
for the feeds' shapes, or, for a size not tuned, a whole-model ONNX Runtime session of the original model
(correct, not tuned: said once per size by a logged warning).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from collage.errors import ArtifactError, CollageError
from collage.runtime.manifest import MANIFEST, JsonObject
from collage.runtime.records import BoundaryOverhead, LoadedPartition, TensorSpec
from collage.util import sha256_file, timed_runs

log = logging.getLogger(__name__)

MULTI_SIZE_KIND = "multi-size"
MULTI_SIZE_FORMAT = 2
SIZES_DIR = "sizes"
DYNAMIC_DIR = "dynamic"
DYNAMIC_FILE = "model.onnx"

Shapes = tuple[tuple[str, tuple[int, ...]], ...]


class SizeSet(Protocol):
    """What a multi-size artifact uses of each size set's artifact (a :class:`collage.runtime.artifact.Artifact`,
    named here by what it offers: the artifact module imports this one to load multi-size artifacts)."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    partitions: list[LoadedPartition]

    @property
    def backends(self) -> list[str]: ...

    def close(self) -> None: ...

    def check_feeds(self, feeds: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]: ...

    def run(self, feeds: Mapping[str, npt.ArrayLike], times: list[float] | None = None) -> dict[str, np.ndarray]: ...

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]: ...

    def boundary_overhead(self, feeds: Mapping[str, npt.ArrayLike] | None = None, repeat: int = 20,
                          warmup: int = 3) -> BoundaryOverhead: ...


def is_multi_size(root: str | os.PathLike[str]) -> bool:
    """Whether the artifact directory ``root`` holds a multi-size manifest (False for anything unreadable: the
    ordinary reader names that)."""
    try:
        manifest = json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("kind") == MULTI_SIZE_KIND


def _inside(root: Path, rel: object, mpath: Path, what: str) -> Path:
    p = Path(str(rel))
    if not rel or p.is_absolute() or ".." in p.parts:
        raise ArtifactError(f"{mpath}: {what} {rel!r} points outside the artifact; refused")
    path = root / p
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise ArtifactError(f"{path}: {what} leads outside the artifact (to {real}); refused")
    return path


def read_multi_manifest(root: Path) -> JsonObject:
    """The multi-size manifest of ``root``, its fields checked; ArtifactError naming what is wrong."""
    mpath = root / MANIFEST
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ArtifactError(f"{mpath}: unreadable manifest ({e}); the artifact is corrupted: re-export it") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{mpath}: not a collage manifest (expected a JSON object)")
    if manifest.get("format_version") != MULTI_SIZE_FORMAT:
        raise ArtifactError(f"{mpath}: multi-size manifest of format version {manifest.get('format_version')!r}; "
                            f"this collage reads version {MULTI_SIZE_FORMAT}: upgrade collage or re-tune")
    missing = [k for k in ("sizes", "dynamic", "target") if k not in manifest]
    sizes, dynamic = manifest.get("sizes"), manifest.get("dynamic")
    if missing or not isinstance(sizes, list) or not sizes or not isinstance(dynamic, dict):
        raise ArtifactError(f"{mpath}: multi-size manifest lacks {missing or 'its size sets'}; the artifact is "
                            "corrupted: re-export it")
    for k, s in enumerate(sizes):
        if not isinstance(s, dict) or "dir" not in s or not isinstance(s.get("inputs"), dict):
            raise ArtifactError(f"{mpath}: size set {k} lacks its dir or inputs; the artifact is corrupted")
        _inside(root, s["dir"], mpath, f"size set {k}'s directory")
    files = dynamic.get("files")
    if not isinstance(files, list) or len(files) != 1 or "sha256" not in files[0] or "name" not in files[0]:
        raise ArtifactError(f"{mpath}: the dynamic model's entry lists no single file with its sha256; corrupted")
    return manifest


def dynamic_model_path(root: Path, manifest: JsonObject) -> Path:
    """The checked path of the dynamic model: inside the artifact, a file, of the recorded sha256."""
    mpath = root / MANIFEST
    dynamic = manifest["dynamic"]
    f = dynamic["files"][0]
    path = _inside(root, f"{dynamic.get('dir', DYNAMIC_DIR)}/{f['name']}", mpath, "the dynamic model")
    if not path.is_file():
        raise ArtifactError(f"{path}: missing (listed in {mpath}); the artifact is incomplete: copy it again or "
                            "re-export it")
    digest = sha256_file(path)
    if digest != f["sha256"]:
        raise ArtifactError(f"{path}: checksum mismatch (sha256 {digest[:16]}..., manifest says "
                            f"{str(f['sha256'])[:16]}...); the file was changed or corrupted: copy the artifact "
                            "again or re-export it")
    return path


def load_multi_size(root: Path, load: Callable[[Path], SizeSet | MultiSizeArtifact],
                    cleanup: Path | None = None) -> MultiSizeArtifact:
    """Every size set's artifact (``load(dir)``: ``collage.runtime.artifact.load`` with the caller's options) and
    the checked dynamic model of the multi-size artifact ``root``; ``cleanup``: an extraction folder it then owns."""
    manifest = read_multi_manifest(root)
    dynamic = dynamic_model_path(root, manifest)
    subs = []
    for s in manifest["sizes"]:
        sub = load(root / s["dir"])
        if isinstance(sub, MultiSizeArtifact):
            raise ArtifactError(f"{root / s['dir']}: a size set's artifact is itself a multi-size artifact; refused")
        subs.append(sub)
    return MultiSizeArtifact(root, manifest, subs, dynamic, cleanup)


def _shapes_of(feeds: Mapping[str, npt.ArrayLike]) -> Shapes:
    return tuple(sorted((str(n), tuple(int(d) for d in np.shape(v))) for n, v in feeds.items()))


class MultiSizeArtifact:
    """A loaded multi-size artifact: the API of :class:`collage.runtime.artifact.Artifact`, each call run by the
    plan tuned for its feeds' shapes (``artifact_for``), or by the original model on ONNX Runtime for a size
    that was not tuned. ``inputs`` / ``outputs`` / ``random_inputs`` are those of the first size set."""

    def __init__(self, path: Path, manifest: JsonObject, sizes: list[SizeSet], dynamic: Path,
                 cleanup: Path | None = None) -> None:
        self.path, self.manifest, self.sizes, self.dynamic = path, manifest, sizes, dynamic
        self._by_shapes: dict[Shapes, SizeSet] = {tuple(sorted((s.name, tuple(s.shape)) for s in a.inputs)): a
                                              for a in sizes}
        first = sizes[0]
        self.inputs: list[TensorSpec] = first.inputs
        self.outputs: list[TensorSpec] = first.outputs
        self._input_specs = {s.name: s for s in first.inputs}
        self._dynamic_inputs = {d["name"]: d for d in manifest["dynamic"].get("inputs") or []}
        self._output_names = ([d["name"] for d in manifest["dynamic"].get("outputs") or []]
                              or [s.name for s in self.outputs])
        self._session: Any = None  # an onnxruntime.InferenceSession (onnxruntime ships no type information)
        self._warned: set[Shapes] = set()
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(cleanup), True) if cleanup else None

    def __repr__(self) -> str:
        tuned = "; ".join(" ".join(f"{n}={list(s)}" for n, s in key) for key in self._by_shapes)
        return f"<collage.MultiSizeArtifact {self.path} tuned for {tuned}; other sizes: the dynamic model>"

    @property
    def backends(self) -> list[str]:
        """The backends of every size set's plan (other sizes run on ONNX Runtime)."""
        return list(dict.fromkeys(b for a in self.sizes for b in a.backends))

    @property
    def partitions(self) -> list[LoadedPartition]:
        """The first size set's partitions (``artifact_for(feeds).partitions``: those of a size)."""
        return self.sizes[0].partitions

    def close(self) -> None:
        for a in self.sizes:
            a.close()
        if self._finalizer is not None:
            self._finalizer()

    def artifact_for(self, feeds: Mapping[str, npt.ArrayLike]) -> SizeSet | None:
        """The size set's artifact tuned for the shapes of ``feeds``, or None (a size not tuned)."""
        return self._by_shapes.get(_shapes_of(feeds))

    def check_feeds(self, feeds: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        art = self.artifact_for(feeds)
        return art.check_feeds(feeds) if art is not None else self._check_dynamic(feeds)

    def run(self, feeds: Mapping[str, npt.ArrayLike], times: list[float] | None = None) -> dict[str, np.ndarray]:
        """The outputs of ``feeds`` by the plan tuned for their shapes; a size not tuned runs on the dynamic model
        (one logged warning per size). ``times``: as ``Artifact.run`` (the dynamic model: one entry, the whole call)."""
        art = self.artifact_for(feeds)
        if art is not None:
            return art.run(feeds, times)
        checked = self._check_dynamic(feeds)
        key = _shapes_of(checked)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s: input size %s was not tuned (tuned: %s); running it untuned on the whole original "
                        "model (ONNX Runtime)", self.path, " ".join(f"{n}={list(s)}" for n, s in key),
                        "; ".join(" ".join(f"{n}={list(s)}" for n, s in k) for k in self._by_shapes))
        session = self._dynamic_session()
        t0 = time.perf_counter_ns()
        try:
            got = session.run(self._output_names, checked)
        except Exception as e:  # noqa: BLE001 - a size the model does not accept, as one clear error
            raise CollageError(f"{self.dynamic}: onnxruntime cannot run the model at input size "
                               f"{dict(key)}: {' '.join(str(e).split())}") from e
        if times is not None:
            times.append((time.perf_counter_ns() - t0) / 1e6)
        outputs: dict[str, np.ndarray] = dict(zip(self._output_names, got))
        return outputs

    def _dynamic_session(self) -> Any:  # an onnxruntime.InferenceSession (untyped)
        if self._session is None:
            from collage.backends.onnxruntime.session import make_session

            try:
                self._session = make_session(self.dynamic, optimize=True)
            except Exception as e:  # noqa: BLE001
                raise ArtifactError(f"{self.dynamic}: onnxruntime cannot load the dynamic model: {e}") from e
        return self._session

    def _check_dynamic(self, feeds: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        """Feeds for the dynamic model: each input given once, of its dtype, rank and fixed sizes."""
        specs = self._dynamic_inputs
        extra = [n for n in feeds if n not in specs]
        if extra:
            raise CollageError(f"unknown input {extra[0]!r}: the model's inputs are {', '.join(map(repr, specs))}")
        out: dict[str, np.ndarray] = {}
        for name, spec in specs.items():
            if name not in feeds:
                raise CollageError(f"missing input {name!r}: expected shape {spec['shape']} {spec['dtype']}")
            arr = np.ascontiguousarray(feeds[name])
            dims = spec.get("shape")
            # a name, null or a negative size (Paddle2ONNX writes -1) is any size
            fixed_ok = dims is None or (len(dims) == arr.ndim and all(not isinstance(d, int) or d < 0 or d == n
                                                                      for d, n in zip(dims, arr.shape)))
            if arr.dtype != np.dtype(spec["dtype"]) or not fixed_ok:
                raise CollageError(f"input {name!r}: the model takes shape {dims} {spec['dtype']} (a name: any "
                                   f"size), got shape {arr.shape} {arr.dtype.name}")
            out[name] = arr
        return out

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random feeds at the first tuned size (``Artifact.random_inputs`` of ``sizes[0]``)."""
        return self.sizes[0].random_inputs(seed)

    def latency_ms(self, feeds: Mapping[str, npt.ArrayLike], repeat: int = 20, warmup: int = 3) -> list[float]:
        """Wall-clock times (ms) of ``repeat`` runs after ``warmup`` runs, at the feeds' size."""
        return timed_runs(self.run, self.check_feeds(feeds), repeat, warmup)

    def boundary_overhead(self, feeds: Mapping[str, npt.ArrayLike] | None = None, repeat: int = 20,
                          warmup: int = 3) -> BoundaryOverhead:
        """``Artifact.boundary_overhead`` of the size set tuned for ``feeds`` (the first one without feeds)."""
        art = self.sizes[0] if feeds is None else self.artifact_for(feeds)
        if art is None:
            raise CollageError(f"input size {dict(_shapes_of(feeds or {}))} was not tuned: it runs on the whole "
                               "original model, which has no partitions")
        return art.boundary_overhead(feeds, repeat, warmup)


__all__ = ["MULTI_SIZE_KIND", "MultiSizeArtifact", "is_multi_size", "load_multi_size", "read_multi_manifest"]
