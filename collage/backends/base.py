"""The one interface every backend implements.

A backend turns a standalone ONNX model (a partition cut by ``Graph.extract``) into something that
runs. Contract:

* ``name`` (registry key, e.g. ``"onnxruntime"``), ``device`` (``"cpu"`` | ``"cuda"``),
  ``precision`` (``"fp32"`` unless a lower-precision variant is asked for).
* ``version()``: a string that changes whenever results may change (runtime version, precision,
  options); it is part of every cost and support cache key.
* ``available()``: ``None`` when the backend can run here, else the reason it cannot (which package
  to install, which device is missing). Nothing else is called on an unavailable backend.
* ``supports(graph, node_id)``: whether the backend takes that node, decided by really converting a
  one-node model of the node's signature (``graph.fingerprint([node_id])``), cached on disk per
  backend version. ``supports_all(graph)`` answers for every node at once.
* ``compile(model) -> Compiled``: raises ``UnsupportedError`` naming the op and node it cannot take,
  ``CompileError`` for anything else; never silently returns something that runs elsewhere.
* ``Compiled.run(feeds) -> {output name: array}`` is the backend's fast call path.
  ``Compiled.save(directory) -> entry`` writes its files and returns a JSON-able dict (with
  ``"files"``: the file names it wrote); ``Backend.load(directory, entry) -> Compiled`` reads them.

Backends are stateless apart from caches and can be used from one thread at a time.
"""
from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import onnx

if TYPE_CHECKING:
    from collage.graph import Graph


class Compiled(abc.ABC):
    """A compiled partition, ready to run."""

    backend: str
    input_names: list[str]
    output_names: list[str]

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds`` (arrays by input name); return arrays by output name."""

    @abc.abstractmethod
    def save(self, directory: Path) -> dict[str, Any]:
        """Write this partition's files into ``directory``; return its manifest entry."""


class Backend(abc.ABC):
    """Base class of every backend (see the module docstring for the contract)."""

    name: ClassVar[str]
    device: ClassVar[str] = "cpu"
    precision: str = "fp32"

    @abc.abstractmethod
    def version(self) -> str: ...

    @abc.abstractmethod
    def available(self) -> str | None: ...

    @abc.abstractmethod
    def supports(self, graph: Graph, node_id: int) -> bool: ...

    def supports_all(self, graph: Graph) -> dict[int, bool]:
        return {i: self.supports(graph, i) for i in range(len(graph))}

    @abc.abstractmethod
    def compile(self, model: onnx.ModelProto) -> Compiled: ...

    @abc.abstractmethod
    def load(self, directory: Path, entry: Mapping[str, Any]) -> Compiled: ...

    @property
    def options(self) -> dict[str, Any]:
        """Settings that change what this backend produces (part of the cost key)."""
        return {"precision": self.precision}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}/{self.device}>"
