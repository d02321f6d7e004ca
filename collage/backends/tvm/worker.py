"""Turning an ONNX model into a TVM library, and the worker process that does it away from the caller.

TVM can abort the whole process on some inputs (a failed C++ check, an LLVM assertion), and
MetaSchedule tuning starts process pools and prints pages of logs. So :class:`TVMBackend` runs its
support checks and compiles here, in one long-lived child process (``python -m
collage.backends.tvm.worker``; importing TVM costs seconds, so every request goes to the same one):
a crash costs that one request (the caller sees ``False`` / ``CompileError``) and a fresh worker
for the next.

Pipeline (:func:`build`): relax ONNX frontend -> ``DecomposeOpsForInference`` and the ``zero``
pipeline (Legalize, FuseOps, FuseTIR) under the target -> optional MetaSchedule tuning of each fused
TIR workload not yet tuned in the database (:mod:`collage.backends.tvm.tuning`), applied with
``MetaScheduleApplyDatabase`` -> optional dlight CPU rules for what is left unscheduled -> ``tvm.compile`` for LLVM ->
``export_library`` to a ``.so``.

Protocol: requests and replies are pickled tuples, each preceded by an 8-byte length, on the
worker's stdin / original stdout (its fd 1 is pointed at stderr, so stray prints cannot corrupt the
channel). Requests: ``("check", model_bytes, options)`` -> reason or None; ``("build", model_bytes,
options, lib_path)`` -> meta dict; ``("quit",)``. Replies: ``("ok", value)`` or ``("refused", op,
node, message)`` or ``("error", type_name, message)``. :func:`worker` is the caller's side: one
shared :class:`WorkerClient` per process, restarted after a crash, stopped at exit. The worker's
output (TVM and MetaSchedule logs) goes to a temporary log file whose tail a crash message quotes.
Setting ``$COLLAGE_TVM_WORKER_ABORT_ON=<op type>`` makes the worker abort on a model holding that op
(how the tests prove a crash is survived).
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

import onnx
from onnx import helper

from collage.backends.tvm.options import BuildOptions

log = logging.getLogger(__name__)

#: Test hook: a worker asked to check or build a model holding a node of this op type calls os.abort().
ABORT_ENV = "COLLAGE_TVM_WORKER_ABORT_ON"


class Refused(Exception):
    """TVM has no converter for an op: names the op and the node."""

    def __init__(self, op: str, node: str, message: str) -> None:
        super().__init__(message)
        self.op, self.node, self.message = op, node, message


# ---------------------------------------------------------------------- the pipeline
def _node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or (node.output[0] if node.output else f"#{index}")


def _input_types(model: onnx.ModelProto) -> tuple[dict[str, list[int]], dict[str, str]]:
    inits = {t.name for t in model.graph.initializer}
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if any(d < 0 for d in dims):
            raise ValueError(f"input {vi.name!r} has no static shape ({dims}); fix it with --shape")
        shapes[vi.name] = dims
        dtypes[vi.name] = helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    return shapes, dtypes


def convert(model: onnx.ModelProto):
    """The relax IRModule of ``model`` (weights bound as constants); Refused for an op without converter."""
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    shapes, dtypes = _input_types(model)
    try:
        return from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except tvm.error.OpNotImplemented as e:
        text = str(e).strip()
        listed = {o.strip() for o in text.rpartition(":")[2].split(",") if o.strip()}
        for i, node in enumerate(model.graph.node):
            if node.op_type in listed:
                raise Refused(node.op_type, _node_name(node, i), f"TVM's relax ONNX frontend has no converter "
                              f"for {node.op_type}") from e
        raise
    except NotImplementedError as e:  # a converter that does not take this attribute / dtype combination
        if len(model.graph.node) == 1:
            node = model.graph.node[0]
            raise Refused(node.op_type, _node_name(node, 0), f"{type(e).__name__}: {e}") from e
        raise


def lower(mod, target):
    """Decompose inference-only ops and run the ``zero`` pipeline (legalize + fuse) under ``target``."""
    from tvm import relax

    with target:
        mod = relax.transform.DecomposeOpsForInference()(mod)
        return relax.get_pipeline("zero")(mod)


def _tensor_meta(ty) -> list[dict[str, Any]]:
    fields = getattr(ty, "fields", None)
    if fields is not None:  # a tuple of outputs
        return [m for f in fields for m in _tensor_meta(f)]
    shape = ty.shape
    values = getattr(shape, "values", shape)
    return [{"shape": [int(v) for v in values], "dtype": str(ty.dtype)}]


def io_meta(model: onnx.ModelProto, mod) -> dict[str, Any]:
    """Names, shapes and dtypes of the inputs and outputs of the compiled ``main``."""
    inits = {t.name for t in model.graph.initializer}
    in_names = [vi.name for vi in model.graph.input if vi.name not in inits]
    out_names = [vo.name for vo in model.graph.output]
    main = mod["main"]
    ins = [_tensor_meta(p.ty)[0] for p in main.params]
    outs = _tensor_meta(main.ret_ty)
    if len(ins) != len(in_names) or len(outs) != len(out_names):
        raise ValueError(f"TVM's main takes {len(ins)} inputs / returns {len(outs)} outputs; the model has "
                         f"{len(in_names)} / {len(out_names)}")
    for vo, m in zip(model.graph.output, outs):  # TVM's idea of an output's shape must be ONNX's
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vo.type.tensor_type.shape.dim] \
            if vo.type.tensor_type.HasField("shape") else None
        if dims is not None and None not in dims and list(dims) != list(m["shape"]):
            raise ValueError(f"TVM makes output {vo.name!r} with shape {m['shape']}, the model declares {dims}")
    return {"inputs": [{"name": n, **m} for n, m in zip(in_names, ins)],
            "outputs": [{"name": n, **m} for n, m in zip(out_names, outs)]}


def _dlight(mod, target):
    from tvm.s_tir import dlight

    with target:
        return dlight.ApplyDefaultSchedule(dlight.cpu.GEMV(), dlight.cpu.Reduction())(mod)


def build(model: onnx.ModelProto, options: BuildOptions, lib_path: str | None = None, *,
          cpu_intrinsics_only: bool = False):
    """Compile ``model``: returns ``(executable, meta)``; exports the library to ``lib_path`` if given.
    ``cpu_intrinsics_only`` is passed to MetaSchedule tuning (:func:`collage.backends.tvm.tuning.tune`): the
    worker process sets it; it only ever compiles for the CPU.

    ``meta`` holds ``inputs``/``outputs`` (name, shape, dtype) and ``tuning`` (MetaSchedule statistics).
    """
    import tvm

    target = options.target()
    mod = lower(convert(model), target)
    meta = io_meta(model, mod)
    tuning: dict[str, Any] = {"mode": options.tuning}
    if options.tuning == "metaschedule":
        from collage.backends.tvm.tuning import tune

        mod, tuning = tune(mod, target, options, cpu_intrinsics_only=cpu_intrinsics_only)
    if options.dlight:
        mod = _dlight(mod, target)
    executable = tvm.compile(mod, target=target)
    if lib_path is not None:
        executable.export_library(lib_path)
    meta["tuning"] = tuning
    return executable, meta


# ---------------------------------------------------------------------- the worker process
def check(model: onnx.ModelProto, options: BuildOptions) -> str | None:
    """None when TVM converts and compiles ``model`` (untuned), else the reason."""
    try:
        build(model, BuildOptions(mcpu=options.mcpu, num_cores=options.num_cores, dlight=options.dlight))
    except Refused as e:
        return e.message
    except Exception as e:  # noqa: BLE001 - any failure is a "no" with the reason
        return f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
    return None


def handle(request: tuple) -> tuple:
    """Answer one request (see the module docstring)."""
    kind = request[0]
    try:
        model = onnx.load_from_string(request[1])
        options: BuildOptions = request[2]
        if options.abort_on and any(n.op_type == options.abort_on for n in model.graph.node):
            os.abort()
        if kind == "check":
            return ("ok", check(model, options))
        if kind == "build":
            return ("ok", build(model, options, request[3], cpu_intrinsics_only=True)[1])
        return ("error", "ValueError", f"unknown request {kind!r}")
    except Refused as e:
        return ("refused", e.op, e.node, e.message)
    except Exception as e:  # noqa: BLE001 - every failure goes back to the caller
        log.debug("request failed:\n%s", traceback.format_exc())
        return ("error", type(e).__name__, str(e))


def send(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    """``n`` bytes from ``fd``; EOFError at end of stream, TimeoutError past ``deadline`` (monotonic)."""
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        block = os.read(fd, min(n, 1 << 20))
        if not block:
            raise EOFError
        chunks.append(block)
        n -= len(block)
    return b"".join(chunks)


def receive(fd: int, deadline: float | None = None) -> Any:
    head = _read_exact(fd, 8, deadline)
    return pickle.loads(_read_exact(fd, struct.unpack("<Q", head)[0], deadline))


def main() -> int:
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints from TVM or MetaSchedule go to the log, never into the channel
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    requests = sys.stdin.fileno()
    # tvm_ffi imports torch whenever it is installed (+4 s here); nothing in this process uses it
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    import tvm  # noqa: F401 - pay the import once, before the first request

    send(channel, ("ready", os.getpid()))
    while True:
        try:
            request = receive(requests)
        except EOFError:
            return 0
        if request[0] == "quit":
            return 0
        send(channel, handle(request))


# ---------------------------------------------------------------------- the caller's side
class WorkerCrashed(Exception):
    """The worker died while answering (its exit signal and last output are in the message)."""


class WorkerTimeout(Exception):
    """The worker did not answer in time (it was killed)."""


class WorkerClient:
    """Talks to one worker process at a time, starting it on first use and after a crash."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._log_path: str | None = None
        self._lock = threading.Lock()
        self._owner = os.getpid()
        self.starts = 0

    def _live(self) -> subprocess.Popen | None:
        if self._owner != os.getpid():  # a forked child must not talk over its parent's pipes
            self._proc, self._log_path, self._owner = None, None, os.getpid()
        return self._proc if self._proc is not None and self._proc.poll() is None else None

    @property
    def pid(self) -> int | None:
        proc = self._live()
        return proc.pid if proc is not None else None

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[3])  # the folder holding the collage package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        fd, self._log_path = tempfile.mkstemp(prefix="collage-tvm-worker-", suffix=".log")
        with os.fdopen(fd, "wb") as log_file:
            proc = subprocess.Popen([sys.executable, "-m", "collage.backends.tvm.worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log_file, env=env)
        self._proc = proc
        self.starts += 1
        try:
            receive(proc.stdout.fileno(), time.monotonic() + 300)
        except (EOFError, TimeoutError):
            raise self._died("starting") from None
        log.debug("TVM worker %d started (log %s)", proc.pid, self._log_path)
        return proc

    def request(self, message: tuple, timeout_s: float | None = None) -> tuple:
        """Send ``message``, return the reply; WorkerCrashed / WorkerTimeout (worker gone) otherwise."""
        with self._lock:
            proc = self._live() or self._start()
            doing = f"answering a {message[0]!r} request"
            try:
                send(proc.stdin, message)
                return receive(proc.stdout.fileno(), None if timeout_s is None else time.monotonic() + timeout_s)
            except TimeoutError:  # before OSError, of which it is a subclass
                self._kill()
                raise WorkerTimeout(f"the TVM worker took more than {timeout_s:g} s {doing}; it was killed") from None
            except (EOFError, OSError):
                raise self._died(doing) from None

    def _tail(self, limit: int = 1500) -> str:
        try:
            with open(self._log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return " ".join(f.read().decode(errors="replace").split())[-limit:]
        except (OSError, TypeError):
            return ""

    def _died(self, doing: str) -> WorkerCrashed:
        proc, self._proc = self._proc, None
        rc = None
        if proc is not None:
            try:
                rc = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # the channel broke but the process lives on: end it
                proc.kill()
                rc = proc.wait()
        how = (f"killed by {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exit code {rc}")
        tail = self._tail()
        return WorkerCrashed(f"the TVM worker process died ({how}) while {doing}"
                             + (f"; its last output: ...{tail}" if tail else "") + f" (log: {self._log_path})")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        """Ask the worker to quit (kill it if it does not) and remove its log."""
        with self._lock:
            proc = self._live()
            if proc is not None:
                try:
                    send(proc.stdin, ("quit",))
                    proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    self._kill()
            self._proc = None
            if self._log_path:
                with contextlib.suppress(OSError):
                    os.unlink(self._log_path)


_client: WorkerClient | None = None
_client_lock = threading.Lock()


def worker() -> WorkerClient:
    """The process's shared worker client (the worker itself starts on the first request)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = WorkerClient()
            atexit.register(_client.stop)
        return _client


if __name__ == "__main__":
    sys.exit(main())
