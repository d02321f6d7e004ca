"""PyTorch eager on CUDA: the ``torch`` backend, a small ONNX-to-torch interpreter.

A partition (sub-ONNX) becomes a *program*: the nodes in order, each turned once into a torch call by
the op table (``collage.backends.torch.ops.OPS``). While building, everything computable from
constants (initializers, Constant nodes, Shape of a statically shaped tensor and whatever follows from
them, e.g. BERT's Shape -> Gather -> Concat -> Reshape chains) is folded on the host, so the run loop
holds only real tensor work. ``supports()`` is "op in the table and its builder takes the attributes"
plus a trial run on zeros; an op outside the table raises ``UnsupportedError`` naming op and node.

``device`` is ``"cuda"`` (the registered backend; ``available()`` then needs ``torch.cuda.is_available()``),
``"cuda:N"`` or ``"cpu"`` (the same interpreter on the CPU, which is how the tests check it without a
GPU). fp32 means fp32: on CUDA, compiling a partition turns PyTorch's TF32 switches off
(``torch.backends.cudnn.allow_tf32`` / ``torch.backends.cuda.matmul.allow_tf32``; process-wide, set
on every run); ``precision="tf32"`` turns them on instead (CUDA only, sm80+). ``precision="bf16"`` /
``"fp16"`` run the program under ``torch.autocast`` (matmuls and convolutions in the lower precision,
reductions and norms in fp32) and cast its outputs back to their ONNX types; fp16 is CUDA only, bf16 also
runs on a CPU. Those are the lower-precision variants ``torch-tf32`` / ``torch-bf16`` / ``torch-fp16``
(:mod:`.variants`, with ``torch-inductor``: the same program through ``torch.compile``).

IO: with ``device_io=False`` (default, what ``collage.runtime.artifact`` passes) ``run`` takes and returns numpy
arrays (one host->device copy per input, one device->host copy per output). With ``device_io=True`` it
takes torch tensors (any device; moved if needed) or numpy, and returns torch tensors on the device:
no host round trip between GPU partitions. See docs/GPU.md.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from collage.backends import handover
from collage.backends.base import Backend, Compiled, trial_refusal
from collage.errors import ArtifactError, CollageError, UnsupportedError
from collage.util import sha256_bytes

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: precisions run under torch.autocast, with the autocast dtype's name
AUTOCAST = {"bf16": "bfloat16", "fp16": "float16"}


def _torch():
    import torch  # noqa: PLC0415 - lazy: importing collage.backends loads no runtime

    return torch


@dataclass
class _Step:
    fn: Any
    inputs: list[str]
    outputs: list[str]
    label: str


class Program:
    """A sub-ONNX as a list of torch calls on ``device`` (see the module docstring)."""

    def __init__(self, model: onnx.ModelProto, device: str) -> None:
        from onnx import numpy_helper, shape_inference

        from collage.backends.torch import ops
        from collage.backends.torch.opnode import OpNode, OpUnsupported, attributes, torch_dtype

        torch = _torch()
        self.device = torch.device(device)
        g = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        try:
            inferred = shape_inference.infer_shapes(model, strict_mode=False).graph
        except Exception:  # noqa: BLE001 - shapes only help folding; the graph's own infos remain
            inferred = g
        shapes: dict[str, tuple[int, ...] | None] = {}
        dtypes: dict[str, int] = {}
        for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
            tt = vi.type.tensor_type
            dtypes[vi.name] = tt.elem_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shapes[vi.name] = tuple(dims) if tt.HasField("shape") and None not in dims else None
        static: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for name, arr in static.items():
            shapes[name] = tuple(arr.shape)
        init_names = set(static)
        self.input_names = [i.name for i in g.input if i.name not in init_names]
        self.output_names = [o.name for o in g.output]
        #: each output's dtype as the ONNX graph declares it (what autocast's lower-precision results are cast back to)
        self.out_dtypes = {o.name: torch_dtype(dtypes[o.name]) for o in g.output if dtypes.get(o.name)}
        self.in_specs = []
        for name in self.input_names:
            shape = shapes.get(name)
            if shape is None:
                raise CollageError(f"torch: input {name!r} of {g.name!r} has no static shape; fix input shapes first")
            self.in_specs.append((name, torch_dtype(dtypes.get(name, onnx.TensorProto.FLOAT)), shape))
        self.steps: list[_Step] = []
        for _k, node in enumerate(g.node):
            label = f"{node.op_type} (node {node.name or node.output[0]!r})"
            if node.domain not in ("", "ai.onnx"):
                raise UnsupportedError(f"torch cannot take op {node.domain}:{node.op_type} (node "
                                       f"{node.name or node.output[0]!r} of model {g.name!r}): only the default ONNX "
                                       "domain is handled")
            build = ops.OPS.get(node.op_type)
            if build is None:
                raise UnsupportedError(f"torch cannot take op {node.op_type} (node {node.name or node.output[0]!r} "
                                       f"of model {g.name!r}): not in the torch backend's op table")
            info = OpNode(node.op_type, node.name, attributes(node),
                          [static.get(i) if i else None for i in node.input],
                          [shapes.get(i) if i else None for i in node.input],
                          sum(1 for o in node.output if o), self.opset)
            try:
                fn = build(info)
            except OpUnsupported as e:
                raise UnsupportedError(f"torch cannot take op {node.op_type} (node {node.name or node.output[0]!r} "
                                       f"of model {g.name!r}): {e}") from None
            outputs = [o for o in node.output if o]
            inputs = list(node.input)
            if node.op_type == "Constant":
                static[outputs[0]] = info.extra["value"]
                continue
            if node.op_type in ops.SHAPE_ONLY and shapes.get(inputs[0]) is not None:
                start, end = info.attr("start", 0), info.attr("end")
                static[outputs[0]] = np.array(shapes[inputs[0]][start:end], dtype=np.int64)
                continue
            if inputs and all(not i or i in static for i in inputs) and any(inputs):
                with torch.inference_mode():
                    got = fn(*[torch.from_numpy(np.array(static[i])) if i else None for i in inputs])
                for o, t in zip(outputs, got):
                    static[o] = t.contiguous().numpy().copy()
                    shapes[o] = tuple(static[o].shape)
                continue
            self.steps.append(_Step(fn, inputs, outputs, label))
        needed = {i for s in self.steps for i in s.inputs if i} | set(self.output_names)
        self.consts = {n: torch.from_numpy(np.array(v)).to(self.device) for n, v in static.items() if n in needed}
        log.debug("torch program %s: %d steps, %d folded constants on %s", g.name, len(self.steps), len(self.consts),
                  self.device)

    def __call__(self, env: dict[str, Any]) -> dict[str, Any]:
        env.update(self.consts)
        for step in self.steps:
            out = step.fn(*[env[i] if i else None for i in step.inputs])
            for name, value in zip(step.outputs, out):
                env[name] = value
        return {n: env[n] for n in self.output_names}


class TorchCompiled(Compiled):
    """A built program; ``run`` takes numpy (or torch tensors with ``device_io``) by input name."""

    def __init__(self, backend: TorchBackend, program: Program, model: onnx.ModelProto,
                 runner: Any = None) -> None:
        self.backend = backend.name
        self._backend = backend
        self._program = program
        #: env -> outputs: the program itself, under autocast, or compiled (``TorchBackend.runner``)
        self._run = runner if runner is not None else program
        self._model = model
        self.input_names = list(program.input_names)
        self.output_names = list(program.output_names)
        self.device_io = backend.device_io
        #: numpy outputs are fresh arrays each call; device outputs are the program's own tensors.
        self.reuses_outputs = False

    def _input(self, name: str, dtype: Any, shape: tuple[int, ...], value: Any) -> Any:
        torch = _torch()
        if isinstance(value, torch.Tensor):
            t = value
        else:
            arr = np.asarray(value)
            t = torch.from_numpy(np.asarray(arr, order="C"))
        if tuple(t.shape) != tuple(shape):
            raise CollageError(f"torch: input {name!r} has shape {tuple(t.shape)}, the partition expects {shape}")
        return t.to(device=self._program.device, dtype=dtype, non_blocking=t.device.type == "cpu" and t.is_pinned())

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        handover.run_on("torch")
        torch = _torch()
        self._backend._set_math_mode()
        env: dict[str, Any] = {}
        for name, dtype, shape in self._program.in_specs:
            try:
                value = feeds[name]
            except KeyError:
                raise CollageError(f"torch: missing input {name!r} (expected {self.input_names})") from None
            env[name] = self._input(name, dtype, shape, value)
        with torch.inference_mode():
            out = self._run(env)
        if self.device_io:
            return {n: t.contiguous() for n, t in out.items()}
        if self._program.device.type == "cpu":  # .cpu() is then no copy: never hand out our constants or inputs
            return {n: t.contiguous().numpy().copy() for n, t in out.items()}
        return {n: t.contiguous().cpu().numpy() for n, t in out.items()}

    def capture_refusal(self) -> str | None:
        """None when this partition can be captured in a CUDA graph (collage.runtime.graphs), else why not."""
        return capture_refusal(self._program.device.type, [s.label for s in self._program.steps])

    def save(self, directory: Path) -> dict[str, Any]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        data = self._model.SerializeToString()
        fname = f"torch-{sha256_bytes(data)[:16]}.onnx"
        (directory / fname).write_bytes(data)
        return {"backend": self.backend, "files": [fname], "format": "onnx (interpreted by collage's torch op table)",
                "device": self._backend.device, "version": self._backend.version(), "options": self._backend.options,
                "inputs": self.input_names, "outputs": self.output_names}


#: ops whose step builds a tensor from host values at run time (an upload that a CUDA graph would replay stale)
HOST_STEPS = frozenset({"Shape"})


def capture_refusal(device_type: str, step_labels: list[str]) -> str | None:
    """Why a program of these steps on ``device_type`` cannot be captured in a CUDA graph (None: it can)."""
    if device_type != "cuda":
        return f"runs on {device_type}: only CUDA work can be captured in a CUDA graph"
    host = [label for label in step_labels if label.split()[0] in HOST_STEPS]
    if host:
        return f"{host[0]} builds a tensor from host values at run time (a graph would replay it stale)"
    return None


class TorchBackend(Backend):
    """PyTorch eager through collage's ONNX op table (see the module docstring)."""

    name = "torch"
    device = "cuda"

    def __init__(self, device: str = "cuda", precision: str = "fp32", device_io: bool = False) -> None:
        if precision not in PRECISIONS:
            raise CollageError(f"torch: precision must be one of {PRECISIONS}, not {precision!r}")
        if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
            raise CollageError(f"torch: device must be 'cuda', 'cuda:N' or 'cpu', not {device!r}")
        self.device = device  # type: ignore[misc] - an instance may run on the CPU (tests)
        self.precision = precision
        self.device_io = bool(device_io)

    def available(self) -> str | None:
        try:
            torch = _torch()
        except ImportError:
            return ("torch is not installed: PyTorch is expected preinstalled on the GPU machine "
                    "(else pip install torch with the CUDA build that matches the driver)")
        if self.device == "cpu":
            return self._cpu_precision_reason()
        if torch.version.cuda is None:
            return f"this torch build ({torch.__version__}) has no CUDA support: no CUDA device for backend {self.name}"
        if not torch.cuda.is_available():
            return f"no CUDA device (torch {torch.__version__} sees none: torch.cuda.is_available() is False)"
        index = int(self.device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            return f"no CUDA device {index} (torch sees {torch.cuda.device_count()})"
        return self._cuda_precision_reason(index)

    def _cpu_precision_reason(self) -> str | None:
        if self.precision == "tf32":
            return (f"{self.name}: TF32 is a CUDA tensor-core math mode (sm80+); on a CPU torch computes fp32, so "
                    "there is no tf32 variant to measure here")
        if self.precision == "fp16":
            return (f"{self.name}: fp16 autocast runs on CUDA only here (a CPU's fp16 convolutions and matmuls in "
                    "torch are emulated, not a faster variant)")
        return None

    def _cuda_precision_reason(self, index: int) -> str | None:
        torch = _torch()
        major, minor = torch.cuda.get_device_capability(index)
        if self.precision in ("tf32", "bf16") and major < 8:
            return (f"{self.name}: {self.precision} needs compute capability 8.0 or later (Ampere); "
                    f"device {index} is sm{major}{minor}")
        return None

    def version(self) -> str:
        torch = _torch()
        where = "cpu"
        if self.device != "cpu":
            from collage.backends.cuda_timing import gpu_name

            where = gpu_name(int(self.device.partition(":")[2] or 0)).replace(" ", "_")
        return f"torch-{torch.__version__}-{where}-{self.precision}"

    @property
    def options(self) -> dict[str, Any]:
        return {"precision": self.precision, "device": self.device, "device_io": self.device_io}

    def _set_math_mode(self) -> None:
        if self.device == "cpu":
            return
        torch = _torch()
        tf32 = self.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32

    def runner(self, program: Program) -> Any:
        """What runs ``program`` (env -> outputs): the program itself; under autocast for bf16/fp16."""
        if self.precision in AUTOCAST:
            return _Autocast(program, AUTOCAST[self.precision])
        return program

    def support_runner(self, program: Program) -> Any:
        """What the support check runs on a one-node program (``runner``; torch-inductor: the eager one)."""
        return self.runner(program)

    def _trial(self, program: Program, run: Any) -> None:
        torch = _torch()
        self._set_math_mode()
        # integer inputs are ones first (a divisor of zero raises), zeros second (an index of one can be out of range)
        has_ints = any(not dtype.is_floating_point for _, dtype, _ in program.in_specs)
        first: Exception | None = None
        for fill in ((1, 0) if has_ints else (0,)):
            env = {n: torch.full(shape, 0 if dtype.is_floating_point else fill, dtype=dtype, device=program.device)
                   for n, dtype, shape in program.in_specs}
            try:
                with torch.inference_mode():
                    run(env)
                break
            except Exception as e:  # noqa: BLE001 - retried once, then the first error is the answer
                first = first or e
        else:
            raise first  # type: ignore[misc]
        if program.device.type == "cuda":
            torch.cuda.synchronize(program.device)

    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        def trial() -> None:
            program = Program(model, self.device)
            self._trial(program, self.support_runner(program))
        return trial_refusal(trial)

    def compile(self, model: onnx.ModelProto) -> TorchCompiled:
        try:
            program = Program(model, self.device)
            run = self.runner(program)
        except CollageError:
            raise
        except Exception as e:  # noqa: BLE001 - classified by the base class
            self.raise_compile_error(model, e, "build a torch program for")
        try:
            self._trial(program, run)
        except Exception as e:  # noqa: BLE001
            self.raise_compile_error(model, e, "run a trial of")
        return TorchCompiled(self, program, model, run)

    def load(self, directory: Path, entry: Mapping[str, Any]) -> TorchCompiled:
        path = Path(directory) / entry["files"][0]
        if not path.is_file():
            raise ArtifactError(f"{path}: torch partition file is missing")
        try:
            model = onnx.load(str(path))
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{path}: not a readable ONNX file ({e}); re-export the artifact") from e
        return self.compile(model)


class _Autocast:
    """``program`` under ``torch.autocast`` in ``dtype`` (matmuls and convolutions in it, reductions in fp32), its
    outputs cast back to the ONNX types the graph declares."""

    def __init__(self, program: Program, dtype: str) -> None:
        self.program = program
        self.dtype = getattr(_torch(), dtype)
        self.device_type = program.device.type

    def __call__(self, env: dict[str, Any]) -> dict[str, Any]:
        torch = _torch()
        # no weight cache: a CUDA graph captured over it must not keep casts from before the capture
        with torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=False):
            out = self.program(env)
        return {n: t.to(self.program.out_dtypes.get(n, t.dtype)) for n, t in out.items()}
