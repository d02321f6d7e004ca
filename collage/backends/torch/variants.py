"""The torch backend's competitors and lower-precision variants, beside ``torch`` (eager, cuDNN/cuBLAS kernels):

* ``torch-inductor``: the partition's program through ``torch.compile`` (TorchInductor: Triton kernels with fusion on
  CUDA, generated C++ on a CPU): the generated-code competitor, in the role TVM plays on CPUs. The whole program is
  one graph (``fullgraph=True``: a graph break is a compile error, never a silent eager piece) with static shapes;
  compiling happens in ``compile`` (its first call), so the measured compile time is the real cost, and
  TorchInductor's own on-disk cache (``TORCHINDUCTOR_CACHE_DIR``, under collage's cache unless set) makes a second
  compile of the same partition cheap. Support is the eager interpreter's (same op table: Inductor lowers every aten
  op it is given, falling back to the aten kernel where it has no lowering), so the support check costs no compile.
* ``torch-tf32``, ``torch-bf16``, ``torch-fp16``: the eager interpreter with TF32 math or under autocast
  (:class:`collage.backends.torch.backend.TorchBackend`'s ``precision``). They change results, so like
  ``openvino-bf16`` they are used only under an accuracy budget (registered in ``collage.backends.VARIANTS``;
  ``collage.tuner.precision`` treats any backend whose ``precision`` is not fp32 as lower precision).
  tf32 and fp16 are CUDA only (``available()`` says why on a CPU); bf16 also runs on a CPU.

Each compiled program gets its own code object for ``torch.compile`` (:func:`fresh_entry`): TorchDynamo keeps its
compiled graphs per code object and falls back to eager after ``recompile_limit`` (8) guards fail, which one shared
entry function would hit after eight partitions in a measuring worker.
"""
from __future__ import annotations

import os
import types
from collections.abc import Callable, Sequence
from typing import Any

from collage.backends.torch.backend import Program, TorchBackend
from collage.errors import CollageError
from collage.util import cache_dir

#: registry names of the lower-precision variants and the precision each runs
VARIANTS = {"torch-tf32": "tf32", "torch-bf16": "bf16", "torch-fp16": "fp16"}


def fresh_entry(run: Callable[[dict[str, Any]], dict[str, Any]], inputs: Sequence[str],
                outputs: Sequence[str]) -> Callable[..., tuple[Any, ...]]:
    """``run`` (env -> outputs) as a function of positional tensors returning a tuple, on a code object of its own."""
    names, outs = tuple(inputs), tuple(outputs)

    def entry(*xs: Any) -> tuple[Any, ...]:
        out = run(dict(zip(names, xs)))
        return tuple(out[n] for n in outs)

    code = entry.__code__.replace(co_name=f"collage_partition_{id(run):x}")
    return types.FunctionType(code, entry.__globals__, code.co_name, entry.__defaults__, entry.__closure__)


def _torch() -> Any:
    import torch  # noqa: PLC0415 - lazy: importing collage.backends loads no runtime

    return torch


class InductorRunner:
    """A program (or its autocast runner) compiled by ``torch.compile``; called like the program (env -> outputs).

    TorchInductor's pattern passes can fail on a graph they match (torch 2.13: its attention fusion takes BERT's
    ``MatMul -> Div(constant) -> Softmax -> MatMul`` and passes the 0-d constant as SDPA's float ``scale``, which
    raises BackendCompilerFailed). Then the partition is compiled again once with ``pattern_matcher`` off (fusion
    and code generation unchanged) and ``patterns_off`` says so."""

    def __init__(self, program: Program, run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.names = [n for n, _, _ in program.in_specs]
        self.outputs = list(program.output_names)
        self.entry = fresh_entry(run, self.names, self.outputs)
        self.compiled = _torch().compile(self.entry, fullgraph=True, dynamic=False)
        self.patterns_off = False
        self.called = False

    def __call__(self, env: dict[str, Any]) -> dict[str, Any]:
        args = [env[n] for n in self.names]
        try:
            got = self.compiled(*args)
        except _torch()._dynamo.exc.BackendCompilerFailed:
            if self.called or self.patterns_off:
                raise
            self.patterns_off = True
            self.compiled = _torch().compile(self.entry, fullgraph=True, dynamic=False,
                                             options={"pattern_matcher": False})
            got = self.compiled(*args)
        self.called = True
        return dict(zip(self.outputs, got))


class TorchInductorBackend(TorchBackend):
    """The torch program through ``torch.compile`` (module docstring)."""

    name = "torch-inductor"

    def version(self) -> str:
        return super().version() + "-inductor"

    def runner(self, program: Program) -> Any:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "torch-inductor"))
        return InductorRunner(program, super().runner(program))

    def support_runner(self, program: Program) -> Any:
        return super().runner(program)


class _TorchLowPrecision(TorchBackend):
    """The eager interpreter in a fixed lower precision (``kind``); a lower-precision variant, used only under
    --accuracy."""

    kind = ""

    def __init__(self, device: str = "cuda", precision: str | None = None, device_io: bool = False) -> None:
        if precision not in (None, self.kind):
            raise CollageError(f"{self.name} computes in {self.kind}, not {precision!r}: use backend 'torch' "
                               "with that precision")
        super().__init__(device=device, precision=self.kind, device_io=device_io)


class TorchTF32Backend(_TorchLowPrecision):
    """torch eager with TF32 tensor-core math for matmuls and convolutions (CUDA, sm80+)."""

    name = "torch-tf32"
    kind = "tf32"


class TorchBF16Backend(_TorchLowPrecision):
    """torch eager under bf16 autocast (CUDA sm80+, or a CPU)."""

    name = "torch-bf16"
    kind = "bf16"


class TorchFP16Backend(_TorchLowPrecision):
    """torch eager under fp16 autocast (CUDA only)."""

    name = "torch-fp16"
    kind = "fp16"
