"""Device hand-overs (collage.measure.device_transitions): what is measured, the figures, their DB keys; the chain
timing itself with the CPU device standing in for the eager mode (the graph mode runs in benchmarks/gpu_check.sh)."""
from __future__ import annotations

import pytest

from collage.measure import device_transitions as dt
from collage.measure.db import SQLiteCostDB
from collage.measure.transitions import model_settings, pair_settings


class Fake:
    def __init__(self, name: str) -> None:
        self.name, self.options = name, {}

    def version(self) -> str:
        return "1"


def test_graph_mode_only_where_both_sides_capture():
    assert dt.modes_to_measure(None, None) == ("eager", "graph")
    assert dt.modes_to_measure(None, "runs on host arrays") == ("eager",)
    assert dt.modes_to_measure("no", None) == ("eager",)


def test_figures_from_chain_medians():
    # 8 pieces: A alone 0.1, all-A 1.0 (0.2 over 8 x 0.1 across 7 cuts), all-B 0.8 (8 x 0.1: no cut), AB 1.6
    cut_a, cut_b, switch = dt.figures({"A1": 0.1, "B1": 0.1, "AA": 1.0, "BB": 0.8, "AB": 1.6}, 8)
    assert cut_a == pytest.approx(0.2 / 7) and cut_b == 0.0
    assert switch == pytest.approx((1.6 - 0.9) / 7)


def test_replay_settings_keep_modes_apart():
    pair = pair_settings(Fake("torch"), Fake("torch-bf16"))
    keys = {dt.replay_settings(pair, m) for m in dt.MODES}
    assert len(keys) == 2 and pair not in keys and model_settings(pair, "f") not in keys
    with pytest.raises(ValueError):
        dt.replay_settings(pair, "replayed")


def test_store_and_read_back_per_mode(tmp_path):
    db = SQLiteCostDB(tmp_path / "c.db")
    a, b = Fake("torch"), Fake("torch-bf16")
    rows = [{"nbytes": 4096, "cut_a_ms": 0.01, "cut_b_ms": -0.02, "switch_ms": 0.003},
            {"nbytes": 8192, "cut_a_ms": 0.01, "cut_b_ms": -0.02, "switch_ms": 0.005}]
    dt.store_fits(db, a, b, "graph", rows)
    got = dt.stored_figures([a, b], db, "graph")
    assert got.cut[a.name] == pytest.approx(0.01) and got.cut[b.name] == 0.0  # a cut never pays back
    fixed, per_byte = got.switch[(a.name, b.name)]
    assert fixed + per_byte * 4096 == pytest.approx(0.003) and got.switch[(b.name, a.name)] == (fixed, per_byte)
    assert dt.stored_figures([a, b], db, "eager") == dt.DeviceFigures("eager")  # the eager rows are not these


def test_without_cuda_only_stored_figures_come_back(tmp_path, monkeypatch):
    monkeypatch.setattr(dt, "_cuda_available", lambda: False)
    monkeypatch.setattr(dt, "measure_device_transition", lambda *a, **k: pytest.fail("measured without a GPU"))
    assert dt.graph_figures([Fake("torch")], SQLiteCostDB(tmp_path / "c.db")) == dt.DeviceFigures("graph")


def test_missing_pairs_are_measured_where_cuda_is(tmp_path, monkeypatch):
    db = SQLiteCostDB(tmp_path / "c.db")
    runs = []
    monkeypatch.setattr(dt, "_cuda_available", lambda: True)
    monkeypatch.setattr(dt, "measure_device_transition", lambda run, store: runs.append((run.a, run.b)))
    dt.graph_figures([Fake("torch"), Fake("torch-bf16")], db)
    assert runs == [("torch", "torch"), ("torch", "torch-bf16"), ("torch-bf16", "torch-bf16")]


def test_chains_timed_with_real_pieces_on_the_cpu_device():
    pytest.importorskip("torch")
    run = dt.DeviceRun("torch", "torch-bf16", {"device": "cpu"}, {"device": "cpu"}, sizes=(4096,), pieces=4,
                       modes=("eager",), rounds=3)
    rows = dt.device_chain_timings(run)
    assert list(rows) == ["eager"] and len(rows["eager"]) == 1
    row = rows["eager"][0]
    assert row["nbytes"] == 4096 and all(row[f"{c}_ms"] > 0 for c in ("A1", "B1", "AA", "BB", "AB"))
    assert row["cut_a_ms"] >= 0 and row["cut_b_ms"] >= 0


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda(), reason="no CUDA device: the in-graph chains run on the GPU machine")
def test_chains_timed_eagerly_and_in_one_cuda_graph():
    run = dt.DeviceRun("torch", "torch-bf16", {}, {}, sizes=(4096, 1 << 20), rounds=20)
    rows = dt.device_chain_timings(run)
    assert set(rows) == {"eager", "graph"}
    for mode in ("eager", "graph"):
        assert [r["nbytes"] for r in rows[mode]] == [4096, 1 << 20]
        assert all(r[f"{c}_ms"] > 0 for r in rows[mode] for c in ("A1", "B1", "AA", "BB", "AB"))
    # one replay launches the chain once: never slower than calling its 8 pieces (launch-bound at these sizes)
    assert rows["graph"][0]["AB_ms"] <= rows["eager"][0]["AB_ms"] * 1.1, rows
    print({m: [(r["nbytes"], round(r["cut_a_ms"], 4), round(r["switch_ms"], 4)) for r in rs]
           for m, rs in rows.items()})
