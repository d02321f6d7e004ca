"""An artifact's manifest: its file names, format version and the checks made before anything is loaded.

The schema is written down in :mod:`collage.tuner.export` (which writes it); this module reads it, for
the runtime and the report. Light on purpose: it imports the standard library and ``collage.errors`` only.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from collage.errors import ArtifactError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PLAN_FILE = "plan.json"
REPORT_FILE = "report.json"

PARTITION_KEYS = ("index", "backend", "dir", "nodes", "inputs", "outputs", "entry", "files")
TOP_KEYS = ("format_version", "collage_version", "target", "model", "backends", "inputs", "outputs",
             "partitions")


def collage_version() -> str:
    from collage.version import __version__
    return __version__



def read_manifest(path: str | os.PathLike) -> dict:
    """Read and check ``manifest.json`` of an artifact directory (or the manifest file itself).

    Raises ``ArtifactError`` naming the file when it is missing, not JSON, of a newer or unknown
    format version, or lacks a required field.
    """
    p = Path(path)
    mpath = p / MANIFEST if p.is_dir() else p
    if not mpath.is_file():
        if not p.exists():
            raise ArtifactError(f"{p}: no such artifact (expected a directory written by `collage tune`, or its .tar.gz)")
        raise ArtifactError(f"{p}: not a collage artifact (no {MANIFEST} in it)")
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
    missing = [k for k in TOP_KEYS if k not in manifest]
    if missing:
        raise ArtifactError(f"{mpath}: manifest lacks field(s) {missing}; the artifact is corrupted: re-export it")
    if not isinstance(manifest["partitions"], list) or not manifest["partitions"]:
        raise ArtifactError(f"{mpath}: manifest lists no partitions; the artifact is corrupted: re-export it")
    for k, part in enumerate(manifest["partitions"]):
        lacking = [key for key in PARTITION_KEYS if key not in part] if isinstance(part, dict) else list(PARTITION_KEYS)
        if lacking:
            raise ArtifactError(f"{mpath}: partition {k} lacks field(s) {lacking}; the artifact is corrupted: re-export it")
        if part["backend"] not in manifest["backends"]:
            raise ArtifactError(f"{mpath}: partition {k} runs on backend {part['backend']!r}, which the manifest's "
                                "'backends' section does not describe; the artifact is corrupted: re-export it")
        rel = Path(part["dir"])
        if rel.is_absolute() or ".." in rel.parts:
            raise ArtifactError(f"{mpath}: partition {k} directory {part['dir']!r} points outside the artifact; refused")
        for f in part["files"]:
            fp = Path(str(f.get("name", "")))
            if not f.get("name") or fp.is_absolute() or ".." in fp.parts or "sha256" not in f:
                raise ArtifactError(f"{mpath}: partition {k} lists a bad file entry {f!r}; refused")
    return manifest


def read_report(root: Path, manifest: dict) -> dict:
    """The artifact's report.json ({} where it has none); ArtifactError naming it where it cannot be read."""
    rpath = root / manifest.get("report", REPORT_FILE)
    try:
        report = json.loads(rpath.read_text()) if rpath.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{rpath}: unreadable report ({e}); re-run `collage tune`") from None
    if not isinstance(report, dict):
        raise ArtifactError(f"{rpath}: not a report (a JSON {type(report).__name__}, not an object); "
                            "re-run `collage tune`")
    return report
