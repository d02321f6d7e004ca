"""Device-resident runs of an artifact: between GPU partitions tensors stay on the device.

A GPU partition loaded with ``device_io=True`` (every GPU backend takes that option: torch, torch-inductor, the torch
variants, tensorrt, onnxruntime-cuda) takes torch tensors and returns torch tensors on its device. ``load`` turns
that on for the partitions of GPU backends (:func:`resident_options`; ``device_resident=True`` for every backend that
takes the option, e.g. the torch backend on a CPU in the tests, ``False`` for none), and an :class:`Artifact`
with such a partition runs through :class:`ResidentRunner`:

* ``Artifact.run(feeds)`` (numpy in, numpy out, as always): the host copies happen at the artifact's own inputs
  (a device partition uploads what it reads) and outputs (downloaded once, at the end), and where a CPU partition
  reads a device tensor (``.cpu().numpy()``) -- never between two device partitions.
* ``Artifact.run_tensors(feeds)``: takes torch tensors (CUDA tensors on a GPU; numpy is accepted too) and returns
  torch tensors on the artifact's device, with no host copy at all when every partition is on the device.

A device partition's output that the backend overwrites at its next call (``reuses_outputs``: TensorRT's bound
buffers) is cloned where it leaves the artifact, like the numpy path copies reused host buffers.
Nothing here imports torch until a device-resident artifact runs (an ONNX Runtime artifact never does).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.errors import BackendUnavailable, CollageError, InputError, InputTypeError

if TYPE_CHECKING:
    from collage.runtime.artifact import Artifact, LoadedPartition

#: a torch tensor (torch is imported lazily: annotations stay Any)
Tensor = Any


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


def is_resident(partition: LoadedPartition) -> bool:
    """Whether ``partition`` takes and returns torch tensors (loaded with ``device_io=True``)."""
    return bool(getattr(partition.compiled, "device_io", False))


def _torch() -> Any:
    import torch  # noqa: PLC0415 - lazy: a host-only artifact never imports torch

    return torch


def torch_dtype(dtype: np.dtype[Any]) -> Any:
    """The torch dtype of a numpy dtype."""
    return _torch().from_numpy(np.empty(0, dtype)).dtype


def to_host(value: Any) -> np.ndarray[Any, Any]:
    """A numpy array of ``value`` (a torch tensor on any device, or an array); a fresh copy for a tensor."""
    if isinstance(value, np.ndarray):
        return value
    return np.array(value.detach().cpu().numpy(), copy=True)


class ResidentRunner:
    """Runs an artifact whose device partitions keep their tensors on the device (module docstring)."""

    def __init__(self, artifact: Artifact, device: str) -> None:
        self.artifact = artifact
        self.device = device
        self.resident = [is_resident(p) for p in artifact.partitions]
        reused = {t for p in artifact.partitions if getattr(p.compiled, "reuses_outputs", True) for t in p.outputs}
        self._clone = {t for t in artifact._output_names if t in reused}

    def run_host(self, feeds: Mapping[str, np.ndarray[Any, Any]], times: list[float] | None = None
                 ) -> dict[str, np.ndarray[Any, Any]]:
        """``Artifact.run``: numpy feeds (already checked) in, numpy outputs out."""
        env = self._run(dict(feeds), times)
        return {t: to_host(env[t]) if not isinstance(env[t], np.ndarray) or t in self._clone else env[t]
                for t in self.artifact._output_names}

    def run_tensors(self, feeds: Mapping[str, Any]) -> dict[str, Tensor]:
        """``Artifact.run_tensors``: torch tensors (or arrays) in, torch tensors on ``device`` out."""
        env = self._run(self.check_tensors(feeds), None)
        torch = _torch()
        out: dict[str, Tensor] = {}
        for t in self.artifact._output_names:
            value = env[t]
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(np.array(value, copy=True))
            elif t in self._clone:
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
        art = self.artifact
        keep = set(art._output_names)
        for p, resident in zip(art.partitions, self.resident):
            pfeeds = {t: env[t] if resident else to_host(env[t]) for t in p.inputs}
            t0 = time.perf_counter_ns()
            result = call(p, pfeeds)
            if times is not None:
                times.append((time.perf_counter_ns() - t0) / 1e6)
            for t in p.outputs:
                env[t] = output(p, result, t)
            for t in p.inputs:
                if art._last_use.get(t) == p.index and t not in keep:
                    del env[t]
        return env


def call(p: LoadedPartition, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """Partition ``p``'s run on ``feeds``; CollageError naming the partition when its backend fails."""
    try:
        result: dict[str, Any] = p.compiled.run(feeds)
    except CollageError:
        raise
    except Exception as e:
        raise CollageError(f"partition {p.index} ({p.backend}, {p.directory.name}) failed: "
                           f"{type(e).__name__}: {e}") from e
    return result


def output(p: LoadedPartition, result: Mapping[str, Any], name: str) -> Any:
    """Output ``name`` of partition ``p``'s ``result``; CollageError when the partition did not return it."""
    try:
        return result[name]
    except KeyError:
        raise CollageError(f"partition {p.index} ({p.backend}, {p.directory.name}) returned no tensor {name!r} (it "
                           f"returned {sorted(result)}); the artifact is inconsistent: re-export it") from None


def resident_runner(artifact: Artifact) -> ResidentRunner | None:
    """The runner of ``artifact`` when a partition of it keeps its tensors on the device, else None (a host run)."""
    if not any(is_resident(p) for p in artifact.partitions):
        return None
    return ResidentRunner(artifact, artifact_device(artifact.partitions, artifact.backend_objects))


def artifact_device(partitions: Sequence[LoadedPartition], backends: Mapping[str, Any]) -> str:
    """Where ``run_tensors`` returns its tensors: the device of the first device-resident partition's backend."""
    for p in partitions:
        if is_resident(p):
            device = str(getattr(backends.get(p.backend), "device", "cuda"))
            return "cpu" if device == "cpu" else device
    return "cpu"
