"""ONNX Runtime on CPU (the MLAS kernels): the universal fallback backend.

Threading (measured: results/transitions/transitions-wait.md, results/transitions/transitions-quiet.md, issue 19): by
default (``shared_pool=True``) every session joins ONE process-wide intra-op pool of ``threads`` threads (default
``collage.util.physical_cores()``; inter-op 1), created by ``set_global_thread_pool_sizes`` before the first
session. It is the fastest scheme measured here for ONNX Runtime alone and for chains of ONNX Runtime
partitions (results/transitions/transitions-wait.md), and its price is the hand-over: its workers spin ~50 ms after
every run whatever the sessions ask (``session.force_spinning_stop`` and ``allow_spinning`` reach per-session pools
only: onnxruntime/core/session/inference_session.cc; Python has no binding for the global pool's spin control),
so an OpenVINO partition right after an ONNX Runtime one would share the cores with that spin (milliseconds
per switch at BERT-base scale) but for ``park`` below. The tuner measures the switch with real work on
both sides and the search pays it (collage.measure.transitions). **Side effect** of that pool: once it
exists, ONNX Runtime refuses any session in the process that asks for its own pool
("use_per_session_threads must be false when using a global thread pool"). So that
other code in the process (reference runs, zoo calibration, tests) keeps working, creating the pool also
makes ``onnxruntime.InferenceSession`` switch any session that asks for its own pool to the shared one
(``session._adopt_plain_sessions``; its ``intra_op_num_threads`` is then ignored), and every session of
this backend created later joins it too. New code should build plain sessions with :func:`make_session`.

``park`` (shared pool, Linux; on by default): while another runtime runs, the pool's workers are parked
(blocked in a signal handler, :mod:`collage.backends.handover`) instead of spinning beside it, and woken
when ONNX Runtime runs next: the switch to OpenVINO then costs ~0 at BERT-base scale, while
ONNX Runtime alone and its chains keep the shared pool's speed (results/transitions/transitions.md). Like ``threads``,
the backend that creates the process-wide pool decides it for the process.

``pool_nice`` (shared pool, Linux): the pool's worker threads run that much lower in priority
(``setpriority`` on their thread ids when the pool is made; the calling thread keeps its own). Alone,
ONNX Runtime's workers still get a core each; when their after-run spin overlaps another runtime's
threads, the kernel gives those the core (results/transitions/transitions-nice.md).

``shared_pool=False``: each session owns its pool (in a process where the shared pool does not exist yet);
``wait`` says how its workers wait between parallel sections: ``"timed"`` (spin at most ``spin_us``, then
sleep: ``session.intra_op.spin_duration_us``, ONNX Runtime >= 1.32), ``"stop"`` (spin while a run lasts
(at most ``spin_us`` per wait when non-zero), stop when it returns: ``session.force_spinning_stop``) or
``"sleep"`` (``allow_spinning`` 0). These hand the cores over at once but made ONNX Runtime alone and
same-runtime chains slower (results/transitions/transitions-wait.md).
``spin=True`` keeps ONNX Runtime's default spin-wait on a session's own pool (no stop after a run).

Residual cuts (``residual_fusion=True``, the default; measured: results/chains/chain.md): at level ``all``
ONNX Runtime runs convolutions in its blocked NCHWc layout and fuses a residual Add/Sum (+ Relu)
into the convolution before it, but only when both addends are NCHWc tensors made inside the graph.
A partition that starts at a residual block's input reads that input as an NCHW graph input, so the
block's closing Sum and Relu stayed unfused: two extra full passes over the tensor per cut. For such
inputs (4-D float, read by a Conv and an Add/Sum) ``compile`` routes the input through a 1x1 MaxPool
(which ONNX Runtime turns into NCHWc and shares with the Conv, so the fusion happens), lets ONNX Runtime
optimise, removes that MaxPool again from the optimised graph (it is an identity in any layout) and
builds the session from the result (a second session creation at compile time). What remains per
cut is the layout conversion itself: ReorderOutput at the end of one piece, ReorderInput at the start
of the next; ``compile_linked`` (:mod:`collage.backends.onnxruntime.link`) removes that pair between ONNX
Runtime partitions that run one after another, handing the tensor over in NCHWc.

Weight-only quantized MatMuls (fp32): from level ``extended`` ONNX Runtime fuses ``DequantizeLinear`` of int8/uint8
(or int4) weights + ``MatMul`` into ``com.microsoft::MatMulNBits`` and, by default, runs it at accuracy level 4:
the activations quantized to int8 on the fly (off by 0.28 on outputs up to 49 where the unfused graph is within
2e-5 of float64; docs/RUNTIME-FACTS.md). The fp32 backend asks for accuracy level 1 (fp32 compute,
``session.qdq_matmulnbits_accuracy_level``), which keeps the ONNX meaning; the reference runs
(:func:`collage.backends.reference_backend`) are this backend, so they compute it exactly too. A partition whose
only quantization is of its weights (:func:`weight_only_quantized`) is run with ONNX Runtime's QDQ handling off
(``session.disable_quant_qdq``): its constant folding then dequantizes the weights once, at load, into a plain
fp32 MatMul, as exact (3.7e-5 off float64) and 3.1x faster than the fused fp32 kernel, 0.89x the int8 shortcut's
speed (x[1,64,1024] @ DQ(int8 W[1024,1024]): 0.262 vs 0.810 and 0.233 ms; results/backends/weight-only.md), at fp32
weights' memory. A ``MatMulNBits`` written in the model keeps its own ``accuracy_level`` (the op's meaning,
which ONNX Runtime defines).
"""
from __future__ import annotations

import logging
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.backends.base import Backend, Compiled, trial_refusal
from collage.backends.options import takes_options
from collage.backends.onnxruntime.known_wrong import check_known_wrong, known_wrong_node
from collage.backends.onnxruntime.route import (
    drop_routes,
    residual_inputs,
    route_residual_inputs,
)
from collage.backends.onnxruntime.session import (
    FP32_DQ_MATMUL,
    OrtCompiled,
    ensure_global_pool,
    global_pool_threads,
    onnxruntime_module,
)
from collage.errors import ArtifactError, BackendUnavailable, CollageError
from collage.util import thread_count

if TYPE_CHECKING:
    import onnx  # compile time only (imported where used): ``load`` builds sessions from files, never imports onnx

log = logging.getLogger(__name__)

_OPT_LEVELS = ("disable", "basic", "extended", "all")

#: With its own pool and ``spin=False``: microseconds a worker keeps spinning for more work before it
#: sleeps (``session.intra_op.spin_duration_us``, time-based spinning, ORT PR #27916).
SPIN_US = 100
#: With its own pool and ``spin=False``, how its workers wait between parallel sections: ``"timed"`` (spin
#: ``spin_us``, then sleep), ``"stop"`` (spin while a run lasts, stop when it returns:
#: ``session.force_spinning_stop``) or ``"sleep"`` (never spin: ``allow_spinning`` 0).
WAITS = ("timed", "stop", "sleep")


#: ops that quantize activations (a QDQ model's QuantizeLinear, a dynamically quantized one's): a partition holding
#: one keeps ONNX Runtime's QDQ handling, whose int8 kernels are that model's form
_ACTIVATION_QUANTIZERS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "DynamicQuantizeMatMul",
                                    "DynamicQuantizeLSTM", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                                    "ConvInteger"})


def weight_only_quantized(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s only quantization is of its weights: ``DequantizeLinear`` nodes, each reading an
    initializer, and nothing that quantizes activations (``_ACTIVATION_QUANTIZERS``)."""
    g = model.graph
    dq = [n for n in g.node if n.op_type == "DequantizeLinear"]
    if not dq or any(n.op_type in _ACTIVATION_QUANTIZERS for n in g.node):
        return False
    weights = {t.name for t in g.initializer}
    return all(n.input and n.input[0] in weights for n in dq)


@dataclass(frozen=True)
class OrtOptions:
    """The ONNX Runtime backend's constructor options (``--backend-option onnxruntime.NAME=VALUE``; the
    module docstring says what the threading ones do)."""

    threads: int | None = None
    spin: bool = False
    shared_pool: bool = True
    opt_level: str = "all"
    precision: str = "fp32"
    residual_fusion: bool = True
    spin_us: int = SPIN_US
    wait: str = "timed"
    pool_nice: int = 0
    park: bool = True


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime, CPU execution provider, fp32 (see the module docstring for threading)."""

    name = "onnxruntime"
    device = "cpu"

    @takes_options(OrtOptions)
    def __init__(self, options: OrtOptions) -> None:
        o = options
        if o.precision != "fp32":
            raise CollageError(f"onnxruntime (CPU) runs fp32 only, not {o.precision!r}")
        if o.opt_level not in _OPT_LEVELS:
            raise CollageError(f"onnxruntime: opt_level must be one of {_OPT_LEVELS}, not {o.opt_level!r}")
        self.threads = thread_count(o.threads)
        self.spin = bool(o.spin)
        self.shared_pool = bool(o.shared_pool)
        self.opt_level = o.opt_level
        self.precision = o.precision
        self.residual_fusion = bool(o.residual_fusion)
        self.spin_us = max(0, int(o.spin_us))
        if o.wait not in WAITS:
            raise CollageError(f"onnxruntime: wait must be one of {WAITS}, not {o.wait!r}")
        self.wait = o.wait
        self.pool_nice = max(0, int(o.pool_nice))
        self.park = bool(o.park)

    def available(self) -> str | None:
        try:
            ort = onnxruntime_module()
        except BackendUnavailable as e:
            return str(e)
        if "CPUExecutionProvider" not in ort.get_available_providers():
            return "this onnxruntime build has no CPUExecutionProvider"
        return None

    def version(self) -> str:
        return f"onnxruntime-{onnxruntime_module().__version__}-{self.precision}-t{self.threads}-opt{self.opt_level}"

    @property
    def options(self) -> dict[str, Any]:
        """Constructor keywords: ``get_backend("onnxruntime", **options)`` rebuilds this backend (inter-op threads:
        1)."""
        opts = {"precision": self.precision, "threads": self.threads, "opt_level": self.opt_level,
                "spin": self.spin, "shared_pool": self.shared_pool}
        if self.name == "onnxruntime":  # a CPU compile option: subclasses (onnxruntime-cuda) neither take nor use it
            opts["residual_fusion"] = self.residual_fusion
            if self.shared_pool and self.pool_nice:
                opts["pool_nice"] = self.pool_nice
            if self.shared_pool and not self.park:
                opts["park"] = False
            if not self.shared_pool and not self.spin:
                opts["wait"] = self.wait
                if self.wait != "sleep":
                    opts["spin_us"] = self.spin_us
        return opts

    def session_options(self, opt_level: str | None = None, model: onnx.ModelProto | None = None) -> Any:
        """SessionOptions with this backend's threading, spinning and optimisation settings; for ``model`` (the
        model the session will run, where known), what its form asks (:func:`weight_only_quantized`)."""
        ort = onnxruntime_module()
        so = ort.SessionOptions()
        so.log_severity_level = 3
        level = opt_level or self.opt_level
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if self.precision == "fp32":  # its DequantizeLinear + MatMul fusion computes in fp32, not int8 (module doc)
            so.add_session_config_entry(*FP32_DQ_MATMUL)
            if model is not None and weight_only_quantized(model):  # weights dequantized once, at load (module doc)
                so.add_session_config_entry("session.disable_quant_qdq", "1")
        if self.shared_pool or global_pool_threads() is not None:
            if self.shared_pool:
                ensure_global_pool(self.threads, self.pool_nice, self.park)
            so.use_per_session_threads = False
        else:
            so.intra_op_num_threads = self.threads
            so.inter_op_num_threads = 1
        if self.spin:
            so.add_session_config_entry("session.intra_op.allow_spinning", "1")
        elif not so.use_per_session_threads or self.wait == "sleep" or (self.wait == "timed" and not self.spin_us):
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.add_session_config_entry("session.force_spinning_stop", "1")
        elif self.wait == "stop":  # its own pool spins while a run lasts and stops when the run returns
            so.add_session_config_entry("session.intra_op.allow_spinning", "1")
            so.add_session_config_entry("session.force_spinning_stop", "1")
            if self.spin_us:  # and within the run spins at most spin_us between parallel sections
                so.add_session_config_entry("session.intra_op.spin_duration_us", str(self.spin_us))
        else:  # its own pool spins at most spin_us after a parallel section, then sleeps (ORT >= 1.32)
            so.add_session_config_entry("session.intra_op.allow_spinning", "1")
            so.add_session_config_entry("session.intra_op.spin_duration_us", str(self.spin_us))
        return so

    def open_session(self, data: bytes | str, opt_level: str | None = None, quiet: bool = False,
                     model: onnx.ModelProto | None = None) -> Any:
        so = self.session_options(opt_level, model)
        if quiet:  # a refusal is an answer here, not an error worth printing
            so.log_severity_level = 4
        return onnxruntime_module().InferenceSession(data, so, providers=["CPUExecutionProvider"])

    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        found = known_wrong_node(model)
        if found is not None:
            return found[1]
        return trial_refusal(lambda: self.open_session(model.SerializeToString(), opt_level="disable", quiet=True))

    def compile(self, model: onnx.ModelProto) -> OrtCompiled:
        check_known_wrong(self.name, model)
        optimized = self.routed_form(model)
        if optimized is not None:
            try:
                return OrtCompiled(self, self.open_session(optimized, opt_level="disable"), model, optimized)
            except Exception as e:  # noqa: BLE001 - an optimisation only: the plain session below decides
                log.debug("onnxruntime: the residual-routed form does not load (%s); compiling the partition as it is",
                          e)
        try:
            session = self.open_session(model.SerializeToString(), model=model)
        except CollageError:
            raise
        except Exception as e:  # noqa: BLE001 - classified below
            self.raise_compile_error(model, e, "create a session for")
        return OrtCompiled(self, session, model)

    def compile_linked(self, models: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> list[Compiled]:
        """Partitions run in order; linked tensors are handed over in NCHWc (``collage.backends.onnxruntime.link``)."""
        from collage.backends.onnxruntime.link import compile_linked

        return compile_linked(self, models, plain)

    def optimized_model(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """ORT's optimised graph of ``model`` at this backend's level (as ORT writes it, read back)."""
        import onnx

        so = self.session_options(model=model)
        with tempfile.TemporaryDirectory(prefix="collage-ort-") as tmp:
            so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
            onnxruntime_module().InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            return onnx.load(so.optimized_model_filepath)

    def routed_form(self, model: onnx.ModelProto) -> bytes | None:
        """``compile``'s optimised form of ``model`` with its residual inputs routed (module doc); None where
        there is none to route, the routing is off, or it fails (then the plain session is used)."""
        names = residual_inputs(model) if self.residual_fusion and self.opt_level == "all" else []
        if not names:
            return None
        try:
            return self._optimize_routed(model, names)
        except Exception as e:  # noqa: BLE001 - an optimisation only
            log.debug("onnxruntime: residual routing failed (%s); compiling the partition as it is", e)
            return None

    def _optimize_routed(self, model: onnx.ModelProto, names: list[str]) -> bytes | None:
        """ORT's optimised model of ``model`` with ``names`` routed for the residual fusion (module doc);
        None when ORT did not keep the routing MaxPools apart (then the plain session is used)."""
        optimized = self.optimized_model(route_residual_inputs(model, names))
        dropped = drop_routes(optimized)
        if dropped != len(names):
            log.debug("onnxruntime: residual routing of %s not applied (%d of %d routes found)",
                      names, dropped, len(names))
            return None
        return optimized.SerializeToString()

    def load(self, directory: Path, entry: Mapping[str, Any]) -> OrtCompiled:
        """Load a saved partition; the file is already optimised, so the session does not optimise again."""
        path = Path(directory) / entry["files"][0]
        if not path.is_file():
            raise ArtifactError(f"{path}: onnxruntime partition file is missing")
        saved = entry.get("version")
        if saved and saved != self.version():
            log.warning("%s: saved by %s, loading with %s", path, saved, self.version())
        try:
            session = self.open_session(str(path), opt_level="disable")
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{path}: onnxruntime cannot load this partition: {e}") from e
        if entry.get("linked"):  # saved by compile_linked: some inputs/outputs are NCHWc-blocked
            from collage.backends.onnxruntime.link import LinkedOrtCompiled

            return LinkedOrtCompiled(self, session, path, linked=entry["linked"].get("tensors", []))
        return OrtCompiled(self, session, path)
