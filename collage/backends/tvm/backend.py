"""Apache TVM (relax) on CPU: the ONNX frontend, LLVM code for this host, optional MetaSchedule tuning.

    TVMBackend()                                            # untuned: naive loops, 30-600x slower than ORT
    TVMBackend(tuning="metaschedule", trials=64, tuning_db="tvm-db/")   # tunes each new TIR workload

The target is ``{"kind": "llvm", "mcpu": <this host's LLVM cpu name>, "num-cores": physical_cores()}``
(``mcpu="native"`` silently means generic code in TVM 0.27, so the name is detected). Support checks
and compiles run in a long-lived worker process (:mod:`collage.backends.tvm.worker`): TVM can abort
the process on some inputs, and a crash there gives ``False`` / ``CompileError`` here, never a dead
caller. ``isolate=False`` compiles in this process instead (faster to debug, no crash protection).
``dlight=True`` applies dlight's CPU rules (GEMV, Reduction) to unscheduled functions; off by default:
on softmax, LayerNorm, ReduceSum/Mean, GlobalAveragePool, MatMul and Gemm(transB) vectors it left
every function unchanged (measured with TVM 0.27), so it only cost compile time.

MetaSchedule: every compile tunes the TIR workloads of its subgraph that the database directory has
not seen tuned with at least ``trials`` measured candidates, then applies the database. The directory
is shared by all candidates and runs (identical blocks and re-runs tune nothing); processes sharing
it take turns through a file lock. Default: ``cache_dir()/tvm-metaschedule/<machine>-<mcpu>-<threads>c-<tvm version>``.

``Compiled.run`` copies the feeds into 64-byte aligned TVM tensors bound to the VM once (``from_dlpack``
would need 64-byte aligned inputs; numpy's are 16-byte aligned) and returns numpy views of the VM's
fresh output tensors: an output is never overwritten by a later call (``reuses_outputs`` is False);
one that would alias an input buffer is copied.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from collage.backends import handover
from collage.backends.base import Backend, Compiled, one_line
from collage.backends.options import takes_options
from collage.backends.tvm.options import BuildOptions
from collage.backends.tvm.worker import (
    ABORT_ENV,
    Refused,
    WorkerCrashed,
    WorkerTimeout,
    worker,
)
from collage.errors import (
    ArtifactError,
    CollageError,
    CompileError,
    ModelError,
    UnsupportedError,
)
from collage.util import cache_dir, machine_id, thread_count

log = logging.getLogger(__name__)

TUNING_MODES = ("none", "metaschedule")
LIB_FILE = "tvm_lib.so"
META_FILE = "tvm_io.json"


@functools.cache
def _tvm_import_error() -> str | None:
    try:
        import tvm
        from tvm import relax  # noqa: F401
        from tvm.relax.frontend.onnx import from_onnx  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken native library
        return f"apache-tvm cannot be imported ({type(e).__name__}: {e}); pip install 'collage[tvm]'"
    if not tvm.__version__.startswith("0.27"):
        return f"apache-tvm {tvm.__version__} is installed; collage needs 0.27 (pip install 'apache-tvm>=0.27,<0.28')"
    from tvm.support import cc

    if cc.get_cc() is None:
        return "no C/C++ compiler found to link TVM libraries (install g++ or set $CXX)"
    return None


@functools.cache
def host_mcpu() -> str | None:
    """LLVM's name for this host's CPU (e.g. ``emeraldrapids``), or None when LLVM only knows generic."""
    import tvm

    name = str(tvm.target.codegen.llvm_get_system_cpu() or "")
    return None if name in ("", "generic") else name


@functools.cache
def _versions() -> str:
    import tvm
    import tvm_ffi

    return f"tvm-{tvm.__version__}+ffi-{tvm_ffi.__version__}"


class TVMCompiled(Compiled):
    """A compiled partition: a relax VM over an LLVM library, inputs bound once."""

    backend = "tvm"
    reuses_outputs = False

    def __init__(self, module: Any, meta: Mapping[str, Any], lib_path: Path | None) -> None:
        import tvm
        from tvm import relax

        self.meta = dict(meta)
        self.input_names = [t["name"] for t in meta["inputs"]]
        self.output_names = [t["name"] for t in meta["outputs"]]
        self.tuning: dict[str, Any] = dict(meta.get("tuning") or {})
        self._module = module  # an Executable (in-process) or a loaded runtime module
        self._lib_path = lib_path
        device = tvm.cpu()
        self._tensor_type = tvm.runtime.Tensor
        self._vm = relax.VirtualMachine(module, device)
        self._inputs = [tvm.runtime.empty(tuple(t["shape"]), t["dtype"], device) for t in meta["inputs"]]
        self._views = [np.from_dlpack(t) for t in self._inputs]
        self._spans = [(v.ctypes.data, v.ctypes.data + v.nbytes) for v in self._views]
        self._vm.set_input("main", *self._inputs)
        self._out_shapes = [tuple(t["shape"]) if t.get("shape") is not None else None for t in meta["outputs"]]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        handover.run_on("tvm")
        for name, view in zip(self.input_names, self._views):
            try:
                value = feeds[name]
            except KeyError:
                raise ModelError(f"tvm: no value fed for input {name!r} (inputs: {self.input_names})") from None
            if value.shape != view.shape or value.dtype != view.dtype:
                raise ModelError(f"tvm: input {name!r} must be {view.dtype}{list(view.shape)}, got "
                                 f"{value.dtype}{list(value.shape)}")
            np.copyto(view, value)
        self._vm.invoke_stateful("main")
        result = self._vm.get_outputs("main")
        tensors = (result,) if isinstance(result, self._tensor_type) else result
        out = {}
        for name, tensor, want in zip(self.output_names, tensors, self._out_shapes):
            array = np.from_dlpack(tensor)
            if want is not None and tuple(array.shape) != want:
                raise CollageError(f"tvm: output {name!r} came back with shape {tuple(array.shape)}, the partition "
                                   f"declares {want}; run this part of the model on another backend")
            start = array.ctypes.data
            if any(lo <= start < hi for lo, hi in self._spans):  # an input buffer the next call overwrites
                array = array.copy()
            out[name] = array
        return out

    def save(self, directory: Path) -> dict[str, Any]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        lib = directory / LIB_FILE
        if self._lib_path is not None:
            shutil.copyfile(self._lib_path, lib)
        else:
            self._module.export_library(str(lib))
        meta = {k: self.meta[k] for k in ("inputs", "outputs")}
        meta.update(tuning=self.tuning, versions=_versions())
        (directory / META_FILE).write_text(json.dumps(meta, indent=1))
        return {"files": [LIB_FILE, META_FILE], "inputs": self.input_names, "outputs": self.output_names}


@dataclass(frozen=True)
class TVMOptions:
    """The TVM backend's constructor options (``--backend-option tvm.NAME=VALUE``; the module docstring says
    what tuning, ``isolate`` and ``dlight`` do). ``mcpu`` None: this host's; ``threads`` None: its physical
    cores; ``compile_timeout_s`` None: the worker's default."""

    tuning: str = "none"
    trials: int = 64
    tuning_db: str | os.PathLike | None = None
    isolate: bool = True
    dlight: bool = False
    mcpu: str | None = None
    threads: int | None = None
    check_timeout_s: float = 600.0
    compile_timeout_s: float | None = None
    seed: int | None = None


class TVMBackend(Backend):
    """Apache TVM relax on the host CPU (see the module docstring)."""

    name = "tvm"
    device = "cpu"

    @takes_options(TVMOptions)
    def __init__(self, options: TVMOptions) -> None:
        o = options
        if o.tuning not in TUNING_MODES:
            raise CollageError(f"tvm: unknown tuning mode {o.tuning!r}; choose one of {', '.join(TUNING_MODES)}")
        if o.trials < 1:
            raise CollageError(f"tvm: trials must be at least 1, not {o.trials}")
        self.tuning = o.tuning
        self.trials = int(o.trials)
        self._tuning_db = Path(o.tuning_db) if o.tuning_db is not None else None
        self.isolate = o.isolate
        self.dlight = o.dlight
        self._mcpu = o.mcpu
        self.threads = thread_count(o.threads)
        self.check_timeout_s = o.check_timeout_s
        self.compile_timeout_s = o.compile_timeout_s
        self.seed = o.seed

    # ------------------------------------------------------------------ identity
    def available(self) -> str | None:
        return _tvm_import_error()

    @property
    def mcpu(self) -> str | None:
        return self._mcpu if self._mcpu is not None else host_mcpu()

    @property
    def tuning_db(self) -> Path | None:
        if self.tuning != "metaschedule":
            return None
        if self._tuning_db is not None:
            return self._tuning_db
        # keyed by machine and TVM version: records of another CPU or TVM build would mislead the search
        key = f"{machine_id()}-{self.mcpu or 'generic'}-{self.threads}c-{_versions()}"
        return cache_dir() / "tvm-metaschedule" / re.sub(r"[^A-Za-z0-9.+-]+", "_", key)

    def _tuning_label(self) -> str:
        return f"metaschedule-{self.trials}" if self.tuning == "metaschedule" else "untuned"

    def version(self) -> str:
        return (f"{_versions()}|llvm-{self.mcpu or 'generic'}-{self.threads}c|{self._tuning_label()}"
                f"{'|dlight' if self.dlight else ''}")

    @property
    def options(self) -> dict[str, Any]:
        return {"precision": self.precision, "tuning": self.tuning, "trials": self.trials, "mcpu": self.mcpu,
                "threads": self.threads, "dlight": self.dlight}

    def build_options(self) -> BuildOptions:
        db = self.tuning_db
        return BuildOptions(mcpu=self.mcpu, num_cores=self.threads, tuning=self.tuning, trials=self.trials,
                            tuning_db=str(db) if db is not None else None, dlight=self.dlight, seed=self.seed,
                            abort_on=os.environ.get(ABORT_ENV) or None)

    # ------------------------------------------------------------------ support
    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        from collage.backends.support import uncarried_type

        reason = uncarried_type(model) or _wrong_form(model)  # DLPack refuses those types at run time
        if reason is not None:
            return reason
        options = self.build_options()
        if not self.isolate:
            from collage.backends.tvm import worker as tvm_worker

            return tvm_worker.check(model, options)
        try:
            status, *rest = worker().request(("check", model.SerializeToString(), options), self.check_timeout_s)
        except WorkerCrashed as e:  # the converter crashes on this node: a "no" (it crashes again, see tests)
            return str(e)
        # WorkerTimeout propagates: a slow answer is no refusal (support_reasons does not cache it)
        if status == "ok":
            return rest[0]
        return rest[-1] if status == "refused" else f"{rest[0]}: {rest[1]}"

    # ------------------------------------------------------------------ compile
    def compile(self, model: onnx.ModelProto) -> TVMCompiled:
        from collage.backends.support import uncarried_type

        reason = uncarried_type(model) or _wrong_form(model)
        if reason is not None:
            raise UnsupportedError(f"tvm cannot take model {model.graph.name!r}: {reason}")
        options = self.build_options()
        what = f"model {model.graph.name!r} ({len(model.graph.node)} nodes)"
        if not self.isolate:
            from collage.backends.tvm import worker as tvm_worker

            try:
                executable, meta = tvm_worker.build(model, options)
            except Refused as e:
                raise self._refused(model, e.op, e.node, e.message) from e
            except Exception as e:  # noqa: BLE001 - explained by raise_compile_error
                self.raise_compile_error(model, e)
            return TVMCompiled(executable, meta, None)
        scratch = Path(tempfile.mkdtemp(prefix="collage-tvm-"))
        lib = scratch / LIB_FILE
        try:
            status, *rest = worker().request(("build", model.SerializeToString(), options, str(lib)),
                                             self.compile_timeout_s)
        except (WorkerCrashed, WorkerTimeout) as e:
            shutil.rmtree(scratch, ignore_errors=True)
            raise CompileError(f"tvm failed to compile {what}: {e}") from e
        if status != "ok":
            shutil.rmtree(scratch, ignore_errors=True)
            if status == "refused":
                raise self._refused(model, *rest)
            self.raise_compile_error(model, CompileError(f"{rest[0]}: {one_line(rest[1])}"))
        compiled = _load(lib, rest[0])
        weakref.finalize(compiled, shutil.rmtree, scratch, True)
        return compiled

    def _refused(self, model: onnx.ModelProto, op: str, node: str, message: str) -> UnsupportedError:
        return UnsupportedError(f"tvm cannot take op {op} (node {node!r} of model {model.graph.name!r}): "
                                f"{message}; run that node on another backend")

    def load(self, directory: Path, entry: Mapping[str, Any]) -> TVMCompiled:
        directory = Path(directory)
        listed = [str(f) for f in entry.get("files") or []]
        for name in (META_FILE, LIB_FILE):  # never read, let alone dlopen, a file the manifest does not list
            if name not in listed:
                raise ArtifactError(f"{directory / name}: not in the partition's checked file list {listed}; refused "
                                    "(a TVM partition's library is native code: it is loaded only when listed and "
                                    "its checksum matches): re-export the artifact")
        meta_path = directory / META_FILE
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as e:
            raise ArtifactError(f"{meta_path}: cannot read the TVM partition's metadata ({e})") from e
        if meta.get("versions") != _versions():
            log.warning("%s was built with %s, this process runs %s", directory, meta.get("versions"), _versions())
        return _load(directory / LIB_FILE, meta)

    def close(self) -> None:
        """Nothing to release per instance: the worker is shared by the process (stopped at exit)."""

    def __repr__(self) -> str:
        return f"<TVMBackend {self._tuning_label()} llvm-{self.mcpu or 'generic'}>"


def _wrong_form(model: onnx.ModelProto) -> str | None:
    """Node forms TVM's ONNX frontend computes wrongly (found by ONNX's backend tests through collage)."""
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        label = f"(node {node.name or node.output[0]!r})"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "BatchNormalization" and attrs.get("training_mode", 0):
            # test_batchnorm_epsilon_training_mode: normalised with the running statistics instead of the batch's
            return f"op BatchNormalization {label} with training_mode=1: tvm computes it wrongly; run it elsewhere"
        if node.op_type == "Mod":
            # test_mod_float_edge_cases_fmod_0_float32: inf / nan operands give nan where ONNX gives values
            return f"op Mod {label}: tvm mishandles inf, nan and signed-zero operands; run it elsewhere"
        if node.op_type == "LayerNormalization" and any(node.output[1:]):
            # test_layer_normalization_*: Mean / InvStdDev come back empty
            return (f"op LayerNormalization (node {node.name or node.output[0]!r}) with its Mean/InvStdDev outputs: "
                    "tvm returns them empty; run that node on another backend")
    return None


def _load(lib: Path, meta: Mapping[str, Any]) -> TVMCompiled:
    import tvm

    if not lib.is_file():
        raise ArtifactError(f"{lib}: TVM library missing; re-export the artifact")
    try:
        module = tvm.runtime.load_module(str(lib))
    except Exception as e:  # noqa: BLE001 - a corrupt or foreign .so
        raise ArtifactError(f"{lib}: cannot load the TVM library ({type(e).__name__}: {one_line(str(e))})") from e
    return TVMCompiled(module, meta, lib)
