"""A plan: which backend runs which nodes, in which order. Plain data, JSON round-trip.

A ``Plan`` is what the search returns and what the artifact records: partitions in an executable
order that together cover every node of the graph exactly once, each one convex.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Partition:
    """One piece of a plan.

    ``nodes``: sorted graph node ids. ``backend``: the backend's registry name. ``cost_ms``: the
    measured (or estimated) latency used by the search, ``None`` if unknown. ``runner_up``: the next
    best backend for the same nodes and its cost, when one was measured. ``inputs``/``outputs``: the
    boundary tensor names (filled in when a plan is tied to a graph).
    """

    nodes: tuple[int, ...]
    backend: str
    cost_ms: float | None = None
    runner_up: tuple[str, float] | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = list(self.nodes)
        d["inputs"] = list(self.inputs)
        d["outputs"] = list(self.outputs)
        d["runner_up"] = list(self.runner_up) if self.runner_up else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Partition:
        ru = d.get("runner_up")
        return cls(nodes=tuple(int(i) for i in d["nodes"]), backend=str(d["backend"]),
                   cost_ms=d.get("cost_ms"), runner_up=(str(ru[0]), float(ru[1])) if ru else None,
                   inputs=tuple(d.get("inputs", ())), outputs=tuple(d.get("outputs", ())),
                   fingerprint=str(d.get("fingerprint", "")))


@dataclass
class Plan:
    """Ordered partitions plus what the search predicted for them.

    ``predicted_ms``: the search's objective (sum of partition costs + transition costs).
    ``notes``: free-form facts a reader of the report should see (for example "never worse: fell
    back to onnxruntime").
    """

    partitions: list[Partition]
    predicted_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def backends(self) -> list[str]:
        seen: list[str] = []
        for p in self.partitions:
            if p.backend not in seen:
                seen.append(p.backend)
        return seen

    def parts(self) -> tuple[tuple[tuple[int, ...], str], ...]:
        """Each partition as ``(nodes, backend)``, in order: what makes two plans the same plan (and what
        ``collage.search.plan_from_parts`` takes)."""
        return tuple((tuple(p.nodes), p.backend) for p in self.partitions)

    def node_backend(self) -> dict[int, str]:
        return {i: p.backend for p in self.partitions for i in p.nodes}

    def check_cover(self, n_nodes: int) -> None:
        """Raise ValueError unless the partitions cover ids 0..n_nodes-1 exactly once."""
        seen: dict[int, int] = {}
        for k, p in enumerate(self.partitions):
            for i in p.nodes:
                if i in seen:
                    raise ValueError(f"node {i} is in partitions {seen[i]} and {k}")
                seen[i] = k
        missing = sorted(set(range(n_nodes)) - set(seen))
        if missing:
            raise ValueError(f"nodes {missing[:10]} are in no partition")

    @classmethod
    def single(cls, backend: str, n_nodes: int, cost_ms: float | None = None) -> Plan:
        return cls([Partition(tuple(range(n_nodes)), backend, cost_ms)], predicted_ms=cost_ms)

    def to_dict(self) -> dict[str, Any]:
        return {"partitions": [p.to_dict() for p in self.partitions], "predicted_ms": self.predicted_ms,
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls([Partition.from_dict(p) for p in d["partitions"]], d.get("predicted_ms"), list(d.get("notes", [])))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    def describe(self) -> str:
        parts = ", ".join(f"{p.backend}[{len(p.nodes)}]" for p in self.partitions)
        pred = f" predicted {self.predicted_ms:.3f} ms" if self.predicted_ms is not None else ""
        return f"Plan({len(self.partitions)} partitions: {parts}{pred})"

