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
* ``Compiled.run(feeds) -> {output name: array}`` is the backend's fast call path. When
  ``Compiled.reuses_outputs`` is True the returned arrays are the backend's own output buffers and the
  NEXT call overwrites them: whoever keeps an output past the next call (the runtime, for graph
  outputs) must copy it.
  ``Compiled.save(directory) -> entry`` writes its files and returns a JSON-able dict (with
  ``"files"``: the file names it wrote); ``Backend.load(directory, entry) -> Compiled`` reads them. At load,
  ``entry["files"]`` is the manifest's one checked list (each file inside the artifact, its sha256 verified
  before the backend is called): a backend opens those files and nothing else.
* ``compile_linked(models, plain)``: partitions of this backend that run one after another in one
  process. A tensor one of them produces and a later one reads (and that is not in ``plain``) may be
  handed over in the runtime's own internal layout (a blocked or channels-last array) instead of the
  ONNX layout, so the boundary costs no conversion pair. The default compiles each model alone.

Support is decided once per backend: a backend implements one primitive,
``_check_supported(model) -> None | reason``, which really converts/compiles a one-node model; the base
class caches its answers on disk under ``cache_dir()/support/<backend>-<version>-<digest>-v<schema>.json`` (the digest
covers the backend's name, version, device and collage's refusal rules for it: ``rules_digest``) keyed by
``graph.fingerprint([node_id])`` (so a second run asks nothing), answers ``supports``,
``supports_all`` (one cache write for a whole graph) and ``support_reason``, and turns a failed
``compile`` into an ``UnsupportedError`` naming the node that cannot be taken (``raise_compile_error``).

Backends are stateless apart from caches and can be used from one thread at a time.
"""
from __future__ import annotations

import abc
import functools
import importlib.util
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import numpy as np

from collage.errors import CompileError, TransientError, UnsupportedError
from collage.util import cache_dir, int8_kernels, is_int8, sha256_bytes

if TYPE_CHECKING:
    import onnx  # annotations only: loading an artifact never imports onnx

    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: Version of the on-disk support cache layout (part of the file name).
SUPPORT_CACHE_SCHEMA = 1


@functools.cache
def rules_digest(module: str) -> str:
    """A digest of the source that decides a backend's support answers: the module defining the backend class and,
    for collage's own backends, every module of its package (``collage/backends/openvino/inexact.py`` ...), with
    this module and ``collage.backends.support``. Empty where the source cannot be read (a frozen install)."""
    files: list[Path] = []
    for name in (module, __name__, "collage.backends.support"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a class of __main__ or of a module made in memory: no source to read
            continue
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        origin = Path(spec.origin)
        inside = name.startswith("collage.backends.") and origin.parent.name != "backends"
        files += sorted(origin.parent.glob("*.py")) if inside and name == module else [origin]
    try:
        return sha256_bytes(b"".join(f.read_bytes() for f in dict.fromkeys(files)))[:12]
    except OSError:
        return ""


class Compiled(abc.ABC):
    """A compiled partition, ready to run."""

    backend: str
    input_names: list[str]
    output_names: list[str]
    #: True when ``run`` returns the backend's own buffers, overwritten by the next ``run``.
    reuses_outputs: ClassVar[bool] = False

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds`` (arrays by input name); return arrays by output name."""

    @abc.abstractmethod
    def save(self, directory: Path) -> dict[str, Any]:
        """Write this partition's files into ``directory``; return its manifest entry."""


#: failures of a trial conversion that mean "could not tell now", never "unsupported" (not cached: see
#: ``Backend.refusal_errors``)
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (MemoryError, OSError, TimeoutError, TransientError)


def trial_refusal(trial: Callable[[], object]) -> str | None:
    """Run a backend's trial conversion of a one-node model (its ``_check_supported``): None when it works;
    the reason when it refuses (an UnsupportedError's message, or the runtime's own error as
    ``"Type: message"``); a transient failure (``TRANSIENT_ERRORS``) propagates, so it is not cached."""
    try:
        trial()
    except UnsupportedError as e:
        return str(e)
    except TRANSIENT_ERRORS:
        raise
    except Exception as e:  # noqa: BLE001 - the runtime's message is the answer
        return f"{type(e).__name__}: {e}"
    return None


class Backend(abc.ABC):
    """Base class of every backend (see the module docstring for the contract)."""

    name: ClassVar[str]
    device: ClassVar[str] = "cpu"
    precision: str = "fp32"
    #: Exceptions of ``_check_supported`` that are definite refusals of the node: answered "no" and cached on
    #: disk like a returned reason. Any other exception (out of memory, a full disk, a timeout, a runtime
    #: error that is no conversion refusal) is transient: the node counts as not taken for this call only,
    #: and is checked again next time. A backend adds its converter's own refusal exceptions here.
    refusal_errors: ClassVar[tuple[type[BaseException], ...]] = (UnsupportedError,)

    @abc.abstractmethod
    def version(self) -> str: ...

    @abc.abstractmethod
    def available(self) -> str | None: ...

    # ------------------------------------------------------------------ support
    def _check_supported(self, model: onnx.ModelProto) -> str | None:
        """The one support primitive: really convert/compile ``model`` (one node); None or the reason.

        Must not raise for an op the backend rejects; it returns the runtime's message instead (or raises
        one of ``refusal_errors``). Raising anything else means "could not tell now" (see ``refusal_errors``).
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither supports() nor _check_supported()")

    def supports(self, graph: Graph, node_id: int) -> bool:
        return self.support_reason(graph, node_id) is None

    def support_reason(self, graph: Graph, node_id: int) -> str | None:
        """None when the backend takes node ``node_id``, else why not (cached on disk)."""
        return self.support_reasons(graph, [node_id])[node_id]

    def supports_all(self, graph: Graph) -> dict[int, bool]:
        if type(self).supports is not Backend.supports:  # a backend that answers supports() itself
            return {i: self.supports(graph, i) for i in range(len(graph))}
        return {i: r is None for i, r in self.support_reasons(graph, range(len(graph))).items()}

    def support_reasons(self, graph: Graph, node_ids: Iterable[int]) -> dict[int, str | None]:
        """``support_reason`` for many nodes: each distinct signature is checked once, the cache written once.

        Only answers are cached: None, a returned reason, or one of ``refusal_errors``. A node whose check
        raised anything else is "no" in this answer (with the error) and is checked again on the next call."""
        cache = self._support_cache()
        by_fp: dict[str, list[int]] = {}
        for i in node_ids:
            by_fp.setdefault(graph.fingerprint([i]), []).append(i)
        fresh: dict[str, str | None] = {}
        transient: dict[str, str] = {}
        for fp, ids in by_fp.items():
            if fp in cache:
                continue
            try:
                reason = self._check_supported(graph.extract([ids[0]]))
            except NotImplementedError:
                raise
            except self.refusal_errors as e:  # a definite refusal, raised rather than returned
                reason = f"{type(e).__name__}: {e}"
            except Exception as e:  # could not tell now: "no" for this call, never cached
                transient[fp] = one_line(f"could not check ({type(e).__name__}: {e}); checked again next time")
                log.warning("%s: %s: %s", self.name, graph.node_label(ids[0]), transient[fp])
                continue
            if reason is not None:
                reason = one_line(reason)
                log.debug("%s does not take %s: %s", self.name, graph.node_label(ids[0]), reason)
            fresh[fp] = cache[fp] = reason
        if fresh:
            self._write_support_cache(fresh)
        return {i: transient[fp] if fp in transient else cache[fp] for fp, ids in by_fp.items() for i in ids}

    def support_cache_path(self) -> Path:
        """The file holding this backend version's support answers: a new runtime version, or a change to
        collage's own refusal rules (the backend's package's source: an op form found computed wrongly and now
        refused), starts a new file, so no answer of the old rules stands."""
        version = self.version()
        slug = re.sub(r"[^A-Za-z0-9._+-]+", "_", f"{self.name}-{version}")[:80]
        rules = rules_digest(type(self).__module__)
        digest = sha256_bytes(f"{self.name}|{version}|{self.device}|{rules}".encode())[:10]
        return cache_dir() / "support" / f"{slug}-{digest}-v{SUPPORT_CACHE_SCHEMA}.json"

    def _support_cache(self) -> dict[str, str | None]:
        mem = self.__dict__.get("_support_mem")
        path = self.support_cache_path()
        if mem is None or mem[0] != path:
            mem = (path, _read_json(path))
            self.__dict__["_support_mem"] = mem
        return mem[1]

    def _write_support_cache(self, fresh: Mapping[str, str | None]) -> None:
        """Merge ``fresh`` into the file (re-read first: other processes may have written) atomically."""
        path = self.support_cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = _read_json(path)
        merged.update(fresh)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(merged, f, indent=0, sort_keys=True)
            os.replace(tmp, path)
        except OSError as e:  # a read-only cache must not stop the work; it only costs a re-check
            log.warning("cannot write support cache %s: %s", path, e)
            Path(tmp).unlink(missing_ok=True)
        self._support_cache().update(merged)

    def raise_compile_error(self, model: onnx.ModelProto, error: BaseException, what: str = "compile") -> NoReturn:
        """Raise UnsupportedError naming the first node this backend cannot take, else CompileError from ``error``."""
        from collage.backends.support import find_unsupported_node

        message = one_line(str(error))
        found = find_unsupported_node(model, self._check_supported, message)
        if found is not None:
            node, reason = found
            raise UnsupportedError(
                f"{self.name} cannot take op {op_name(node)} (node {node.name or node.output[0]!r} of model "
                f"{model.graph.name!r}): {one_line(reason)}") from error
        raise CompileError(f"{self.name} failed to {what} model {model.graph.name!r} "
                           f"({len(model.graph.node)} nodes): {type(error).__name__}: {message}") from error

    @abc.abstractmethod
    def compile(self, model: onnx.ModelProto) -> Compiled: ...

    @abc.abstractmethod
    def load(self, directory: Path, entry: Mapping[str, Any]) -> Compiled: ...

    def compile_linked(self, models: Sequence[onnx.ModelProto], plain: Collection[str] = ()) -> list[Compiled]:
        """Compile ``models`` (partitions run in this order, in one process) for hand-over between them.

        A tensor that a model outputs and a later model reads, unless its name is in ``plain`` (graph
        outputs, tensors another backend reads), may be passed in the runtime's internal layout; the
        returned ``Compiled`` objects then produce and accept that opaque array for it, and their
        ``save``/``load`` keep the linked form. Inputs of the whole sequence keep the ONNX layout, and so
        do outputs in ``plain``. Default: each model compiled alone (every boundary in the ONNX layout).
        """
        return [self.compile(m) for m in models]

    @property
    def options(self) -> dict[str, Any]:
        """Settings that change what this backend produces (part of the cost key)."""
        return {"precision": self.precision}

    def int8_kernels(self) -> str | None:
        """For an int8 variant, which int8 kernels it runs here (:func:`collage.util.int8_kernels`: ``"vnni"`` or
        ``"avx2"``), which its error depends on; None for any other backend."""
        return int8_kernels() if is_int8(self) else None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}/{self.device}>"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable support cache %s: %s", path, e)
        return {}


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def op_name(node: onnx.NodeProto) -> str:
    return f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def node_attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """Attribute ``name`` of ``node`` (strings decoded), or ``default``."""
    for a in node.attribute:
        if a.name == name:
            from onnx import helper

            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def first_refused(model: onnx.ModelProto, reason: Callable[[onnx.NodeProto], str | None]
                  ) -> tuple[onnx.NodeProto, str] | None:
    """The first node of ``model`` for which ``reason`` gives a reason, with it; None when there is none."""
    for node in model.graph.node:
        why = reason(node)
        if why is not None:
            return node, why
    return None


def refuse(backend_name: str, model: onnx.ModelProto, found: tuple[onnx.NodeProto, str] | None) -> None:
    """Raise ``UnsupportedError`` naming the node ``first_refused`` found in ``model`` (no-op for None)."""
    if found is not None:
        node, why = found
        raise UnsupportedError(f"{backend_name} cannot take op {op_name(node)} (node {node.name or node.output[0]!r} "
                               f"of model {model.graph.name!r}): {why}")
