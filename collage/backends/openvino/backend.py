"""OpenVINO on CPU (the oneDNN-based CPU plugin).

Settings (docs/RUNTIME-FACTS.md): ``INFERENCE_PRECISION_HINT`` f32 unless ``precision`` asks otherwise
(the plugin's default on AMX/avx512_bf16 CPUs is bf16, which changes results), in f32 no dynamic quantization of
activations (``DYNAMIC_QUANTIZATION_GROUP_SIZE`` 0; :meth:`OpenVINOBackend.config`), ``PERFORMANCE_HINT``
LATENCY, ``NUM_STREAMS`` 1, ``INFERENCE_NUM_THREADS`` = ``threads`` (default
``collage.util.physical_cores()``). One ``ov.Core`` per process (:func:`core`).

Hand-over: with ``pinning=False`` (the default) the plugin does not pin its worker threads to cores
(``ENABLE_CPU_PINNING`` NO), so when another runtime's partition runs next the OS can give it the
cores at once; ``pinning=True`` is the plugin's own default for LATENCY on Linux.

Linked partitions (``compile_linked``, in ``collage.backends.openvino.link``): the feature maps between
OpenVINO partitions of one sequence are handed over channels-last (NHWC, the plugin's own layout) in
the inference precision (f32, or bf16 carried in numpy as its raw ``uint16`` bits), so the boundary
needs no Reorder pair.

Artifact format: OpenVINO IR (``.xml`` + ``.bin`` written by ``ov.save_model`` without fp16
compression), not a compiled blob (``export_model``). The IR is portable across CPU models and
OpenVINO patch releases and the compile settings above are applied again at load, so a loaded
partition computes exactly what a fresh compile does; a blob is tied to the exact OpenVINO build, the
CPU's ISA and the config it was compiled with. The price is a compile at load (milliseconds for a
layer, about a second for BERT-base).
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.backends.base import Backend, Compiled, trial_refusal
from collage.backends.openvino.compiled import OVCompiled, core, openvino_module
from collage.errors import ArtifactError, BackendUnavailable, CollageError
from collage.util import onednn_below_vnni, thread_count

if TYPE_CHECKING:  # the deploy path (load) needs openvino only; onnx is read lazily where a model is converted
    import onnx

log = logging.getLogger(__name__)

_PRECISIONS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}

class OpenVINOBackend(Backend):
    """OpenVINO CPU plugin (see the module docstring for its settings)."""

    name = "openvino"
    device = "cpu"

    def __init__(self, threads: int | None = None, precision: str = "fp32", pinning: bool = False,
                 hint: str = "LATENCY") -> None:
        if precision not in _PRECISIONS:
            raise CollageError(f"openvino: precision must be one of {sorted(_PRECISIONS)}, not {precision!r}")
        self.threads = thread_count(threads)
        self.precision = precision
        self.pinning = bool(pinning)
        self.hint = hint

    def available(self) -> str | None:
        try:
            devices = core().available_devices
        except BackendUnavailable as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - a broken install says why
            return f"openvino cannot start: {e}"
        if "CPU" not in devices:
            return f"openvino sees no CPU device (devices: {devices})"
        return None

    def version(self) -> str:
        return f"openvino-{openvino_module().get_version().split('-')[0]}-{self.precision}-t{self.threads}"

    @property
    def options(self) -> dict[str, Any]:
        """Constructor keywords: ``get_backend("openvino", **options)`` rebuilds this backend (streams: 1)."""
        return {"precision": self.precision, "threads": self.threads, "hint": self.hint, "pinning": self.pinning}

    def config(self) -> dict[str, str]:
        """The CPU plugin's compile config. In fp32 its dynamic quantization is off (``DYNAMIC_QUANTIZATION_GROUP_SIZE``
        0): by default the plugin quantizes the activations of a MatMul whose weights are compressed (int8/uint8
        weights through ``DequantizeLinear``, ``com.microsoft::MatMulNBits``) to int8 in groups of 32, which moved an
        int4 MLP's output by 0.024 where fp32 matches ONNX Runtime exactly (docs/RUNTIME-FACTS.md)."""
        config = {
            "INFERENCE_PRECISION_HINT": _PRECISIONS[self.precision],
            "PERFORMANCE_HINT": self.hint,
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(self.threads),
            "ENABLE_CPU_PINNING": "YES" if self.pinning else "NO",
        }
        if self.precision == "fp32":
            config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
        return config

    def int8_kernels(self) -> str | None:
        """As every backend's, less what oneDNN's instruction-set cap (``ONEDNN_MAX_CPU_ISA``) takes away: capped
        below VNNI, the plugin runs AVX2's int8 kernels on a VNNI CPU (benchmarks.isa_cap)."""
        kind = super().int8_kernels()
        return "avx2" if kind == "vnni" and onednn_below_vnni() else kind

    def read_model(self, data: bytes) -> Any:
        return core().read_model(data, b"")

    def compile_model(self, model: Any) -> Any:
        return core().compile_model(model, "CPU", self.config())

    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        from collage.backends.openvino.inexact import inexact_node

        found = inexact_node(model)
        if found is not None:
            return found[1]
        return trial_refusal(lambda: self.compile_model(self.read_model(model.SerializeToString())))

    def compile(self, model: onnx.ModelProto) -> OVCompiled:
        from collage.backends.openvino.inexact import check_exact

        check_exact(self.name, model)
        try:
            compiled = self.compile_model(self.read_model(model.SerializeToString()))
        except Exception as e:  # noqa: BLE001 - classified below
            self.raise_compile_error(model, e)
        inits = {t.name for t in model.graph.initializer}
        return OVCompiled(self, compiled, model, [i.name for i in model.graph.input if i.name not in inits],
                          [o.name for o in model.graph.output])

    def compile_linked(self, models: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> list[Compiled]:
        """Partitions run in order in one process; the feature maps between them are handed over NHWC in
        the inference precision, the plugin's own form (``collage.backends.openvino.link``)."""
        from collage.backends.openvino.link import compile_linked

        return list(compile_linked(self, models, plain))

    def load(self, directory: Path, entry: Mapping[str, Any]) -> OVCompiled:
        """Read the IR and compile it with this backend's settings."""
        xml = Path(directory) / entry["files"][0]
        weights = xml.with_suffix(".bin").name  # read_model opens it beside the .xml: it must be a listed file
        if xml.suffix != ".xml" or weights not in entry["files"]:
            raise ArtifactError(f"{xml}: an openvino partition lists its IR as .xml then its weights {weights!r}; "
                                f"the list is {list(entry['files'])}: re-export the artifact")
        for name in entry["files"]:
            if not (Path(directory) / name).is_file():
                raise ArtifactError(f"{Path(directory) / name}: openvino partition file is missing")
        saved = entry.get("version")
        if saved and saved != self.version():
            log.warning("%s: saved by %s, loading with %s", xml, saved, self.version())
        try:
            compiled = self.compile_model(core().read_model(str(xml)))
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{xml}: openvino cannot load this partition: {e}") from e
        return OVCompiled(self, compiled, xml, entry.get("inputs"), entry.get("outputs"))
