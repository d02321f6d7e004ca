"""Pictures of a tuned artifact as SVG strings (used by :mod:`collage.report.render`; imports nothing of collage).

- ``render_svg(manifest)``: partitions as boxes (width by measured ms) by longest-path layer, arrows
  labelled with the tensor handed over and its size, every node as a small square coloured by backend.
- ``render_bars(rows)``: time per partition against its runner-up backend's.

Colours: one hue per backend family (the name before the first '-': openvino, openvino-bf16 and
openvino-fp16 are shades of one purple), each with the text colour that reads best on it; every pair
has a contrast ratio of at least 4.5:1 (WCAG AA), checked by ``colour_pair``.
"""
from __future__ import annotations

import hashlib
import html
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

#: base colour of each backend family (fp32 / default variant)
FAMILY = {"onnxruntime": "#1f5fa0", "openvino": "#6a2c9c", "tvm": "#2b6a2b", "tensorrt": "#a3231f",
          "torch": "#8f4700"}
_EXTRA = ["#00607a", "#7a4b00", "#5b5b5b", "#8a1c5a", "#3b5200"]
#: variant suffix -> shade index (0 = the family colour)
VARIANT_SHADE = {"": 0, "bf16": 1, "fp16": 2, "int8": 3, "cuda": 1, "gpu": 1}
#: shade index -> (mix towards, fraction)
_SHADES = [("#ffffff", 0.0), ("#ffffff", 0.55), ("#000000", 0.35), ("#ffffff", 0.78)]
TEXT_DARK, TEXT_LIGHT = "#111111", "#ffffff"
MIN_CONTRAST = 4.5


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


# ---------------------------------------------------------------------- colours
def _rgb(c: str) -> tuple[float, float, float]:
    c = c.lstrip("#")
    return tuple(int(c[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def _hex(rgb: Sequence[float]) -> str:
    return "#" + "".join(f"{round(max(0.0, min(1.0, x)) * 255):02x}" for x in rgb)


def _mix(a: str, b: str, t: float) -> str:
    return _hex([x + (y - x) * t for x, y in zip(_rgb(a), _rgb(b))])


def luminance(c: str) -> float:
    lin = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in _rgb(c)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two colours (1 to 21)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def family(backend: str) -> tuple[str, str]:
    """('openvino', 'bf16') for 'openvino-bf16'; ('onnxruntime', 'cuda') for 'onnxruntime-cuda'."""
    head, _, rest = backend.partition("-")
    return head, rest


def colour_pair(backend: str) -> tuple[str, str]:
    """(fill, text colour) of a backend: its family's hue, its variant's shade, contrast >= 4.5:1."""
    fam, variant = family(backend)
    base = FAMILY.get(fam) or _EXTRA[int(hashlib.sha256(fam.encode()).hexdigest(), 16) % len(_EXTRA)]
    shade = VARIANT_SHADE.get(variant, 1 + int(hashlib.sha256(variant.encode()).hexdigest(), 16) % 3)
    towards, t = _SHADES[shade]
    fill = _mix(base, towards, t)
    text = max((TEXT_LIGHT, TEXT_DARK), key=lambda tc: contrast(fill, tc))
    while contrast(fill, text) < MIN_CONTRAST:  # push the fill away from its text colour until it reads
        fill = _mix(fill, "#000000" if text == TEXT_LIGHT else "#ffffff", 0.1)
    return fill, text


def backend_colours(backends: list[str]) -> dict[str, str]:
    return {b: colour_pair(b)[0] for b in backends}


# ---------------------------------------------------------------------- graph picture
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


_ITEMSIZE = {"float64": 8, "int64": 8, "uint64": 8, "float32": 4, "int32": 4, "uint32": 4, "float16": 2,
             "bfloat16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1}


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def tensor_label(name: str, spec: Mapping[str, Any] | None, width: int = 24) -> tuple[str, str]:
    """('t7', '1×64×56×56 f32, 784.0 KB'): the name (cut to ``width``) and its shape, dtype and size ('' when
    the manifest does not record the shape)."""
    short = name if len(name) <= width else name[:width - 1] + "…"
    if not spec or "shape" not in spec:
        return short, ""
    shape = [int(d) for d in spec["shape"]]
    dtype = str(spec.get("dtype", "?"))
    size = math.prod(shape) * _ITEMSIZE.get(dtype, 4)
    short_dtype = dtype.replace("float", "f").replace("uint", "u").replace("int", "i")
    return short, f"{'×'.join(map(str, shape)) or 'scalar'} {short_dtype}, {human_bytes(size)}"


def _esc(s: object) -> str:
    return html.escape(str(s))


def render_svg(manifest: dict, max_width: int = 1100) -> str:
    """The graph coloured by backend, as an SVG string that scales down to its container's width.

    Top: partitions as boxes whose width grows with their measured ms, one column per longest-path layer
    of the partition DAG (parallel partitions stack), columns left to right wrapped into bands; an arrow,
    labelled with the tensor and its size, for each tensor handed from one partition to another. Below:
    every node in topological order as a small square coloured by its partition's backend (hover for the
    op), a dark tick where a partition starts. A legend.
    """
    parts = manifest["partitions"]
    tensors = manifest.get("tensors") or {}
    names = list(dict.fromkeys(p["backend"] for p in parts))
    pairs = {b: colour_pair(b) for b in names}
    layer = _layers(manifest)
    cols: dict[int, list[int]] = {}
    for k, lv in enumerate(layer):
        cols.setdefault(lv, []).append(k)
    costs = [num(p.get("cost_ms")) for p in parts]
    top_ms = max((c for c in costs if c is not None), default=None)
    bw_min, bw_max, bh, gap_in, band_gap, margin, gutter = 96, 220, 40, 40, 72, 20, 24
    hgap = 150 if len(cols) <= 12 else 40  # room for an arrow's label between columns

    def box_w(k: int) -> float:
        c = costs[k]
        return bw_min if c is None or not top_ms else bw_min + (bw_max - bw_min) * c / top_ms

    col_w = {lv: max(box_w(k) for k in ks) for lv, ks in cols.items()}
    bands: list[list[int]] = [[]]
    width_used = gutter + margin
    for lv in sorted(cols):
        if bands[-1] and width_used + col_w[lv] + margin > max_width:
            bands.append([])
            width_used = gutter + margin
        bands[-1].append(lv)
        width_used += col_w[lv] + hgap
    band_widths = [gutter + margin * 2 + sum(col_w[lv] for lv in b) + hgap * (len(b) - 1) for b in bands]
    title = f"{len(parts)} partition(s) in execution order, left to right"
    subtitle = ("box width: measured ms of the partition; arrows: tensors handed from one partition to the next, "
                "with shape and size")
    total_w = max(600.0, min(float(max_width), max(band_widths)), 7.2 * len(title) + 2 * margin)
    pos: dict[int, tuple[float, float]] = {}
    band_of: dict[int, int] = {}
    band_bottom: list[float] = []
    y = margin + 70  # room for arcs over the first band, under the subtitle
    for j, band in enumerate(bands):
        band_h = max(len(cols[lv]) for lv in band) * (bh + gap_in) - gap_in
        x = float(gutter + margin)
        for lv in band:
            col_h = len(cols[lv]) * (bh + gap_in) - gap_in
            for r, k in enumerate(cols[lv]):
                pos[k] = (x + (col_w[lv] - box_w(k)) / 2, y + (band_h - col_h) / 2 + r * (bh + gap_in))
                band_of[k] = j
            x += col_w[lv] + hgap
        y += band_h
        band_bottom.append(y)
        y += band_gap
    blocks_h = y
    nodes = sorted((i, p["backend"], k, op) for k, p in enumerate(parts)
                   for i, op in zip(p["nodes"], p.get("ops") or ["?"] * len(p["nodes"])))
    cell = 12
    per_row = max(20, int((total_w - 2 * margin) // cell))
    strip_top = blocks_h + 30
    strip_h = math.ceil(len(nodes) / per_row) * cell
    legend_top = strip_top + strip_h + 24
    height = legend_top + 24 * len(names) + margin
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {total_w:.0f} {height:.0f}" style="max-width:100%;height:auto" '
           'font-family="sans-serif" font-size="11" role="img">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>',
           f'<text x="{margin}" y="{margin + 8}" font-size="13" font-weight="bold">{_esc(title)}</text>',
           f'<text x="{margin}" y="{margin + 26}" fill="#333">{_esc(subtitle)}</text>']
    producer: dict[str, int] = {}
    edges: dict[tuple[int, int], list[str]] = {}
    for k, p in enumerate(parts):
        for t in p["inputs"]:
            if t in producer:
                edges.setdefault((producer[t], k), []).append(t)
        for t in p["outputs"]:
            producer[t] = k
    lane = [bottom + band_gap / 2 for bottom in band_bottom]
    labels: list[str] = []
    for e, ((a, b), names_ab) in enumerate(edges.items()):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        wa, wb = box_w(a), box_w(b)
        ja, jb, jitter = band_of[a], band_of[b], (e % 5 - 2) * 4
        name, size = tensor_label(names_ab[0], tensors.get(names_ab[0]))
        name += f" +{len(names_ab) - 1}" if len(names_ab) > 1 else ""
        if ja == jb and layer[b] == layer[a] + 1:  # next column: straight across, label above the middle
            x1, y1, x2, y2 = xa + wa, ya + bh / 2, xb - 2, yb + bh / 2
            mid = (x1 + x2) / 2
            d = f"M {x1:.1f} {y1:.1f} C {mid:.1f} {y1:.1f}, {mid:.1f} {y2:.1f}, {x2:.1f} {y2:.1f}"
            lx, ly, anchor = mid, min(y1, y2) - 16, "middle"
        elif ja == jb:  # skips columns: an arc over the band, higher the further it goes
            top = min(ya, yb) - 8 - 7 * (e % 3) - 4 * min(4, layer[b] - layer[a])
            xs, xe = xa + wa * 0.75, xb + wb * 0.25
            d = f"M {xs:.1f} {ya:.1f} C {xs:.1f} {top:.1f}, {xe:.1f} {top:.1f}, {xe:.1f} {yb - 2:.1f}"
            lx, ly, anchor = (xs + xe) / 2, top - 6, "middle"
        else:
            x1, x2 = xa + wa / 2 + (b % 3 - 1) * 8, xb + wb / 2 + (a % 3 - 1) * 8
            if jb == ja + 1:  # next band: down into the gap, across, down
                d = (f"M {x1:.1f} {ya + bh:.1f} L {x1:.1f} {lane[ja] + jitter:.1f} L {x2:.1f} {lane[ja] + jitter:.1f} "
                     f"L {x2:.1f} {yb - 2:.1f}")
            else:  # further: through the left gutter, so that no box is crossed
                g = gutter / 2 + jitter
                d = (f"M {x1:.1f} {ya + bh:.1f} L {x1:.1f} {lane[ja] + jitter:.1f} L {g:.1f} {lane[ja] + jitter:.1f} "
                     f"L {g:.1f} {lane[jb - 1] + jitter:.1f} L {x2:.1f} {lane[jb - 1] + jitter:.1f} L {x2:.1f} {yb - 2:.1f}")
            lx, ly, anchor = x1 + 4, lane[ja] + jitter - 16, "start"
        # keep the label inside the picture (about 5.6 px a character at 9 px)
        half = 5.6 * max(len(name), len(size)) / (2 if anchor == "middle" else 1)
        lo, hi = (margin / 2 + half, total_w - margin / 2 - half) if anchor == "middle" else \
            (margin / 2, total_w - margin / 2 - half)
        lx = max(lo, min(lx, hi))
        full = ", ".join(" ".join(tensor_label(t, tensors.get(t), 200)) for t in names_ab)
        out.append(f'<path d="{d}" fill="none" stroke="#444" stroke-width="1.2" marker-end="url(#arrow)">'
                   f'<title>{_esc(full)}</title></path>')
        labels.append(f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" font-size="9" fill="#222" '
                      f'stroke="white" stroke-width="3" paint-order="stroke">{_esc(name)}'
                      + (f'<tspan x="{lx:.1f}" dy="10">{_esc(size)}</tspan>' if size else "") + "</text>")
    for k, p in enumerate(parts):
        x, y = pos[k]
        fill, ink = pairs[p["backend"]]
        ms = costs[k]
        tip = f"partition {k}: {p['backend']}, {len(p['nodes'])} ops ({op_summary(p.get('ops') or [], 8)})"
        out.append(f'<g><title>{_esc(tip)}</title><rect x="{x:.1f}" y="{y:.1f}" width="{box_w(k):.1f}" '
                   f'height="{bh}" rx="6" fill="{fill}" stroke="#222" stroke-width="0.8"/>'
                   f'<text x="{x + 6:.1f}" y="{y + 16:.1f}" fill="{ink}" font-weight="bold">#{k} '
                   f'{_esc(p["backend"][:16])}</text><text x="{x + 6:.1f}" y="{y + 32:.1f}" fill="{ink}">'
                   f'{len(p["nodes"])} ops{"" if ms is None else f" · {ms:.3f} ms"}</text></g>')
    out += labels  # over the arrows and boxes
    out.append(f'<text x="{margin}" y="{strip_top - 10:.0f}" font-size="13" font-weight="bold">All {len(nodes)} '
               'nodes in topological order (a dark tick marks where a partition starts)</text>')
    last_part = None
    for n, (i, backend, k, op) in enumerate(nodes):
        x = margin + (n % per_row) * cell
        y = strip_top + (n // per_row) * cell
        out.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{pairs[backend][0]}">'
                   f'<title>#{i} {_esc(op)} (partition {k}, {_esc(backend)})</title></rect>')
        if k != last_part:
            out.append(f'<rect x="{x}" y="{y}" width="2" height="{cell - 1}" fill="#111"/>')
            last_part = k
    counts = Counter(p["backend"] for p in parts)
    nodes_by = Counter(b for _, b, _, _ in nodes)
    for j, b in enumerate(names):
        y = legend_top + 24 * j
        out.append(f'<rect x="{margin}" y="{y}" width="16" height="16" fill="{pairs[b][0]}" stroke="#222" '
                   f'stroke-width="0.5"/><text x="{margin + 24}" y="{y + 12}">{_esc(b)}: {counts[b]} partition(s), '
                   f'{nodes_by[b]} node(s)</text>')
    out.append("</svg>")
    return "\n".join(out)


# ---------------------------------------------------------------------- bar chart
def render_bars(rows: Sequence[Mapping[str, Any]], width: int = 900) -> str:
    """Time per partition (its backend's colour) against the runner-up backend's time for the same nodes
    (grey), one pair of bars per partition. ``rows``: dicts with partition, backend, ms, runner_up, runner_up_ms."""
    rows = list(rows)
    vals = [v for r in rows for v in (num(r.get("ms")), num(r.get("runner_up_ms"))) if v is not None]
    top = max(vals, default=0.0) or 1.0
    left, right, bar_h, gap, margin = 170, 330, 12, 12, 16
    span = width - left - right
    height = margin * 2 + 20 + len(rows) * (2 * bar_h + gap)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'style="max-width:100%;height:auto" font-family="sans-serif" font-size="11" role="img">',
           f'<text x="{margin}" y="{margin + 4}" font-size="13" font-weight="bold">Time per partition (ms, measured '
           'alone) against the runner-up backend</text>']
    y = margin + 20
    for r in rows:
        ms, ru_ms = num(r.get("ms")), num(r.get("runner_up_ms"))
        fill, _ = colour_pair(str(r["backend"]))
        out.append(f'<text x="{left - 8}" y="{y + bar_h - 2}" text-anchor="end">#{r["partition"]} {_esc(r["backend"])}</text>')
        w = 0 if ms is None else max(1.0, span * ms / top)
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{fill}"><title>partition '
                   f'{r["partition"]} on {_esc(r["backend"])}: {"–" if ms is None else f"{ms:.3f}"} ms</title></rect>'
                   f'<text x="{left + w + 4:.1f}" y="{y + bar_h - 2}">{"unknown" if ms is None else f"{ms:.3f} ms"}</text>')
        y += bar_h
        if ru_ms is not None and r.get("runner_up"):
            w2 = max(1.0, span * ru_ms / top)
            ratio = f" ({ru_ms / ms:.2f}× the chosen)" if ms else ""
            out.append(f'<rect x="{left}" y="{y}" width="{w2:.1f}" height="{bar_h - 3}" fill="#9a9a9a"/>'
                       f'<text x="{left + w2 + 4:.1f}" y="{y + bar_h - 3}" fill="#333">runner-up '
                       f'{_esc(r["runner_up"])} {ru_ms:.3f} ms{ratio}</text>')
        else:
            out.append(f'<text x="{left + 4}" y="{y + bar_h - 3}" fill="#333">no runner-up measured</text>')
        y += bar_h + gap
    out.append("</svg>")
    return "\n".join(out)
