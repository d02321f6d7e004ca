"""Device-resident runs of an artifact: between GPU partitions tensors stay on the device.

A GPU partition loaded with ``device_io=True`` (every GPU backend takes that option: torch, torch-inductor, the torch
variants, tensorrt, onnxruntime-cuda) takes torch tensors and returns torch tensors on its device. ``load`` turns
that on for the partitions of GPU backends (:func:`resident_options`; ``device_resident=True`` for every backend that
takes the option, e.g. the torch backend on a CPU in the tests, ``False`` for none), and an artifact with such a
partition runs through :class:`ResidentRunner`:

* ``Artifact.run(feeds)`` (numpy in, numpy out, as always): the host copies happen at the artifact's own inputs
  (a device partition uploads what it reads) and outputs (downloaded once, at the end), and where a CPU partition
  reads a device tensor (``.cpu().numpy()``) -- never between two device partitions.
* ``Artifact.run_tensors(feeds)``: takes torch tensors (CUDA tensors on a GPU; numpy is accepted too) and returns
  torch tensors on the artifact's device, with no host copy at all when every partition is on the device.

On a CUDA device the plan is captured in CUDA graphs and replayed (:mod:`collage.runtime.graphs`: where a partition
cannot be captured it splits the plan; ``Artifact.graph_report()`` says where and why). Runs that time each
partition (``run(feeds, times)``) run the partitions one by one instead.

A device partition's output that the backend overwrites at its next call (``reuses_outputs``: TensorRT's bound
buffers; a replayed graph's outputs) is copied where it leaves the artifact, as the numpy path copies reused host
buffers. Nothing here imports torch until a device-resident artifact runs (an ONNX Runtime artifact never does).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from collage.errors import BackendUnavailable, CollageError, InputError, InputTypeError
from collage.runtime.parts import Part, call, is_resident, last_uses, output, to_host

#: a torch tensor (torch is imported lazily: annotations stay Any)
Tensor = Any


class Spec(Protocol):
    """An input or output of the artifact (``collage.runtime.artifact.TensorSpec``)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    def describe(self) -> str: ...


class Loaded(Protocol):
    """What the runner asks of a loaded artifact (:class:`collage.runtime.artifact.Artifact`)."""

    allow_nonfinite: bool
    backend_objects: dict[str, Any]

    @property
    def partitions(self) -> Sequence[Part]: ...

    @property
    def inputs(self) -> Sequence[Spec]: ...

    @property
    def outputs(self) -> Sequence[Spec]: ...

    def check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray[Any, Any]]: ...


def resident_options(manifest: Mapping[str, Any], backend_options: Mapping[str, Mapping[str, Any]] | None,
                     device_resident: bool | None) -> dict[str, dict[str, Any]]:
    """``backend_options`` with ``device_io=True`` added for the backends whose partitions stay on the device: with
    ``device_resident`` None those that run on a GPU, True every one that takes the option, False none. An option
    the caller gave wins."""
    from collage.backends import option_names

    out = {k: dict(v) for k, v in (backend_options or {}).items()}
    if device_resident is False:
        return out
    for name, info in manifest["backends"].items():
        try:
            takes = "device_io" in (option_names(name) or ())
        except (BackendUnavailable, CollageError):  # load names what is missing
            continue
        on_gpu = str(info.get("device", "cpu")) != "cpu"
        if takes and (device_resident or on_gpu):
            out.setdefault(name, {}).setdefault("device_io", True)
    return out


def _torch() -> Any:
    import torch  # noqa: PLC0415 - lazy: a host-only artifact never imports torch

    return torch


def torch_dtype(dtype: np.dtype[Any]) -> Any:
    """The torch dtype of a numpy dtype."""
    return _torch().from_numpy(np.empty(0, dtype)).dtype


def host_input(part: Part, value: Any) -> Any:
    """What ``part`` is fed for ``value``: as it is for a device-resident part, else a host array."""
    return value if is_resident(part) else to_host(value)


class ResidentRunner:
    """Runs an artifact whose device partitions keep their tensors on the device (module docstring)."""

    def __init__(self, artifact: Loaded, device: str) -> None:
        from collage.runtime import graphs

        self.artifact = artifact
        self.device = device
        self.parts = list(artifact.partitions)
        self.resident = [is_resident(p) for p in self.parts]
        self.output_names = [s.name for s in artifact.outputs]
        self.last_use = last_uses(self.parts)
        self.segments = graphs.plan_segments([graphs.capture_refusal(p) for p in self.parts])
        self.graphs_off = graphs.graphs_wanted(device, self.segments)
        self.replay = (graphs.GraphReplay(self.parts, self.segments, self.output_names, device)
                       if self.graphs_off is None else None)
        #: outputs whose producer overwrites them at its next call (numpy buffers; TensorRT's bound tensors)
        self._reused = {t for p in self.parts if getattr(p.compiled, "reuses_outputs", True) for t in p.outputs}

    def graph_report(self) -> dict[str, Any]:
        """Whether the plan is replayed as CUDA graphs, which segments are captured and what splits them."""
        from collage.runtime.graphs import describe

        return {"replayed": self.replay is not None, "why_not": self.graphs_off,
                **describe(self.segments, self.parts)}

    def run_host(self, feeds: Mapping[str, np.ndarray[Any, Any]], times: list[float] | None = None
                 ) -> dict[str, np.ndarray[Any, Any]]:
        """``Artifact.run``: numpy feeds (already checked) in, numpy outputs out."""
        env = self._run(dict(feeds), times)
        out: dict[str, np.ndarray[Any, Any]] = {}
        for t in self.output_names:
            value = env[t]
            if isinstance(value, np.ndarray):  # a host partition's output: copied where the numpy path copies it
                out[t] = np.array(value, copy=True) if t in self._reused else value
            else:  # a device tensor: downloaded, a fresh array
                out[t] = to_host(value)
        return out

    def run_tensors(self, feeds: Mapping[str, Any]) -> dict[str, Tensor]:
        """``Artifact.run_tensors``: torch tensors (or arrays) in, torch tensors on ``device`` out."""
        env = self._run(self.check_tensors(feeds), None)
        torch = _torch()
        out: dict[str, Tensor] = {}
        for t in self.output_names:
            value = env[t]
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(np.array(value, copy=True))
            elif t in self._reused or self.replay is not None:  # a replayed graph's outputs are its own buffers
                value = value.clone()
            out[t] = value.to(self.device)
        return out

    def check_tensors(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Feeds by input name: torch tensors of the input's shape and dtype, or arrays (checked like ``run``'s)."""
        torch = _torch()
        if not isinstance(feeds, Mapping):
            raise InputTypeError(f"inputs must be a dict {{input name: tensor}}, not a {type(feeds).__name__}")
        arrays = {k: v for k, v in feeds.items() if not isinstance(v, torch.Tensor)}
        tensors = {k: v for k, v in feeds.items() if isinstance(v, torch.Tensor)}
        specs = {s.name: s for s in self.artifact.inputs}
        for name, t in tensors.items():
            spec = specs.get(name)
            if spec is None:
                raise InputError(f"unknown input {name!r}: the model's inputs are {', '.join(map(repr, specs))}")
            if tuple(t.shape) != spec.shape or t.dtype != torch_dtype(spec.dtype):
                raise InputError(f"input {name!r}: expected {spec.describe()}, got shape {tuple(t.shape)} {t.dtype}")
            if not self.artifact.allow_nonfinite and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise InputError(f"input {name!r} holds NaN or infinite values; refused (allow_nonfinite=True runs it)")
        placeholders = {k: np.zeros(specs[k].shape, specs[k].dtype) for k in tensors}
        checked = self.artifact.check_feeds({**arrays, **placeholders})  # missing / extra / wrong arrays
        return {**checked, **tensors}

    def _run(self, env: dict[str, Any], times: list[float] | None) -> dict[str, Any]:
        if self.replay is not None and times is None:
            return self.replay.run(env, host_input)
        keep = set(self.output_names)
        for p in self.parts:
            pfeeds = {t: host_input(p, env[t]) for t in p.inputs}
            t0 = time.perf_counter_ns()
            result = call(p, pfeeds)
            if times is not None:
                times.append((time.perf_counter_ns() - t0) / 1e6)
            for t in p.outputs:
                env[t] = output(p, result, t)
            for t in p.inputs:
                if self.last_use.get(t) == p.index and t not in keep:
                    del env[t]
        return env


def resident_runner(artifact: Loaded) -> ResidentRunner | None:
    """The runner of ``artifact`` when a partition of it keeps its tensors on the device, else None (a host run)."""
    if not any(is_resident(p) for p in artifact.partitions):
        return None
    return ResidentRunner(artifact, artifact_device(artifact.partitions, artifact.backend_objects))


def artifact_device(parts: Sequence[Part], backends: Mapping[str, Any]) -> str:
    """Where ``run_tensors`` returns its tensors: the device of the first device-resident partition's backend."""
    for p in parts:
        if is_resident(p):
            device = str(getattr(backends.get(p.backend), "device", "cuda"))
            return "cpu" if device == "cpu" else device
    return "cpu"
