"""How much of the search space a tune saw: candidates measured out of how many (the budget cuts the rest),
refinement trials run or why none were. Written to report.json as ``"coverage"``, said on the terminal, shown
by ``collage report``.

    "coverage": {
      "distinct": 242,          # distinct candidates (by structural fingerprint x backend)
      "with_cost": 159,         # of them, with a measured cost (reused + measured now)
      "reused": 0,              # found in the cost DB
      "measured_now": 159,      # measured by this tune (failed ones included)
      "failed": 0,
      "unmeasured": 83,         # left when the budget ran out (never measured, not in the search)
      "budget_s": 15.0,         # null: no budget
      "budget_cut": true,       # the budget ran out before every candidate was measured
      "unmeasured_nodes": [3, 4],   # smallest and largest unmeasured candidate, in nodes (null if none)
      "refinement": {"requested": 4, "ran": 0, "why_none": "the plan is one partition: ..."},
      "estimates": {            # under a budget (collage.tuner.guided): what the learned cost model priced
        "distinct": 242, "measured": 159,
        "estimated": 83,        # unmeasured, priced by the model while guiding (never exported)
        "unpriced": 0,          # unmeasured, no model for its backend variant (too few rows)
        "error": {"n": 57, "median_ape": 12.0, "p90_ape": 41.0, "in_range": 0.7},  # predicted before measuring
        "error_by_backend": {"onnxruntime": {...}, ...}, "training_rows": {"onnxruntime": 2210, ...},
        "rounds": 31, "converged_levels": [0, 1],   # estimate -> search -> measure rounds; levels whose plan
                                                    # came out measured throughout
        "filled": 0,            # measured in measuring order beside the rounds (collage.tuner.guided.SEARCH_SHARE)
        "last_rounds": [{"level": 1, "predicted_ms": 1.2, "partitions": 5, "estimated": 2, "measured": 2,
                        "filled": 0}, ...],
        "stopped": "the budget ran out", "optimistic_plan": {...}, "fit_s": 1.1, "search_s": 0.4}
    }
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: a tune's busiest window where other processes used this share of its CPUs (at least ``BUSY_FLOOR`` CPUs) says
#: the machine was busy (report.json's ``time.others``: collage.measure.contention)
BUSY_SHARE, BUSY_FLOOR = 0.25, 0.5


def measurement_coverage(measured: Any, items: Iterable[tuple[tuple[int, ...], str]],
                         budget_s: float | None) -> dict[str, Any]:
    """The coverage dict (module docstring) of a ``measure_candidates`` result ``measured`` over ``items``
    (``(nodes, backend)``, the candidates asked for)."""
    distinct = int(getattr(measured, "distinct", 0) or 0)
    unmeasured = int(getattr(measured, "unmeasured", 0) or 0)
    sizes = [len(nodes) for nodes, backend in items if (nodes, backend) not in measured]
    return {"distinct": distinct, "with_cost": distinct - unmeasured,
            "reused": int(getattr(measured, "reused", 0) or 0),
            "measured_now": int(getattr(measured, "measured", 0) or 0),
            "failed": int(getattr(measured, "failed", 0) or 0), "unmeasured": unmeasured, "budget_s": budget_s,
            "budget_cut": unmeasured > 0 and budget_s is not None,
            "unmeasured_nodes": [min(sizes), max(sizes)] if sizes and unmeasured else None,
            "refinement": {"requested": 0, "ran": 0, "why_none": "not asked for (--refine-trials 0)"}}


def refinement(requested: int, ran: int = 0, why_none: str | None = None) -> dict[str, Any]:
    return {"requested": int(requested), "ran": int(ran),
            "why_none": None if ran else (why_none or "not asked for (--refine-trials 0)")}


def measured_line(cov: Mapping[str, Any]) -> str:
    """One sentence: 'measured 159 of 242 distinct candidates (0 from the cost DB); the 15 s budget cut the
    other 83 (3-4 nodes, measured last), left out of the search'."""
    d, have = cov.get("distinct") or 0, cov.get("with_cost") or 0
    pct = f" ({100.0 * have / d:.0f}%)" if d else ""
    text = f"measured {have} of {d} distinct candidates{pct}: {cov.get('reused', 0)} from the cost DB, " \
           f"{cov.get('measured_now', 0)} now" + (f" ({cov['failed']} failed)" if cov.get("failed") else "")
    left = cov.get("unmeasured") or 0
    if left:
        sizes = cov.get("unmeasured_nodes")
        last = "" if cov.get("estimates") else ", measured last"  # guided: not an order by size
        span = "" if not sizes else f" ({sizes[0]} nodes{last})" if sizes[0] == sizes[1] else \
            f" ({sizes[0]}-{sizes[1]} nodes{last})"
        why = f"the {cov['budget_s']:.0f} s budget" if cov.get("budget_cut") else "the measurement job"
        text += f"; {why} cut the other {left}{span}: they are not in the search"
    return text


def refinement_line(cov: Mapping[str, Any]) -> str:
    r = cov.get("refinement") or {}
    if r.get("ran"):
        return f"refinement: {r['ran']} measured trial(s) of {r.get('requested', r['ran'])} asked for"
    asked = f"{r['requested']} trial(s) asked for, none ran: " if r.get("requested") else "none: "
    return "refinement: " + asked + str(r.get("why_none") or "not asked for")


def guide(est: Mapping[str, Any]) -> str:
    """Which cost model priced the unmeasured candidates: the one learned from the cost DB, the one shipped with
    collage for a machine class (a fresh DB: ``estimates.shipped.priced`` names the backends it priced), or both."""
    shipped = est.get("shipped") or {}
    priced = list(shipped.get("priced") or [])
    if not priced:
        return "the learned cost model"
    cls = shipped.get("machine_class") or "another"
    own = f"the cost model shipped for {cls} CPUs, scaled to this machine by its probe"
    learned = sorted(set(est.get("training_rows") or {}) - set(priced))
    if not learned:
        return own
    return f"{own} ({', '.join(priced)}), and the one learned from the cost DB ({', '.join(learned)})"


def estimates_line(est: Mapping[str, Any]) -> str:
    """One sentence on guided measuring: 'guided by the learned cost model: 83 candidates estimated, none exported
    (every partition of the plan is measured); predicted before measuring, 57 of them were off by 12% (median),
    41% (p90), 70% within the predicted 10-90% range'."""
    text = (f"guided by {guide(est)}: {est.get('estimated', 0)} candidate(s) estimated"
            + (f", {est['unpriced']} unpriced (too few measurements of their backend)" if est.get("unpriced") else "")
            + ", none exported (every partition of the plan is measured)"
            + (f"; {est['filled']} measured in measuring order beside the rounds (fitting and searching took over "
               "a quarter of the time)" if est.get("filled") else ""))
    err = est.get("error") or {}
    if err.get("n"):
        text += (f"; predicted before measuring, {err['n']} of them were off by {err['median_ape']:.0f}% (median), "
                 f"{err['p90_ape']:.0f}% (p90)")
        if err.get("in_range") is not None:
            text += f", {100 * err['in_range']:.0f}% within the predicted 10-90% range"
    else:
        text += "; no prediction was measured this run"
    return text


def load_line(load: Mapping[str, Any]) -> str:
    """One sentence on load-time folding (report.json's ``load``): 'folded at load by onnxslim 0.1.98: 860 -> 397
    nodes in 1.20 s (node ids number the folded model; numerics are checked against the model as read)'."""
    nodes, after = load.get("nodes"), load.get("nodes_after")
    inlined = list(load.get("inlined") or [])
    more = ", ..." if len(inlined) > 3 else ""
    head = f"{len(inlined)} local function(s) inlined ({', '.join(inlined[:3])}{more}); " if inlined else ""
    return head + _fold_line(load, nodes, after)


def _fold_line(load: Mapping[str, Any], nodes: Any, after: Any) -> str:
    tail = ""
    if nodes is not None and after is not None and nodes != after:
        tail = f"; {after - nodes} Constant node(s) made initializers or unused node(s) dropped: {nodes} tuned"
    if load.get("error"):
        return (f"not folded at load: {load.get('folded_by', 'folding')} failed ({load['error']}); the model is tuned "
                f"as read ({load.get('nodes_before', '?')} nodes{tail})")
    if load.get("applied") is False or load.get("nodes_before") == after:
        return f"nothing to fold at load ({load.get('nodes_before', '?')} nodes{tail})"
    return (f"folded at load by {load.get('folded_by', '?')}: {load.get('nodes_before', '?')} -> "
            f"{after} nodes in {load.get('fold_s', 0) or 0:.2f} s{tail} (node ids number the folded "
            "model; numerics are checked against the model as read)")


def busy_line(others: Mapping[str, Any] | None) -> str | None:
    """One line where report.json's ``time.others`` says the busiest window reached ``BUSY_SHARE`` of the CPUs,
    else None."""
    if not others or others.get("peak_cpus") is None:
        return None
    cpus, peak = int(others.get("cpus") or 1), float(others["peak_cpus"])
    if peak < max(BUSY_FLOOR, BUSY_SHARE * cpus):
        return None
    phase = others.get("peak_phase") or "starting"
    return (f"the machine was busy: other processes used {peak:.1f} of the {cpus} CPU(s) this tune ran on for "
            f"{others.get('window_s', 0):.0f} s during {phase}; timings taken then may be slow or uneven, and so may "
            "the choices made from them: re-tune on a quieter machine to trust them")
