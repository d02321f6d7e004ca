"""ONNX Runtime with the CUDA execution provider (cuDNN / cuBLAS): the ``onnxruntime-cuda`` backend.

Shares the CPU backend's code (``OnnxRuntimeBackend``: session options, support probing, compile-error
classification); what differs is the provider list, the IO binding on the device and what ``save``
writes.

Install: the CUDA EP ships in the ``onnxruntime-gpu`` wheel, which **replaces** ``onnxruntime`` (same
``import onnxruntime``; the two wheels overwrite each other's files): ``pip uninstall onnxruntime &&
pip install onnxruntime-gpu``, never both in one environment. The CPU backend keeps working with
onnxruntime-gpu (it has the CPU EP too).

No silent fallback: sessions set ``session.disable_cpu_ep_fallback`` (``strict=True``), so a node the
CUDA EP does not take fails the session and ``supports()`` answers no, instead of ORT quietly running it
on the CPU. fp32 means fp32: the CUDA EP's ``use_tf32`` is set to 0 (ORT enables TF32 by default).

IO: inputs and outputs are bound on the GPU once (``OrtValue`` on "cuda", or torch tensors when PyTorch
is installed). ``device_io=False``: ``run`` copies numpy inputs into the bound device buffers
(``OrtValue.update_inplace``) and returns numpy copies of the outputs. ``device_io=True``: ``run`` also
takes torch CUDA tensors (bound in place, zero-copy) and returns the bound torch output tensors, which
the next ``run`` overwrites (``reuses_outputs``). When PyTorch sees the GPU, ORT runs on PyTorch's
current stream (``user_compute_stream``) so that CUDA-event timing and torch producers/consumers are
ordered with it.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from collage.backends import handover
from collage.backends.base import Compiled
from collage.backends.cuda_timing import gpu_name, no_device_reason, torch_cuda
from collage.backends.onnxruntime.backend import OnnxRuntimeBackend
from collage.backends.onnxruntime.session import (
    TYPE_TO_NP,
    onnxruntime_module,
    static_shape,
)
from collage.errors import ArtifactError, BackendUnavailable, CollageError
from collage.util import sha256_bytes

log = logging.getLogger(__name__)

REPLACES_NOTE = ("onnxruntime-gpu REPLACES onnxruntime (same import name): pip uninstall -y onnxruntime && "
                 "pip install onnxruntime-gpu; never install both in one environment")


class OrtCudaCompiled(Compiled):
    """An ORT CUDA session with device-resident IO binding (see the module docstring)."""

    def __init__(self, backend: OnnxRuntimeCudaBackend, session: Any, model: onnx.ModelProto | Path) -> None:
        ort = onnxruntime_module()
        self.backend = backend.name
        self._backend = backend
        self._session = session
        self._model = model
        self.device_io = backend.device_io
        self.reuses_outputs = backend.device_io
        self._dev = backend.device_id
        self._binding = session.io_binding()
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        self._torch = torch_cuda() if backend.ort_device == "cuda" else None
        self._in: list[tuple[str, np.dtype, tuple[int, ...], Any]] = []
        for i in session.get_inputs():
            if i.type not in TYPE_TO_NP:
                raise CollageError(f"onnxruntime-cuda: input {i.name!r} has type {i.type}, which collage cannot bind")
            dtype, shape = np.dtype(TYPE_TO_NP[i.type]), static_shape(i.shape, i.name)
            value = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype.type, backend.ort_device, self._dev)
            self._binding.bind_ortvalue_input(i.name, value)
            self._in.append((i.name, dtype, shape, value))
        self._bound: dict[str, Any] = {}  # input name -> the torch tensor bound in place of our OrtValue
        self._out: dict[str, Any] = {}
        # an output that is also an input (a pass-through) is never written by ORT into a pre-bound buffer
        # (docs/RUNTIME-FACTS.md): it is not bound; ``run`` copies the fed input into its buffer
        self._passthrough = [o.name for o in session.get_outputs() if o.name in self.input_names]
        for o in session.get_outputs():
            if o.type not in TYPE_TO_NP:
                raise CollageError(f"onnxruntime-cuda: output {o.name!r} has type {o.type}, which collage cannot bind")
            dtype, shape = np.dtype(TYPE_TO_NP[o.type]), static_shape(o.shape, o.name)
            bind = o.name not in self._passthrough
            if self._torch is not None:
                t = self._torch.empty(shape, dtype=_torch_dtype(self._torch, dtype), device=f"cuda:{self._dev}")
                if bind:
                    self._binding.bind_output(o.name, "cuda", self._dev, dtype.type, list(shape), t.data_ptr())
                self._out[o.name] = t
            else:
                value = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype.type, backend.ort_device,
                                                                  self._dev)
                if bind:
                    self._binding.bind_ortvalue_output(o.name, value)
                self._out[o.name] = value
        self._computes = len(self._passthrough) < len(self._out)
        self._in_dtypes = {name: dtype for name, dtype, _, _ in self._in}
        self._run = session._sess.run_with_iobinding
        self._cbinding = self._binding._iobinding

    def _feed(self, name: str, dtype: np.dtype, shape: tuple[int, ...], value: Any, own: Any) -> None:
        torch = self._torch
        if torch is not None and isinstance(value, torch.Tensor) and value.is_cuda:
            if value is self._bound.get(name):
                return
            if tuple(value.shape) != shape or value.dtype != _torch_dtype(torch, dtype) or not value.is_contiguous():
                raise CollageError(f"onnxruntime-cuda: input {name!r} is a {value.dtype} tensor of shape "
                                   f"{tuple(value.shape)}; the partition expects a contiguous {dtype} {shape}")
            self._binding.bind_input(name, "cuda", value.device.index or 0, dtype.type, list(shape), value.data_ptr())
            self._bound[name] = value  # keeps the memory alive while bound
            return
        if torch is not None and isinstance(value, torch.Tensor):
            value = value.numpy()
        arr = np.asarray(value, dtype=dtype, order="C")
        if arr.shape != shape:
            raise CollageError(f"onnxruntime-cuda: input {name!r} has shape {arr.shape}, the partition expects {shape}")
        if name in self._bound:  # a torch tensor was bound last time: go back to our own buffer
            self._binding.bind_ortvalue_input(name, own)
            del self._bound[name]
        own.update_inplace(arr)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        handover.run_on("onnxruntime")
        for name, dtype, shape, own in self._in:
            try:
                value = feeds[name]
            except KeyError:
                raise CollageError(f"onnxruntime-cuda: missing input {name!r} (expected {self.input_names})") from None
            self._feed(name, dtype, shape, value, own)
        if self._computes:  # ORT refuses a run with no bound output
            self._run(self._cbinding, None)
        for name in self._passthrough:
            self._copy_through(name, feeds[name])
        if self.device_io:
            return dict(self._out)
        if self._torch is not None:
            return {n: t.cpu().numpy() for n, t in self._out.items()}
        return {n: np.array(v.numpy(), copy=True) for n, v in self._out.items()}  # never an alias of our buffer

    def _copy_through(self, name: str, value: Any) -> None:
        """Write the fed input ``value`` into the buffer of the pass-through output ``name``."""
        torch, out = self._torch, self._out[name]
        if torch is not None:
            src = value if isinstance(value, torch.Tensor) else torch.from_numpy(
                np.asarray(value, dtype=self._in_dtypes[name], order="C"))
            out.copy_(src.reshape(out.shape))
        else:
            out.update_inplace(np.asarray(value, dtype=self._in_dtypes[name], order="C"))

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the partition's ONNX model as given (ORT optimises it for the CUDA EP when loading)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        data = self._model.read_bytes() if isinstance(self._model, Path) else self._model.SerializeToString()
        fname = f"onnxruntime-cuda-{sha256_bytes(data)[:16]}.onnx"
        target = directory / fname
        if not (isinstance(self._model, Path) and target.resolve() == self._model.resolve()):
            target.write_bytes(data)
        return {"backend": self.backend, "files": [fname], "format": "onnx (optimised by onnxruntime when loaded)",
                "device": "cuda", "version": self._backend.version(), "options": self._backend.options,
                "inputs": self.input_names, "outputs": self.output_names}


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


class OnnxRuntimeCudaBackend(OnnxRuntimeBackend):
    """ONNX Runtime, CUDA execution provider, fp32 (see the module docstring)."""

    name = "onnxruntime-cuda"
    device = "cuda"
    #: where IO buffers live ("cpu" only in tests that exercise the binding code without a GPU)
    ort_device = "cuda"

    def __init__(self, device_id: int = 0, opt_level: str = "all", precision: str = "fp32",
                 device_io: bool = False, strict: bool = True, conv_algo_search: str = "EXHAUSTIVE",
                 threads: int | None = None) -> None:
        super().__init__(threads=threads, opt_level=opt_level, precision=precision)
        if conv_algo_search not in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"):
            raise CollageError(f"onnxruntime-cuda: conv_algo_search must be EXHAUSTIVE, HEURISTIC or DEFAULT, "
                               f"not {conv_algo_search!r}")
        self.device_id = int(device_id)
        self.device_io = bool(device_io)
        self.strict = bool(strict)
        self.conv_algo_search = conv_algo_search

    def available(self) -> str | None:
        try:
            ort = onnxruntime_module()
        except BackendUnavailable as e:
            return f"{e} (for CUDA: pip install onnxruntime-gpu; {REPLACES_NOTE})"
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (this is the CPU wheel); "
                    f"{REPLACES_NOTE}")
        return no_device_reason()

    def version(self) -> str:
        gpu = gpu_name(self.device_id).replace(" ", "_")
        return f"onnxruntime-gpu-{onnxruntime_module().__version__}-{gpu}-{self.precision}-opt{self.opt_level}"

    @property
    def options(self) -> dict[str, Any]:
        return {**super().options, "device_id": self.device_id, "device_io": self.device_io, "strict": self.strict,
                "conv_algo_search": self.conv_algo_search, "tf32": False}

    def provider_options(self) -> dict[str, str]:
        opts = {"device_id": str(self.device_id), "use_tf32": "0", "cudnn_conv_algo_search": self.conv_algo_search,
                "do_copy_in_default_stream": "1"}
        torch = torch_cuda()
        if torch is not None:
            stream = torch.cuda.current_stream(self.device_id).cuda_stream
            if stream:  # 0 is the legacy default stream: ORT's own stream then (Run still blocks until done)
                opts.update({"has_user_compute_stream": "1", "user_compute_stream": str(stream)})
        return opts

    def open_session(self, data: bytes | str, opt_level: str | None = None, quiet: bool = False) -> Any:
        so = self.session_options(opt_level)
        if quiet:
            so.log_severity_level = 4
        if self.strict:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        return onnxruntime_module().InferenceSession(data, so, providers=self.providers())

    def providers(self) -> list:
        return [("CUDAExecutionProvider", self.provider_options()), "CPUExecutionProvider"]

    def compile(self, model: onnx.ModelProto) -> OrtCudaCompiled:
        try:
            session = self.open_session(model.SerializeToString())
        except CollageError:
            raise
        except Exception as e:  # noqa: BLE001 - classified by the base class
            self.raise_compile_error(model, e, "create a CUDA session for")
        return OrtCudaCompiled(self, session, model)

    def load(self, directory: Path, entry: Mapping[str, Any]) -> OrtCudaCompiled:
        path = Path(directory) / entry["files"][0]
        if not path.is_file():
            raise ArtifactError(f"{path}: onnxruntime-cuda partition file is missing")
        try:
            session = self.open_session(str(path))
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{path}: onnxruntime-cuda cannot load this partition: {e}") from e
        return OrtCudaCompiled(self, session, path)
