"""NVIDIA TensorRT (10.x) through its ONNX parser: the ``tensorrt`` backend (device "cuda").

Compile = parse the sub-ONNX with ``trt.OnnxParser``, build a serialized engine
(``builder.build_serialized_network``) with fp32 (TF32 turned OFF: TensorRT enables it by default) or
fp16 (``precision="fp16"``: ``BuilderFlag.FP16``, TensorRT then picks fp16 kernels where it judges
them faster), deserialize it and create an execution context.

Caches (under ``collage.util.cache_dir()/tensorrt``), both keyed by what makes a build valid:

* **engine cache** ``engines/<key>.engine``: ``key = engine_cache_key(sha256 of the model bytes,
  TensorRT version, GPU name + compute capability, precision, builder options)``. The model's sha256,
  not the structural fingerprint: an engine embeds the weights, so two blocks with the same
  fingerprint but different weights need two engines. A second compile of the same partition on the
  same GPU/TensorRT loads the engine instead of building it (builds take seconds to minutes).
* **timing cache** ``timing-<TensorRT version>-<GPU>.cache``: TensorRT's tactic timings, shared by every
  build on that GPU and version (a later build of similar layers skips the timing), merged back after
  each build.

Run: TensorRT 10 API: ``context.set_tensor_address(name, ptr)`` for every IO tensor, then
``context.execute_async_v3(stream)`` on PyTorch's current CUDA stream. Device buffers are torch
tensors (PyTorch must be installed beside TensorRT; it is on the GPU machines we use), allocated
once per compiled partition. ``device_io=False``: numpy in, numpy out (one copy each way).
``device_io=True``: torch CUDA tensors are bound in place (zero-copy) and the bound output tensors
are returned, overwritten by the next run (``reuses_outputs``).

Artifact: ``Compiled.save`` writes ``tensorrt-<key>.engine`` and ``tensorrt-<key>.io.json`` (IO names,
shapes, dtypes, TensorRT version, GPU, precision). An engine runs only on the GPU model and TensorRT
version it was built with; ``load`` refuses anything else with the reason.
"""
from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from collage.backends import handover
from collage.backends.base import Backend, Compiled
from collage.backends.cuda_timing import gpu_name, no_device_reason
from collage.errors import ArtifactError, BackendUnavailable, CollageError, CompileError, UnsupportedError
from collage.util import cache_dir, sha256_bytes

log = logging.getLogger(__name__)

ENGINE_CACHE_SCHEMA = 1
PRECISIONS = ("fp32", "fp16")
INSTALL = "pip install 'collage[gpu]'"

_LOGGER: Any = None


def _trt():
    try:
        import tensorrt  # noqa: PLC0415 - lazy
    except ImportError as e:
        raise BackendUnavailable(f"tensorrt not installed: {INSTALL}") from e
    return tensorrt


def _logger() -> Any:
    global _LOGGER
    if _LOGGER is None:  # TensorRT wants one logger per process
        trt = _trt()
        _LOGGER = trt.Logger(trt.Logger.WARNING)
    return _LOGGER


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60]


def engine_cache_key(model_sha256: str, *, trt_version: str, gpu: str, precision: str,
                     builder_options: Mapping[str, Any] | None = None) -> str:
    """The engine cache key: everything that makes a serialized engine valid (see the module docstring)."""
    payload = json.dumps({"schema": ENGINE_CACHE_SCHEMA, "model": model_sha256, "tensorrt": trt_version, "gpu": gpu,
                          "precision": precision, "builder": dict(builder_options or {})}, sort_keys=True)
    return sha256_bytes(payload.encode())


def trt_dir() -> Path:
    return cache_dir() / "tensorrt"


def timing_cache_path(trt_version: str, gpu: str) -> Path:
    return trt_dir() / f"timing-{_slug(trt_version)}-{_slug(gpu)}.cache"


def engine_cache_path(key: str) -> Path:
    return trt_dir() / "engines" / f"{key}.engine"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache costs a rebuild next time, nothing else
        log.warning("cannot write %s: %s", path, e)
        Path(tmp).unlink(missing_ok=True)


class TrtCompiled(Compiled):
    """A deserialized engine with its execution context and device buffers (see the module docstring)."""

    def __init__(self, backend: TensorRTBackend, engine_bytes: bytes, key: str) -> None:
        import torch  # noqa: PLC0415 - device buffers

        trt = _trt()
        self.backend = backend.name
        self._backend = backend
        self._torch = torch
        self._bytes = engine_bytes
        self.key = key
        self.device_io = backend.device_io
        self.reuses_outputs = backend.device_io
        self._runtime = trt.Runtime(_logger())
        self._engine = self._runtime.deserialize_cuda_engine(engine_bytes)
        if self._engine is None:
            raise CompileError(f"tensorrt {trt.__version__} could not deserialize engine {key[:16]} on "
                               f"{gpu_name(backend.device_id)}: it was built for another GPU or TensorRT version")
        self._context = self._engine.create_execution_context()
        dev = self._device = torch.device(f"cuda:{backend.device_id}")
        self.input_names, self.output_names = [], []
        self.io: dict[str, dict[str, Any]] = {}
        self._buffers: dict[str, Any] = {}
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            is_input = self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            shape = tuple(int(d) for d in self._engine.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise CompileError(f"tensorrt: tensor {name!r} has dynamic shape {shape}; "
                                   "collage builds static engines")
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            (self.input_names if is_input else self.output_names).append(name)
            self.io[name] = {"shape": list(shape), "dtype": dtype.name, "input": is_input}
            buf = torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype, device=dev)
            self._buffers[name] = buf
            self._context.set_tensor_address(name, buf.data_ptr())
        self._bound: dict[str, Any] = {}

    def _feed(self, name: str, value: Any) -> None:
        torch, buf = self._torch, self._buffers[name]
        if isinstance(value, torch.Tensor) and value.is_cuda:
            if value is self._bound.get(name):
                return
            if value.shape != buf.shape or value.dtype != buf.dtype or not value.is_contiguous():
                raise CollageError(f"tensorrt: input {name!r} is a {value.dtype} tensor of shape {tuple(value.shape)}; "
                                   f"the engine expects a contiguous {buf.dtype} {tuple(buf.shape)}")
            self._context.set_tensor_address(name, value.data_ptr())
            self._bound[name] = value
            return
        src = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value, order="C"))
        if tuple(src.shape) != tuple(buf.shape):
            raise CollageError(f"tensorrt: input {name!r} has shape {tuple(src.shape)}, the engine expects "
                               f"{tuple(buf.shape)}")
        if name in self._bound:
            self._context.set_tensor_address(name, buf.data_ptr())
            del self._bound[name]
        buf.copy_(src.to(buf.dtype))

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        handover.run_on("tensorrt")
        for name in self.input_names:
            try:
                self._feed(name, feeds[name])
            except KeyError:
                raise CollageError(f"tensorrt: missing input {name!r} (expected {self.input_names})") from None
        stream = self._torch.cuda.current_stream(self._device)
        if not self._context.execute_async_v3(stream.cuda_stream):
            raise CollageError(f"tensorrt: execute_async_v3 failed for engine {self.key[:16]}")
        outs = {n: self._buffers[n] for n in self.output_names}
        if self.device_io:
            return outs
        return {n: t.cpu().numpy() for n, t in outs.items()}  # .cpu() waits for the stream

    def save(self, directory: Path) -> dict[str, Any]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"tensorrt-{self.key[:16]}"
        (directory / f"{stem}.engine").write_bytes(self._bytes)
        b = self._backend
        meta = {"key": self.key, "tensorrt": b.trt_version(), "gpu": gpu_name(b.device_id), "precision": b.precision,
                "inputs": self.input_names, "outputs": self.output_names, "io": self.io}
        (directory / f"{stem}.io.json").write_text(json.dumps(meta, indent=2) + "\n")
        entry = {"backend": self.backend, "files": [f"{stem}.engine", f"{stem}.io.json"], "format": "tensorrt engine",
                 "device": "cuda", "version": b.version(), "options": b.options}
        entry.update({k: meta[k] for k in ("key", "tensorrt", "gpu", "inputs", "outputs")})
        return entry


class TensorRTBackend(Backend):
    """TensorRT 10 engines built from sub-ONNX (see the module docstring)."""

    name = "tensorrt"
    device = "cuda"

    def __init__(self, precision: str = "fp32", device_id: int = 0, workspace_mb: int = 4096,
                 device_io: bool = False, engine_cache: bool = True, opt_level: int | None = None) -> None:
        if precision not in PRECISIONS:
            raise CollageError(f"tensorrt: precision must be one of {PRECISIONS}, not {precision!r}")
        self.precision = precision
        self.device_id = int(device_id)
        self.workspace_mb = int(workspace_mb)
        self.device_io = bool(device_io)
        self.engine_cache = bool(engine_cache)
        self.opt_level = opt_level

    # ------------------------------------------------------------------ identity
    def available(self) -> str | None:
        try:
            _trt()
        except BackendUnavailable as e:
            return str(e)
        reason = no_device_reason()
        if reason:
            return reason
        try:
            import torch  # noqa: F401, PLC0415
        except ImportError:
            return "tensorrt needs PyTorch for its device buffers: install torch (CUDA build)"
        return None

    def trt_version(self) -> str:
        return str(_trt().__version__)

    def gpu(self) -> str:
        return gpu_name(self.device_id)

    def version(self) -> str:
        return f"tensorrt-{self.trt_version()}-{self.gpu().replace(' ', '_')}-{self.precision}"

    @property
    def builder_options(self) -> dict[str, Any]:
        return {"workspace_mb": self.workspace_mb, "opt_level": self.opt_level, "tf32": self.precision != "fp32"}

    @property
    def options(self) -> dict[str, Any]:
        return {"precision": self.precision, "device_id": self.device_id, "device_io": self.device_io,
                **self.builder_options}

    def cache_key(self, model_bytes: bytes) -> str:
        return engine_cache_key(sha256_bytes(model_bytes), trt_version=self.trt_version(), gpu=self.gpu(),
                                precision=self.precision, builder_options=self.builder_options)

    # ------------------------------------------------------------------ parse / build
    def _parse(self, model: onnx.ModelProto) -> tuple[Any, Any, Any, str | None, int]:
        """(builder, network, parser, error or None, index of the failing node or -1)."""
        trt = _trt()
        builder = trt.Builder(_logger())
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, _logger())
        if parser.parse(model.SerializeToString()):
            return builder, network, parser, None, -1
        errors, node = [], -1
        for i in range(parser.num_errors):
            err = parser.get_error(i)
            idx = int(err.node()) if hasattr(err, "node") else -1
            node = idx if node < 0 else node
            op = err.node_operator() if hasattr(err, "node_operator") else ""
            errors.append(f"{err.desc()}" + (f" [node {idx} {op}]" if idx >= 0 else ""))
        return builder, network, parser, "; ".join(errors) or "the ONNX parser rejected the model", node

    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        return self._parse(model)[3]

    def _build(self, model: onnx.ModelProto) -> bytes:
        trt = _trt()
        builder, network, _parser, error, node_idx = self._parse(model)
        if error is not None:
            if 0 <= node_idx < len(model.graph.node):
                node = model.graph.node[node_idx]
                raise UnsupportedError(f"tensorrt cannot take op {node.op_type} (node {node.name or node.output[0]!r} "
                                       f"of model {model.graph.name!r}): {error}")
            self.raise_compile_error(model, RuntimeError(error), "parse")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_mb << 20)
        if self.precision == "fp32":
            config.clear_flag(trt.BuilderFlag.TF32)
        else:
            config.set_flag(trt.BuilderFlag.FP16)
        if self.opt_level is not None:
            config.builder_optimization_level = int(self.opt_level)
        tpath = timing_cache_path(self.trt_version(), self.gpu())
        old = tpath.read_bytes() if tpath.is_file() else b""
        timing = config.create_timing_cache(old)
        config.set_timing_cache(timing, ignore_mismatch=False)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise CompileError(f"tensorrt {trt.__version__} failed to build an engine for model {model.graph.name!r} "
                               f"({len(model.graph.node)} nodes, {self.precision}); see TensorRT's log above")
        new = config.get_timing_cache().serialize()
        if bytes(new) != old:
            _atomic_write(tpath, bytes(new))
        return bytes(serialized)

    def compile(self, model: onnx.ModelProto) -> TrtCompiled:
        data = model.SerializeToString()
        key = self.cache_key(data)
        path = engine_cache_path(key)
        if self.engine_cache and path.is_file():
            try:
                return TrtCompiled(self, path.read_bytes(), key)
            except CompileError as e:
                log.warning("ignoring cached engine %s: %s", path, e)
        engine = self._build(model)
        if self.engine_cache:
            _atomic_write(path, engine)
        return TrtCompiled(self, engine, key)

    def load(self, directory: Path, entry: Mapping[str, Any]) -> TrtCompiled:
        directory = Path(directory)
        engine_file = next((f for f in entry["files"] if str(f).endswith(".engine")), None)
        if engine_file is None or not (directory / engine_file).is_file():
            raise ArtifactError(f"{directory}: tensorrt partition engine file is missing")
        built_gpu, built_trt = entry.get("gpu"), entry.get("tensorrt")
        if built_gpu and built_gpu != self.gpu() or built_trt and built_trt != self.trt_version():
            raise ArtifactError(f"{directory / engine_file}: engine built for {built_gpu} with TensorRT {built_trt}; "
                                f"this machine has {self.gpu()} with TensorRT {self.trt_version()}. TensorRT engines "
                                "only run where they were built: re-tune (or re-export) the model on this machine")
        try:
            return TrtCompiled(self, (directory / engine_file).read_bytes(), str(entry.get("key", "")))
        except CompileError as e:
            raise ArtifactError(f"{directory / engine_file}: {e}") from e
