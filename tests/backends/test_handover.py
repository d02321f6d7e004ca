"""Parking ONNX Runtime's shared pool while another runtime runs (collage.backends.handover, issue 19).

Each case runs in a fresh process: the shared pool and the parking are process-wide. Where a worker is
"parked" is read from Linux itself: /proc/self/task/<tid>/syscall names the system call a blocked thread
sits in (clock_nanosleep, 230 on x86_64: libc's sleep, the park handler); a spinning worker is running (no syscall)
and an idle one waits in futex (202).
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap
import time

import pytest

from collage.backends import unavailable_reason

#: clock_nanosleep's number (libc's sleep, the park handler) per architecture
NANOSLEEP = {"x86_64": 230, "aarch64": 115}.get(platform.machine())

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parking is Linux only (tgkill, /proc)"),
    pytest.mark.skipif(unavailable_reason("onnxruntime") is not None, reason="onnxruntime unavailable"),
]

PRELUDE = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from onnx import TensorProto as T, helper, numpy_helper
    from collage.backends import get_backend, handover

    def model(n=384):  # a few MatMuls: enough work for the pool's worker to take part
        rng = np.random.default_rng(0)
        nodes, inits, x = [], [], "x"
        for k in range(4):
            inits.append(numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32) / n ** 0.5, f"w{k}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{k}"], [f"y{k}"]))
            x = f"y{k}"
        g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", T.FLOAT, [n, n])],
                              [helper.make_tensor_value_info(x, T.FLOAT, [n, n])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    def syscall(tid):  # the system call a blocked thread sits in; None while it runs
        first = open(f"/proc/self/task/{tid}/syscall").read().split()[0]
        return None if first == "running" else int(first)

    def poll(workers, until, timeout=3.0):  # the workers' system calls, once ``until`` holds (or at the timeout)
        t_end = time.monotonic() + timeout
        while True:
            calls = [syscall(t) for t in workers]
            if until(calls) or time.monotonic() > t_end:
                return calls
            time.sleep(0.002)
    """)


def _run(body: str) -> dict:
    out = subprocess.run([sys.executable, "-c", f"NANOSLEEP = {NANOSLEEP!r}\n" + PRELUDE + textwrap.dedent(body)],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_run_on_another_runtime_parks_the_pool_and_the_next_onnxruntime_run_wakes_it():
    if unavailable_reason("openvino") is not None:
        pytest.skip(f"openvino unavailable: {unavailable_reason('openvino')}")
    if NANOSLEEP is None:
        pytest.skip(f"clock_nanosleep's number on {platform.machine()} is not listed here")
    got = _run("""
        m = model(); x = {"x": np.random.default_rng(1).standard_normal((384, 384)).astype(np.float32)}
        ort = get_backend("onnxruntime").compile(m)
        workers = handover.threads("onnxruntime")
        ov = get_backend("openvino").compile(m)
        want = ort.run(x)["y3"].copy()
        ov.run(x)  # right after an ONNX Runtime run: its worker would still spin for ~50 ms
        at_park = poll(workers, lambda calls: all(c == NANOSLEEP for c in calls))
        parked = sorted(handover.parked())
        again = ort.run(x)["y3"].copy()
        after = poll(workers, lambda calls: NANOSLEEP not in calls)
        print(json.dumps({"workers": workers, "at_park": at_park, "parked": parked, "after": after,
                          "same": bool(np.array_equal(want, again))}))
        """)
    assert got["workers"], "the shared pool started no worker thread"
    assert got["parked"] == ["onnxruntime"]
    assert all(c == NANOSLEEP for c in got["at_park"]), f"a pool worker is not parked while OpenVINO runs: {got}"
    assert NANOSLEEP not in got["after"], f"a pool worker still sleeps after ONNX Runtime ran again: {got}"
    assert got["same"]


def test_without_park_the_pool_is_left_alone():
    got = _run("""
        ort = get_backend("onnxruntime", park=False)
        c = ort.compile(model())
        c.run({"x": np.ones((384, 384), np.float32)})
        handover.run_on("openvino")
        print(json.dumps({"parked": sorted(handover.parked()), "opts": ort.options}))
        """)
    assert got["parked"] == [] and got["opts"]["park"] is False


def test_a_run_that_bypasses_the_handover_still_computes_while_the_pool_is_parked():
    """A session's raw run while its pool's worker sleeps in the park handler: ONNX Runtime's caller does the
    work itself (no hang, the right answer), and the worker is woken afterwards as usual."""
    got = _run("""
        m = model(); x = {"x": np.random.default_rng(2).standard_normal((384, 384)).astype(np.float32)}
        c = get_backend("onnxruntime").compile(m)
        want = c.run(x)["y3"].copy()
        handover.run_on("openvino")  # as an OpenVINO partition's run would: the pool is parked
        t0 = time.perf_counter()
        raw = c._session._sess.run(["y3"], x, None)[0]  # the pybind call: no handover.run_on on the way
        took = time.perf_counter() - t0
        still = sorted(handover.parked())
        handover.wake_all()
        print(json.dumps({"same": bool(np.allclose(raw, want, rtol=1e-5, atol=1e-5)), "took": took,
                          "still": still, "after": sorted(handover.parked())}))
        """)
    assert got["same"]
    assert got["took"] < 5.0, f"the raw run waited for the parked worker ({got['took']:.1f} s)"
    assert got["still"] == ["onnxruntime"] and got["after"] == []


def test_python_threads_are_never_registered():
    got = _run("""
        import threading
        ok = handover.register("somewhere", [threading.get_native_id()])
        print(json.dumps({"ok": ok}))
        """)
    assert got["ok"] is False


def test_a_wake_right_after_a_park_is_not_lost_and_exit_does_not_wait_for_a_parked_pool():
    """A park and a wake back to back, 200 times (the worker may not have taken the park when the wake is
    due: sent then, the wake's handler would run first and the park's sleep after it, ~40 s); then the
    process exits with its pool parked (ONNX Runtime joins its workers at exit: a parked one would hold the
    exit up until its sleep ended)."""
    if NANOSLEEP is None:
        pytest.skip(f"clock_nanosleep's number on {platform.machine()} is not listed here")
    t0 = time.monotonic()
    got = _run("""
        x = {"x": np.ones((384, 384), np.float32)}
        c = get_backend("onnxruntime").compile(model())
        workers = handover.threads("onnxruntime")
        for _ in range(200):
            c.run(x)
            handover.run_on("openvino")
            handover.run_on("onnxruntime")
        stuck = poll(workers, lambda calls: NANOSLEEP not in calls, timeout=2.0)
        handover.run_on("openvino")  # and exit parked
        poll(workers, lambda calls: all(c == NANOSLEEP for c in calls))
        print(json.dumps({"stuck": stuck, "workers": workers}))
        """)
    took = time.monotonic() - t0
    assert got["workers"] and NANOSLEEP not in got["stuck"], f"a worker stayed parked after its wake: {got}"
    assert took < 30, f"the process took {took:.0f} s to finish with its pool parked"
