"""What runs where, written into the model itself: ``collage annotate OUT -o model.annotated.onnx``.

The original model (the file the artifact was tuned from, checked against the manifest's sha256) with
every node's backend, precision and partition in its ``metadata_props`` and ``doc_string``, and a summary
of the plan in the model's ``metadata_props``, so that Netron or any ONNX tool shows which node went where.
Nothing else changes: the annotated model runs and checks like the original.

Node keys: ``collage.backend``, ``collage.precision``, ``collage.partition`` (its index in execution
order), ``collage.node`` (the node's id in collage's topological order). A ``Constant`` node that collage
folded into a weight gets ``collage.backend = "(constant, folded into its consumers)"``; a node that
reaches no output, ``"(dropped: reaches no graph output)"``. Model keys: ``collage.plan`` (one line, e.g.
``3 partitions: onnxruntime[13], openvino[14], onnxruntime[13]``), ``collage.summary`` (JSON: partitions
with backend, precision, nodes and ms; plan_ms; baselines), ``collage.version``.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import onnx

from collage.errors import ArtifactError, CollageError, ModelError
from collage.report.model import Report, as_report
from collage.report.records import write_value
from collage.runtime.artifact import artifact_dir, verify_files
from collage.runtime.manifest import read_manifest, read_report
from collage.util import sha256_file

log = logging.getLogger(__name__)

FOLDED = "(constant, folded into its consumers)"
DROPPED = "(dropped: reaches no graph output)"


def source_model(root: Path, manifest: dict, report: Report, model: str | os.PathLike | None) -> Path:
    """The model file the artifact was tuned from: ``model`` if given, else the path report.json records;
    its sha256 must match the manifest's when the manifest has the file's."""
    info = manifest.get("model") or {}
    path = Path(model) if model is not None else Path(str(report.source or info.get("source") or ""))
    if not path.is_file():
        raise ArtifactError(f"{root}: the model it was tuned from ({path}) is not there; "
                            "pass it with --model FILE.onnx")
    if info.get("sha256_of") == "source file" and info.get("sha256") and sha256_file(path) != info["sha256"]:
        raise ArtifactError(f"{path}: not the model {root} was tuned from (sha256 differs from the manifest's "
                            f"{str(info['sha256'])[:16]}...); pass the right one with --model")
    return path


def _precisions(manifest: dict, report: Report) -> dict[int, str]:
    by_report = {int(q.index): str(q.precision if q.precision is not None else "fp32")
                 for q in (report.precision.partitions if report.precision is not None else ()) if q.index is not None}
    out = {}
    for p in manifest["partitions"]:
        settings = ((manifest.get("backends") or {}).get(p["backend"]) or {}).get("settings") or {}
        out[int(p["index"])] = by_report.get(int(p["index"]), str(settings.get("precision") or "fp32"))
    return out


def _set(props: Any, key: str, value: str) -> None:
    for entry in props:
        if entry.key == key:
            entry.value = value
            return
    entry = props.add()
    entry.key, entry.value = key, value


def annotate(artifact: str | os.PathLike, out: str | os.PathLike, model: str | os.PathLike | None = None) -> dict:
    """Write the annotated model (module docstring) to ``out``; return the summary written into it."""
    from collage.graph.ir import Graph

    out = Path(out)
    if out.suffix != ".onnx" or out.is_dir():  # onnx.save picks its format from the suffix (.json: text)
        raise CollageError(f"{out}: the annotated model is written as an ONNX file: name one ending in .onnx "
                           "that is not a directory")
    src = Path(artifact).resolve()
    if not src.is_file() and out.resolve().is_relative_to(src):
        raise CollageError(f"{out}: inside the artifact {artifact}, whose files are checksummed; write the "
                           "annotated model elsewhere")
    with artifact_dir(artifact) as root:
        manifest = read_manifest(root)
        verify_files(root, manifest)  # a damaged artifact is named, as `collage run` names it
        report = as_report(read_report(root, manifest))
        path = source_model(root, manifest, report, model)
    try:
        original = onnx.load(str(path))
    except Exception as e:
        raise ModelError(f"{path}: not a readable ONNX model ({e})") from e
    graph = Graph.load(path)  # collage's node ids, as the tuner numbered them
    by_output: dict[str, int] = {}
    for i in range(len(graph)):
        for t in graph.op(i).output:
            if t:
                by_output[t] = i
    precision = _precisions(manifest, report)
    where: dict[int, tuple[int, str]] = {}
    for p in manifest["partitions"]:
        for i in p["nodes"]:
            where[int(i)] = (int(p["index"]), p["backend"])
    if len(where) != len(graph):
        raise ArtifactError(f"{root}: its partitions cover {len(where)} nodes, the model {path} has {len(graph)}; "
                            "not the model it was tuned from")
    counts = {"annotated": 0, "folded": 0, "dropped": 0}
    for node in original.graph.node:
        ids = {by_output[t] for t in node.output if t in by_output}
        if ids:
            i = min(ids)
            k, backend = where[i]
            marks = {"collage.backend": backend, "collage.precision": precision[k], "collage.partition": str(k),
                     "collage.node": str(i)}
            text = f"collage: partition {k} on {backend} ({precision[k]})"
            counts["annotated"] += 1
        else:
            folded = node.op_type == "Constant"
            marks = {"collage.backend": FOLDED if folded else DROPPED}
            text = f"collage: {marks['collage.backend']}"
            counts["folded" if folded else "dropped"] += 1
        for key, value in marks.items():
            _set(node.metadata_props, key, value)
        node.doc_string = (node.doc_string + "\n" if node.doc_string else "") + text
    parts = [{"index": int(p["index"]), "backend": p["backend"], "precision": precision[int(p["index"])],
              "nodes": len(p["nodes"]), "ms": p.get("cost_ms")} for p in manifest["partitions"]]
    summary = {"partitions": parts, "plan_ms": report.plan_ms, "baselines": write_value(report.baselines) or None,
               "nodes": counts, "artifact": str(Path(artifact).resolve())}
    line = f"{len(parts)} partition(s): " + ", ".join(f"{p['backend']}[{p['nodes']}]" for p in parts)
    _set(original.metadata_props, "collage.plan", line)
    _set(original.metadata_props, "collage.summary", json.dumps(summary))
    _set(original.metadata_props, "collage.version", str(manifest.get("collage_version", "")))
    out.parent.mkdir(parents=True, exist_ok=True)
    large = original.ByteSize() > 1_800_000_000
    onnx.save(original, str(out), save_as_external_data=large)
    log.info("annotated %d nodes of %s -> %s", counts["annotated"], path, out)
    return summary
