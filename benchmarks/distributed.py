"""The Ray executor: dispatch overhead per candidate, throughput with 1-8 nodes, a projection for a fleet.

    python -m benchmarks.distributed [--nodes 1,2,4,8] [--per-size 6] [--out results/measurement/distributed.md]

1. **Dispatch overhead**: the same candidates measured by the local executor and by a one-node Ray
   cluster; per candidate, the job's wall time minus the measurement windows' own time (``Measurement.wall_s``,
   timed around the worker job on whichever machine ran it), so what is left is what the executor adds
   (cost-DB look-ups, claims, Ray's scheduling and transfers). Ray with ``per_node=1`` (a node gets its
   next window only when it has returned the last: the raw round trip) and the default ``per_node=2``.
2. **Throughput**: ``per_size x 8`` candidates on clusters of 1, 2, 4, 8 simulated nodes. The backend is
   ``collage.backends.simulated:SleepBackend``: a compile sleeps, a call sleeps, so a window is a calibrated
   ~1 s in which the node's cores are idle; N nodes on this 2-core machine then measure in parallel as N
   machines would. That measures the executor's scaling, not this machine's cores (the machine lock is off
   for these nodes because they share one machine; on a fleet each node is its own machine).
3. **Projection**: the real window time per candidate (ONNX Runtime and OpenVINO, collage's default cap,
   on this machine, measured here locally) plus the Ray overhead gives candidates per hour per node;
   with the distinct keys of resnet50 and bert-base (results/measurement/noise.md) that is the time per model on N
   nodes.

Every cluster is local (``ray.cluster_utils.Cluster``: a head without the measurement resource plus N
nodes with ``collage_measure: 1`` and one CPU each) and is shut down after its run.
"""
from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from collage.util import machine_id, markdown_table, source_commit

SLEEP = "collage.backends.simulated:SleepBackend"
#: the simulated window: compile 0.5 s, then calls of 20 ms (warm-up 0.2 s, then >= 10 timed calls)
SLEEP_OPTS = {"ms_per_node": 20.0, "compile_s": 0.5}
#: distinct (fingerprint, backend) keys over onnxruntime + openvino, results/measurement/noise.md (candidates up to 12
#: nodes)
DISTINCT = {"resnet50": 806, "bert-base": 1118}

log = logging.getLogger("benchmarks.distributed")


def distinct_graph(n: int, offset: int = 0):
    """A graph of ``n`` unconnected Relu nodes, each of its own width: ``n`` distinct fingerprints."""
    from collage.graph.ir import Graph

    nodes, ins, outs = [], [], []
    for i in range(n):
        w = 8 + offset + i
        ins.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, w]))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, w]))
        nodes.append(helper.make_node("Relu", [f"x{i}"], [f"y{i}"], name=f"r{i}"))
    model = helper.make_model(helper.make_graph(nodes, f"distinct{n}_{offset}", ins, outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return Graph.load(model)


class LocalCluster:
    """A local Ray cluster: a head without the measurement resource, ``n`` nodes with it (one CPU each)."""

    def __init__(self, n: int) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        for _ in range(n):
            self.cluster.add_node(num_cpus=1, resources={"collage_measure": 1})
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False, logging_level=logging.WARNING)

    def close(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()


def run_job(graph, db_path: Path, executor, opts=SLEEP_OPTS, cap_s: float = 0.5):
    """Measure every node of ``graph`` on the sleep backend; (wall s, windows' own s, table)."""
    from collage.measure.schedule import measure_candidates

    t0 = time.perf_counter()
    table = measure_candidates(graph, [((i,), SLEEP) for i in range(len(graph))], db=str(db_path), cap_s=cap_s,
                               progress=False, executor=executor, backend_options={SLEEP: opts})
    wall = time.perf_counter() - t0
    assert table.measured == len(graph) and table.failed == 0, (table.summary(), table.failures)
    return wall, sum(m.wall_s for m in table.stats.values()), table


def overhead_rows(tmp: Path, n: int, repeats: int = 3) -> list[dict]:
    """Part 1: per-candidate time beyond the window itself, local vs Ray (one node), ``repeats`` interleaved runs."""
    import statistics

    from collage.measure.executor import LocalExecutor, RayExecutor

    opts = {"ms_per_node": 1.0, "compile_s": 0.0}
    names = ["local (worker process on this machine)", "Ray, 1 node, per_node=1", "Ray, 1 node, per_node=2"]
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    cluster = LocalCluster(1)
    try:
        executors = {names[0]: LocalExecutor(),
                     names[1]: RayExecutor(cluster.cluster.address, lock=False, per_node=1),
                     names[2]: RayExecutor(cluster.cluster.address, lock=False, per_node=2)}
        for i, (_name, ex) in enumerate(executors.items()):  # every worker process started before timing
            run_job(distinct_graph(3, 9000 + 10 * i), tmp / f"warm-{i}.sqlite", ex, opts, cap_s=0.05)
        for r in range(repeats):
            for i, (name, ex) in enumerate(executors.items()):
                wall, own, _ = run_job(distinct_graph(n, 1000 * (r + 1) + 100 * i), tmp / f"over-{r}-{i}.sqlite", ex,
                                       opts, cap_s=0.05)
                runs[name].append((wall, own))
        for ex in executors.values():
            ex.close()
    finally:
        cluster.close()
    rows = []
    for name in names:
        per = sorted(1000 * (wall - own) / n for wall, own in runs[name])
        rows.append({"executor": name, "candidates": n, "runs": repeats,
                     "wall s (median)": statistics.median(w for w, _ in runs[name]),
                     "windows s (median)": statistics.median(o for _, o in runs[name]),
                     "overhead ms per candidate (median)": statistics.median(per),
                     "min..max": f"{per[0]:.1f}..{per[-1]:.1f}"})
    return rows


def throughput_rows(tmp: Path, node_counts: list[int], per_size: int) -> list[dict]:
    """Part 2: the same job on 1, 2, 4, 8 simulated nodes."""
    from collage.measure.executor import RayExecutor

    n = per_size * max(node_counts)
    rows = []
    base = None
    for k in node_counts:
        cluster = LocalCluster(k)
        try:
            with RayExecutor(cluster.cluster.address, lock=False) as ex:
                run_job(distinct_graph(2 * k, 5000 + 100 * k), tmp / f"warm{k}.sqlite", ex)  # each node's worker up
                wall, own, table = run_job(distinct_graph(n, 10 * k), tmp / f"nodes{k}.sqlite", ex)
        finally:
            cluster.close()
        window = own / n
        rate = n / wall
        base = base or rate
        rows.append({"nodes": k, "candidates": n, "wall s": wall, "mean window s": window,
                     "candidates/s": rate, "speedup vs 1 node": rate / base, "ideal": k * (1.0 / window) / base,
                     "efficiency": rate / (k / window), "windows per node": " ".join(
                         str(v) for v in sorted(table.where.values(), reverse=True))})
        log.info("%d nodes: %.1f s, %.2f candidates/s", k, wall, rate)
    return rows


def real_window_s(tmp: Path, count: int) -> tuple[float, dict]:
    """Part 3: seconds per candidate of real measurements: ``count`` squeezenet candidates spread evenly over what
    the tuner enumerates (default ``Limits``: up to 12 nodes), ONNX Runtime and OpenVINO, collage's default cap."""
    from collage import zoo
    from collage.backends import get_backend
    from collage.measure.schedule import measure_candidates
    from collage.search.candidates import Limits, enumerate_candidates

    g = zoo.load_graph("zoo:squeezenet")
    names = ["onnxruntime", "openvino"]
    supports = {n: get_backend(n).supports_all(g) for n in names}
    seen, distinct = set(), []
    for c in enumerate_candidates(g, supports, Limits()):
        k = (g.fingerprint(c.nodes), c.backend)
        if k not in seen:
            seen.add(k)
            distinct.append((c.nodes, c.backend))
    step = max(1, len(distinct) // count)
    items = distinct[::step][:count]
    t0 = time.perf_counter()
    table = measure_candidates(g, items, db=str(tmp / "real.sqlite"), progress=False)
    wall = time.perf_counter() - t0
    sizes = sorted(len(n) for n, _ in items)
    return wall / max(1, table.measured), {"keys": table.measured, "wall s": wall, "of": len(distinct),
                                           "nodes": f"{sizes[0]}-{sizes[-1]} nodes (median {sizes[len(sizes) // 2]})"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,2,4,8")
    ap.add_argument("--per-size", type=int, default=6, help="candidates per node of the largest cluster")
    ap.add_argument("--overhead-candidates", type=int, default=40)
    ap.add_argument("--real-candidates", type=int, default=24)
    ap.add_argument("--out", default="results/measurement/distributed.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    command = " ".join(["python -m benchmarks.distributed", *(argv if argv is not None else sys.argv[1:])])
    node_counts = [int(x) for x in args.nodes.split(",")]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="collage-distributed-") as d:
        tmp = Path(d)
        over = overhead_rows(tmp, args.overhead_candidates)
        log.info("%s", markdown_table(over))
        thr = throughput_rows(tmp, node_counts, args.per_size)
        log.info("%s", markdown_table(thr))
        real_s, real = real_window_s(tmp, args.real_candidates)
    ray_over_s = next(r for r in over if "per_node=2" in r["executor"])["overhead ms per candidate (median)"] / 1000
    local_over_s = over[0]["overhead ms per candidate (median)"] / 1000
    per_hour = 3600.0 / (real_s + max(0.0, ray_over_s - local_over_s))
    proj = []
    for model, keys in DISTINCT.items():
        row = {"model": model, "distinct keys (2 backends)": keys, "1 machine, local": f"{keys * real_s / 60:.0f} min"}
        for k in (4, 8, 16, 32):
            row[f"{k} nodes"] = f"{keys / (per_hour * k) * 60:.1f} min"
        proj.append(row)
    text = render(command, over, thr, real_s, real, per_hour, proj, time.perf_counter() - t_start,
                  drivers_nodes=real_s / max(1e-6, ray_over_s))
    Path(args.out).write_text(text)
    print(text)
    return 0


def render(command, over, thr, real_s, real, per_hour, proj, total_s, drivers_nodes) -> str:
    last = thr[-1] if thr else {"nodes": 0, "efficiency": float("nan")}
    return "\n".join([
        "# Measuring on a Ray cluster: dispatch overhead, scaling, projection",
        "",
        f"Command: `{command}` at commit {source_commit()} ({total_s:.0f} s). Machine: {machine_id()}, shared with "
        f"other jobs (load average {os.getloadavg()[0]:.1f} when it ended); "
        f"{dt.datetime.now(dt.timezone.utc).isoformat(timespec='minutes')}. Clusters are local "
        "(`ray.cluster_utils.Cluster`: a head without the measurement resource and N nodes with `collage_measure: 1`, "
        "one CPU each) and the cost DB a SQLite file (every node is on this machine).",
        "",
        "## 1. Dispatch overhead per candidate",
        "",
        "The same candidates on the local executor and on a one-node Ray cluster (simulated backend: 1 ms calls, "
        "no compile, cap 0.05 s). *overhead* = (job wall time - the windows' own time) / candidates: what the "
        "executor adds around a measurement (cost-DB look-ups, claims, the model's transfer, Ray's scheduling). "
        "`per_node=1` is the raw round trip (a node gets its next window only after returning the last); the "
        "default `per_node=2` queues one more window per node. Median of the interleaved runs, with their range: "
        "on this loaded 2-core machine a few milliseconds either way are noise.",
        "",
        markdown_table(over),
        "## 2. Throughput with 1, 2, 4, 8 nodes",
        "",
        f"Simulated backend (`collage.backends.simulated:SleepBackend`, options {SLEEP_OPTS}): a compile sleeps "
        "0.5 s and a call 20 ms, so a window (compile, 0.2 s warm-up, timed calls until the median is stable) "
        "lasts about 1 s **while the cores stay idle**. The nodes all run on this 2-core machine, so a real "
        "backend would measure how many cores the machine has, not how the executor scales; with sleeps, N "
        "nodes behave as N machines (the machine lock, which would serialise them here, is off for this run). "
        "*ideal* = N x one node's rate at the measured window length; *efficiency* = rate / (N / mean window).",
        "",
        markdown_table(thr),
        f"At {last['nodes']} nodes the executor keeps {100 * last['efficiency']:.0f}% of the ideal rate. What it loses "
        "on this machine is "
        "CPU: each node is a raylet, a Ray worker and a measurement worker process, 8 of each on 2 shared "
        "cores (other engineers' jobs running too); on a fleet each node brings its own cores.",
        "",
        "## 3. Projection for a fleet",
        "",
        f"Real windows on this machine: {real['keys']} squeezenet candidates spread evenly over the "
        f"{real['of']} distinct ones the tuner enumerates ({real['nodes']}; ONNX Runtime and OpenVINO, collage's "
        f"default cap of 2 s, compile included) took {real['wall s']:.0f} s locally: **{real_s:.2f} s per "
        f"candidate**. Adding the Ray executor's overhead beyond the local one (section 1, `per_node=2`) gives "
        f"**{per_hour:.0f} candidates per hour per node** (one measurement at a time per machine); the same order as "
        "results/measurement/noise.md, whose one-window runs took 83 s for 214 resnet50 and bert-base subgraphs. With "
        "the distinct keys of two real models (results/measurement/noise.md: candidates up to 12 nodes, deduplicated "
        "by fingerprint, two backends) and nodes like this one:",
        "",
        markdown_table(proj),
        "This assumes identical 2-core nodes and windows as long as squeezenet's candidates; larger subgraphs "
        "(bert-base layers) have longer compiles, and TVM or int8 candidates multiply the keys. The per-node rate is "
        "what scales: the whole overhead per candidate (section 1, driver and node together) is milliseconds against "
        f"{real_s:.1f} s of measurement, so one driver keeps at least ~{drivers_nodes:.0f} nodes busy before its "
        "own work per candidate becomes the bottleneck (the cost DB's few statements per candidate, shared by "
        "all nodes, are the other limit; PostgreSQL serves thousands a second).",
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())
