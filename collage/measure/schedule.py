"""Isolated, crash-safe, noise-controlled measurement of candidates.

* Every compile and timed run happens in a **worker process** (a fresh ``python -m
  collage.measure.worker`` talking over a socket pair; its output goes to a temp file whose tail
  is quoted when it crashes), owned by a
  ``Measurer``. A worker that aborts, raises or passes its timeout turns the candidate into a failed
  measurement with the reason (``"worker crashed (SIGABRT) during compile"``, ``"timeout after 60 s
  during run"``, the exception text); the worker is replaced and the job goes on.
* **Noise control**: a measurement window is a compile, a warm-up, then single timed calls until the
  distribution-free 95% confidence interval of the median is within 2% of it, or its cap passes (at
  least 10 samples; fewer, down to 1, when a single call takes a sizeable part of the cap). One window
  is tight (~2%) but the machine's speed drifts between time windows (shared vCPUs, other tenants).
  ``measure_candidates(rounds=k)`` measures each key in ``k`` windows of ``cap_s / k`` spread over the
  job (round robin over ``window`` keys in flight) and stores the median of the round medians
  (``combine_rounds``): a slow period moves one round, not the cost. The default is one window: more
  rounds took longer and did not make two separate runs agree better (results/measurement/noise.md). Optional: a
  reference probe next to each window, and a window whose probe was slow taken again (``probe``); each round in
  its own worker process (``round_workers``). ``timeout_s`` catches
  hangs: a candidate whose first call returned gets the time its remaining calls need. Inputs are seeded
  random arrays of the model's dtypes and shapes (integer indices kept in range of what they index).
* **One measurement at a time** on this machine: compile and timing hold an exclusive file lock
  (``cache_dir()/"measure.lock"``), shared by every process using the same cache directory.
* ``measure_candidates`` deduplicates candidates by structural fingerprint, never measures a key the
  cost database already holds for this model (a failure the model file caused holds for that file only, a
  transient one for none: ``Cost.holds_for``), claims each key in the database before measuring it (two processes
  sharing a DB do not duplicate work), commits each cost as soon as its last round is taken (a
  ``kill -9`` loses at most the rounds of the keys in flight, never a committed cost), and stops
  cleanly at its budget keeping what it finished (keys in flight with the rounds they have).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.measure.db import Cost, CostDB, CostKey, default_owner, key_maker, owner_dead
from collage.measure.connect import get_db
from collage.measure.executor import Done, Executor, Window, get_executor, wait_for
from collage.measure.measurer import (DEFAULT_CAP_S, DEFAULT_TIMEOUT_S, LOAD_TIMEOUT_S, MAX_EXTENSION_S, Measurement,
                                          combine_rounds, window_warmup_s)
from collage.measure.worker import resolve_backend
from collage.errors import BackendUnavailable, CollageError, MeasurementError

if TYPE_CHECKING:
    from collage.graph.ir import Graph

log = logging.getLogger(__name__)

#: Measurement windows per key in ``measure_candidates`` (cost = median of the round medians).
DEFAULT_ROUNDS = 1
#: Keys in flight at once (their rounds are taken round robin, so a key's windows lie this many apart).
DEFAULT_WINDOW = 24
#: Reference probe next to every window; a window whose probe is PROBE_SLOW over the job's recent ones is redone.
DEFAULT_PROBE = False
PROBE_SLOW = 0.15
MAX_REDO = 2
#: Round r of a key runs in the backend's r-th worker process.
DEFAULT_ROUND_WORKERS = False
#: A key whose window came back without a measurement (its node died, Ray's retries ran out) is handed out
#: again this many times before it is left unmeasured.
MAX_LOST = 2

# ---------------------------------------------------------------------- many candidates
class CostTable(dict):
    """``measure_candidates``' result: a dict ``(nodes, backend) -> Cost`` with the job's counts as attributes.

    ``candidates`` items asked, ``distinct`` fingerprint keys among them, ``reused`` keys found in the
    DB, ``measured`` keys measured now (``failed`` of them failed, reasons in ``failures``),
    ``unmeasured`` keys left when the budget ran out.
    """

    def __init__(self, *, candidates: int = 0, distinct: int = 0) -> None:
        super().__init__()
        self.candidates = candidates
        self.distinct = distinct
        self.reused = 0
        self.measured = 0
        self.failed = 0
        self.unmeasured = 0
        self.elapsed_s = 0.0
        self.failures: dict[CostKey, str] = {}
        #: the combined ``Measurement`` (CV, rounds, probe) of each key measured now
        self.stats: dict[CostKey, Measurement] = {}
        #: windows measured per machine ("local", or the Ray node's host name)
        self.where: dict[str, int] = {}
        #: windows that came back without a measurement (a node died, a node refused), with why
        self.lost: list[str] = []

    def summary(self) -> str:
        return (f"{self.candidates} candidates, {self.distinct} distinct fingerprints: {self.reused} reused from the "
                f"cost DB, {self.measured} measured now ({self.failed} failed), {self.unmeasured} left unmeasured; "
                f"{self.elapsed_s:.1f} s")


def reference_int_values(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Values every integer/bool tensor of ``graph`` takes in a reference run (ONNX Runtime).

    Used as the inputs of cut subgraphs that read such tensors (shapes, indices, masks): random
    integers there would measure a failing Reshape or an out-of-range Gather. Graph inputs take
    ``collage.graph.inputs.random_inputs`` values (token ids in the embedding's range, masks). Empty when the
    reference run cannot be made (the subgraphs then get random values in a safe range).
    """
    from collage.graph.inputs import random_inputs

    feeds = random_inputs(graph, seed=seed)
    wanted = [t for i in range(len(graph)) for t in graph.op(i).output
              if t and graph.consumers(t) and graph.tensor(t).dtype.kind in "iub"]
    out = {k: v for k, v in feeds.items() if v.dtype.kind in "iub"}
    if not wanted:
        return out
    try:
        from collage.backends.onnxruntime.session import make_session

        sess = make_session(graph.with_outputs(wanted))
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(names, feeds)
        out.update({n: v for n, v in zip(names, values) if n in set(wanted)})
    except Exception as e:  # noqa: BLE001 - only makes inputs more realistic; never stops measuring
        log.warning("%s: reference run for integer tensors failed (%s); cut subgraphs get random integers",
                    graph.name, e)
    return out


def _resolve_all(names: Sequence[str], backend_options: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    out = {}
    for name in names:
        b = resolve_backend(name, backend_options.get(name, {}))
        why = b.available()
        if why:
            raise BackendUnavailable(f"backend {name!r} cannot run here: {why}")
        out[name] = b
    return out


@dataclass
class _Pending:
    """A key in flight in ``measure_candidates``: its model and the rounds taken so far."""

    key: CostKey
    nodes: tuple[int, ...]
    backend: str
    blob: bytes
    feeds: dict[str, np.ndarray]
    done: list[Measurement] = field(default_factory=list)
    redone: int = 0
    lost: int = 0
    stored: bool = False  # the executor stored the key's cost already (a Ray node)


class _ProbeJudge:
    """Tells a slow measurement window by its reference probe against the job's recent probes."""

    def __init__(self, slow: float = PROBE_SLOW, history: int = 50) -> None:
        self.slow, self.history = slow, history
        self.seen: list[float] = []

    def is_slow(self, probe_ms: float | None) -> bool:
        if probe_ms is None:
            return False
        ref = float(np.median(self.seen)) if len(self.seen) >= 5 else None
        self.seen = (self.seen + [probe_ms])[-self.history:]
        return ref is not None and probe_ms > (1.0 + self.slow) * ref


def _drop_dead_claims(store: CostDB) -> None:
    """Release the claims of processes on this host that no longer exist.

    A driver killed after its worker committed a key but before it released its claim leaves the claim
    behind; a rerun reuses the key and never claims it, so without this the row stays in the claims table
    (a watcher reads it as work in flight) until it expires.
    """
    for c in store.claims():
        if owner_dead(c.owner):
            store.release(c.key, c.owner)


@dataclass(frozen=True)
class MeasureOptions:
    """How ``measure_candidates`` measures (each field as its docstring says; the defaults are the tuner's).

    ``db``: the cost DB (a path, URL or ``CostDB``; None: the default one). ``backend_options``: backend name ->
    its constructor options. ``budget_s``: stop before starting a window past it. ``progress``: show the
    counter, named by ``what`` and ``unit``. ``timeout_s``, ``cap_s``: each key's timeout and timing cap
    (shared by its ``rounds``). ``retry_failed``: measure stored failures again. ``claim_wait_s``: how long a
    key another process claimed is waited for (None: ``timeout_s``). ``rounds``, ``window``, ``probe``,
    ``round_workers``: the noise control. ``executor``: where windows run (None: this machine; a Ray address;
    an ``Executor``, left open).
    """

    db: None | str | CostDB = None
    backend_options: Mapping[str, Mapping[str, Any]] | None = None
    budget_s: float | None = None
    progress: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    cap_s: float = DEFAULT_CAP_S
    retry_failed: bool = False
    claim_wait_s: float | None = None
    rounds: int = DEFAULT_ROUNDS
    window: int = DEFAULT_WINDOW
    probe: bool = DEFAULT_PROBE
    round_workers: bool = DEFAULT_ROUND_WORKERS
    executor: None | str | Executor = None
    what: str = "candidates"
    unit: str = "cand"


def measure_candidates(graph: Graph, items: Sequence[tuple[tuple[int, ...], str]],
                       options: MeasureOptions | None = None, **overrides: Any) -> CostTable:
    """Measure ``items`` (node ids, backend name) of ``graph``; return ``{(nodes, backend): Cost}``.

    ``options`` (a ``MeasureOptions``; default: its defaults) with ``overrides`` (its field names as keywords,
    ``measure_candidates(g, items, db=..., budget_s=...)``) say how.

    Deduplicated by ``graph.fingerprint(nodes)``; a key already in ``db`` is reused, never re-measured
    (failed ones too where the failure holds for this model, ``Cost.holds_for``: a structural one, or one of
    this very file; a transient failure, one another model's file caused, or any with ``retry_failed``, is
    measured again). Keys another
    process has claimed are left to it and picked up from the DB when it commits them (waiting up to
    ``claim_wait_s``, default ``timeout_s``; a dead owner's claim is taken over at once). Keys are
    measured in the order of ``items``. At ``budget_s`` the job stops before starting another
    measurement window; unmeasured items are absent. Backend names may be registry names or
    ``module:Class`` specs; ``backend_options`` maps a name to its constructor options. ``what`` and ``unit``
    name what the progress counter counts (``measuring NAME: what: 3/308 unit``).

    **Rounds**: each key is measured in ``rounds`` short windows (``cap_s / rounds`` of timing each, a
    compile each) spread over the job: up to ``window`` keys are in flight and measured round robin, so
    that a key's windows lie several measurements apart; its cost is the median of its round medians
    (``combine_rounds``), committed as soon as its last round is taken. A ``kill -9`` loses the rounds
    of the keys in flight, never a committed cost; at the budget, keys in flight are committed with the
    rounds they have. With ``round_workers``, round ``r`` runs in the backend's ``r``-th worker process
    (per-process effects average out too). With ``probe``, a window whose reference probe
    (``worker.reference_probe``) ran over ``1 + PROBE_SLOW`` times the job's recent probes is taken again
    (at most ``MAX_REDO`` times a key). ``rounds=1, window=1`` is one window per key, in order.
    """
    opts = dataclasses.replace(options or MeasureOptions(), **overrides)
    return _MeasureJob(graph, items, opts).run()


def _fingerprint_keys(graph: Graph, items: Sequence[tuple[tuple[int, ...], str]], backends: Mapping[str, Any]
                      ) -> tuple[dict[tuple[tuple[int, ...], str], CostKey],
                                 dict[CostKey, tuple[tuple[int, ...], str]]]:
    """Each item's cost key, and each distinct key's first item (the one measured for it)."""
    make = {name: key_maker(b) for name, b in backends.items()}
    item_key: dict[tuple[tuple[int, ...], str], CostKey] = {}
    rep: dict[CostKey, tuple[tuple[int, ...], str]] = {}
    for nodes, bname in items:
        nodes = tuple(nodes)
        key = make[bname](graph.fingerprint(nodes))
        item_key[(nodes, bname)] = key
        rep.setdefault(key, (nodes, bname))
    return item_key, rep


class _MeasureJob:
    """One ``measure_candidates`` call: its keys (``queue``: to admit; ``deferred``: claimed by another process;
    ``active``: admitted, a window to hand out; the executor's windows in flight) and what it found (``known``,
    ``table``)."""

    def __init__(self, graph: Graph, items: Sequence[tuple[tuple[int, ...], str]], o: MeasureOptions) -> None:
        from collage.progress import progress_bar

        self.t_start = time.monotonic()
        self.graph, self.o = graph, o
        self.rounds, self.window = max(1, int(o.rounds)), max(1, int(o.window))
        self.store = get_db(o.db)
        self.backend_options = {k: dict(v) for k, v in (o.backend_options or {}).items()}
        self.backends = _resolve_all(sorted({b for _, b in items}), self.backend_options)
        self.item_key, self.rep = _fingerprint_keys(graph, items, self.backends)
        self.table = CostTable(candidates=len(self.item_key), distinct=len(self.rep))
        _drop_dead_claims(self.store)
        self.known: dict[CostKey, Cost] = {k: c for k, c in self.store.get_many(self.rep).items() if self.holds(c)}
        self.table.reused = len(self.known)
        # the caller's order (tune puts whole-model and single-node candidates first, so that a budget cut
        # still leaves a cover); one worker per backend (and round) keeps each runtime warm whatever the order
        self.queue = [k for k in self.rep if k not in self.known]
        self.owner = default_owner()
        self.ttl_s = o.timeout_s + LOAD_TIMEOUT_S + MAX_EXTENSION_S
        self.wait_s = o.timeout_s if o.claim_wait_s is None else o.claim_wait_s
        self.bar = progress_bar(len(self.rep), f"measuring {graph.name}: {o.what}", o.unit, enabled=o.progress,
                                initial=len(self.known),
                                deadline=None if o.budget_s is None else self.t_start + o.budget_s)
        self.deferred: list[CostKey] = []
        self.deferred_since: dict[CostKey, float] = {}
        self.active: list[_Pending] = []
        self.judge = _ProbeJudge()
        self.int_values: dict[str, np.ndarray] | None = None
        self.runner = get_executor(o.executor)
        self.owns_runner = self.runner is not o.executor
        self.window = max(self.window, self.runner.capacity)
        self.last_swap = 0.0

    # ------------------------------------------------------------------ the loop
    def run(self) -> CostTable:
        """Measure until every key is known, deferred past its wait, or the budget ran out; the table."""
        runner = self.runner
        try:
            runner.start(self.store, self.backends)
            while self.queue or self.deferred or self.active or runner.in_flight():
                if self.over_budget():
                    log.info("budget of %.0f s reached; stopping with %d keys unmeasured", self.o.budget_s,
                             len(self.queue) + len(self.deferred) + sum(1 for p in self.active if not p.done))
                    break
                if not self.step():
                    break
            # windows still in flight (the budget, a stall) finish and are kept
            for d in wait_for(runner, time.monotonic() + self.o.timeout_s + LOAD_TIMEOUT_S):
                self.handle(d)
        finally:
            self.close()
        for item, key in self.item_key.items():
            if key in self.known:
                self.table[item] = self.known[key]
        self.table.unmeasured = self.table.distinct - len(self.known)
        self.table.elapsed_s = time.monotonic() - self.t_start
        return self.table

    def step(self) -> bool:
        """Admit keys, hand out windows, take in what came back; False when the machine stalled (lock wait)."""
        runner = self.runner
        busy = bool(self.active or runner.in_flight())
        # keys other processes are measuring: retried now and then (waited for when nothing else is left)
        if not self.queue and self.deferred and (not busy or time.monotonic() - self.last_swap > 1.0):
            if not busy:
                time.sleep(0.2)
            self.queue, self.deferred, self.last_swap = self.deferred, [], time.monotonic()
        while self.queue and len(self.active) + len(runner.in_flight()) < self.window:
            self.admit(self.queue.pop(0))
        stalled = False
        while self.active and len(runner.in_flight()) < runner.capacity:
            if not self.submit(self.active.pop(0)):
                stalled = True
                break
        for d in runner.collect(timeout_s=1.0):
            self.handle(d)
        return not stalled

    def close(self) -> None:
        """Keys in flight: committed with the rounds they have (budget, lock timeout), else released."""
        for w in self.runner.in_flight():
            self.store.release(w.key, self.owner)
        for p in self.active:
            if p.done:
                self.commit(p)
            else:
                self.store.release(p.key, self.owner)
        if self.owns_runner:
            self.runner.close()
        self.bar.close()

    def over_budget(self) -> bool:
        return self.o.budget_s is not None and time.monotonic() - self.t_start >= self.o.budget_s

    # ------------------------------------------------------------------ one key
    def holds(self, cost: Cost) -> bool:
        return cost.ok if self.o.retry_failed else cost.holds_for(self.graph.digest)

    def reuse(self, key: CostKey) -> bool:
        """Take ``key``'s cost from the DB when it is there and holds for this model (``holds``)."""
        done = self.store.get(key)
        if done is None or not self.holds(done):
            return False
        self.known[key] = done
        self.table.reused += 1
        self.bar.update(1)
        return True

    def admit(self, key: CostKey) -> None:
        """Claim ``key`` and make it active (its subgraph cut out), or defer it when another process has it."""
        if self.reuse(key):
            return
        if not self.store.claim(key, self.owner, ttl_s=self.ttl_s):
            first = self.deferred_since.setdefault(key, time.monotonic())
            if time.monotonic() - first > self.wait_s + 120:
                log.warning("key %s stays claimed by another process; leaving it unmeasured", key.fingerprint)
            else:
                self.deferred.append(key)
            return
        # another process may have committed the key and dropped its claim between our read and our
        # claim: read again under the claim, or the key is measured twice
        if self.reuse(key):
            self.store.release(key, self.owner)
            return
        nodes, bname = self.rep[key]
        try:
            blob = self.graph.extract(nodes).SerializeToString()
        except CollageError as e:  # a cutting problem, not a measurement: reported, not stored
            self.store.release(key, self.owner)
            self.finish(key, Cost.from_key(key, error=f"cannot extract the subgraph: {e}"), nodes, bname, None)
            return
        self.active.append(_Pending(key, nodes, bname, blob, self.given_ints(nodes)))

    def given_ints(self, nodes: tuple[int, ...]) -> dict[str, np.ndarray]:
        """Reference values of the integer tensors entering ``nodes`` (``reference_int_values``, taken once)."""
        graph = self.graph
        entering = [t for t in graph.boundary(nodes)[0] if graph.tensor(t).dtype.kind in "iub"]
        if entering and self.int_values is None:
            self.int_values = reference_int_values(graph)
        return {t: self.int_values[t] for t in entering if self.int_values and t in self.int_values}

    def submit(self, p: _Pending) -> bool:
        """Hand ``p``'s next window to the executor; False when the budget ran out waiting for the machine."""
        o, rounds = self.o, self.rounds
        left = None if o.budget_s is None else max(0.0, o.budget_s - (time.monotonic() - self.t_start))
        if p.done:
            self.store.claim(p.key, self.owner, ttl_s=self.ttl_s)  # refresh: the key stays ours across its rounds
        w = Window(p.key, p.blob, p.backend, self.backend_options.get(p.backend, {}), p.feeds, timeout_s=o.timeout_s,
                   cap_s=o.cap_s / rounds, warmup_s=window_warmup_s(rounds), probe=o.probe,
                   slot=len(p.done) % rounds if o.round_workers else 0, lock_timeout_s=left,
                   commit=rounds == 1 and not o.probe, retry_failed=o.retry_failed,
                   file=self.graph.digest() if self.runner.stores_costs else None, tag=p)
        try:
            self.runner.submit(w)
        except MeasurementError as e:  # the budget (or LOCK_WAIT_S) ran out waiting for another process's measurement
            log.log(logging.INFO if o.budget_s is not None else logging.WARNING,
                    "%s; stopping with the rest unmeasured",
                    e)
            self.active.insert(0, p)
            return False
        except BaseException:  # Ctrl-C or SIGTERM mid-window: the key goes back, and its claim is released below
            self.active.insert(0, p)
            raise
        return True

    def handle(self, d: Done) -> None:
        """Take in a window that came back: lost, redone (slow probe), another round, or the key's cost."""
        p: _Pending = d.window.tag
        res = d.measurement
        if res is None:
            self.lost(p, d)
            return
        self.table.where[d.where] = self.table.where.get(d.where, 0) + 1
        if res.ok and self.o.probe and self.judge.is_slow(res.probe_ms) and p.redone < MAX_REDO:
            p.redone += 1
            log.debug("slow window (probe %.3f ms) for %s; measuring that round again", res.probe_ms,
                      p.key.fingerprint)
            self.active.append(p)
            return
        p.done.append(res)
        p.stored = d.stored
        if not res.ok or len(p.done) >= self.rounds:
            self.commit(p)
        else:
            self.active.append(p)

    def lost(self, p: _Pending, d: Done) -> None:
        """A window that came back without a measurement: handed out again ``MAX_LOST`` times, then left."""
        p.lost += 1
        self.table.lost.append(f"{p.key.fingerprint} on {p.backend}: {d.lost}")
        if p.lost <= MAX_LOST:
            log.warning("%s on %s: no measurement came back (%s); handing it out again", _short(p.nodes),
                        p.backend, d.lost)
            self.active.append(p)
        else:
            log.warning("%s on %s: no measurement came back %d times (%s); left unmeasured", _short(p.nodes),
                        p.backend, p.lost, d.lost)
            self.store.release(p.key, self.owner)

    def commit(self, p: _Pending) -> None:
        """Store ``p``'s cost from the rounds it has (unless the executor did) and release its claim."""
        res = combine_rounds(p.done)
        res.samples_ms = []  # spread stats are kept; thousands of single-call times per key are not
        cost = res.to_cost(p.key, None if res.ok else self.graph.digest())
        try:
            if not p.stored:
                self.store.put(cost)
        finally:
            self.store.release(p.key, self.owner)
        self.finish(p.key, cost, p.nodes, p.backend, res)

    def finish(self, key: CostKey, cost: Cost, nodes: tuple[int, ...], bname: str, stats: Measurement | None) -> None:
        """Count ``key``'s new cost in the table and the progress bar."""
        table = self.table
        self.known[key] = cost
        if stats is not None:
            table.stats[key] = stats
        table.measured += 1
        if not cost.ok:
            table.failed += 1
            table.failures[key] = cost.error or "?"
            log.warning("%s on %s (nodes %s): %s", self.graph.name, bname, _short(nodes), cost.error)
        self.bar.update(1)
        self.bar.set_postfix(failed=table.failed, refresh=False)


def _short(nodes: Sequence[int]) -> str:
    return str(list(nodes)) if len(nodes) <= 6 else f"[{nodes[0]}..{nodes[-1]}] ({len(nodes)} nodes)"
