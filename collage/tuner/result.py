"""What a tune returns (:class:`TuneResult`), and what ``collage tune --json`` prints and ``TuneResult.to_dict()``
returns (documented in the README)::

    {"artifact": "/path/out",                # the artifact directory
     "model": "tiny-resnet", "target": "cpu", "backends": ["onnxruntime", "openvino"],
     "plan_ms": 0.115,                       # stitched plan, measured end to end (median ms)
     "predicted_ms": 0.144,                  # the search's objective
     "baselines": {"onnxruntime": 0.117, "openvino": 0.115},   # whole model on one backend (median ms)
     "best_single": {"backend": "openvino", "ms": 0.115},     # null when no baseline ran
     "speedup": 1.0,                         # best single backend ms / plan ms
     "partitions": [{"index": 0, "backend": "openvino", "nodes": 40, "ms": 0.115, "ms_is": "end to end",
                     "predicted_ms": 0.144}],    # ms: measured, as ``collage report`` shows it (ms_is says how)
     "coverage": {...},                      # collage.report.coverage (measured of distinct, budget cut, refinement)
     "numerics": {...},                      # max_abs_err, tolerance, ok (null under lower precision)
     "notes": ["never worse: ..."]}
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage.plan import Plan


@dataclass
class TuneResult:
    """One tune's artifact folder, final plan, its measured ms, the baselines, and report.json's content. The
    keys of ``to_dict()`` are attributes too, computed once (the first time one is read)."""

    out_dir: Path
    plan: Plan
    plan_ms: float
    baselines: dict[str, float]
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def best_single(self) -> tuple[str, float]:
        """(backend, ms) of the fastest single backend on the whole model (``to_dict()`` has it as a dict)."""
        name = min(self.baselines, key=self.baselines.__getitem__)
        return name, self.baselines[name]

    @property
    def artifact(self) -> str:
        return str(self.out_dir)

    @cached_property
    def _summary(self) -> dict[str, Any]:
        return tune_summary(self)

    @property
    def model(self) -> str | None:
        return self._summary["model"]

    @property
    def target(self) -> str | None:
        return self._summary["target"]

    @property
    def backends(self) -> list[str]:
        return self._summary["backends"]

    @property
    def predicted_ms(self) -> float | None:
        return self._summary["predicted_ms"]

    @property
    def speedup(self) -> float | None:
        """Best single backend ms / plan ms (None when no baseline ran)."""
        return self._summary["speedup"]

    @property
    def coverage(self) -> dict[str, Any] | None:
        return self._summary["coverage"]

    @property
    def numerics(self) -> dict[str, Any] | None:
        return self._summary["numerics"]

    @property
    def notes(self) -> list[str]:
        return self._summary["notes"]

    @property
    def partitions(self) -> Any:
        """The pandas DataFrame of partitions that ``collage report`` shows (collage.report.render.partition_table)."""
        from collage.report.render import partition_table
        return partition_table(self.out_dir)

    def to_dict(self) -> dict[str, Any]:
        """The ``collage tune --json`` object (module docstring): a new dict each call."""
        return tune_summary(self)

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)


def _ms(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def tune_summary(res: Any) -> dict[str, Any]:
    """The JSON object (module docstring) of a ``TuneResult``."""
    report = res.report or {}
    base = {k: _ms(v) for k, v in (res.baselines or {}).items()}
    ok = {k: v for k, v in base.items() if v is not None}
    best = min(ok.items(), key=lambda kv: kv[1]) if ok else None
    from collage.report.render import measured_ms

    parts = [{"index": k, "backend": p.backend, "nodes": list(p.nodes), "cost_ms": _ms(p.cost_ms)}
             for k, p in enumerate(res.plan.partitions)]
    measured = measured_ms({"partitions": parts}, {**report, "plan_ms": _ms(res.plan_ms)})
    return {
        "artifact": str(res.out_dir), "model": report.get("model"), "target": report.get("target"),
        "backends": list(report.get("backends") or []), "plan_ms": _ms(res.plan_ms),
        "predicted_ms": _ms(res.plan.predicted_ms), "baselines": base,
        "best_single": {"backend": best[0], "ms": best[1]} if best else None,
        "speedup": best[1] / res.plan_ms if best and res.plan_ms else None,
        "partitions": [{"index": p["index"], "backend": p["backend"], "nodes": len(p["nodes"]), "ms": ms, "ms_is": how,
                        "predicted_ms": p["cost_ms"]} for p, (ms, how) in zip(parts, measured)],
        "coverage": report.get("coverage"), "numerics": report.get("numerics"), "notes": list(res.plan.notes),
    }
