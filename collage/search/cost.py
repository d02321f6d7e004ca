"""What a candidate costs, as the search sees it: a number of ms, a named failure, or unknown.

A cost table (``{Candidate: raw cost}``) holds whatever the measuring left for each candidate: a number of
ms, a measurement record (``median_ms`` and ``error``, as :mod:`collage.measure` writes them), ``None``
(nothing measured) or a :class:`Cost`. :meth:`Cost.of` reads any of them into one of three states, after the
``Cost`` of TVM's Collage (src/relay/collage/cost.h), with the states named rather than coded as ``inf`` and
``NaN`` in a float:

* **value**: a finite, non-negative number of ms: the only state the search prices a partition with;
* **failed**: the candidate cannot run: its measurement failed (the error is kept), or the number said so
  (``+inf``, a negative number);
* **unknown**: nothing says what it costs: not measured, no median, ``NaN``.

:func:`collage.search.cover.usable_costs` keeps the values and drops the others, so a node that only failed or
unknown candidates cover is the search's clear error ("no candidate with a usable cost covers ...").

(Not :class:`collage.measure.db.Cost`, the cost database's stored record with its key: that is one of the raw
costs read here. The search cannot import it: it sees costs, never runtimes.)
"""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from collage.search.candidates import Candidate


class CostState(enum.Enum):
    VALUE = "value"
    FAILED = "failed"
    UNKNOWN = "unknown"


class Measured(Protocol):
    """A measurement record as the cost tables hold it (``collage.measure``'s ``Cost`` and ``Measurement``)."""

    @property
    def median_ms(self) -> float | None: ...

    @property
    def error(self) -> str | None: ...


#: What a cost table may hold for a candidate (:meth:`Cost.of` reads it).
RawCost: TypeAlias = "Cost | float | Measured | None"
#: The search's input: per candidate, what the measuring left.
CostTable: TypeAlias = "Mapping[Candidate, RawCost]"

#: Record attributes read as the number of ms, first found first (a measurement's ``median_ms``; ``ms`` and
#: ``cost_ms`` for hand-made records).
_MS_ATTRIBUTES = ("median_ms", "ms", "cost_ms")


@dataclass(frozen=True)
class Cost:
    """One candidate's cost in one of three states (module docstring). Build it with :meth:`value`,
    :meth:`failed`, :meth:`unknown` or :meth:`of`; read the ms of a value with :attr:`ms`."""

    state: CostState
    _ms: float = 0.0
    #: why it failed or is unknown ("" for a value)
    why: str = ""

    @classmethod
    def value(cls, ms: float) -> Cost:
        """A finite, non-negative number of ms (ValueError otherwise: read untrusted numbers with :meth:`of`)."""
        ms = float(ms)
        if not math.isfinite(ms) or ms < 0:
            raise ValueError(f"a cost value is a finite, non-negative number of ms, not {ms}")
        return cls(CostState.VALUE, ms)

    @classmethod
    def failed(cls, why: str) -> Cost:
        return cls(CostState.FAILED, why=why)

    @classmethod
    def unknown(cls, why: str = "not measured") -> Cost:
        return cls(CostState.UNKNOWN, why=why)

    @classmethod
    def of(cls, raw: object) -> Cost:
        """What a cost table holds, read into a state: ``None`` is unknown; a number is a value where finite and
        non-negative, unknown where NaN, failed otherwise; a record with an ``error`` (or ``ok`` False) failed,
        one without a median is unknown, else its median is read as a number; a :class:`Cost` is itself."""
        if isinstance(raw, Cost):
            return raw
        if raw is None:
            return cls.unknown()
        if isinstance(raw, (int, float)):
            return cls._number(float(raw))
        error = getattr(raw, "error", None)
        if error:
            return cls.failed(str(error))
        if getattr(raw, "ok", True) is False:
            return cls.unknown("measurement not ok")
        for attr in _MS_ATTRIBUTES:
            if hasattr(raw, attr):
                ms = getattr(raw, attr)
                return cls.unknown(f"no {attr}") if ms is None else cls._number(float(ms))
        return cls.unknown(f"not a cost: {type(raw).__name__}")

    @classmethod
    def _number(cls, ms: float) -> Cost:
        if math.isnan(ms):
            return cls.unknown("NaN")
        if math.isinf(ms) or ms < 0:
            return cls.failed(f"cost {ms} ms")
        return cls(CostState.VALUE, ms)

    @property
    def is_value(self) -> bool:
        return self.state is CostState.VALUE

    @property
    def is_failed(self) -> bool:
        return self.state is CostState.FAILED

    @property
    def is_unknown(self) -> bool:
        return self.state is CostState.UNKNOWN

    @property
    def ms(self) -> float:
        """The number of ms of a value; ValueError for a failed or unknown cost (ask :attr:`is_value` first)."""
        if self.state is not CostState.VALUE:
            raise ValueError(f"a {self.state.value} cost has no ms ({self.why})")
        return self._ms

    def rank(self) -> tuple[int, float]:
        """A sort key: the values by ms, then the unknown, then the failed."""
        return {CostState.VALUE: 0, CostState.UNKNOWN: 1, CostState.FAILED: 2}[self.state], self._ms

    def __str__(self) -> str:
        return f"{self._ms:.3f} ms" if self.is_value else f"{self.state.value} ({self.why})"
