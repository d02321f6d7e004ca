"""JSON objects as frozen dataclasses: :class:`Record`, the base of report.json's model (:mod:`.model`).

A record's fields are its object's keys (``field(metadata={"key": ...})`` names a key that is not a Python name,
such as ``"lambda"``), each typed with what the key holds: ``float``, ``int``, ``bool``, ``str``, another
record, ``tuple[X, ...]`` (a JSON array), ``Mapping[str, X]`` (an object of X), ``Any`` (kept as read), or a
union of them (``float | Bias | None``: the first arm the value fits). Reading is lenient: a value of another
type than its field's reads as ``None`` (the field's default where ``None`` is not one of its types), the way
the report has always shown what it cannot read as unknown; the JSON Schema (``report.schema.json``) is the
strict check. Numbers are kept as read (an int stays an int, so that writing gives the same JSON).

``Record.from_dict(d).to_dict() == d`` for every object whose values have their fields' types: a record
remembers the keys it was read with (``present``, in order: a key the object did not have is not written, one
it had as null is) and keeps the keys it does not know (``extra``), so that a newer writer's keys survive an
older reader. A record made in code (``present`` None) writes every field.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Union, get_args, get_origin

NoneType = type(None)


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of a JSON object's record (module docstring): subclasses declare their keys as fields."""

    #: keys of the object this record was read from that are not its fields, kept as read
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict, kw_only=True, repr=False)
    #: the keys the object had, in order (None: made in code, every field is written)
    present: tuple[str, ...] | None = dataclasses.field(default=None, kw_only=True, repr=False, compare=False)

    _BASE: ClassVar[frozenset[str]] = frozenset({"extra", "present"})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        """The record of JSON object ``d`` (leniently: module docstring)."""
        values = {}
        for f, key, hint in _fields(cls):
            if key in d:
                got = read_value(d[key], hint)
                values[f.name] = got if got is not None or _optional(hint) else _default(f)
        known = {key for _, key, _ in _fields(cls)}
        return cls(**values, extra={k: v for k, v in d.items() if k not in known}, present=tuple(d))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys it was read with, in their order, and any field set since; every field
        where it was made in code."""
        spec = {key: f for f, key, _ in _fields(type(self))}
        order = list(self.present) if self.present is not None else [*spec, *self.extra]
        order += [key for key, f in spec.items() if key not in order and getattr(self, f.name) != _default(f)]
        out: dict[str, Any] = {}
        for key in order:
            if key in spec:
                out[key] = write_value(getattr(self, spec[key].name))
            elif key in self.extra:
                out[key] = self.extra[key]
        return out


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field, str, Any], ...]:
    """(field, JSON key, resolved type) of each key-field of a record class."""
    hints = typing.get_type_hints(cls)
    return tuple((f, f.metadata.get("key", f.name), hints[f.name]) for f in dataclasses.fields(cls)
                 if f.name not in Record._BASE)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _optional(hint: Any) -> bool:
    return hint is Any or (get_origin(hint) in (Union, types.UnionType) and NoneType in get_args(hint))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fits(value: Any, hint: Any) -> bool:
    """Whether JSON ``value`` is of type ``hint`` (one arm of a union: module docstring)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(fits(value, arm) for arm in get_args(hint))
    if hint is NoneType:
        return value is None
    if isinstance(hint, type) and issubclass(hint, Record):
        return isinstance(value, Mapping)
    if origin is tuple:
        return isinstance(value, (list, tuple))
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        return isinstance(value, Mapping)
    if hint is float:
        return _is_number(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def read_value(value: Any, hint: Any) -> Any:
    """JSON ``value`` as type ``hint``; None where it is of another type."""
    if hint is Any:
        return value
    if get_origin(hint) in (Union, types.UnionType):
        arm = next((a for a in get_args(hint) if a is not NoneType and fits(value, a)), None)
        return None if arm is None else read_value(value, arm)
    if not fits(value, hint):
        return None
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value)
    args = get_args(hint)
    if get_origin(hint) is tuple:
        return tuple(read_value(v, args[0]) for v in value)
    if get_origin(hint) in (Mapping, dict):
        return {str(k): read_value(v, args[1]) for k, v in value.items()}
    return value


def write_value(value: Any) -> Any:
    """A field's value as JSON."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [write_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: write_value(v) for k, v in value.items()}
    return value
