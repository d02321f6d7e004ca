"""ONNX Runtime's runtime side: the lazy import, the process-wide intra-op pool, plain sessions
(:func:`make_session`) and a compiled partition (``OrtCompiled``).

Kept apart from :mod:`collage.backends.onnxruntime.backend` (the Backend: settings, support, compile with
residual routing, load) so that the linker (:mod:`collage.backends.onnxruntime.link`), which builds
``OrtCompiled`` objects, and the backend, which calls the linker, do not import each other: what they ask of
the backend is a Protocol (``SessionSettings`` here, ``link.Linkable``). The shared pool and its side
effect are described in the backend's module docstring.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from collage.backends import handover
from collage.backends.base import Compiled
from collage.errors import ArtifactError, BackendUnavailable, CollageError, TransientError
from collage.util import physical_cores, sha256_bytes

if TYPE_CHECKING:
    import onnx  # annotations only: sessions are built from files/bytes, loading never imports onnx

log = logging.getLogger(__name__)


class SessionSettings(Protocol):
    """What a compiled partition asks of the backend that made it (``OnnxRuntimeBackend`` and its CUDA
    subclass): its name, version and options for the artifact entry, its SessionOptions to save with."""

    name: str

    @property
    def options(self) -> dict[str, Any]: ...

    def version(self) -> str: ...

    def session_options(self, opt_level: str | None = None, model: Any = None) -> Any: ...


#: the session config entry that makes ONNX Runtime compute a fused DequantizeLinear + MatMul (MatMulNBits) in fp32,
#: not on activations quantized to int8 (collage.backends.onnxruntime.backend's module doc)
FP32_DQ_MATMUL = ("session.qdq_matmulnbits_accuracy_level", "1")

_pool_lock = threading.Lock()
_global_pool_threads: int | None = None  # set once per process


def onnxruntime_module():  # lazy import: importing collage.backends never loads a runtime
    try:
        import onnxruntime
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendUnavailable("onnxruntime is not installed: pip install onnxruntime") from e
    return onnxruntime


def global_pool_threads() -> int | None:
    """Threads of the process-wide ONNX Runtime pool, or None while it does not exist."""
    return _global_pool_threads


def _thread_ids() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:  # not Linux: no per-thread priorities to set
        return set()


def ensure_global_pool(threads: int, nice: int = 0, park: bool = True) -> None:
    """Create the process-wide pool (once); ``nice`` > 0 lowers its worker threads' scheduling priority
    (Linux, per thread: ``setpriority`` on each worker's thread id; see the backend's module docstring);
    ``park``: its workers are parked while another runtime runs (:mod:`collage.backends.handover`)."""
    global _global_pool_threads
    with _pool_lock:
        if _global_pool_threads is None:
            from onnxruntime.capi import _pybind_state

            before = _thread_ids()
            _pybind_state.set_global_thread_pool_sizes(threads, 1)  # starts the pool's workers now
            workers = _thread_ids() - before
            if nice > 0:
                for tid in workers:
                    try:
                        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
                    except OSError as e:  # the thread ended, or no such call here: run at normal priority
                        log.debug("onnxruntime: cannot lower the priority of pool thread %d: %s", tid, e)
            if park:
                handover.register("onnxruntime", workers)
            _global_pool_threads = threads
            _adopt_plain_sessions(onnxruntime_module())
            log.debug("onnxruntime: process-wide pool of %d intra-op threads", threads)
        elif _global_pool_threads != threads:
            raise TransientError(  # the process's state, not the model's: a support check must not cache it
                f"onnxruntime: this process already has a shared pool of {_global_pool_threads} threads; a backend "
                f"asking for {threads} must run in another process (or pass shared_pool=False)")


def _adopt_plain_sessions(ort: Any) -> None:
    """Make ``InferenceSession`` put sessions that ask for their own pool on the shared one (see module doc),
    and wake the pool's parked workers before a session is made or run (:mod:`collage.backends.handover`)."""
    cls = ort.InferenceSession
    original = cls.__init__
    if getattr(original, "_collage_shared_pool", False):
        return

    def __init__(self, path_or_bytes, sess_options=None, *args, **kwargs):  # noqa: ANN001 - mirrors ORT
        if sess_options is None:
            sess_options = ort.SessionOptions()
        if sess_options.use_per_session_threads:
            log.debug("onnxruntime: moving a session that asked for its own thread pool onto the shared pool")
            sess_options.use_per_session_threads = False
            sess_options.intra_op_num_threads = 0
            sess_options.inter_op_num_threads = 0
        handover.run_on("onnxruntime")  # creating a session may use the pool: its workers must be awake
        original(self, path_or_bytes, sess_options, *args, **kwargs)

    __init__._collage_shared_pool = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__

    run = cls.run

    def run_waking(self, *args, **kwargs):  # noqa: ANN001, ANN202 - mirrors ORT
        handover.run_on("onnxruntime")  # the shared pool's workers, parked while another runtime ran
        return run(self, *args, **kwargs)

    run_waking.__wrapped__ = run  # type: ignore[attr-defined]
    cls.run = run_waking


def make_session(model: onnx.ModelProto | bytes | str | Path, *, optimize: bool = False, threads: int | None = None):
    """A plain CPU ``InferenceSession`` that works whether or not the shared pool exists (reference runs)."""
    ort = onnxruntime_module()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.add_session_config_entry(*FP32_DQ_MATMUL)
    if _global_pool_threads is not None:
        so.use_per_session_threads = False
    else:
        so.intra_op_num_threads = threads or physical_cores()
    if hasattr(model, "SerializeToString"):  # an onnx.ModelProto (tested without importing onnx)
        data: bytes | str = model.SerializeToString()
    else:
        data = str(model) if isinstance(model, Path) else model
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


TYPE_TO_NP = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}



class OrtCompiled(Compiled):
    """An ONNX Runtime session with its IO binding.

    ``run`` is the fast path: inputs and outputs are pre-bound OrtValues sharing memory with numpy
    arrays; a call re-binds an input only when a different array object is passed (zero-copy when it
    is C-contiguous with the right dtype, else one conversion), then ``run_with_iobinding`` without
    RunOptions.

    **The returned arrays are this object's output buffers and are OVERWRITTEN by the next ``run``**
    (``reuses_outputs = True``): copy any output you keep past the next call (the runtime copies
    graph outputs). Input arrays are read in place during the call, never written.
    """

    reuses_outputs = True

    def __init__(self, backend: SessionSettings, session: Any, model: onnx.ModelProto | Path,
                 optimized: bytes | None = None) -> None:
        ort = onnxruntime_module()
        self.backend = backend.name
        self._backend = backend
        self._session = session
        self._model = model
        self._optimized = optimized  # the already-optimised model the session was built from, if any
        self._binding = session.io_binding()
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        self._in_specs: list[tuple[str, np.dtype, tuple[int, ...]]] = []
        for i in session.get_inputs():
            self._in_specs.append((i.name, np.dtype(TYPE_TO_NP.get(i.type, np.float32)), static_shape(i.shape, i.name)))
        self._bound: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] = {}
        self._keep: list[Any] = []
        #: outputs that are also inputs (a pass-through): ORT never writes a pre-bound buffer for them
        #: (docs/RUNTIME-FACTS.md), so they are not bound and ``run`` copies the fed input into their buffer
        self._passthrough = [o.name for o in session.get_outputs() if o.name in self.input_names]
        for o in session.get_outputs():
            if o.type not in TYPE_TO_NP:
                raise CollageError(f"onnxruntime: output {o.name!r} has type {o.type}, which collage cannot bind")
            arr = np.empty(static_shape(o.shape, o.name), dtype=TYPE_TO_NP[o.type])
            self._outputs[o.name] = arr
            if o.name in self._passthrough:
                continue
            value = ort.OrtValue.ortvalue_from_numpy(arr)
            self._binding.bind_ortvalue_output(o.name, value)
            self._keep.append(value)
        self._computes = len(self._passthrough) < len(self._outputs)
        self._ortvalue_from_numpy = ort.OrtValue.ortvalue_from_numpy
        self._run = session._sess.run_with_iobinding
        self._cbinding = self._binding._iobinding
        self._in_values: dict[str, Any] = {}

    def _bind(self, name: str, dtype: np.dtype, shape: tuple[int, ...], arr: Any) -> None:
        original = arr
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or not arr.flags.c_contiguous:
            arr = np.asarray(arr, dtype=dtype, order="C")
        if arr.shape != shape:
            raise CollageError(f"onnxruntime: input {name!r} has shape {arr.shape}, the partition expects {shape}")
        value = self._ortvalue_from_numpy(arr)
        self._binding.bind_ortvalue_input(name, value)
        self._in_values[name] = (value, arr)  # keeps the memory alive while bound
        self._bound[name] = original

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        handover.run_on("onnxruntime")
        bound = self._bound
        for name, dtype, shape in self._in_specs:
            try:
                arr = feeds[name]
            except KeyError:
                raise CollageError(f"onnxruntime: missing input {name!r} (expected {self.input_names})") from None
            if arr is not bound.get(name):
                self._bind(name, dtype, shape, arr)
        if self._computes:  # ORT refuses a run with no bound output (a pure pass-through graph has none)
            try:
                self._run(self._cbinding, None)
            except Exception as e:  # noqa: BLE001 - a runtime failure (bad values, shapes) as one clear error
                what = self._model.name if isinstance(self._model, Path) else self._model.graph.name
                raise CollageError(f"onnxruntime failed running {what!r}: {' '.join(str(e).split())}") from e
        for name in self._passthrough:  # the bound input (converted if it had to be) is the output
            np.copyto(self._outputs[name], self._in_values[name][1])
        return dict(self._outputs)

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the ONNX Runtime-optimised model (ORT_ENABLE_ALL, this machine's layout) as one .onnx file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if isinstance(self._model, Path) or self._optimized is not None:  # already optimised: copy it
            data = self._optimized if self._optimized is not None else self._model.read_bytes()
            fname = f"onnxruntime-{sha256_bytes(data)[:16]}.onnx"
            if not (isinstance(self._model, Path) and (directory / fname).resolve() == self._model.resolve()):
                (directory / fname).write_bytes(data)
        else:
            data = self._model.SerializeToString()
            fname = f"onnxruntime-{sha256_bytes(data)[:16]}.onnx"
            so = self._backend.session_options(model=self._model)
            so.optimized_model_filepath = str(directory / fname)
            try:  # creating the session writes the optimised model
                onnxruntime_module().InferenceSession(data, so, providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001
                raise ArtifactError(f"{directory / fname}: onnxruntime could not write the partition: {e}") from e
        return {"backend": self.backend, "files": [fname], "format": "onnx (optimised by onnxruntime, level all)",
                "version": self._backend.version(), "options": self._backend.options,
                "inputs": self.input_names, "outputs": self.output_names}


def static_shape(shape: list, name: str) -> tuple[int, ...]:
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise CollageError(f"onnxruntime: tensor {name!r} has non-static shape {shape}; fix input shapes first")
    return tuple(shape)
