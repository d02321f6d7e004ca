"""A TVM tuning budget inside the tune (``--tvm-budget``): MetaSchedule spent where TVM can change the plan.

Tuning every TVM candidate is out of reach on a small CPU (minutes per workload), and untuned TVM is
30-600x behind the vendor libraries. So, once the vendor backends' costs are measured, every TVM candidate
of at most ``MAX_NODES`` nodes is ranked by how far its best vendor cost lies above a roofline estimate of
the same nodes (FLOPs and bytes against this machine's peak, :func:`machine_peak`, probed once with numpy
and cached; the distance in ms, past a floor for TVM's own call cost), weighted up for the classes where TVM has won or
can fuse what vendors do not (depthwise and odd-shaped convolutions, memory-bound chains of elementwise / normalisation
ops). In that order the candidates are compiled by the TVM backend with MetaSchedule, which tunes each workload its
shared tuning database has not seen (``TVMBackend.tuning_db``: under the cache dir, keyed by machine and TVM version; a
workload tuned once is never tuned again, in this tune or any later one) until the budget is spent. Those
candidates are then measured like any other. A candidate whose tuned cost is already in the cost DB was
tuned by an earlier tune and costs no tuning at all.

:func:`tvm_tuning_report` is report.json's ``tvm_tuning`` section: what ran (workloads, trials, seconds, per
candidate) and what it won (TVM partitions of the plan, ms gained vs the best vendor on the same nodes).
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from collage.errors import CollageError
from collage.graph.stats import node_flops
from collage.util import cache_dir, machine_id

if TYPE_CHECKING:
    from collage.backends.base import Backend
    from collage.graph.ir import Graph
    from collage.plan import Plan
    from collage.search.candidates import Candidate

log = logging.getLogger(__name__)

#: the largest candidate (in nodes) worth a tuning: bigger ones hold many workloads and eat the budget
MAX_NODES = 6
#: a TVM call's own cost (inputs copied into its bound tensors, the VM call): no kernel is faster than this
CALL_FLOOR_MS = 0.01
#: weight of a candidate's vendor-over-roofline gap, per class
CLASS_WEIGHT = {"depthwise conv": 3.0, "odd conv": 2.0, "elementwise chain": 2.0, "layernorm/softmax chain": 2.0}
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "Tanh", "Erf", "Gelu", "Pow",
                         "Sqrt", "Exp", "Neg", "HardSigmoid", "HardSwish", "LeakyRelu", "Cast", "Where", "Min", "Max"})
NORMALISATION = frozenset({"LayerNormalization", "Softmax", "ReduceMean", "ReduceSum", "BatchNormalization",
                           "InstanceNormalization", "GroupNormalization", "LogSoftmax", "ReduceMax"})
SHAPE_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice", "Gather",
                       "Shape", "Split", "Expand", "Identity"})
ACTIVATIONS = frozenset({"Relu", "Clip", "Sigmoid", "Tanh", "Erf", "Gelu", "HardSwish", "LeakyRelu", "Mul", "Add",
                         "Div"})
PEAK_FILE = "roofline-peak.json"


# ---------------------------------------------------------------------- roofline
def _best_s(fn: Callable[[], object], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _probe_peak() -> dict[str, float]:
    """GFLOP/s of a float32 matmul and GB/s (read + write) of a 1 MB copy on this machine, best of many runs
    (a busy machine makes a probe low, and a low peak hides room under the vendors: best of many short calls).

    The copy is cache-resident on purpose: batch-1 candidates' tensors mostly fit in L2, and the estimate
    is a lower bound of what a fused kernel needs (a DRAM-sized copy measured 2-20 GB/s here, 1 MB 50-70)."""
    rng = np.random.default_rng(0)
    gflops = 0.0
    for n, reps in ((256, 200), (384, 100), (512, 40)):  # small calls fit between other processes' slices
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        gflops = max(gflops, 2 * n ** 3 / _best_s(lambda a=a, b=b: a @ b, reps) / 1e9)
    src = np.ones(1 << 18, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch outside the timing
    gbps = 2 * src.nbytes / _best_s(lambda: np.copyto(dst, src), 200) / 1e9
    return {"gflops": round(gflops, 2), "gbps": round(gbps, 2)}


def machine_peak() -> dict[str, float]:
    """This machine's peak (``gflops``, ``gbps``) as numpy sees it: probed once, cached under the cache dir."""
    path = cache_dir() / PEAK_FILE
    key = f"v2|{machine_id()}"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    got = data.get(key)
    if isinstance(got, dict) and got.get("gflops", 0) > 0 and got.get("gbps", 0) > 0:
        return got
    got = _probe_peak()
    data[key] = got
    try:
        path.write_text(json.dumps(data, indent=1))
    except OSError as e:  # the probe is cheap; only the cache is lost
        log.debug("cannot cache the roofline peak: %s", e)
    return got


def _nbytes(graph: Graph, name: str) -> int:
    try:
        t = graph.tensor(name)
        return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
    except Exception:  # noqa: BLE001 - an unknown shape counts nothing; the estimate stays a lower bound
        return 0


def roofline_ms(graph: Graph, nodes: Sequence[int], peak: Mapping[str, float]) -> float:
    """A lower bound of ``nodes``' latency: max(FLOPs / peak FLOP/s, bytes in and out / peak bandwidth).

    Bytes are the tensors entering the set (weights included) and those leaving it: what a kernel that
    fuses the set into one loop has to move at least."""
    flops = sum(node_flops(graph, i) for i in nodes)
    produced = {t for i in nodes for t in graph.op(i).output if t}
    entering = {t for i in nodes for t in graph.op(i).input if t and t not in produced}
    leaving = graph.boundary(nodes)[1]
    nbytes = sum(_nbytes(graph, t) for t in entering | set(leaving))
    return 1e3 * max(flops / (peak["gflops"] * 1e9), nbytes / (peak["gbps"] * 1e9))


# ---------------------------------------------------------------------- classes
def candidate_class(graph: Graph, nodes: Sequence[int]) -> str:
    """depthwise conv | 3x3 conv | 1x1 conv | odd conv | matmul+activation | layernorm/softmax chain |
    elementwise chain | reshape/transpose chain | other."""
    ops = [graph.op(i) for i in nodes]
    types = [n.op_type for n in ops]
    convs = [n for n in ops if n.op_type in ("Conv", "ConvTranspose")]
    if convs:
        conv = convs[0]
        group = next((a.i for a in conv.attribute if a.name == "group"), 1)
        try:
            w = graph.tensor(conv.input[1]).shape
        except Exception:  # noqa: BLE001
            w = ()
        if group > 1 and len(w) > 1 and w[1] == 1:
            return "depthwise conv"
        kernel = tuple(w[2:]) if len(w) > 2 else ()
        if group == 1 and kernel in ((3, 3), (1, 1)):
            return f"{kernel[0]}x{kernel[1]} conv"
        return "odd conv"
    if any(t in ("MatMul", "Gemm") for t in types):
        return "matmul+activation" if any(t in ACTIVATIONS for t in types) else "matmul"
    if any(t in NORMALISATION for t in types) and all(t in NORMALISATION | ELEMENTWISE | SHAPE_OPS for t in types):
        return "layernorm/softmax chain"
    if all(t in ELEMENTWISE for t in types):
        return "elementwise chain" if len(types) > 1 else "elementwise"
    if all(t in SHAPE_OPS for t in types):
        return "reshape/transpose chain"
    return "other"


# ---------------------------------------------------------------------- ranking
@dataclass
class Ranked:
    """A TVM candidate worth tuning: its vendor best, roofline estimate and score (gap x class weight)."""

    cand: Candidate
    cls: str
    vendor: str
    vendor_ms: float
    roofline_ms: float
    score: float


def vendor_first(cands: Sequence[Candidate], max_nodes: int = MAX_NODES) -> list[tuple[tuple[int, ...], str]]:
    """The vendor candidates a tune with a TVM budget measures before the others (within half the measuring
    budget): those on the nodes of a TVM candidate small enough to rank, since :func:`rank` needs their vendor
    cost. In enumeration order the coarse ranges come first, and under a short budget none of these would be
    measured: nothing ranked, and TVM never tried."""
    twins = {c.nodes for c in cands if c.backend == "tvm" and len(c.nodes) <= max_nodes}
    return [(c.nodes, c.backend) for c in cands if c.backend != "tvm" and c.nodes in twins]


def rank(graph: Graph, tvm_cands: Sequence[Candidate], vendor_costs: Mapping[tuple[tuple[int, ...], str], float],
         peak: Mapping[str, float], *, max_nodes: int = MAX_NODES) -> list[Ranked]:
    """TVM candidates of at most ``max_nodes`` nodes with a measured vendor cost on the same nodes, best score
    first; one per fingerprint (identical blocks share their tuning). The score is the room a perfect kernel
    has under the best vendor, in ms (vendor - roofline - ``CALL_FLOOR_MS``; none: not ranked), times the
    class weight: what tuning could gain end to end, not a ratio that tiny calls dominated by overhead win."""
    best: dict[tuple[int, ...], tuple[float, str]] = {}
    for (nodes, backend), ms in vendor_costs.items():
        if nodes not in best or ms < best[nodes][0]:
            best[nodes] = (ms, backend)
    out, seen = [], set()
    for c in tvm_cands:
        if len(c.nodes) > max_nodes or c.nodes not in best:
            continue
        fp = graph.fingerprint(c.nodes)
        if fp in seen:
            continue
        seen.add(fp)
        ms, vendor = best[c.nodes]
        roof = roofline_ms(graph, c.nodes, peak)
        room = ms - roof - CALL_FLOOR_MS  # what the best possible kernel could save over the vendor
        if room <= 0:
            continue
        cls = candidate_class(graph, c.nodes)
        out.append(Ranked(c, cls, vendor, ms, roof, room * CLASS_WEIGHT.get(cls, 1.0)))
    out.sort(key=lambda r: (-r.score, r.cand.nodes))
    return out


# ---------------------------------------------------------------------- tuning
@dataclass
class TuningRun:
    """What the TVM budget step did: the candidates it tuned (or found tuned), per candidate, and totals."""

    budget_s: float
    peak: dict[str, float]
    database: str | None
    trials_per_workload: int
    ranked: int = 0
    spent_s: float = 0.0
    entries: list[dict[str, Any]] = field(default_factory=list)
    selected: list[Candidate] = field(default_factory=list)
    stopped: str = ""
    charged_s: float = 0.0

    @property
    def new_trials(self) -> int:
        return sum(e.get("new_trials", 0) for e in self.entries)

    @property
    def new_workloads(self) -> int:
        return sum(e.get("workloads_tuned", 0) for e in self.entries)


SECONDS_FILE = "collage-candidate-seconds.json"


def _seconds_file(tvm: Backend) -> Any:
    db = getattr(tvm, "tuning_db", None)
    return None if db is None else db / SECONDS_FILE


def _read_seconds(path: Any) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def _record_seconds(path: Any, key: str, seconds: float) -> None:
    if path is None:
        return
    data = _read_seconds(path)
    data[key] = round(seconds, 3)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
        os.replace(tmp, path)
    except OSError as e:  # only the charge of a later tune is lost
        log.debug("cannot record tuning seconds: %s", e)


def tune_within_budget(graph: Graph, tvm: Backend, ranked: Sequence[Ranked], budget_s: float, *,
                       already_costed: Callable[[Candidate], bool],
                       say: Callable[..., None] = lambda *a: None) -> TuningRun:
    """Compile (= tune the new workloads of) the ranked candidates in order until ``budget_s`` is spent.

    The budget is what this model's TVM tuning gets, across tunes: a candidate ``already_costed`` (its tuned
    cost is in the cost DB: it was tuned when an earlier tune measured it) is selected without a compile and
    charged the seconds its tuning took then (recorded beside the tuning database), so the same tune run
    again re-selects what the first one tuned and tunes nothing new; a larger budget goes further down the
    ranking. The budget is checked before each tuning (one may run past it: a workload's tuning is not
    interrupted; the overrun is in the report)."""
    run = TuningRun(budget_s, dict(machine_peak()), str(getattr(tvm, "tuning_db", None) or ""),
                    int(getattr(tvm, "trials", 0)), ranked=len(ranked))
    seconds_path = _seconds_file(tvm)
    recorded = _read_seconds(seconds_path)
    t0 = time.monotonic()
    charged = reused_s = 0.0
    for r in ranked:
        key = f"{graph.fingerprint(r.cand.nodes)}-{run.trials_per_workload}"
        entry = {"nodes": [graph.node_label(i) for i in r.cand.nodes], "node_ids": list(r.cand.nodes),
                 "class": r.cls, "vendor": r.vendor, "vendor_ms": round(r.vendor_ms, 4),
                 "roofline_ms": round(r.roofline_ms, 5), "score": round(r.score, 2)}
        if already_costed(r.cand):
            charge = recorded.get(key, 0.0)
            charged += charge
            reused_s += charge
            entry.update(status="reused", new_trials=0, workloads_tuned=0, tuning_s=0.0, charged_s=charge)
            run.entries.append(entry)
            run.selected.append(r.cand)
            continue
        if charged >= budget_s:
            earlier = f", {reused_s:.0f} s of it by earlier tunes whose tuning this one reuses" if reused_s else ""
            run.stopped = run.stopped or (f"budget spent ({charged:.0f} s{earlier}) at candidate "
                                          f"{len(run.entries) + 1} of {len(ranked)}")
            continue  # only candidates tuned by earlier tunes from here on
        start = time.monotonic()
        try:
            compiled = tvm.compile(graph.extract(r.cand.nodes))
        except CollageError as e:
            wall = time.monotonic() - start
            charged += wall
            entry.update(status="failed", error=str(e)[:300], tuning_s=round(wall, 2), charged_s=round(wall, 2),
                         new_trials=0, workloads_tuned=0)
            run.entries.append(entry)
            continue
        wall = time.monotonic() - start
        charged += wall
        _record_seconds(seconds_path, key, wall)
        stats = dict(getattr(compiled, "tuning", {}) or {})
        tuned = int(stats.get("tuned", 0))
        entry.update(status="tuned" if tuned else "reused", workloads=int(stats.get("workloads", 0)),
                     workloads_tuned=tuned, workloads_reused=int(stats.get("reused", 0)),
                     new_trials=tuned * int(stats.get("trials", run.trials_per_workload)),
                     tuning_s=round(float(stats.get("tuning_s", 0.0)), 2), compile_s=round(wall, 2),
                     charged_s=round(wall, 2))
        run.entries.append(entry)
        run.selected.append(r.cand)
        say("tvm tuning: %s (%s, vendor %s %.3f ms, roofline %.4f ms): %d workload(s) tuned, %.1f s",
            entry["nodes"][0] + (f" +{len(r.cand.nodes) - 1}" if len(r.cand.nodes) > 1 else ""), r.cls, r.vendor,
            r.vendor_ms, r.roofline_ms, tuned, wall)
    if not run.stopped:
        run.stopped = f"all {len(ranked)} ranked candidates done"
    run.spent_s = round(time.monotonic() - t0, 2)
    run.charged_s = round(charged, 2)
    return run


def tvm_tuning_report(run: TuningRun, graph: Graph, plan: Plan, raw: Mapping[tuple[tuple[int, ...], str], Any],
                      vendors: Sequence[str]) -> dict[str, Any]:
    """report.json's ``tvm_tuning``: what ran and what it won."""
    for e in run.entries:
        cost = raw.get((tuple(e["node_ids"]), "tvm"))
        if cost is not None and cost.ok:
            e["tvm_ms"] = round(cost.median_ms, 4)
            e["tvm_vs_vendor"] = round(cost.median_ms / e["vendor_ms"], 3) if e["vendor_ms"] else None
    won = []
    for p in plan.partitions:
        if p.backend != "tvm":
            continue
        tvm_cost = raw.get((tuple(p.nodes), "tvm"))
        vend = [(c.median_ms, v) for v in vendors if (c := raw.get((tuple(p.nodes), v))) is not None and c.ok]
        row: dict[str, Any] = {"nodes": [graph.node_label(i) for i in p.nodes],
                               "tvm_ms": round(tvm_cost.median_ms, 4) if tvm_cost is not None and tvm_cost.ok else None}
        if vend and row["tvm_ms"] is not None:
            ms, v = min(vend)
            row.update(vendor=v, vendor_ms=round(ms, 4), gained_ms=round(ms - row["tvm_ms"], 4))
        won.append(row)
    return {
        "budget_s": run.budget_s, "spent_s": run.spent_s, "charged_s": run.charged_s, "stopped": run.stopped,
        "database": run.database, "trials_per_workload": run.trials_per_workload, "peak": run.peak,
        "ranked_candidates": run.ranked, "tried_candidates": len(run.entries),
        "tuned_candidates": sum(e["status"] == "tuned" for e in run.entries),
        "new_workloads_tuned": run.new_workloads, "new_trials": run.new_trials,
        "tuning_s": round(sum(e.get("tuning_s", 0.0) for e in run.entries), 2),
        "candidates": run.entries,
        "won": {"tvm_partitions": len(won), "gained_ms": round(sum(w.get("gained_ms", 0.0) for w in won), 4),
                "partitions": won},
    }
