"""A plan: which backend runs which nodes, in which order. Plain data, JSON round-trip.

A ``Plan`` is what the search returns and what the artifact records: partitions in an executable
order that together cover every node of the graph exactly once, each one convex, and its ``notes``:
facts for the reader of the report, each a :class:`Note` of a :class:`NoteKind`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class NoteKind(StrEnum):
    """What a plan's note is about: the tune keeps, drops or rewrites notes by their kind, never by their
    wording."""

    #: the search's own facts (a greedy or ILP answer, the plan it kept and why)
    SEARCH = "search"
    #: how much of the prediction is transitions between backends: rewritten when the plan is priced again
    TRANSITIONS = "transitions"
    #: the plan is refinement's ("refined by N measured trials"): dropped when never-worse replaces the plan
    REFINED = "refined"
    #: what refinement did or why it did not run (kept whatever becomes of the plan)
    REFINEMENT = "refinement"
    #: the accuracy budget's outcome: replaced when the precision search runs again or the plan changes
    PRECISION = "precision"
    #: what the accuracy budget is judged on (the calibration inputs)
    ACCURACY = "accuracy"
    #: the plan is the best single backend because the searched one was not faster
    NEVER_WORSE = "never worse"
    #: the plan is the fastest single backend whose outputs match the reference, because the chosen one's did not
    NUMERICS = "numerics"
    #: facts of the baselines (a stale cost DB, baselines taken from it)
    BASELINES = "baselines"
    #: anything else (and every note of a plan.json written before notes had kinds)
    OTHER = "other"


class Note(str):
    """One fact of a plan for the reader of the report: its sentence, and its ``kind``.

    A Note *is* its text (a ``str``): report.json's ``notes``, the bench table and whoever reads or prints the
    sentence see it as before, while the tune filters notes by kind (:func:`kind_of`). Immutable, like the
    string it is; equal to its text (the kind is not compared). plan.json writes each note as ``{"kind": ...,
    "text": ...}``; a plain string there (a plan.json from before kinds) reads as kind ``other``.
    """

    __slots__ = ("kind",)
    kind: NoteKind

    def __new__(cls, kind: NoteKind | str, text: str) -> Note:
        note = super().__new__(cls, text)
        object.__setattr__(note, "kind", NoteKind(kind))
        return note

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Note is immutable (set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Note is immutable (delete {name!r})")

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Note({self.kind.value!r}, {str.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy: the kind travels with the text
        return Note, (self.kind.value, self.text)

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "text": self.text}

    @classmethod
    def from_json(cls, value: Any) -> Note:
        """A note as plan.json holds it: ``{"kind", "text"}`` (an unknown kind reads as ``other``), or a plain
        string (plan.json before kinds: ``other``)."""
        if isinstance(value, Note):
            return value
        if isinstance(value, dict):
            try:
                kind = NoteKind(str(value.get("kind")))
            except ValueError:
                kind = NoteKind.OTHER
            return cls(kind, str(value.get("text", "")))
        return cls(NoteKind.OTHER, str(value))


def kind_of(note: str) -> NoteKind:
    """A note's kind; a plain string (a note made without one) is ``other``."""
    return note.kind if isinstance(note, Note) else NoteKind.OTHER


def as_notes(notes: Iterable[Any]) -> list[Note]:
    return [Note.from_json(n) for n in notes]


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
    ``notes``: facts a reader of the report should see (for example "never worse: fell back to
    onnxruntime"), each a :class:`Note` (plain strings given here become notes of kind ``other``).
    """

    partitions: list[Partition]
    predicted_ms: float | None = None
    notes: list[Note] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.notes = as_notes(self.notes)

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
                "notes": [Note.from_json(n).to_dict() for n in self.notes]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        """A plan as ``to_dict`` writes it; notes as plain strings (plan.json before kinds) read as ``other``."""
        return cls([Partition.from_dict(p) for p in d["partitions"]], d.get("predicted_ms"),
                   as_notes(d.get("notes") or []))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    def describe(self) -> str:
        parts = ", ".join(f"{p.backend}[{len(p.nodes)}]" for p in self.partitions)
        pred = f" predicted {self.predicted_ms:.3f} ms" if self.predicted_ms is not None else ""
        return f"Plan({len(self.partitions)} partitions: {parts}{pred})"

