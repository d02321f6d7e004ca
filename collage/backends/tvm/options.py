"""What decides what a TVM build produces (:class:`BuildOptions`): made by the backend, sent to the worker
with each request, read by the MetaSchedule tuning. A module of its own so the worker and the tuning it
calls both read it without importing each other."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BuildOptions:
    """Everything that decides what a build produces (sent to the worker with each request)."""

    mcpu: str | None
    num_cores: int
    tuning: str = "none"               # "none" | "metaschedule"
    trials: int = 64                   # MetaSchedule trials per TIR workload
    tuning_db: str | None = None       # MetaSchedule JSON database directory
    dlight: bool = False               # dlight CPU rules (GEMV, Reduction) on what is left unscheduled
    runner_timeout_s: float = 120.0    # per MetaSchedule candidate measurement
    seed: int | None = None
    abort_on: str | None = None        # test hook, see collage.backends.tvm.worker.ABORT_ENV

    def target(self):
        import tvm

        spec: dict[str, Any] = {"kind": "llvm", "num-cores": int(self.num_cores)}
        if self.mcpu:
            spec["mcpu"] = self.mcpu
        return tvm.target.Target(spec)
