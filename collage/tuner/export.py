"""Export a tuned plan as a deployable artifact, and read an artifact's manifest.

An artifact is a directory (optionally also packed as ``<dir>.tar.gz``)::

    out/
      manifest.json                 what is in it, and the checksums that prove it (schema below)
      plan.json                     the Plan, boundaries filled in (collage.plan.Plan.from_json), and model_sha256
      report.json                   the tuner's report, version first (report/report.schema.json), and model_sha256
      partitions/000-onnxruntime/   one file set per partition, written by the backend's
      partitions/001-openvino/      Compiled.save(dir); read back by Backend.load(dir, entry)
      ...

manifest.json (``FORMAT_VERSION`` 1)::

    {"format_version": 1, "collage_version": "0.1.0", "created": "2026-11-29T21:50:00Z",
     "target": "cpu", "machine": "x86_64|<cpu model>|2c|avx512-vnni",   # collage.util.machine_id
     "model": {"name": ..., "source": "resnet50.onnx", "nodes": 122,
               "sha256": ..., "sha256_of": "source file" | "serialized model"},
     "extras": ["openvino"],   # pip extras beyond the core install its backends need (collage.extras)
     "backends": {"openvino": {"version": ..., "device": "cpu", "options": {<kwargs of get_backend>},
                               "settings": {<Backend.options>}},
                  "openvino-int8": {..., "int8_kernels": "vnni"}},   # int8 only: its error was judged on
                                   # this CPU's int8 kernels ("vnni" | "avx2": collage.util.int8_kernels)
     "inputs":  [{"name": "x", "shape": [1, 3, 224, 224], "dtype": "float32"}],
     "outputs": [{"name": "y", "shape": [1, 1000], "dtype": "float32"}],
     "tensors": {"t7": {"name": "t7", "shape": [1, 64, 56, 56], "dtype": "float32"}, ...},  # partition boundaries
     "partitions": [   # in execution order
        {"index": 0, "backend": "onnxruntime", "dir": "partitions/000-onnxruntime",
         "nodes": [0, 1, ...], "ops": ["Conv", "Relu", ...],     # op type of each node, same order
         "inputs": ["x"], "outputs": ["t7"],                       # tensor names at its boundary
         "entry": {<what Compiled.save returned, less its "files">},
         "files": [{"name": "model.onnx", "sha256": ..., "bytes": 1234}],   # THE list: all a loader may open
         "cost_ms": 0.61, "runner_up": ["openvino", 0.74], "fingerprint": ...}],
     "plan": "plan.json", "report": "report.json"}

``model.sha256`` is the sha256 of the original model file's bytes when the graph was loaded from a
file (what ``sha256sum model.onnx`` prints, so a deployer can check which model was tuned);
otherwise (a Graph built from an in-memory ModelProto) of that model serialised as loaded
(``graph.model``); ``sha256_of`` says which. plan.json and report.json carry it too (``model_sha256``):
the report refuses a plan or report of another model (:func:`collage.runtime.manifest.read_plan`).

The runtime reads it with :mod:`collage.runtime.manifest`.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.errors import ArtifactError, BackendUnavailable
from collage.extras import backend_extras
from collage.graph.inputs import input_specs
from collage.report.model import REPORT_VERSION
from collage.runtime.manifest import FORMAT_VERSION, MANIFEST, PLAN_FILE, REPORT_FILE, collage_version
from collage.plan import Partition, Plan
from collage.tuner.outdir import (OutputLocation, archive_path, as_inspected, carry_over, check_output_location,
                                  inspect_output, install, recover_replaced, staging_dir, umask, warn_kept)
from collage.util import is_int8, machine_id, sha256_bytes, sha256_file

if TYPE_CHECKING:
    from collage.backends.base import Compiled
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

def partition_dir_name(index: int, backend: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in backend)
    return f"{index:03d}-{safe}"


def _model_sha256(graph: Graph) -> tuple[str, str]:
    src = Path(graph.source)
    if graph.source not in ("", "<model>") and src.is_file():
        return sha256_file(src), "source file"
    return sha256_bytes(graph.model.SerializeToString()), "serialized model"


def _tensor_entry(graph: Graph, name: str, index_high: int | None = None) -> dict[str, Any]:
    info = graph.tensor(name)
    entry = {"name": name, "shape": [int(d) for d in info.shape], "dtype": info.dtype.name}
    if index_high is not None:  # Artifact.random_inputs keeps the input's values in range
        entry["index_high"] = int(index_high)
    return entry


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays, result objects (BoundaryOverhead), dataclasses, paths: what the tuner hands us
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=_json_default, allow_nan=True) + "\n")


def _check_execution_order(graph: Graph, plan: Plan, bounds: list[tuple[list[str], list[str]]]) -> None:
    try:
        plan.check_cover(len(graph))
    except ValueError as e:
        raise ArtifactError(f"cannot export {graph.source}: "
                            f"the plan does not cover the graph exactly once: {e}") from None
    available = set(graph.inputs)
    for k, (p, (ins, outs)) in enumerate(zip(plan.partitions, bounds)):
        missing = [t for t in ins if t not in available]
        if missing:
            raise ArtifactError(
                f"cannot export {graph.source}: partition {k} ({p.backend}, nodes {list(p.nodes)[:8]}...) reads "
                f"tensor {missing[0]!r} before any earlier partition produces it; the plan's partitions are not "
                "in an executable order (sort them topologically)")
        available.update(outs)
    lost = [t for t in graph.outputs if t not in available]
    if lost:
        raise ArtifactError(f"cannot export {graph.source}: graph output {lost[0]!r} is produced by no partition")


def export(graph: Graph, plan: Plan, out_dir: str | os.PathLike | OutputLocation, *,
           compiled: Mapping[int, Compiled] | None = None,
           backend_options: dict[str, dict] | None = None,
           target: str = "cpu", report: dict | None = None, archive: bool = False) -> Path:
    """Write ``plan`` for ``graph`` as an artifact directory at ``out_dir``; return its path.

    Each partition is compiled from ``graph.extract(p.nodes)`` by its backend (created with
    ``get_backend(name, **backend_options[name])``) unless ``compiled[k]`` already holds the
    compiled partition ``k``; the partitions of one backend are compiled together with
    ``Backend.compile_linked`` (tensors passed only between them may keep the runtime's own layout). The directory
    is built next to ``out_dir`` and renamed into place only when complete (inside it, where ``out_dir`` cannot be
    renamed: a mount point); an existing ``out_dir`` is replaced only if it is a collage artifact (the files it does
    not list are kept) or an empty directory (:mod:`collage.tuner.outdir`). ``out_dir`` may be the
    :class:`collage.tuner.outdir.OutputLocation` a tune checked before it began (checked again, checksums included,
    only if an entry under it changed since: :func:`collage.tuner.outdir.as_inspected`).
    ``archive=True`` also writes ``<out_dir>.tar.gz``.
    """
    where = (as_inspected(out_dir, archive=archive) if isinstance(out_dir, OutputLocation)
             else inspect_output(out_dir, archive=archive))
    out = where.out
    compiled = dict(compiled or {})
    backend_options = {k: dict(v) for k, v in (backend_options or {}).items()}
    bounds = [graph.boundary(p.nodes) for p in plan.partitions]
    _check_execution_order(graph, plan, bounds)
    backends = _backends(graph, plan, backend_options)
    try:
        tmp = staging_dir(where)
    except OSError as e:
        raise ArtifactError(f"{out}: cannot write the artifact there ({e.strerror or e}); choose another "
                            "output path") from None
    try:
        compiled.update(_compile_linked(graph, plan, bounds, backends, compiled))
        parts_meta, tied = _write_partitions(graph, plan, bounds, compiled, tmp)
        sha, sha_of = _model_sha256(graph)
        manifest = _manifest(graph, (sha, sha_of), target, backends, backend_options, bounds, parts_meta)
        # both name the model they belong to: `collage report` refuses a plan or report of another model
        _write_json(tmp / PLAN_FILE, {**Plan(tied, plan.predicted_ms, list(plan.notes)).to_dict(),
                                      "model_sha256": sha})
        _write_json(tmp / REPORT_FILE, {"version": REPORT_VERSION, **(report or {}), "model_sha256": sha})
        renamed = carry_over(where, tmp)  # the user's files in the old artifact
        _write_json(tmp / MANIFEST, manifest)  # last: a directory with a manifest is complete
        install(tmp, where)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    warn_kept(where, renamed)
    if archive:
        write_archive(out)
    log.info("wrote artifact %s (%d partitions)", out, len(plan.partitions))
    return out


def _backends(graph: Graph, plan: Plan, backend_options: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The plan's backends, each created with its options and available here (else BackendUnavailable)."""
    from collage.backends import get_backend

    backends: dict[str, Any] = {}
    for name in plan.backends:
        b = get_backend(name, **backend_options.get(name, {}))
        reason = b.available()
        if reason:
            raise BackendUnavailable(f"cannot export {graph.source}: backend {name!r} is not available here: {reason}")
        backends[name] = b
    return backends


def _write_partitions(graph: Graph, plan: Plan, bounds: list[tuple[list[str], list[str]]],
                      compiled: Mapping[int, Compiled], tmp: Path) -> tuple[list[dict[str, Any]], list[Partition]]:
    """Each compiled partition saved under ``tmp/partitions/``: its manifest entries, and the plan's partitions
    with their boundaries."""
    parts_meta = []
    tied: list[Partition] = []
    for k, (p, (ins, outs)) in enumerate(zip(plan.partitions, bounds)):
        rel = f"partitions/{partition_dir_name(k, p.backend)}"
        pdir = tmp / rel
        pdir.mkdir(parents=True)
        c = compiled[k]
        _check_compiled_names(graph, k, p.backend, c, ins, outs)
        entry = c.save(pdir)
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), list) or not entry["files"]:
            raise ArtifactError(f"backend {p.backend!r}: Compiled.save() for partition {k} returned {entry!r}; "
                                "it must return a dict with a non-empty 'files' list (a bug in the backend)")
        parts_meta.append({
            "index": k, "backend": p.backend, "dir": rel,
            "nodes": [int(i) for i in p.nodes], "ops": [graph.op_type(i) for i in p.nodes],
            # one list of files (checked at load, the only files the backend is given): not also in the entry
            "inputs": list(ins), "outputs": list(outs), "entry": {k: v for k, v in entry.items() if k != "files"},
            "files": _listed_files(pdir, rel, entry["files"], p.backend, k),
            "cost_ms": p.cost_ms, "runner_up": list(p.runner_up) if p.runner_up else None,
            "fingerprint": p.fingerprint})
        tied.append(Partition(tuple(p.nodes), p.backend, p.cost_ms, p.runner_up, tuple(ins), tuple(outs),
                              p.fingerprint))
    return parts_meta, tied


def _listed_files(pdir: Path, rel: str, names: list[Any], backend: str, k: int) -> list[dict[str, Any]]:
    """The manifest's list of a partition's files (name, sha256, size); each must be a file inside ``pdir``."""
    files = []
    for fname in names:
        fpath = (pdir / fname).resolve()
        if pdir.resolve() not in fpath.parents or not fpath.is_file():
            raise ArtifactError(f"backend {backend!r} listed file {fname!r} for partition {k}, which is not "
                                f"a file inside {rel} (a bug in the backend's save())")
        files.append({"name": str(fname), "sha256": sha256_file(fpath), "bytes": fpath.stat().st_size})
    return files


def _manifest(graph: Graph, sha: tuple[str, str], target: str, backends: Mapping[str, Any],
              backend_options: Mapping[str, Any], bounds: list[tuple[list[str], list[str]]],
              parts_meta: list[dict[str, Any]]) -> dict[str, Any]:
    """manifest.json's content (module docstring)."""
    return {
        "format_version": FORMAT_VERSION,
        "collage_version": collage_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "target": target,
        "machine": machine_id(),
        "model": {"name": graph.name, "source": Path(graph.source).name, "nodes": len(graph),
                  "sha256": sha[0], "sha256_of": sha[1]},
        # what `pip install` a machine that runs this artifact needs beyond `pip install collage`
        "extras": backend_extras(backends),
        "backends": {name: {"version": b.version(), "device": b.device,
                            "options": backend_options.get(name, {}), "settings": b.options,
                            # an int8 backend's error was judged on this CPU's int8 kernels (collage.runtime
                            # warns on a CPU that runs the other kind)
                            **({"int8_kernels": b.int8_kernels()}
                               if is_int8(b) and hasattr(b, "int8_kernels") else {})}
                     for name, b in backends.items()},
        "inputs": [_tensor_entry(graph, s.name, s.high) for s in input_specs(graph)],
        "outputs": [_tensor_entry(graph, t) for t in graph.outputs],
        # every tensor at a partition boundary: shape and dtype (the report labels its arrows with them)
        "tensors": {t: _tensor_entry(graph, t) for ins, outs in bounds for t in (*ins, *outs)},
        "partitions": parts_meta,
        "plan": PLAN_FILE,
        "report": REPORT_FILE,
    }


def _compile_linked(graph: Graph, plan: Plan, bounds: list[tuple[list[str], list[str]]], backends: Mapping[str, Any],
                    done: Mapping[int, Compiled]) -> dict[int, Compiled]:
    """Compile the partitions not in ``done``, those of one backend together (``Backend.compile_linked``, in plan
    order): a tensor passed between two of them may stay in the runtime's own layout. Graph outputs and tensors
    read by any other partition (another backend's, or one compiled earlier) keep the ONNX layout."""
    groups: dict[str, list[int]] = {}
    for k, p in enumerate(plan.partitions):
        if k not in done:
            groups.setdefault(p.backend, []).append(k)
    out: dict[int, Compiled] = {}
    for name, ks in groups.items():
        group = set(ks)
        plain = set(graph.outputs) | {t for j, (ins, _) in enumerate(bounds) if j not in group for t in ins}
        models = [graph.extract(plan.partitions[k].nodes, name=f"{graph.name}_p{k:03d}_{name}") for k in ks]
        log.info("compiling %d partition(s) (%s nodes) with %s", len(ks), [len(plan.partitions[k].nodes) for k in ks],
                 name)
        compiled = backends[name].compile_linked(models, plain) if len(ks) > 1 else [backends[name].compile(models[0])]
        if len(compiled) != len(ks):
            raise ArtifactError(f"backend {name!r}: compile_linked returned {len(compiled)} partitions for {len(ks)} "
                                "models (a bug in the backend)")
        out.update(zip(ks, compiled))
    return out


def _check_compiled_names(graph: Graph, k: int, backend: str, c: Compiled, ins: list[str], outs: list[str]) -> None:
    have_in, have_out = list(getattr(c, "input_names", ins)), list(getattr(c, "output_names", outs))
    if set(have_in) != set(ins) or set(have_out) != set(outs):
        raise ArtifactError(
            f"partition {k} ({backend}): the compiled partition takes {have_in} -> {have_out}, but the plan's "
            f"boundary in {graph.source} is {ins} -> {outs}; was it compiled from another node set?")


def write_archive(artifact_dir: str | os.PathLike) -> Path:
    """Pack an artifact directory as ``<dir>.tar.gz`` (members under ``<dir name>/``), atomically."""
    src = Path(artifact_dir).resolve()
    dest = archive_path(src)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=src.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp_name, "w:gz") as tar:
            for path in sorted(src.rglob("*")):
                if path.is_symlink():
                    raise ArtifactError(f"{path}: artifacts hold no symbolic links; cannot archive it")
                tar.add(path, arcname=f"{src.name}/{path.relative_to(src).as_posix()}", recursive=False)
        os.chmod(tmp_name, 0o666 & ~umask())  # mkstemp made it 0600
        os.replace(tmp_name, dest)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return dest


#: public name of what a multi-size artifact's manifest is written with (collage.tuner.sizes)
write_json = _write_json

__all__ = ["check_output_location", "export", "partition_dir_name", "recover_replaced", "write_archive", "write_json"]
