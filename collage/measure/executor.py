"""Where measurement windows run: this machine's worker processes, or the machines of a Ray cluster.

``measure_candidates`` (collage.measure.schedule) decides *what* to measure (deduplication, the cost
DB, claims, rounds, the budget); an ``Executor`` runs each measurement window it is handed and gives
back its ``Measurement``:

* ``LocalExecutor`` (the default): today's isolated worker processes on this machine (``Measurer``),
  one window at a time under the machine lock; ``submit`` runs the window before it returns.
* ``RayExecutor`` (``--cluster ray://HOST:PORT``, ``HOST:PORT`` or ``auto`` = ``$RAY_ADDRESS``): each
  window is a Ray task that needs the custom resource ``collage_measure`` (``RESOURCE``). A node offers
  ``collage_measure: 1`` (``ray start ... --resources '{"collage_measure": 1}'``), so it runs one
  measurement at a time and measurements never share a machine's cores. The task runs on the node in
  that node's own isolated worker process, exactly as locally (``Measurer``, same timing, same machine
  lock), and when the window is the key's last it writes the cost to the shared cost DB itself, as soon
  as it exists: a driver that dies afterwards loses nothing. docs/CLUSTER.md says how to run one.

**Faults.** A node that dies mid-task: Ray retries the task on another node (``max_retries``); the
retry first looks the key up in the DB (the dead node may have written it just before dying), so a
finished measurement is never taken twice. When the retries run out the window comes back *lost*
(``Done.lost``) and ``measure_candidates`` hands the key out again (twice) or leaves it unmeasured. A
driver that dies: its tasks end with its Ray job, its claims expire (at once for a rerun on the same
host, whose process check sees the owner gone; after their TTL elsewhere), and a rerun reuses every
cost the nodes wrote.

**Machines.** The machine is part of the cost key, and the driver is the *target*: it computes every key
with its own ``machine_id()`` and backend versions, and later verifies the plan end to end on itself.
A node whose machine id or backend versions differ from the driver's would measure something else under
the target's key, so it is **refused**: ``RayExecutor.start`` asks every measurement node for its
identity and stops the job with a message naming the nodes that differ and how; a node that joins
later and differs answers each window with a refusal (the window comes back lost and goes to another
node) instead of measuring it.

**Nodes lost before or early.** A measurement node that dies before the job asks it who it is, or while it
answers, is left out (``RayExecutor.start``); when windows come back from none and no measurement node is
alive any more (asked every ``NODE_CHECK_S``), or when none is alive at the start but the cluster has dead
nodes, the executor measures on this machine from then on (``LocalExecutor``, the driver being the target),
the windows in flight included, and says so in one line. A cluster that never had a measurement node is
refused. An address where nothing answers is refused within ``CONNECT_TIMEOUT_S`` (``check_reachable``).
"""
from __future__ import annotations

import abc
import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.measure.db import Cost, CostDB, CostKey, key_for
from collage.measure.connect import get_db
from collage.measure.measurer import Measurement, Measurer, WindowSettings
from collage.extras import require
from collage.errors import ClusterUnreachable, CollageError

if TYPE_CHECKING:
    from collage.backends.base import Backend

log = logging.getLogger(__name__)

#: The custom Ray resource a measurement node offers (1 per machine: one measurement at a time).
RESOURCE = "collage_measure"
#: Windows queued per measurement node beyond the one it runs (hides the dispatch latency).
DEFAULT_PER_NODE = 2
#: Ray's retries of a window whose node (or Ray worker) died.
DEFAULT_MAX_RETRIES = 3
#: How long a measurement node may take to say who it is (``RayExecutor.start``) before it is left out.
IDENTITY_TIMEOUT_S = 120.0
#: While no window comes back, how often the driver asks Ray whether measurement nodes are still alive.
NODE_CHECK_S = 2.0


@dataclass
class Window:
    """One measurement window of one key, as ``measure_candidates`` hands it to an executor."""

    key: CostKey
    blob: bytes
    backend: str
    options: dict[str, Any]
    feeds: dict[str, np.ndarray]
    timeout_s: float
    cap_s: float
    warmup_s: float
    probe: bool = False
    slot: int = 0  # round_workers: the backend's slot-th worker process
    lock_timeout_s: float | None = None  # LocalExecutor: give up waiting for the machine lock after this long
    commit: bool = False  # the key's last window: an executor that stores costs stores this one
    retry_failed: bool = False  # a failed cost already stored does not count as done
    file: str | None = None  # the model's Graph.digest(): a failure the file caused is stored under it (db.Cost.file)
    tag: Any = field(default=None, repr=False, compare=False)  # the caller's; never leaves the driver

    def settings(self) -> WindowSettings:
        """How the ``Measurer`` runs it."""
        return WindowSettings(timeout_s=self.timeout_s, cap_s=self.cap_s, warmup_s=self.warmup_s, probe=self.probe,
                              lock_timeout_s=self.lock_timeout_s)


@dataclass
class Done:
    """A window's outcome: its ``measurement``, or None with ``lost`` saying why none came back."""

    window: Window
    measurement: Measurement | None
    stored: bool = False  # the executor wrote the cost to the DB already
    where: str = "local"  # the machine that measured it
    lost: str | None = None


class Executor(abc.ABC):
    """Runs measurement windows (module docstring). Used by one thread; ``close`` ends it."""

    name = "executor"
    #: whether it stores a key's cost itself (its last window, ``Window.commit``): its windows then carry ``file``
    stores_costs = False

    @property
    @abc.abstractmethod
    def capacity(self) -> int:
        """How many windows may be in flight at once."""

    @abc.abstractmethod
    def start(self, db: CostDB, backends: Mapping[str, Backend]) -> None:
        """Get ready to measure ``backends`` (name -> instance with its options) into ``db``."""

    @abc.abstractmethod
    def submit(self, window: Window) -> None:
        """Start ``window``. ``MeasurementError`` when it cannot start before ``window.lock_timeout_s``."""

    @abc.abstractmethod
    def collect(self, timeout_s: float) -> list[Done]:
        """Windows finished since the last call, waiting up to ``timeout_s`` for a first one."""

    @abc.abstractmethod
    def in_flight(self) -> list[Window]:
        """Windows submitted and not yet collected."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop (windows in flight are abandoned); the executor may not be used afterwards."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """This machine's isolated worker processes (``Measurer``), one window at a time, run inside ``submit``."""

    name = "local"

    def __init__(self, *, lock: bool = True) -> None:
        self.lock = lock
        self._workers: dict[tuple[str, int], Measurer] = {}
        self._done: list[Done] = []

    @property
    def capacity(self) -> int:
        return 1

    def start(self, db: CostDB, backends: Mapping[str, Backend]) -> None:
        pass

    def submit(self, window: Window) -> None:
        w = window
        worker = self._workers.get((w.backend, w.slot))
        if worker is None:
            worker = self._workers[(w.backend, w.slot)] = Measurer(lock=self.lock)
        res = worker.measure_bytes(w.blob, w.backend, w.options, w.settings(), feeds=w.feeds)
        self._done.append(Done(w, res))

    def collect(self, timeout_s: float) -> list[Done]:
        out, self._done = self._done, []
        return out

    def in_flight(self) -> list[Window]:
        return [d.window for d in self._done]

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()


# ---------------------------------------------------------------------- Ray
def _ray() -> Any:
    return require("ray", "--cluster", "the same Ray version on every node: docs/CLUSTER.md")


@dataclass
class NodeIdentity:
    """What a measurement node says about itself: where it is and what its cost keys would carry."""

    node_id: str
    host: str
    machine: str
    versions: dict[str, str]  # backend name -> version() (or "unavailable: why")


@dataclass
class NodeResult:
    """What a window's Ray task sends back."""

    kind: str  # measured | known (the DB had it: a retried task) | refused (not the target machine)
    measurement: Measurement | None = None
    stored: bool = False
    host: str = ""
    message: str = ""


class _NodeState:
    """Per Ray worker process on a node: warm measurement workers, backends and DB connections."""

    def __init__(self) -> None:
        self.measurers: dict[tuple[str, int, bool], Measurer] = {}
        self.backends: dict[tuple[str, str], Backend] = {}
        self.dbs: dict[str, CostDB] = {}

    def backend(self, name: str, options: Mapping[str, Any]) -> Backend:
        from collage.measure.db import canonical_json
        from collage.measure.worker import resolve_backend

        k = (name, canonical_json(dict(options)))
        if k not in self.backends:
            self.backends[k] = resolve_backend(name, options)
        return self.backends[k]

    def db(self, url: str) -> CostDB:
        if url not in self.dbs:
            self.dbs[url] = get_db(url)
        return self.dbs[url]

    def measurer(self, backend: str, slot: int, lock: bool) -> Measurer:
        k = (backend, slot, lock)
        if k not in self.measurers:
            self.measurers[k] = Measurer(lock=lock)
        return self.measurers[k]


_NODE: _NodeState | None = None


def _node() -> _NodeState:
    global _NODE
    if _NODE is None:
        _NODE = _NodeState()
    return _NODE


def _mismatch(want: CostKey, got: CostKey, host: str) -> str:
    diffs = [f"{f} {getattr(got, f)!r} (target: {getattr(want, f)!r})"
             for f in ("machine", "version", "device", "options")
             if getattr(got, f) != getattr(want, f)]
    return f"node {host} is not the target machine: its " + "; ".join(diffs)


def node_identity(backends: Mapping[str, Mapping[str, Any]]) -> NodeIdentity:
    """This node's identity (runs as a Ray task on each measurement node; importable on its own)."""
    import ray

    from collage.util import machine_id

    versions = {}
    for name, options in backends.items():
        try:
            b = _node().backend(name, options)
            why = b.available()
            versions[name] = b.version() if why is None else f"unavailable: {why}"
        except Exception as e:  # noqa: BLE001 - reported per backend, the node is then refused
            versions[name] = f"unavailable: {type(e).__name__}: {e}"
    return NodeIdentity(ray.get_runtime_context().get_node_id(), _where(), machine_id(), versions)


def _where() -> str:
    """This Ray node as people read it: host name and the start of the node id (several nodes may share a host)."""
    import ray

    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


def measure_on_node(w: Window, db_url: str | None, lock: bool) -> NodeResult:
    """One window on this node (the body of a Ray task): in its own worker process, stored when it is the last."""
    host = _where()
    node = _node()
    key = key_for(node.backend(w.backend, w.options), w.key.fingerprint)
    if key != w.key:
        return NodeResult("refused", host=host, message=_mismatch(w.key, key, host))
    store = node.db(db_url) if (db_url and w.commit) else None
    if store is not None:
        known = store.get(w.key)  # a retry whose first attempt stored it before its node died
        if known is not None and (known.ok if w.retry_failed else known.holds_for(w.file)):
            return NodeResult("known", _from_cost(known), stored=True, host=host)
    # lock_timeout_s is the driver's budget for its own machine's lock; a node waits LOCK_WAIT_S for its own
    settings = replace(w.settings(), lock_timeout_s=None)
    res = node.measurer(w.backend, w.slot, lock).measure_bytes(w.blob, w.backend, w.options, settings, feeds=w.feeds)
    stored = False
    if store is not None:
        res.samples_ms = []
        store.put(res.to_cost(w.key, w.file))
        stored = True
    return NodeResult("measured", res, stored=stored, host=host)


def _from_cost(c: Cost) -> Measurement:
    return Measurement(median_ms=c.median_ms, p10_ms=c.p10_ms, p90_ms=c.p90_ms, samples=c.samples,
                       compile_s=c.compile_s, error=c.error, round_ms=[c.median_ms] if c.median_ms is not None else [])


def ray_address(spec: str) -> str:
    """The address ``ray.init`` takes for ``--cluster SPEC``: ``auto`` reads $RAY_ADDRESS."""
    if spec == "auto":
        return os.environ.get("RAY_ADDRESS") or "auto"
    return spec


#: How long the address of ``--cluster`` may take to accept a TCP connection before the job is refused (``ray.init``
#: itself, given a GCS address where nothing listens, retries 20 times 35 s: it would never seem to return).
CONNECT_TIMEOUT_S = 10.0
#: ``ray.init``'s own attempts at a GCS address that accepted the connection (``RAY_gcs_server_port_wait_time_s``,
#: the number of ~1 s-apart tries of its GCS client; Ray's default is 20, each up to ~35 s when no GCS answers).
GCS_CONNECT_ATTEMPTS = "1"


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``ray://HOST:PORT`` or ``HOST:PORT``; None for ``auto`` and what is not of that form."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """``ClusterUnreachable`` unless something accepts a TCP connection at ``address`` within ``timeout_s``."""
    hp = host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout_s):
            pass
    except OSError as e:
        why = (f"no answer within {timeout_s:.0f} s" if isinstance(e, TimeoutError)
               else (e.strerror or str(e) or type(e).__name__).lower())
        raise ClusterUnreachable(
            f"cannot reach the Ray cluster at {address!r} ({why}); start it with "
            "`ray start --head` (docs/CLUSTER.md), or give --cluster the head's HOST:6379 or ray://HOST:10001") from e


@contextlib.contextmanager
def _bounded_gcs_wait() -> Iterator[None]:
    """``ray.init``'s GCS connection tried ``GCS_CONNECT_ATTEMPTS`` times, not 20 (unless the user set it)."""
    name = "RAY_gcs_server_port_wait_time_s"
    if name in os.environ:
        yield
        return
    os.environ[name] = GCS_CONNECT_ATTEMPTS
    try:
        yield
    finally:
        os.environ.pop(name, None)


#: ``ray.init`` attempts when the cluster answered but failed to start this connection's client server (Ray's
#: proxy starts one per ``ray://`` connection: on a loaded 2-core machine it missed its gRPC timeout, and once
#: its psutil read a zombie process's command line); an unreachable cluster fails at the first attempt.
INIT_ATTEMPTS = 3
INIT_PAUSE_S = 2.0


def _server_side(e: BaseException) -> bool:
    """Whether ``ray.init`` reached the cluster and its client server failed to start (worth another try)."""
    text = str(e)
    return "Initialization failure from server" in text or "Starting Ray client server failed" in text


#: what ``RayExecutor._lost_nodes`` said already: the nodes lost, the cluster addresses given up for this machine
#: (a tune makes one executor per measuring step)
_said_lost: set[str] = set()


def _node_name(node: Mapping[str, Any]) -> str:
    """A ``ray.nodes()`` entry as people read it: its address and the start of its node id."""
    return f"{node.get('NodeManagerAddress', '?')}/{str(node.get('NodeID', '?'))[:8]}"


class RayExecutor(Executor):
    """Measurement windows as Ray tasks on the cluster's ``collage_measure`` nodes (module docstring)."""

    name = "ray"
    stores_costs = True

    def __init__(self, address: str = "auto", *, lock: bool = True, per_node: int = DEFAULT_PER_NODE,
                 max_retries: int = DEFAULT_MAX_RETRIES, check_nodes: bool = True) -> None:
        ray = _ray()
        self.address = ray_address(address)
        self.lock, self.per_node, self.check_nodes = lock, max(1, int(per_node)), check_nodes
        self._owns = not ray.is_initialized()
        if self._owns:
            check_reachable(self.address)
            for attempt in range(1, INIT_ATTEMPTS + 1):
                try:
                    with _bounded_gcs_wait():
                        ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING,
                                 configure_logging=False)
                    break
                except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, ValueError, RuntimeError...
                    if attempt < INIT_ATTEMPTS and _server_side(e):
                        log.warning("the Ray cluster at %r failed to start a client server (%s); connecting again",
                                    self.address, str(e).splitlines()[0])
                        time.sleep(INIT_PAUSE_S)
                        continue
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
                    raise ClusterUnreachable(f"cannot reach the Ray cluster at {self.address!r} ({first}); start it "
                                             "with `ray start --head` (docs/CLUSTER.md) or pass --cluster "
                                             "ray://HOST:10001") from e
        self._refs: dict[Any, Window] = {}
        self._db_url: str | None = None
        self._local: LocalExecutor | None = None  # every measurement node died: this machine measures
        self._last_node_check = time.monotonic()
        self.nodes = self.measurement_nodes()
        if not self.nodes:
            dead = self.dead_nodes()
            if not dead:
                self.close()
                raise CollageError(f"the Ray cluster at {self.address!r} has no node with the {RESOURCE!r} resource; "
                                   f"start measurement nodes with `ray start --address HEAD:6379 --resources "
                                   f"'{{\"{RESOURCE}\": 1}}'` (docs/CLUSTER.md)")
            self._lost_nodes(f"no node of the Ray cluster at {self.address!r} offers {RESOURCE!r} now, and "
                             f"{len(dead)} died: " + ", ".join(_node_name(n) for n in dead))
        self._task = ray.remote(measure_on_node).options(num_cpus=0, resources={RESOURCE: 1},
                                                         max_retries=max_retries, retry_exceptions=False)

    @staticmethod
    def measurement_nodes() -> list[dict[str, Any]]:
        """Alive nodes offering the ``collage_measure`` resource (``ray.nodes()`` entries)."""
        ray = _ray()
        return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(RESOURCE, 0) >= 1]

    @staticmethod
    def dead_nodes() -> list[dict[str, Any]]:
        """The cluster's nodes that died (``ray.nodes()`` keeps them, without their resources: a cluster with
        none of its measurement nodes alive and some dead lost them, one without dead nodes never had any)."""
        ray = _ray()
        try:
            return [n for n in ray.nodes() if not n.get("Alive")]
        except Exception:  # noqa: BLE001 - no answer from Ray: none known
            return []

    @property
    def capacity(self) -> int:
        return 1 if self._local is not None else self.per_node * len(self.nodes)

    def start(self, db: CostDB, backends: Mapping[str, Backend]) -> None:
        from collage.measure.db import SQLiteCostDB

        self._db_url = db.url
        if self._db_url is None:
            log.warning("the cost DB %r has no URL the nodes can open: costs are stored by this driver only", db)
        elif isinstance(db, SQLiteCostDB):
            log.warning("cost DB %s is a SQLite file: only nodes on this machine can open it; a cluster of "
                        "machines needs --db postgresql://... (docs/CLUSTER.md)", db.path)
        if self.check_nodes:
            self._check(backends)

    def _check(self, backends: Mapping[str, Backend]) -> None:
        """Refuse the job when a measurement node is not the target machine (module docstring)."""
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from collage.util import machine_id

        specs = {name: dict(b.options) for name, b in backends.items()}
        probe = ray.remote(node_identity)
        refs = {probe.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(specs): n for n in self.nodes}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=IDENTITY_TIMEOUT_S)
        idents: list[NodeIdentity] = []
        gone: list[str] = []
        for ref, n in refs.items():
            try:
                if ref not in ready:
                    raise ray.exceptions.GetTimeoutError(f"no answer in {IDENTITY_TIMEOUT_S:.0f} s")
                idents.append(ray.get(ref))
            except ray.exceptions.RayError as e:  # the node died (TaskUnschedulableError) or does not answer
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
                gone.append(f"{_node_name(n)} ({type(e).__name__})")
        if gone:
            self.nodes = [n for n in self.nodes if any(i.node_id == n["NodeID"] for i in idents)]
            self._lost_nodes(f"{len(gone)} of {len(refs)} measurement nodes did not answer: " + ", ".join(gone))
            if self._local is not None:
                return
        target = machine_id()
        want = {name: b.version() for name, b in backends.items()}
        bad = []
        for ident in idents:
            diffs = []
            if ident.machine != target:
                diffs.append(f"machine {ident.machine!r}")
            diffs += [f"{name} {ident.versions.get(name)!r} (target: {v!r})" for name, v in want.items()
                      if ident.versions.get(name) != v]
            if diffs:
                bad.append(f"{ident.host}: " + ", ".join(diffs))
        if bad:
            raise CollageError(
                f"{len(bad)} of {len(idents)} measurement nodes are not the target machine ({target!r}, the machine "
                "this tune runs on, with its backend versions); their costs would be filed under the wrong key:\n  "
                + "\n  ".join(bad) + "\nStop collage on those nodes (or restart them without the "
                f"{RESOURCE!r} resource), or run the tune on one of them; a cluster measures for one kind of machine "
                "(docs/CLUSTER.md, 'When nodes differ')")
        log.info("Ray cluster %s: %d measurement nodes, all %s", self.address, len(idents), target)

    def _lost_nodes(self, what: str) -> None:
        """Go on with the measurement nodes left, or with this machine's workers when none is left (said in one
        line, once per process); windows in flight on the cluster are measured again here."""
        if self.nodes:
            if what not in _said_lost:
                log.warning("%s; measuring on the %d node(s) left", what, len(self.nodes))
            _said_lost.add(what)
            return
        if self.address not in _said_lost:
            log.warning("%s; no Ray measurement node is left: measuring on this machine from now on", what)
        _said_lost.add(self.address)
        ray = _ray()
        self._local = LocalExecutor(lock=self.lock)
        pending, self._refs = list(self._refs.items()), {}
        for ref, w in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            self._local.submit(w)

    def _nodes_alive(self) -> bool:
        """Whether a measurement node is still up (asked of Ray at most every ``NODE_CHECK_S``); when none
        is, the executor falls back to this machine (``_lost_nodes``)."""
        now = time.monotonic()
        if now - self._last_node_check < NODE_CHECK_S:
            return True
        self._last_node_check = now
        alive = {n["NodeID"] for n in self.measurement_nodes()}
        dead = [n for n in self.nodes if n["NodeID"] not in alive]
        if dead:
            self.nodes = [n for n in self.nodes if n["NodeID"] in alive]
            self._lost_nodes(f"{len(dead)} Ray measurement node(s) died: " + ", ".join(_node_name(n) for n in dead))
        return self._local is None

    def submit(self, window: Window) -> None:
        if self._local is not None:
            self._local.submit(window)
            return
        w = window
        sent = replace(w, lock_timeout_s=None, tag=None)  # without the caller's tag
        self._refs[self._task.remote(sent, self._db_url, self.lock)] = w

    def collect(self, timeout_s: float) -> list[Done]:
        if self._local is not None:
            return self._local.collect(timeout_s)
        if not self._refs:
            return []
        ray = _ray()
        refs = list(self._refs)
        ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, timeout_s))
        if not ready:
            if not self._nodes_alive():  # its windows wait for a node that will not come: measured here
                return self._local.collect(timeout_s)
            return []
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out = []
        for ref in ready:
            w = self._refs.pop(ref)
            try:
                r: NodeResult = ray.get(ref)
            except ray.exceptions.RayError as e:  # the node died and Ray's retries ran out, or the task failed
                out.append(Done(w, None, lost=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"))
                continue
            if r.kind == "refused":
                out.append(Done(w, None, where=r.host, lost=r.message))
            else:
                out.append(Done(w, r.measurement, stored=r.stored, where=r.host))
        return out

    def in_flight(self) -> list[Window]:
        if self._local is not None:
            return self._local.in_flight()
        return list(self._refs.values())

    def close(self) -> None:
        ray = _ray()
        if getattr(self, "_local", None) is not None:
            self._local.close()
        for ref in list(getattr(self, "_refs", {})):
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        self._refs = {}
        if self._owns and ray.is_initialized():
            ray.shutdown()
        self._owns = False


def get_executor(spec: None | str | Executor = None) -> Executor:
    """``None`` or ``"local"``: this machine's workers; ``"auto"``, ``"ray://HOST:PORT"``, ``"HOST:PORT"``: Ray."""
    if isinstance(spec, Executor):
        return spec
    if spec is None or spec == "local":
        return LocalExecutor()
    return RayExecutor(spec)


def wait_for(executor: Executor, until: float) -> list[Done]:
    """Everything ``executor`` has in flight, collected until done or until ``time.monotonic()`` passes ``until``."""
    out: list[Done] = []
    while executor.in_flight() and time.monotonic() < until:
        out += executor.collect(timeout_s=min(1.0, max(0.0, until - time.monotonic())))
    return out
