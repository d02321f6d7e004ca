"""An artifact's manifest: its file names, format version and the checks made before anything is loaded.

The schema is written down in :mod:`collage.tuner.export` (which writes it); this module reads it, for
the runtime and the report, and checks its structure in ONE place (:func:`check_structure`): every key the
runtime or the report reads is there and of its type, so a damaged or hand-edited manifest is refused in one
line naming ``manifest.json`` and the key, before anything is opened (never a KeyError or TypeError later).
It also reads ``report.json`` and ``plan.json`` and checks that they belong to the manifest's model
(:func:`read_report`, :func:`read_plan`). Light on purpose: the standard library, numpy (dtype names) and
``collage.errors`` only.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn, TypeAlias, TypeVar

import numpy as np

from collage.errors import ArtifactError

#: A JSON object as ``json.loads`` gives it (manifest.json, plan.json, report.json): its values are whatever the
#: file holds, so ``Any`` (the json module's type); :func:`check_structure` checks every key the runtime and the
#: report read before they read it.
JsonObject: TypeAlias = dict[str, Any]

T = TypeVar("T")

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PLAN_FILE = "plan.json"
REPORT_FILE = "report.json"

PARTITION_KEYS = ("index", "backend", "dir", "nodes", "inputs", "outputs", "entry", "files")
TOP_KEYS = ("format_version", "collage_version", "target", "model", "backends", "inputs", "outputs",
            "partitions")
#: the first bytes of an ONNX file (ModelProto field 1, ir_version, a small varint): `collage run model.onnx`
_ONNX_MAGIC = tuple(bytes([0x08, v]) for v in range(1, 32))
#: JSON's names for Python's types, for the messages
_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def collage_version() -> str:
    from collage.version import __version__
    return __version__


def read_manifest(path: str | os.PathLike[str]) -> JsonObject:
    """Read and check ``manifest.json`` of an artifact directory (or the manifest file itself).

    Raises ``ArtifactError`` naming the file when it is missing, an ONNX model rather than an artifact, not
    JSON, of a newer or unknown format version, or when a key is missing or of the wrong type
    (:func:`check_structure`).
    """
    p = Path(path)
    mpath = p / MANIFEST if p.is_dir() else p
    if not mpath.is_file():
        if not p.exists():
            raise ArtifactError(f"{p}: no such artifact (expected a directory written by `collage tune`, or its "
                                ".tar.gz)")
        raise ArtifactError(f"{p}: not a collage artifact (no {MANIFEST} in it)")
    if p.is_file() and _is_onnx(p):
        raise ArtifactError(f"{p}: this is an ONNX model, not a collage artifact; tune it first with "
                            f"`collage tune {p} -o OUT`, then give OUT (or OUT.tar.gz) here")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{mpath}: unreadable manifest ({e}); the artifact is corrupted: re-export it") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{mpath}: not a collage manifest (expected a JSON object)")
    if manifest.get("kind") == "multi-size":  # collage.runtime.multisize: load it with collage.load / collage run
        raise ArtifactError(f"{mpath}: a multi-size artifact (one plan per input size, in its sizes/ folders); "
                            "collage.load and `collage run` / `collage report` take it whole, other commands one "
                            "of its sizes/NNN folders")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ArtifactError(f"{mpath}: missing or invalid format_version {version!r}; not a collage artifact manifest")
    if version > FORMAT_VERSION:
        raise ArtifactError(
            f"{mpath}: artifact format version {version} was written by collage "
            f"{manifest.get('collage_version', '?')}; this collage ({collage_version()}) reads format version "
            f"{FORMAT_VERSION} and older: upgrade collage (pip install -U collage) to load it")
    check_structure(manifest, mpath)
    return manifest


def _is_onnx(path: Path) -> bool:
    if path.suffix.lower() == ".onnx":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(2) in _ONNX_MAGIC
    except OSError:
        return False


# ---------------------------------------------------------------------- structure
class _Checker:
    """The structure checks of one manifest; each failure is one line naming the file and the key."""

    def __init__(self, mpath: Path) -> None:
        self.mpath = mpath

    def fail(self, key: str, what: str) -> NoReturn:
        raise ArtifactError(f"{self.mpath}: key {key!r} {what}; the artifact is corrupted or was edited: re-export it")

    def typed(self, key: str, value: object, want: type[T] | tuple[type[T], ...], label: str) -> T:
        """``value`` where it is of type ``want`` (a bool only where ``want`` names bool), else the failure."""
        wants = want if isinstance(want, tuple) else (want,)
        if not isinstance(value, wants) or (isinstance(value, bool) and bool not in wants):
            self.fail(key, f"must be {label}, not {_JSON_TYPES.get(type(value), type(value).__name__)}")
        return value

    def text(self, key: str, value: object) -> str:
        text = self.typed(key, value, str, "a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(key, f"holds {text!r}, which is not valid UTF-8 text")
        return text

    def count(self, key: str, value: object) -> int:
        number = self.typed(key, value, int, "a whole number")
        if number < 0:
            self.fail(key, f"is {number}, a negative number")
        return number

    def texts(self, key: str, value: object) -> list[str]:
        items = self.typed(key, value, list, "a list of names")
        return [self.text(f"{key}[{k}]", v) for k, v in enumerate(items)]

    def inside(self, key: str, value: object) -> str:
        """A relative path inside the artifact (no absolute path, no '..')."""
        text = self.text(key, value)
        rel = PurePosixPath(text)
        if not text or rel.is_absolute() or text.startswith("\\") or ".." in rel.parts or ".." in Path(text).parts:
            self.fail(key, f"is {text!r}, which points outside the artifact; refused")
        return text

    def tensor(self, key: str, value: object) -> str:
        value = self.typed(key, value, dict, "an object (name, shape, dtype)")
        lacking = [k for k in ("name", "shape", "dtype") if k not in value]
        if lacking:
            self.fail(key, f"lacks {lacking}")
        name = self.text(f"{key}.name", value["name"])
        self.typed(f"{key}.shape", value["shape"], list, "a list of dimensions")
        for k, d in enumerate(value["shape"]):
            self.count(f"{key}.shape[{k}]", d)
        dtype = self.text(f"{key}.dtype", value["dtype"])
        if not known_dtype(dtype):
            self.fail(f"{key}.dtype", f"is {dtype!r}, not a numeric dtype collage knows (float32, int64, ...)")
        if value.get("index_high") is not None:
            self.count(f"{key}.index_high", value["index_high"])
        return name


def known_dtype(name: str) -> bool:
    """Whether ``name`` is the numpy name of an ONNX tensor type, as collage's graph gives it: numbers and booleans
    (float32, int64, bool, bfloat16, float8_*, ...) and ``object`` (ONNX strings)."""
    try:
        dt = np.dtype(name)
    except TypeError:
        try:  # bfloat16, float8_*, int4: ml_dtypes (installed with onnx) registers them with numpy
            import ml_dtypes  # noqa: F401
            dt = np.dtype(name)
        except (ImportError, TypeError):
            return False
    return dt.name == name and (dt.kind in "biufcO" or dt.type.__module__ == "ml_dtypes")


def check_structure(manifest: JsonObject, mpath: str | os.PathLike[str] = MANIFEST) -> None:
    """ArtifactError naming ``mpath`` and the first key that is missing or of the wrong type or value: the top
    keys, the model, the backends, the input/output/boundary tensors and every partition (its files inside the
    artifact, its backend described, every tensor it reads made before it runs)."""
    c = _Checker(Path(mpath))
    missing = [k for k in TOP_KEYS if k not in manifest]
    if missing:
        raise ArtifactError(f"{mpath}: manifest lacks field(s) {missing}; the artifact is corrupted: re-export it")
    c.text("collage_version", manifest["collage_version"])
    c.text("target", manifest["target"])
    model = c.typed("model", manifest["model"], dict, "an object (name, sha256, ...)")
    for key in ("name", "source", "sha256", "sha256_of"):
        if model.get(key) is not None:
            c.text(f"model.{key}", model[key])
    if model.get("nodes") is not None:
        c.count("model.nodes", model["nodes"])
    backends = c.typed("backends", manifest["backends"], dict, "an object (backend name: its version, options)")
    for name, info in backends.items():
        c.typed(f"backends.{name}", info, dict, "an object (version, options, settings)")
        if "version" not in info:
            c.fail(f"backends.{name}", "lacks 'version'")
        c.text(f"backends.{name}.version", info["version"])
        for key in ("options", "settings"):
            if info.get(key) is not None:
                c.typed(f"backends.{name}.{key}", info[key], dict, "an object")
    names = [c.tensor(f"inputs[{k}]", t) for k, t in enumerate(c.typed("inputs", manifest["inputs"], list, "a list"))]
    outputs = c.typed("outputs", manifest["outputs"], list, "a list")
    if not outputs:
        c.fail("outputs", "is empty: a model has at least one output")
    outs = [c.tensor(f"outputs[{k}]", t) for k, t in enumerate(outputs)]
    for key, value in c.typed("tensors", manifest.get("tensors") or {}, dict, "an object").items():
        c.tensor(f"tensors.{key}", value)
    for key in ("plan", "report"):
        if manifest.get(key) is not None:
            c.inside(key, manifest[key])
    made = set(names)
    parts = c.typed("partitions", manifest["partitions"], list, "a list of partitions")
    if not parts:
        raise ArtifactError(f"{mpath}: manifest lists no partitions; the artifact is corrupted: re-export it")
    for k, part in enumerate(parts):
        made |= _check_partition(c, k, part, backends, made)
    lost = [t for t in outs if t not in made]
    if lost:
        c.fail("outputs", f"names {lost[0]!r}, which no partition makes")


def _check_partition(c: _Checker, k: int, part: object, backends: Mapping[str, Any], made: set[str]) -> set[str]:
    """Partition ``k``'s keys; the tensors it makes. ``made``: the model inputs and what earlier partitions make."""
    key = f"partitions[{k}]"
    lacking = [name for name in PARTITION_KEYS if name not in part] if isinstance(part, dict) else list(PARTITION_KEYS)
    if lacking or not isinstance(part, dict):
        raise ArtifactError(f"{c.mpath}: partition {k} lacks field(s) {lacking}; the artifact is corrupted: re-export "
                            "it")
    if c.count(f"{key}.index", part["index"]) != k:
        c.fail(f"{key}.index", f"is {part['index']}, not {k} (partitions are listed in the order they run)")
    backend = c.text(f"{key}.backend", part["backend"])
    if backend not in backends:
        raise ArtifactError(f"{c.mpath}: partition {k} runs on backend {backend!r}, which the manifest's "
                            "'backends' section does not describe; the artifact is corrupted: re-export it")
    c.inside(f"{key}.dir", part["dir"])
    for j, node in enumerate(c.typed(f"{key}.nodes", part["nodes"], list, "a list of node ids")):
        c.count(f"{key}.nodes[{j}]", node)
    if part.get("ops") is not None:
        c.texts(f"{key}.ops", part["ops"])
    inputs, outputs = c.texts(f"{key}.inputs", part["inputs"]), c.texts(f"{key}.outputs", part["outputs"])
    unmade = [t for t in inputs if t not in made]
    if unmade:
        c.fail(f"{key}.inputs", f"names {unmade[0]!r}, which neither the model's inputs nor an earlier partition make")
    c.typed(f"{key}.entry", part["entry"], dict, "an object")
    files = c.typed(f"{key}.files", part["files"], list, "a list of file entries (name, sha256, bytes)")
    if not files:
        c.fail(f"{key}.files", "is empty: a partition has at least one file")
    for j, f in enumerate(files):
        fkey = f"{key}.files[{j}]"
        c.typed(fkey, f, dict, "an object (name, sha256, bytes)")
        fp = PurePosixPath(str(f.get("name", "")))
        if not f.get("name") or fp.is_absolute() or ".." in fp.parts or ".." in Path(str(f["name"])).parts \
                or "sha256" not in f:
            raise ArtifactError(f"{c.mpath}: partition {k} lists a bad file entry {f!r}; refused")
        c.text(f"{fkey}.name", f["name"])
        c.text(f"{fkey}.sha256", f["sha256"])
        if f.get("bytes") is not None:
            c.count(f"{fkey}.bytes", f["bytes"])
    if part.get("cost_ms") is not None:
        c.typed(f"{key}.cost_ms", part["cost_ms"], (int, float), "a number or null")
    ru = part.get("runner_up")
    if ru is not None and not (isinstance(ru, list) and len(ru) == 2 and isinstance(ru[0], str)
                               and isinstance(ru[1], (int, float)) and not isinstance(ru[1], bool)):
        c.fail(f"{key}.runner_up", f"is {ru!r}, not null or [backend, ms]")
    return set(outputs)


# ---------------------------------------------------------------------- report.json, plan.json
def read_report(root: Path, manifest: JsonObject) -> JsonObject:
    """The artifact's report.json ({} where it has none); ArtifactError naming it where it cannot be read or
    belongs to another model than the manifest's."""
    rpath = root / manifest.get("report", REPORT_FILE)
    try:
        report = json.loads(rpath.read_text()) if rpath.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{rpath}: unreadable report ({e}); re-run `collage tune`") from None
    if not isinstance(report, dict):
        raise ArtifactError(f"{rpath}: not a report (a JSON {type(report).__name__}, not an object); "
                            "re-run `collage tune`")
    _same_model(rpath, report, manifest)
    return report


def read_plan(root: Path, manifest: JsonObject) -> JsonObject | None:
    """The artifact's plan.json as a dict (None where it has none); ArtifactError naming it where it cannot be
    read, or belongs to another model or plan: its partitions (nodes, backend, fingerprint) are the manifest's."""
    ppath = root / manifest.get("plan", PLAN_FILE)
    if not ppath.is_file():
        return None
    try:
        plan = json.loads(ppath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{ppath}: unreadable plan ({e}); re-run `collage tune`") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("partitions"), list):
        raise ArtifactError(f"{ppath}: not a plan (no 'partitions' list); re-run `collage tune`")
    _same_model(ppath, plan, manifest)
    mine, theirs = manifest["partitions"], plan["partitions"]
    for k in range(max(len(mine), len(theirs))):
        want, got = _part_key(mine[k] if k < len(mine) else None), _part_key(theirs[k] if k < len(theirs) else None)
        if want[:2] != got[:2] or (want[2] and got[2] and want[2] != got[2]):
            raise ArtifactError(f"{ppath}: partition {k} is {_said(got)}, but {MANIFEST} says {_said(want)}: this "
                                "plan belongs to another model or tune; copy the artifact again or re-run "
                                "`collage tune`")
    return plan


def _part_key(part: object) -> tuple[object, object, str]:
    if not isinstance(part, dict):
        return None, None, ""
    nodes = part.get("nodes")
    return (tuple(nodes) if isinstance(nodes, list) else nodes), part.get("backend"), str(part.get("fingerprint") or "")


def _said(key: tuple[object, object, str]) -> str:
    if key[0] is None and key[1] is None:
        return "missing"
    nodes = key[0] if isinstance(key[0], tuple) else ()
    span = f"nodes {nodes[0]}-{nodes[-1]}" if nodes else "no nodes"
    return f"{key[1]!r} on {len(nodes)} node(s) ({span}" + (f", fingerprint {key[2]})" if key[2] else ")")


def _same_model(path: Path, doc: JsonObject, manifest: JsonObject) -> None:
    """ArtifactError naming ``path`` where report.json / plan.json is of another model than the manifest:
    its ``model_sha256`` (written since this check exists) or, in older ones, the report's model name."""
    model = manifest["model"]
    sha, want = doc.get("model_sha256"), model.get("sha256")
    if sha is not None and want is not None and sha != want:
        raise ArtifactError(f"{path}: belongs to another model (sha256 {str(sha)[:16]}...) than {MANIFEST} "
                            f"({model.get('name')!r}, sha256 {str(want)[:16]}...): the artifact's files were mixed; "
                            "copy the artifact again or re-run `collage tune`")
    name = doc.get("model")
    if isinstance(name, str) and model.get("name") is not None and name != model["name"]:
        raise ArtifactError(f"{path}: is the report of model {name!r}, but {MANIFEST} is of {model['name']!r}: the "
                            "artifact's files were mixed; copy the artifact again or re-run `collage tune`")
