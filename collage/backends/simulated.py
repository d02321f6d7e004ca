"""``SleepBackend``: a simulated backend whose call is a calibrated sleep, for scale tests and benchmarks.

Not registered (it computes nothing): name it as ``"collage.backends.simulated:SleepBackend"`` where a
backend spec is taken (``measure_candidates``, the measurement worker). A call of a compiled model sleeps
``ms_per_node`` times the model's node count; a compile sleeps ``compile_s``. A sleep leaves the cores
idle, so N simulated machines on one small machine measure in parallel the way N real ones would: the
distributed benchmark (benchmarks/distributed.py) uses it to measure the scaling of the Ray executor
rather than the cores of the machine it runs on.

With ``$COLLAGE_SLEEP_LOG`` set, every compile appends a line (host, pid, sha256 of the model) to that
file: tests count how many times each candidate was really measured.
"""
from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from collage.backends.base import Backend, Compiled


class _SleepCompiled(Compiled):
    backend = "sleep"

    def __init__(self, model: onnx.ModelProto, seconds: float) -> None:
        self.seconds = seconds
        self.input_names = [i.name for i in model.graph.input]
        self.output_names = [o.name for o in model.graph.output]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(self.seconds)
        return {}

    def save(self, directory: Path) -> dict[str, Any]:
        raise NotImplementedError("SleepBackend is simulated: it has nothing to save")


class SleepBackend(Backend):
    """A call sleeps ``ms_per_node`` ms per node of the model; a compile sleeps ``compile_s`` (module docstring)."""

    name = "sleep"
    device = "cpu"

    def __init__(self, ms_per_node: float = 1.0, compile_s: float = 0.0) -> None:
        self.ms_per_node, self.compile_s = float(ms_per_node), float(compile_s)

    def version(self) -> str:
        return "sleep-1"

    def available(self) -> str | None:
        return None

    def supports(self, graph: Any, node_id: int) -> bool:
        return True

    def compile(self, model: onnx.ModelProto) -> Compiled:
        log = os.environ.get("COLLAGE_SLEEP_LOG")
        if log:
            digest = hashlib.sha256(model.SerializeToString()).hexdigest()[:16]
            with open(log, "a") as f:
                f.write(f"{socket.gethostname()} {os.getpid()} {digest}\n")
        if self.compile_s:
            time.sleep(self.compile_s)
        return _SleepCompiled(model, self.ms_per_node * len(model.graph.node) / 1000.0)

    def load(self, directory: Path, entry: Mapping[str, Any]) -> Compiled:
        raise NotImplementedError("SleepBackend is simulated: it has no artifact to load")

    @property
    def options(self) -> dict[str, Any]:
        return {"ms_per_node": self.ms_per_node, "compile_s": self.compile_s}
