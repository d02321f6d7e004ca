"""Load a tuned artifact and run it: the light deploy path.

    art = collage.load("out/")                    # or "out.tar.gz"
    outputs = art.run({"input": x})               # {output name: np.ndarray}

Loading imports numpy, the standard library and the backends the artifact uses: nothing of the
tuner (no search, no cost database, no optuna, no pandas, no networkx, no tqdm), and for ONNX Runtime
partitions not even onnx (sessions are built from the saved files; tests/runtime/test_without_onnx.py).
It checks, before loading anything, the manifest's format version, every partition file's sha256 and
every backend's version, and names the file or backend that does not match.

A backend version mismatch is an error by default, because the plan (which backend runs which
nodes) was measured with the recorded versions and its outputs were checked against them; pass
``check_versions=False`` (CLI ``--ignore-version-mismatch``) to run anyway, e.g. after a security
update of a runtime, until the model is re-tuned. The mismatch is then logged as a warning.

CLI: ``collage run OUT --input NAME=x.npy ... [--random] [--output DIR] [--repeat N]``, in
:mod:`collage.commands.run`.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import shutil
import tarfile
import tempfile
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from collage.runtime.manifest import MANIFEST, PLAN_FILE, REPORT_FILE, JsonObject, read_manifest
# the records live in collage.runtime.records (the multi-size artifact names them too); exported here as before
from collage.runtime.records import BoundaryOverhead as BoundaryOverhead
from collage.runtime.records import LoadedPartition as LoadedPartition
from collage.runtime.records import TensorSpec as TensorSpec
from collage.errors import ArtifactError, BackendUnavailable, CollageError, InputError, InputTypeError
from collage.seeded_inputs import InputSpec, seeded_inputs
from collage.util import INT8_KERNEL_WORDS, sha256_file, timed_runs

if TYPE_CHECKING:
    from collage.backends.base import Backend
    from collage.runtime.multisize import MultiSizeArtifact

log = logging.getLogger(__name__)


def _spec(d: Mapping[str, Any]) -> TensorSpec:
    high = d.get("index_high")
    return TensorSpec(str(d["name"]), tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]),
                      None if high is None else int(high))


def nonfinite_message(name: str, arr: np.ndarray) -> str:
    """Why an input holding NaN or infinity is refused (what ``Artifact.check_feeds`` raises)."""
    nan, inf = int(np.isnan(arr).sum()), int(np.isinf(arr).sum())
    first = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
    return (f"input {name!r} holds {nan} NaN and {inf} infinite value(s) (the first at index {first}); refused: "
            "backends disagree on them (OpenVINO turns an all-NaN image into plausible finite probabilities where "
            "ONNX Runtime gives NaN), so no output would be trustworthy. Clean the input, or pass "
            "allow_nonfinite=True (CLI --allow-nonfinite) if the model handles NaN and infinity itself")


class Artifact:
    """A loaded artifact: partitions compiled by their backends, run in order.

    ``allow_nonfinite`` (False unless ``load(..., allow_nonfinite=True)``): whether inputs may hold NaN or
    infinity. Refused by default: the tune checks the backends agree on random finite inputs only, and on
    non-finite ones they do not (an OpenVINO partition can turn NaN into finite numbers that look right).
    """

    def __init__(self, path: Path, manifest: JsonObject, partitions: list[LoadedPartition],
                 cleanup: Path | None = None, backends: Mapping[str, Backend] | None = None,
                 allow_nonfinite: bool = False) -> None:
        self.path = path
        self.allow_nonfinite = allow_nonfinite
        #: the backend objects running the partitions, by name
        self.backend_objects: dict[str, Backend] = dict(backends or {})
        self.manifest = manifest
        self.partitions = partitions
        self.inputs: list[TensorSpec] = [_spec(d) for d in manifest["inputs"]]
        self.outputs: list[TensorSpec] = [_spec(d) for d in manifest["outputs"]]
        self._input_specs = {s.name: s for s in self.inputs}
        self._output_names = [s.name for s in self.outputs]
        # last partition reading each tensor: intermediate tensors are dropped after it
        self._last_use: dict[str, int] = {}
        for p in partitions:
            for t in p.inputs:
                self._last_use[t] = p.index
        self._copy_out = {t: any(getattr(p.compiled, "reuses_outputs", True) for p in partitions
                                 if t in p.outputs) for t in self._output_names}
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(cleanup), True) if cleanup else None
        from collage.runtime.resident import resident_runner

        #: device-resident partitions (GPU backends loaded with device_io): run by collage.runtime.resident
        self._resident = resident_runner(self)

    def __repr__(self) -> str:
        parts = ", ".join(f"{p.backend}[{p.n_nodes}]" for p in self.partitions)
        return f"<collage.Artifact {self.path} model={self.manifest['model'].get('name')!r}: {parts}>"

    @property
    def backends(self) -> list[str]:
        return list(dict.fromkeys(p.backend for p in self.partitions))

    def close(self) -> None:
        """Remove the extraction directory of a loaded .tar.gz (also done when garbage-collected)."""
        if self._finalizer is not None:
            self._finalizer()

    # ------------------------------------------------------------------ running
    def check_feeds(self, feeds: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        """Feeds as C-contiguous arrays; InputError naming the tensor when one is missing, extra, of the wrong
        shape or dtype, or holds NaN or infinity (unless ``allow_nonfinite``); InputTypeError when ``feeds``
        is not a mapping by input name."""
        if not isinstance(feeds, Mapping):
            raise InputTypeError(f"inputs must be a dict {{input name: array}}, not a {type(feeds).__name__}: "
                                 "e.g. run({" + ", ".join(f"{s.name!r}: <{s.describe()}>" for s in self.inputs)
                                 + "})")
        extra = [n for n in feeds if n not in self._input_specs]
        if extra:
            raise InputError(f"unknown input {extra[0]!r}: the model's inputs are "
                             + ", ".join(f"{s.name!r} ({s.describe()})" for s in self.inputs))
        out: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            if spec.name not in feeds:
                raise InputError(f"missing input {spec.name!r}: expected {spec.describe()}")
            arr = feeds[spec.name]
            if not isinstance(arr, np.ndarray):
                try:
                    arr = np.asarray(arr)
                except (TypeError, ValueError) as e:
                    raise InputError(f"input {spec.name!r}: not an array ({e}); expected {spec.describe()}") from None
            if arr.dtype != spec.dtype or arr.shape != spec.shape:
                raise InputError(f"input {spec.name!r}: expected {spec.describe()}, got shape {arr.shape} "
                                 f"{arr.dtype.name}" + (f" (convert it with .astype(np.{spec.dtype.name}))"
                                                        if arr.dtype != spec.dtype else ""))
            if not self.allow_nonfinite and arr.dtype.kind in "fc" and not np.isfinite(arr).all():
                raise InputError(nonfinite_message(spec.name, arr))
            out[spec.name] = arr if arr.flags.c_contiguous else np.asarray(arr, order="C")
        return out

    def run(self, feeds: Mapping[str, npt.ArrayLike], times: list[float] | None = None) -> dict[str, np.ndarray]:
        """Run every partition in order on ``feeds``; return the graph outputs by name. With ``times`` (a list),
        each partition's call is timed and its ms appended, in order (what it costs where it runs)."""
        if self._resident is not None:  # tensors stay on the device between device partitions
            return self._resident.run_host(self.check_feeds(feeds), times)
        env: dict[str, np.ndarray] = self.check_feeds(feeds)
        keep = set(self._output_names)
        for p in self.partitions:
            try:
                if times is None:
                    result = p.compiled.run({t: env[t] for t in p.inputs})
                else:
                    pfeeds = {t: env[t] for t in p.inputs}
                    t0 = time.perf_counter_ns()
                    result = p.compiled.run(pfeeds)
                    times.append((time.perf_counter_ns() - t0) / 1e6)
            except CollageError:
                raise
            except Exception as e:
                raise CollageError(f"partition {p.index} ({p.backend}, {p.directory.name}) failed: "
                                   f"{type(e).__name__}: {e}") from e
            for t in p.outputs:
                try:
                    env[t] = result[t]
                except KeyError:
                    raise CollageError(f"partition {p.index} ({p.backend}, {p.directory.name}) returned no tensor "
                                       f"{t!r} (it returned {sorted(result)}); the artifact is inconsistent: "
                                       "re-export it") from None
            for t in p.inputs:
                if self._last_use.get(t) == p.index and t not in keep:
                    del env[t]
        return {t: (np.array(env[t], copy=True) if self._copy_out.get(t) else env[t]) for t in self._output_names}

    def run_tensors(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """``run`` on torch tensors (CUDA tensors for a GPU artifact): torch tensors out, on the artifact's device
        (:mod:`collage.runtime.resident`)."""
        from collage.runtime.resident import ResidentRunner

        return (self._resident or ResidentRunner(self, "cpu")).run_tensors(feeds)

    def graph_report(self) -> dict[str, Any] | None:
        """How a device-resident artifact runs: CUDA-graph segments and what splits them (None: a host artifact)."""
        return None if self._resident is None else self._resident.graph_report()

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random feeds of the right shapes, dtypes and index ranges: the one rule of
        :mod:`collage.seeded_inputs`, so they equal ``collage.graph.inputs.random_inputs(graph, seed)`` of the tuned
        model (for artifacts whose manifest records index ranges)."""
        return seeded_inputs([InputSpec(s.name, s.shape, s.dtype, s.high) for s in self.inputs], seed)

    def latency_ms(self, feeds: Mapping[str, npt.ArrayLike], repeat: int = 20, warmup: int = 3) -> list[float]:
        """Wall-clock times (ms) of ``repeat`` runs after ``warmup`` runs."""
        return timed_runs(self.run, self.check_feeds(feeds), repeat, warmup)

    def boundary_overhead(self, feeds: Mapping[str, npt.ArrayLike] | None = None, repeat: int = 20,
                          warmup: int = 3) -> BoundaryOverhead:
        """Measure the per-boundary overhead of stitching, interleaving all timings (medians)."""
        feeds = self.check_feeds(feeds if feeds is not None else self.random_inputs())
        env = dict(feeds)
        for p in self.partitions:  # capture every partition's inputs once
            env.update(p.compiled.run({t: env[t] for t in p.inputs}))
        pfeeds = [{t: env[t] for t in p.inputs} for p in self.partitions]
        n = len(self.partitions)

        def timed(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter_ns()
            fn()
            return (time.perf_counter_ns() - t0) / 1e6

        def pair(k: int) -> None:
            a, b = self.partitions[k], self.partitions[k + 1]
            out = a.compiled.run(pfeeds[k])
            b.compiled.run({t: out[t] if t in out else pfeeds[k + 1][t] for t in b.inputs})

        stitched: list[float] = []
        parts: list[list[float]] = [[] for _ in range(n)]
        pairs: list[list[float]] = [[] for _ in range(n - 1)]
        chain = PartitionTimes(self, feeds)
        for r in range(warmup + repeat):
            s = timed(chain)
            ps = [timed(functools.partial(p.compiled.run, f)) for p, f in zip(self.partitions, pfeeds)]
            qs = [timed(functools.partial(pair, k)) for k in range(n - 1)]
            if r >= warmup:
                stitched.append(s)
                for k in range(n):
                    parts[k].append(ps[k])
                for k in range(n - 1):
                    pairs[k].append(qs[k])
        med = [float(np.median(x)) for x in parts]
        per = [float(np.median(pairs[k])) - med[k] - med[k + 1] for k in range(n - 1)]
        return BoundaryOverhead(float(np.median(stitched)), med, per, repeat, chain.medians(skip=warmup))


class PartitionTimes:
    """Runs of an artifact that keep each partition's call time (``Artifact.run(feeds, times)``): calling it runs
    the artifact once on ``feeds``; :meth:`medians` is each partition's median over the runs kept (the first
    ``skip`` left out; :meth:`clear` drops those so far, e.g. a warm-up's)."""

    def __init__(self, artifact: Artifact, feeds: Mapping[str, npt.ArrayLike]) -> None:
        self.artifact, self.feeds = artifact, feeds
        self.runs: list[list[float]] = []

    def __call__(self) -> None:
        got: list[float] = []
        self.artifact.run(self.feeds, got)
        self.runs.append(got)

    def clear(self) -> None:
        self.runs.clear()

    def medians(self, skip: int = 0) -> list[float]:
        kept = self.runs[skip:]
        return [float(np.median([r[k] for r in kept])) for k in range(len(self.artifact.partitions))]


# ---------------------------------------------------------------------- loading
#: the most an archive's manifest.json, plan.json or report.json may unpack to (the manifest declares no size
#: for them; a partition file must have the size the manifest declares for it)
META_MAX_BYTES = 64 << 20
_TAR_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error)


def _safe_extract(archive: Path, dest: Path) -> Path:
    """Unpack the artifact in ``archive`` under ``dest``; return its root. Every member is checked first (no
    absolute path, no ``..``, no link leading out, nothing but files, folders and links); then the manifest
    alone is unpacked and checked (:func:`read_manifest`), and of the rest only what it lists: each partition's
    files, of the sizes it declares, and plan.json / report.json (at most ``META_MAX_BYTES`` each). A member it
    does not list is never unpacked (a warning names it), so what lands in TMPDIR is bounded by the manifest."""
    try:
        tar = tarfile.open(archive, "r:*")
    except _TAR_ERRORS as e:
        why = "; ".join(line.strip("- ") for line in str(e).splitlines() if line.strip())  # tarfile lists each method
        raise ArtifactError(f"{archive}: not a readable .tar.gz artifact ({why})") from None
    with tar:
        try:
            members = tar.getmembers()
        except _TAR_ERRORS as e:
            raise ArtifactError(f"{archive}: truncated or damaged archive ({type(e).__name__}: {e}); copy it "
                                "again or re-export the artifact") from None
        for m in members:
            _check_member(archive, m)
        prefix = _manifest_prefix(archive, members)
        wanted: set[PurePosixPath] = set()
        try:
            _unpack_listed(tar, archive, members, dest, prefix, wanted)
        except _TAR_ERRORS as e:
            raise ArtifactError(f"{archive}: cannot extract ({e}); refused") from None
        skipped = [m.name for m in members if not m.isdir() and PurePosixPath(m.name) not in wanted]
        if skipped:
            log.warning("%s: %d member(s) its %s does not list left packed (%s%s)", archive, len(skipped), MANIFEST,
                        ", ".join(map(repr, skipped[:3])), ", ..." if len(skipped) > 3 else "")
    return dest / prefix


def _unpack_listed(tar: tarfile.TarFile, archive: Path, members: list[tarfile.TarInfo], dest: Path,
                   prefix: PurePosixPath, wanted: set[PurePosixPath], nested: bool = False) -> None:
    """Unpack the manifest at ``prefix``, check it, then what it lists (``wanted`` gathers the names); a
    multi-size manifest (collage.runtime.multisize) lists artifacts of their own and the dynamic model."""
    from collage.runtime.multisize import DYNAMIC_DIR, is_multi_size, read_multi_manifest

    tar.extractall(dest, members=[_only(archive, members, prefix / MANIFEST, META_MAX_BYTES)], filter="data")
    wanted.add(prefix / MANIFEST)
    if not nested and is_multi_size(dest / prefix):
        multi = read_multi_manifest(dest / prefix)
        for s in multi["sizes"]:
            _unpack_listed(tar, archive, members, dest, prefix / s["dir"], wanted, nested=True)
        f = multi["dynamic"]["files"][0]
        name = prefix / multi["dynamic"].get("dir", DYNAMIC_DIR) / f["name"]
        if name in {PurePosixPath(m.name) for m in members}:  # a missing one is named by the loader
            tar.extractall(dest, members=[_only(archive, members, name, None, f.get("bytes"))], filter="data")
            wanted.add(name)
        return
    chosen = _listed(archive, members, prefix, read_manifest(dest / prefix / MANIFEST))
    tar.extractall(dest, members=chosen, filter="data")
    wanted.update(PurePosixPath(m.name) for m in chosen)


def _check_member(archive: Path, m: tarfile.TarInfo) -> None:
    name = PurePosixPath(m.name)
    if m.name.startswith(("/", "\\")) or name.is_absolute() or (len(m.name) > 1 and m.name[1] == ":"):
        raise ArtifactError(f"{archive}: member {m.name!r} has an absolute path; refused (unsafe archive)")
    if ".." in name.parts:
        raise ArtifactError(f"{archive}: member {m.name!r} points outside the artifact ('..'); "
                            "refused (unsafe archive)")
    if m.issym() or m.islnk():
        target = PurePosixPath(m.linkname)
        resolved = (name.parent / target) if m.issym() else target
        depth = 0
        for part in resolved.parts:
            depth += -1 if part == ".." else (0 if part == "." else 1)
            if depth < 0:
                break
        if target.is_absolute() or depth < 0:
            raise ArtifactError(f"{archive}: member {m.name!r} is a link to {m.linkname!r}, outside the "
                                "artifact; refused (unsafe archive)")
    elif not (m.isfile() or m.isdir()):
        raise ArtifactError(f"{archive}: member {m.name!r} is not a regular file or directory; refused")


def _manifest_prefix(archive: Path, members: list[tarfile.TarInfo]) -> PurePosixPath:
    """The artifact's folder inside the archive: its top, or its single top-level folder, with a manifest.json."""
    names = {PurePosixPath(m.name) for m in members if m.isfile()}
    if PurePosixPath(MANIFEST) in names:
        return PurePosixPath()
    tops = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
    if len(tops) == 1 and PurePosixPath(next(iter(tops)), MANIFEST) in names:
        return PurePosixPath(next(iter(tops)))
    raise ArtifactError(f"{archive}: archive holds no {MANIFEST} at its top or in a single top-level folder; "
                        "not a collage artifact")


def _only(archive: Path, members: list[tarfile.TarInfo], name: PurePosixPath, most: int | None,
          declared: int | None = None) -> tarfile.TarInfo:
    """The (last) member called ``name``: a regular file of ``declared`` bytes, or at most ``most``."""
    m = [m for m in members if PurePosixPath(m.name) == name][-1]
    if not m.isfile():
        raise ArtifactError(f"{archive}: member {m.name!r} is not a regular file (an artifact's files are); refused")
    if declared is not None and m.size != declared:
        raise ArtifactError(f"{archive}: member {m.name!r} holds {m.size} bytes, {MANIFEST} declares {declared}; "
                            "refused (the archive was changed: copy it again or re-export the artifact)")
    if most is not None and m.size > most:
        raise ArtifactError(f"{archive}: member {m.name!r} holds {m.size} bytes, more than the {most} a "
                            f"{name.name} may; refused")
    return m


def _listed(archive: Path, members: list[tarfile.TarInfo], prefix: PurePosixPath,
            manifest: JsonObject) -> list[tarfile.TarInfo]:
    """The members to unpack after the manifest: what it lists (checked by :func:`_only`), nothing else."""
    sizes: dict[PurePosixPath, tuple[int | None, int | None]] = {
        prefix / manifest.get(key, default): (META_MAX_BYTES, None)
        for key, default in (("plan", PLAN_FILE), ("report", REPORT_FILE))}
    for part in manifest["partitions"]:
        for f in part["files"]:
            sizes[prefix / part["dir"] / f["name"]] = (None, f.get("bytes"))
    present = {PurePosixPath(m.name) for m in members}
    return [_only(archive, members, name, *limits) for name, limits in sizes.items() if name in present]


def is_archive(path: str | os.PathLike[str]) -> bool:
    src = Path(path)
    return src.is_file() and (src.name.endswith((".tar.gz", ".tgz", ".tar")) or tarfile.is_tarfile(src))


@contextlib.contextmanager
def artifact_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The artifact directory of ``path``: itself, or for a ``.tar.gz`` a temporary extraction (checked like
    ``load`` does: no absolute paths, links or members outside it), removed when the block ends. For every
    command that reads an artifact (report, annotate, ...)."""
    src = Path(path)
    if not is_archive(src):
        yield src
        return
    tmp = Path(tempfile.mkdtemp(prefix="collage-artifact-"))
    try:
        yield _safe_extract(src, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verify_files(root: Path, manifest: JsonObject) -> None:
    """Check each partition's listed files before anything opens them: inside the artifact (no absolute
    path, no ``..``, no symbolic link leading out), regular files, and of the recorded sha256.
    ArtifactError naming the first file that is missing, outside or changed."""
    real_root = os.path.realpath(root)
    for part in manifest["partitions"]:
        names = partition_files(root, manifest, part)
        for name in names:
            path = root / part["dir"] / name
            real = os.path.realpath(path)
            if os.path.commonpath([real_root, real]) != real_root or real == real_root:
                raise ArtifactError(f"{path}: listed in {root / MANIFEST} for partition {part['index']} but leads "
                                    f"outside the artifact (to {real}); refused: an artifact's files lie inside it")
            if not os.path.isfile(real):
                raise ArtifactError(f"{path}: missing (listed in {root / MANIFEST} for partition {part['index']}); "
                                    "the artifact is incomplete: copy it again or re-export it")
        for f in part["files"]:
            path = root / part["dir"] / f["name"]
            digest = sha256_file(path)
            if digest != f["sha256"]:
                raise ArtifactError(f"{path}: checksum mismatch (sha256 {digest[:16]}..., manifest says "
                                    f"{str(f['sha256'])[:16]}...); the file was changed or corrupted: copy the "
                                    "artifact again or re-export it")


def partition_files(root: Path, manifest: JsonObject, part: Mapping[str, Any]) -> list[str]:
    """The ONE list of a partition's files (``part["files"]``, each with its checksum): the only files its
    backend may open. An ``entry["files"]`` (written by collage before this list was the only one) must name
    exactly the same files; ArtifactError naming the first file listed in one and not the other."""
    names = [str(f["name"]) for f in part["files"]]
    if len(set(names)) != len(names):
        raise ArtifactError(f"{root / MANIFEST}: partition {part['index']} lists a file twice; refused")
    legacy = part["entry"].get("files") if isinstance(part.get("entry"), Mapping) else None
    if legacy is not None:
        if not isinstance(legacy, list) or [str(n) for n in legacy] != names:
            odd = next((n for n in (legacy if isinstance(legacy, list) else [legacy]) if str(n) not in names), None)
            odd = odd if odd is not None else next((n for n in names if n not in map(str, legacy or [])), legacy)
            raise ArtifactError(f"{root / MANIFEST}: partition {part['index']}'s entry names file {str(odd)!r}, which "
                                f"its checked file list {names} does not hold (or not in that order); refused: the "
                                "manifest was edited or is corrupted: re-export the artifact")
    return names


def _make_backend(name: str, info: Mapping[str, Any], root: Path, overrides: Mapping[str, Any] | None = None
                  ) -> Backend:
    """The backend as it was tuned: get_backend(name, **options), with the recorded settings that are
    constructor parameters (thread count, precision...) filled in, then ``overrides`` on top."""
    from collage.backends import get_backend

    options = dict(info.get("options") or {})
    try:
        b = get_backend(name, **options)
        params = inspect.signature(type(b).__init__).parameters
        settings = {k: v for k, v in (info.get("settings") or {}).items() if k in params and k not in options}
        if settings or overrides:
            b = get_backend(name, **{**settings, **options, **dict(overrides or {})})
    except BackendUnavailable as e:  # its runtime is not installed: the message says what to pip install
        raise BackendUnavailable(f"{root}: needs backend {name!r}: {e}") from e
    except CollageError:
        raise
    except Exception as e:
        raise BackendUnavailable(f"{root / MANIFEST}: backend {name!r} cannot be created here with options "
                                 f"{options} ({type(e).__name__}: {e})") from e
    return b


def _backends(manifest: JsonObject, root: Path, check_versions: bool,
              backend_options: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Backend]:
    out = {}
    for name, info in manifest["backends"].items():
        b = _make_backend(name, info, root)
        reason = b.available()
        if reason:
            raise BackendUnavailable(f"{root}: needs backend {name!r}, which cannot run here: {reason}")
        have, want = b.version(), str(info.get("version"))
        if have != want:
            msg = (f"{root}: backend {name!r} version mismatch: the artifact was tuned with {want!r}, this "
                   f"machine has {have!r}. Install the {name} version it was tuned with to run the plan as "
                   f"tuned, or re-tune the model on this version with `collage tune`")
            if check_versions:
                raise ArtifactError(msg + "; to run anyway pass check_versions=False (CLI --ignore-version-mismatch)")
            log.warning("%s; running anyway (version check disabled)", msg)
        judged = info.get("int8_kernels")  # a backend outside collage.backends.base.Backend may not say
        here = b.int8_kernels() if judged and hasattr(b, "int8_kernels") else None
        if judged and here and judged != here:
            log.warning("%s: backend %r: its int8 error was judged within the accuracy budget on a CPU with %s int8 "
                        "kernels; this CPU runs %s ones, which round differently and can be further off: check its "
                        "outputs here, or re-tune on this CPU class", root, name, INT8_KERNEL_WORDS.get(judged, judged),
                        INT8_KERNEL_WORDS.get(here, here))
        if backend_options and name in backend_options:
            b = _make_backend(name, info, root, backend_options[name])
            log.info("%s: running %s as %s (overridden options)", root, name, b.version())
        out[name] = b
    return out


def load(path: str | os.PathLike[str], *, check_versions: bool = True,
         backend_options: Mapping[str, Mapping[str, Any]] | None = None, allow_nonfinite: bool = False,
         device_resident: bool | None = None) -> Artifact | MultiSizeArtifact:
    """Load an artifact directory or ``.tar.gz`` (see the module docstring for what is checked); a multi-size
    artifact gives a :class:`collage.runtime.multisize.MultiSizeArtifact` (the same API, dispatching by size).

    Backends are created as they were tuned (same options and recorded settings, e.g. thread
    count); ``backend_options={"openvino": {"threads": 8}}`` overrides settings after the version
    check (the plan was measured with the recorded ones). ``allow_nonfinite=True`` lets inputs hold NaN or
    infinity (refused by default: :class:`Artifact`). ``device_resident`` (None: for GPU backends) loads partitions
    with ``device_io`` so that tensors stay on the device between them (:mod:`collage.runtime.resident`).
    """
    src = Path(path)
    cleanup: Path | None = None
    if src.is_file() and (src.suffix in (".gz", ".tgz", ".tar") or tarfile.is_tarfile(src)):
        cleanup = Path(tempfile.mkdtemp(prefix="collage-artifact-"))
        try:
            root = _safe_extract(src, cleanup)
        except BaseException:
            shutil.rmtree(cleanup, ignore_errors=True)
            raise
    else:
        root = src
    try:
        from collage.runtime.multisize import is_multi_size, load_multi_size

        if is_multi_size(root):  # one plan per tuned input size (collage.runtime.multisize): same API
            return load_multi_size(root, functools.partial(load, check_versions=check_versions,
                                                           backend_options=backend_options,
                                                           allow_nonfinite=allow_nonfinite), cleanup)
        manifest = read_manifest(root)
        verify_files(root, manifest)
        from collage.runtime.resident import resident_options

        backend_options = resident_options(manifest, backend_options, device_resident)
        backends = _backends(manifest, root, check_versions, backend_options)
        parts = []
        for part in manifest["partitions"]:
            pdir = root / part["dir"]
            # the backend opens the checked list and nothing else (verify_files above checked every file)
            entry = {**part["entry"], "files": partition_files(root, manifest, part)}
            try:
                compiled = backends[part["backend"]].load(pdir, entry)
            except CollageError:
                raise
            except UnicodeError as e:  # a tensor name in its files that is not UTF-8 (the tune refuses such models)
                raise ArtifactError(f"{pdir}: backend {part['backend']!r} cannot load this partition: a name in its "
                                    f"files is not valid UTF-8 text ({e}); re-export the artifact") from e
            except Exception as e:
                raise ArtifactError(f"{pdir}: backend {part['backend']!r} cannot load this partition "
                                    f"({type(e).__name__}: {e}); re-export the artifact") from e
            parts.append(LoadedPartition(int(part["index"]), part["backend"], pdir, list(part["inputs"]),
                                         list(part["outputs"]), compiled, len(part["nodes"]), part.get("cost_ms")))
        return Artifact(root, manifest, parts, cleanup, backends, allow_nonfinite)
    except BaseException:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
        raise
