"""THE rule for seeded random inputs, on plain specs (a leaf: numpy and collage.errors only).

Every place that needs inputs it was not given (the zoo, the tuner's feeds and calibration samples, the cost
worker, ``Artifact.random_inputs``, the tests) draws them with :func:`seeded_inputs`, from one
``numpy.random.default_rng(seed)`` walked over the inputs in order:

- floating point: standard normal, cast to the dtype;
- bool: True with probability 1/2;
- an integer input whose name contains ``mask`` (attention masks): per row (last axis), 1 for a random-length
  prefix of at least half the row, 0 after;
- other integers: uniform in ``[0, high)``, where ``high`` is the spec's index range (the length of the table a
  Gather-like node indexes with it) or, when it has none, ``int_high`` (default 4);
- anything else (strings, complex): InputError (a CollageError and a ValueError) naming the input.

The specs come from a Graph or an ONNX model (:func:`collage.graph.inputs.input_specs`, which also finds the
index ranges) or from an artifact's manifest (:mod:`collage.runtime.artifact`); this module imports neither
so that the deploy path can use it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from collage.errors import InputError

#: exclusive upper bound for integer inputs with no known index range
DEFAULT_INT_HIGH = 4


@dataclass(frozen=True)
class InputSpec:
    """One input to draw: its name, static shape, dtype and, for an index, its exclusive upper bound."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    high: int | None = None


def _mask(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    arr = np.zeros(shape, dtype=dtype)
    length = shape[-1] if shape else 1
    flat = arr.reshape(-1, length) if shape else arr.reshape(1, 1)
    for row in flat:
        row[: int(rng.integers(max(1, length // 2), length + 1))] = 1
    return flat.reshape(shape)


def draw(rng: np.random.Generator, spec: InputSpec, int_high: int = DEFAULT_INT_HIGH) -> np.ndarray:
    """One input's values under the module's rule, drawn from ``rng``."""
    shape, dtype = tuple(spec.shape), np.dtype(spec.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind not in "iu":
        raise InputError(f"input {spec.name!r} has dtype {dtype}, for which collage draws no random values: "
                         "pass real inputs")
    if "mask" in spec.name.lower():
        return _mask(rng, shape, dtype)
    return rng.integers(0, spec.high or int_high, size=shape).astype(dtype)


def seeded_inputs(specs: Iterable[InputSpec], seed: int = 0, *,
                  int_high: int = DEFAULT_INT_HIGH) -> dict[str, np.ndarray]:
    """Seeded feeds, by input name, for ``specs`` in order (see the module docstring for the rule)."""
    rng = np.random.default_rng(seed)
    return {s.name: draw(rng, s, int_high) for s in specs}
