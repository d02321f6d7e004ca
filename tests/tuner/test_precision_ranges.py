"""Lower-precision range candidates judged at the model's outputs (collage.tuner.precision.output_errors)."""
from __future__ import annotations

import numpy as np
import pytest

from collage.tuner.precision import tuner as P
from collage.backends import get_backend
from collage.measure.accuracy import Budget, ErrorMeasure, compare, load_calibration, measure_errors, reference_runs
from collage.graph.ir import Graph
from collage.tuner.precision.output_errors import OutputErrors, range_bounds, screen_ranges, span_of
from collage.search.candidates import Candidate
from tests.helpers import bf16_mark, chain_model

needs_bf16 = bf16_mark()


def test_span_of_needs_contiguous_range_between_bounds():
    bounds = frozenset({0, 2, 4, 8})
    assert span_of((0, 1), bounds) == (0, 2)
    assert span_of((2, 3, 4, 5, 6, 7), bounds) == (2, 8)
    assert span_of((0, 1, 2), bounds) is None  # ends between cuts
    assert span_of((0, 1, 3, 4), bounds) is None  # not contiguous (same length as (0, 4) would need)
    assert span_of((), bounds) is None


def test_range_bounds_of_a_chain_hold_both_ends():
    g = Graph.load(chain_model(8))
    b = range_bounds(g)
    assert 0 in b and len(g) in b and len(b) > 2


class _FakeOut:
    """Output errors growing with how many of the n nodes run in lower precision (1.0 at ``limit`` nodes)."""

    def __init__(self, n: int, limit: float, bounds: frozenset[int]) -> None:
        self.graph, self.limit, self.bounds, self.asked = list(range(n)), limit, bounds, []

    def span(self, c):
        return span_of(c.nodes, self.bounds)

    def measure(self, cs, budget_s=None, progress=False):
        self.asked += list(cs)
        return {c: ErrorMeasure(rel=len(c.nodes) / self.limit) for c in cs}

    def close(self):
        pass


def _ranges(n: int, cuts: list[int], backend: str = "openvino-bf16") -> list[Candidate]:
    spans = {(0, c) for c in cuts} | {(c, n) for c in cuts} | set(zip([0, *cuts], [*cuts, n])) | {(0, n)}
    return [Candidate(tuple(range(a, b)), backend) for a, b in sorted(spans)]


def test_screen_ranges_bisects_prefixes_and_suffixes():
    n, cuts = 64, list(range(2, 64, 2))  # 31 cuts
    out = _FakeOut(n, limit=40.0, bounds=frozenset({0, n, *cuts}))
    cands = _ranges(n, cuts) + _ranges(n, cuts, "onnxruntime")
    screen = screen_ranges(out, Budget(None, 1.0), cands, {"openvino-bf16"})
    dropped, errs = screen.dropped, screen.errors
    over = {c for c in cands if c.backend == "openvino-bf16" and len(c.nodes) > 40 and len(c.nodes) < n
            and (c.nodes[0] == 0 or c.nodes[-1] == n - 1)}
    assert dropped == over  # every prefix/suffix longer than 40 nodes, nothing else (no fp32, no segment)
    assert len(out.asked) <= 1 + 2 * 6, len(out.asked)  # the whole model, then ~log2(31) per family
    assert all(c.backend == "openvino-bf16" for c in out.asked)
    assert set(errs) == set(out.asked)
    # timed first: the longest prefixes/suffixes within budget (40 nodes), each with its fp32 complement
    assert screen.first[:2] == [Candidate(tuple(range(40)), "openvino-bf16"),
                                Candidate(tuple(range(40, n)), "onnxruntime")]
    assert Candidate(tuple(range(24, n)), "openvino-bf16") in screen.first
    assert not set(screen.first) & dropped and len(screen.first) == 2 * 2 * 4


def test_screen_ranges_keeps_everything_when_the_whole_model_is_within_budget():
    n, cuts = 16, [4, 8, 12]
    out = _FakeOut(n, limit=100.0, bounds=frozenset({0, n, *cuts}))
    screen = screen_ranges(out, Budget(None, 1.0), _ranges(n, cuts), {"openvino-bf16"})
    assert not screen.dropped and not screen.first and len(out.asked) == 1


def test_screen_ranges_stops_at_its_time_budget():
    n, cuts = 64, list(range(2, 64, 2))
    out = _FakeOut(n, limit=40.0, bounds=frozenset({0, n, *cuts}))
    screen = screen_ranges(out, Budget(None, 1.0), _ranges(n, cuts), {"openvino-bf16"}, budget_s=-1.0)
    assert not screen.dropped and not out.asked  # nothing measured: nothing dropped on a guess


def test_prescreen_drops_over_budget_ranges_before_timing(monkeypatch):
    g = Graph.load(chain_model(16))
    n, cuts = len(g), sorted(range_bounds(g) - {0, len(g)})
    bks = [get_backend("onnxruntime"), get_backend("openvino-bf16")]
    monkeypatch.setattr(P.OutputErrors, "measure", lambda self, cs, budget_s=None, progress=False:
                        {c: ErrorMeasure(rel=len(c.nodes) / 10.0) for c in cs})
    tuner = P.PrecisionTuner.setup(g, bks, P.PrecisionSettings("rel=1.0", None, progress=False))
    cands = _ranges(n, cuts) + _ranges(n, cuts, "onnxruntime")
    kept = tuner.prescreen(cands)
    assert Candidate(tuple(range(n)), "openvino-bf16") in kept  # the whole model always stays
    assert all(len(c.nodes) <= 10 or c.backend == "onnxruntime" or len(c.nodes) == n for c in kept)
    whole = [c for c in cands if len(c.nodes) == n]
    assert kept[:len(whole)] == whole  # whole models first, then the longest within-budget ranges
    longest = max((c for c in kept if c.backend == "openvino-bf16" and len(c.nodes) < n and c.nodes[0] == 0),
                  key=lambda c: len(c.nodes))
    assert kept[len(whole)] == longest and len(longest.nodes) <= 10
    assert len(kept) == len(set(kept))


@needs_bf16
def test_output_error_of_a_prefix_runs_the_rest_in_fp32(tmp_path):
    from collage.measure.connect import get_db

    g = Graph.load(chain_model(8))
    n = len(g)
    bks = {"openvino-bf16": get_backend("openvino-bf16"), "onnxruntime": get_backend("onnxruntime")}
    cal = load_calibration(g, None)
    a, b = 0, sorted(range_bounds(g) - {0, n})[0]
    prefix, whole = Candidate(tuple(range(a, b)), "openvino-bf16"), Candidate(tuple(range(n)), "openvino-bf16")
    db = get_db(tmp_path / "costs.sqlite")
    got = OutputErrors(g, bks, cal, db).measure([prefix, whole, Candidate((0, 1, 3), "openvino-bf16")])
    assert set(got) == {prefix, whole}  # not a range: skipped
    # by hand: the bf16 prefix's outputs through ONNX Runtime on the rest, compared at the model's output
    refs = reference_runs(g, cal, g.boundary(range(b, n))[0])
    pre = bks["openvino-bf16"].compile(g.extract(prefix.nodes))
    rest = bks["onnxruntime"].compile(g.extract(range(b, n)))
    want = ErrorMeasure()
    for ref in refs:
        mid = pre.run({t: ref[t] for t in g.boundary(prefix.nodes)[0]})
        compare(rest.run(dict(mid)), ref, g.outputs, want)
    assert got[prefix].rel == pytest.approx(want.rel, rel=1e-9) and got[prefix].rel > 0
    assert got[whole].rel == pytest.approx(measure_errors(g, [whole], bks, cal)[whole].rel, rel=1e-9)
    # cached: a second measurer on the same DB finds them
    again = OutputErrors(g, bks, cal, get_db(tmp_path / "costs.sqlite"))
    assert again.cached([prefix, whole]).keys() == {prefix, whole}
    assert np.isfinite(got[prefix].cos)
