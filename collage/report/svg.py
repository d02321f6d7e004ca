"""The tuned graph as an SVG picture: partitions as blocks by longest-path layer, every node as a
small square coloured by its partition's backend, a legend. Used by ``collage.report.render`` (HTML page);
imports nothing from the package."""
from __future__ import annotations

import html
import math
from collections import Counter
from typing import Any

PALETTE = {"onnxruntime": "#4e79a7", "openvino": "#8e44ad", "tvm": "#59a14f", "tensorrt": "#e15759",
           "onnxruntime-cuda": "#f28e2b"}
_EXTRA_COLOURS = ["#edc948", "#76b7b2", "#ff9da7", "#9c755f", "#bab0ac"]


def num(v: Any) -> float | None:
    if isinstance(v, dict):
        v = v.get("ms", v.get("median_ms"))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)):
        return None
    return float(v)


def op_summary(ops: list[str], top: int = 4) -> str:
    counts = Counter(ops).most_common()
    text = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in counts[:top])
    return text + (f", +{len(counts) - top} more" if len(counts) > top else "")


def backend_colours(backends: list[str]) -> dict[str, str]:
    extra = iter(_EXTRA_COLOURS * 4)
    return {b: PALETTE.get(b) or next(extra) for b in backends}


def _layers(manifest: dict) -> list[int]:
    """Longest-path layer of each partition in the partition DAG (tensor producer -> consumer)."""
    producer: dict[str, int] = {}
    layer = []
    for k, p in enumerate(manifest["partitions"]):
        deps = [producer[t] for t in p["inputs"] if t in producer]
        layer.append(1 + max((layer[d] for d in deps), default=-1))
        for t in p["outputs"]:
            producer[t] = k
    return layer


def render_svg(manifest: dict, max_width: int = 1100) -> str:
    """The graph coloured by backend, as an SVG string.

    Top: partitions as blocks, one column per longest-path layer of the partition DAG (parallel
    partitions stack in a column), columns left to right wrapped into bands, arrows for the tensors
    handed between partitions. Below: every node in topological order as a small square coloured
    by its partition's backend (hover for op type), a dark tick where a partition starts. A legend.
    """
    parts = manifest["partitions"]
    colours = backend_colours(list(dict.fromkeys(p["backend"] for p in parts)))
    layer = _layers(manifest)
    cols: dict[int, list[int]] = {}
    for k, lv in enumerate(layer):
        cols.setdefault(lv, []).append(k)
    bw, bh, gap_in, hgap, band_gap, margin, gutter = 132, 40, 10, 30, 46, 20, 24
    # wrap columns into bands no wider than max_width
    bands: list[list[int]] = [[]]
    for lv in sorted(cols):
        if bands[-1] and gutter + margin + (len(bands[-1]) + 1) * (bw + hgap) > max_width:
            bands.append([])
        bands[-1].append(lv)
    total_w = max(600, min(max_width, gutter + margin * 2 + max(len(b) for b in bands) * (bw + hgap)))
    pos: dict[int, tuple[float, float]] = {}
    band_of: dict[int, int] = {}
    band_bottom: list[float] = []
    y = margin + 30
    for j, band in enumerate(bands):
        band_h = max(len(cols[lv]) for lv in band) * (bh + gap_in) - gap_in
        for c, lv in enumerate(band):
            col_h = len(cols[lv]) * (bh + gap_in) - gap_in
            for r, k in enumerate(cols[lv]):
                pos[k] = (gutter + margin + c * (bw + hgap), y + (band_h - col_h) / 2 + r * (bh + gap_in))
                band_of[k] = j
        y += band_h
        band_bottom.append(y)
        y += band_gap
    blocks_h = y
    # node strip
    nodes = sorted((i, p["backend"], k, op) for k, p in enumerate(parts)
                   for i, op in zip(p["nodes"], p.get("ops") or ["?"] * len(p["nodes"])))
    cell = 12
    per_row = max(20, int((total_w - 2 * margin) // cell))
    strip_top = blocks_h + 30
    strip_h = math.ceil(len(nodes) / per_row) * cell
    legend_top = strip_top + strip_h + 24
    height = legend_top + 24 * len(colours) + margin
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {total_w:.0f} {height:.0f}" font-family="sans-serif" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
           f'<text x="{margin}" y="{margin + 8}" font-size="13" font-weight="bold">{len(parts)} partition(s) in '
           'execution order, left to right (arrows: tensors handed from one partition to another)</text>']
    producer: dict[str, int] = {}
    edges: dict[tuple[int, int], list[str]] = {}
    for k, p in enumerate(parts):
        for t in p["inputs"]:
            if t in producer:
                edges.setdefault((producer[t], k), []).append(t)
        for t in p["outputs"]:
            producer[t] = k
    lane = [bottom + band_gap / 2 for bottom in band_bottom]  # the gap under each band
    for (a, b), tensors in edges.items():
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ja, jb, jitter = band_of[a], band_of[b], (a % 5 - 2) * 3
        if ja == jb and layer[b] == layer[a] + 1:  # next column: straight across
            x1, y1, x2, y2 = xa + bw, ya + bh / 2, xb - 2, yb + bh / 2
            mid = (x1 + x2) / 2
            d = f"M {x1:.1f} {y1:.1f} C {mid:.1f} {y1:.1f}, {mid:.1f} {y2:.1f}, {x2:.1f} {y2:.1f}"
        elif ja == jb:  # skips columns: arc over the band
            top = min(ya, yb) - band_gap / 2 + 6
            d = (f"M {xa + bw / 2:.1f} {ya:.1f} C {xa + bw / 2:.1f} {top:.1f}, {xb + bw / 2:.1f} {top:.1f}, "
                 f"{xb + bw / 2:.1f} {yb - 2:.1f}")
        else:
            x1, x2 = xa + bw / 2 + (b % 3 - 1) * 8, xb + bw / 2 + (a % 3 - 1) * 8
            if jb == ja + 1:  # next band: down into the gap, across, down
                d = (f"M {x1:.1f} {ya + bh:.1f} L {x1:.1f} {lane[ja] + jitter:.1f} L {x2:.1f} {lane[ja] + jitter:.1f} "
                     f"L {x2:.1f} {yb - 2:.1f}")
            else:  # further: through the left gutter, so that no block is crossed
                g = gutter / 2 + jitter
                d = (f"M {x1:.1f} {ya + bh:.1f} L {x1:.1f} {lane[ja] + jitter:.1f} L {g:.1f} {lane[ja] + jitter:.1f} "
                     f"L {g:.1f} {lane[jb - 1] + jitter:.1f} L {x2:.1f} {lane[jb - 1] + jitter:.1f} L {x2:.1f} {yb - 2:.1f}")
        out.append(f'<path d="{d}" fill="none" stroke="#555" stroke-width="1.2" marker-end="url(#arrow)">'
                   f'<title>{html.escape(", ".join(tensors))}</title></path>')
    for k, p in enumerate(parts):
        x, y = pos[k]
        ms = num(p.get("cost_ms"))
        ops = p.get("ops") or []
        tip = f"partition {k}: {p['backend']}, {len(p['nodes'])} ops ({op_summary(ops, 8)})"
        out.append(f'<g><title>{html.escape(tip)}</title><rect x="{x:.1f}" y="{y:.1f}" width="{bw}" '
                   f'height="{bh}" rx="6" fill="{colours[p["backend"]]}" stroke="#222" stroke-width="0.8"/>'
                   f'<text x="{x + 6:.1f}" y="{y + 16:.1f}" fill="white" font-weight="bold">#{k} '
                   f'{html.escape(p["backend"][:14])}</text><text x="{x + 6:.1f}" y="{y + 32:.1f}" fill="white">'
                   f'{len(p["nodes"])} ops{"" if ms is None else f" · {ms:.3f} ms"}</text></g>')
    out.append(f'<text x="{margin}" y="{strip_top - 10:.0f}" font-size="13" font-weight="bold">All {len(nodes)} '
               'nodes in topological order (a dark tick marks where a partition starts)</text>')
    last_part = None
    for n, (i, backend, k, op) in enumerate(nodes):
        x = margin + (n % per_row) * cell
        y = strip_top + (n // per_row) * cell
        out.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{colours[backend]}">'
                   f'<title>#{i} {html.escape(op)} (partition {k}, {html.escape(backend)})</title></rect>')
        if k != last_part:
            out.append(f'<rect x="{x}" y="{y}" width="2" height="{cell - 1}" fill="#111"/>')
            last_part = k
    counts = Counter(p["backend"] for p in parts)
    nodes_by = Counter(b for _, b, _, _ in nodes)
    for j, (b, c) in enumerate(colours.items()):
        y = legend_top + 24 * j
        out.append(f'<rect x="{margin}" y="{y}" width="16" height="16" fill="{c}"/>'
                   f'<text x="{margin + 24}" y="{y + 12}">{html.escape(b)}: {counts[b]} partition(s), '
                   f'{nodes_by[b]} node(s)</text>')
    out.append("</svg>")
    return "\n".join(out)
