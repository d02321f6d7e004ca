"""Pictures of a tuned artifact as SVG strings (used by :mod:`collage.report.render`; imports nothing of collage
but :mod:`collage.report.textfit`, which sizes and wraps their text).

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
from dataclasses import dataclass
from typing import Any

from collage.report.textfit import fit, svg_text, text_width, wrap

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


@dataclass
class _Header:
    """Text lines over a picture: a bold title (13 px) and grey subtitle lines (11 px)."""

    title: list[str]
    subtitle: list[str]

    def bottom(self, top: float) -> float:
        """Where the last line's descenders end when the first baseline is ``top + 8``."""
        return top + 8 + 17 * (len(self.title) - 1) + (18 + 14 * (len(self.subtitle) - 1) if self.subtitle else 0) + 4

    def svg(self, x: float, top: float) -> list[str]:
        out = [svg_text(x, top + 8, self.title, 17, 'font-size="13" font-weight="bold"')]
        if self.subtitle:
            out.append(svg_text(x, top + 8 + 17 * (len(self.title) - 1) + 18, self.subtitle, 14, 'fill="#333"'))
        return out


_PAD = 6  # text inside a box starts this far from its left edge, and ends this far from its right


def _box_labels(parts: list[dict], costs: list[float | None]) -> tuple[list[str], list[str], float]:
    """('#k backend', 'n ops · ms') of each partition and the narrowest box that holds the widest of
    them on one line (96 to 160 px; a wider label wraps)."""
    heads = [f"#{k} {p['backend']}" for k, p in enumerate(parts)]
    infos = [f"{len(p['nodes'])} ops" + ("" if c is None else f" · {c:.3f} ms") for p, c in zip(parts, costs)]
    widest = max((text_width(s, 11) for s in heads + infos), default=0.0)
    return heads, infos, max(96.0, min(160.0, widest + 2 * _PAD))


def _edge_label(name: str, size: str, lx: float, ly: float, anchor: str, total_w: float, margin: float) -> str:
    """An arrow's label (tensor name, then its shape and size; 9 px), moved or cut to stay inside the
    picture."""
    room = total_w - margin
    name, size = fit(name, room, 9), fit(size, room, 9)
    wide = max(text_width(name, 9), text_width(size, 9))
    if anchor == "middle":
        lx = max(margin / 2 + wide / 2, min(lx, total_w - margin / 2 - wide / 2))
    else:
        lx = max(margin / 2, min(lx, total_w - margin / 2 - wide))
    return svg_text(lx, ly, [name] + ([size] if size else []), 10,
                    f'text-anchor="{anchor}" font-size="9" fill="#222" stroke="white" stroke-width="3" '
                    'paint-order="stroke"')


def _legend(names: list[str], pairs: Mapping[str, tuple[str, str]], parts: list[dict],
            nodes_by: Mapping[str, int], x: float, top: float, text_w: float) -> tuple[list[str], float]:
    """A swatch and 'backend: n partition(s), m node(s)' (wrapped to ``text_w``) per backend; (svg, bottom)."""
    counts = Counter(p["backend"] for p in parts)
    out, y = [], top
    for b in names:
        lines = wrap(f"{b}: {counts[b]} partition(s), {nodes_by[b]} node(s)", text_w - 24, 11)
        out.append(f'<rect x="{x}" y="{y:.0f}" width="16" height="16" fill="{pairs[b][0]}" stroke="#222" '
                   f'stroke-width="0.5"/>' + svg_text(x + 24, y + 12, lines, 14))
        y += max(24, 14 * len(lines) + 10)
    return out, y


#: the graph picture's spacing (px): between stacked boxes, between bands, around the picture, the left gutter
#: (where arrows to a band further down run), and the node strip's cell
_GAP_IN, _BAND_GAP, _MARGIN, _GUTTER, _CELL = 40, 72, 20, 24, 12


@dataclass(frozen=True)
class _Boxes:
    """Each partition's box: its width (growing with its measured ms), its label lines (head, info), and the
    height every box shares."""

    widths: list[float]
    lines: list[tuple[list[str], list[str]]]
    height: int


def _boxes(parts: list[dict]) -> _Boxes:
    costs = [num(p.get("cost_ms")) for p in parts]
    top_ms = max((c for c in costs if c is not None), default=None)
    heads, infos, bw_min = _box_labels(parts, costs)
    bw_max = bw_min + 124
    widths = [bw_min if c is None or not top_ms else bw_min + (bw_max - bw_min) * c / top_ms for c in costs]
    lines = [(wrap(h, w - 2 * _PAD, 11, 2), wrap(i, w - 2 * _PAD, 11, 2)) for h, i, w in zip(heads, infos, widths)]
    return _Boxes(widths, lines, 8 + 16 * max((len(hs) + len(ls) for hs, ls in lines), default=2))


def _columns(layer: list[int]) -> dict[int, list[int]]:
    cols: dict[int, list[int]] = {}
    for k, lv in enumerate(layer):
        cols.setdefault(lv, []).append(k)
    return cols


def _bands(col_w: Mapping[int, float], hgap: int, max_width: int) -> list[list[int]]:
    """The columns left to right, wrapped into bands no wider than ``max_width``."""
    bands: list[list[int]] = [[]]
    width_used = _GUTTER + _MARGIN
    for lv in sorted(col_w):
        if bands[-1] and width_used + col_w[lv] + _MARGIN > max_width:
            bands.append([])
            width_used = _GUTTER + _MARGIN
        bands[-1].append(lv)
        width_used += col_w[lv] + hgap
    return bands


@dataclass(frozen=True)
class _Grid:
    """The boxes in columns and bands: ``layer`` of each partition (its column), the partitions of each column
    (``cols``) and its width (``col_w``), the columns of each band, ``hgap`` between columns, and the picture's
    width ``total_w``."""

    layer: list[int]
    boxes: _Boxes
    cols: dict[int, list[int]]
    col_w: dict[int, float]
    bands: list[list[int]]
    hgap: int
    total_w: float


def _grid(manifest: dict, max_width: int) -> _Grid:
    layer = _layers(manifest)
    cols = _columns(layer)
    boxes = _boxes(manifest["partitions"])
    hgap = 150 if len(cols) <= 12 else 40  # room for an arrow's label between columns
    col_w = {lv: max(boxes.widths[k] for k in ks) for lv, ks in cols.items()}
    bands = _bands(col_w, hgap, max_width)
    band_widths = [_GUTTER + _MARGIN * 2 + sum(col_w[lv] for lv in b) + hgap * (len(b) - 1) for b in bands]
    return _Grid(layer, boxes, cols, col_w, bands, hgap, max(600.0, min(float(max_width), max(band_widths))))


@dataclass(frozen=True)
class _Layout:
    """Where the boxes of ``grid`` go: ``pos`` of each box (top left), ``band_of`` each box, ``lane`` (the
    middle of the gap under each band, where arrows down run) and ``bottom`` (under the last band's gap)."""

    grid: _Grid
    pos: dict[int, tuple[float, float]]
    band_of: dict[int, int]
    lane: list[float]
    bottom: float


def _place(grid: _Grid, top: float) -> _Layout:
    """The bands one under the other from ``top``; in a band, each column's boxes stacked and centred."""
    pos: dict[int, tuple[float, float]] = {}
    band_of: dict[int, int] = {}
    band_bottom: list[float] = []
    bh, y = grid.boxes.height, top
    for j, band in enumerate(grid.bands):
        band_h = max(len(grid.cols[lv]) for lv in band) * (bh + _GAP_IN) - _GAP_IN
        x = float(_GUTTER + _MARGIN)
        for lv in band:
            col_h = len(grid.cols[lv]) * (bh + _GAP_IN) - _GAP_IN
            for r, k in enumerate(grid.cols[lv]):
                pos[k] = (x + (grid.col_w[lv] - grid.boxes.widths[k]) / 2,
                          y + (band_h - col_h) / 2 + r * (bh + _GAP_IN))
                band_of[k] = j
            x += grid.col_w[lv] + grid.hgap
        y += band_h
        band_bottom.append(y)
        y += _BAND_GAP
    return _Layout(grid, pos, band_of, [bottom + _BAND_GAP / 2 for bottom in band_bottom], y)


def _handovers(parts: list[dict]) -> dict[tuple[int, int], list[str]]:
    """The tensors each partition hands to a later one: (from, to) -> tensor names."""
    producer: dict[str, int] = {}
    edges: dict[tuple[int, int], list[str]] = {}
    for k, p in enumerate(parts):
        for t in p["inputs"]:
            if t in producer:
                edges.setdefault((producer[t], k), []).append(t)
        for t in p["outputs"]:
            producer[t] = k
    return edges


def _arrow_path(lay: _Layout, e: int, a: int, b: int) -> tuple[str, float, float, str]:
    """The ``e``-th arrow's path from box ``a`` to box ``b``, and where its label goes (x, y, anchor)."""
    (xa, ya), (xb, yb) = lay.pos[a], lay.pos[b]
    boxes, layer, lane = lay.grid.boxes, lay.grid.layer, lay.lane
    wa, wb, bh = boxes.widths[a], boxes.widths[b], boxes.height
    ja, jb, jitter = lay.band_of[a], lay.band_of[b], (e % 5 - 2) * 4
    if ja == jb and layer[b] == layer[a] + 1:  # next column: straight across, label above the middle
        x1, y1, x2, y2 = xa + wa, ya + bh / 2, xb - 2, yb + bh / 2
        mid = (x1 + x2) / 2
        d = f"M {x1:.1f} {y1:.1f} C {mid:.1f} {y1:.1f}, {mid:.1f} {y2:.1f}, {x2:.1f} {y2:.1f}"
        return d, mid, min(y1, y2) - 16, "middle"
    if ja == jb:  # skips columns: an arc over the band, higher the further it goes
        top = min(ya, yb) - 8 - 7 * (e % 3) - 4 * min(4, layer[b] - layer[a])
        xs, xe = xa + wa * 0.75, xb + wb * 0.25
        d = f"M {xs:.1f} {ya:.1f} C {xs:.1f} {top:.1f}, {xe:.1f} {top:.1f}, {xe:.1f} {yb - 2:.1f}"
        return d, (xs + xe) / 2, top - 6, "middle"
    x1, x2 = xa + wa / 2 + (b % 3 - 1) * 8, xb + wb / 2 + (a % 3 - 1) * 8
    if jb == ja + 1:  # next band: down into the gap, across, down
        d = (f"M {x1:.1f} {ya + bh:.1f} L {x1:.1f} {lane[ja] + jitter:.1f} L {x2:.1f} {lane[ja] + jitter:.1f} "
             f"L {x2:.1f} {yb - 2:.1f}")
    else:  # further: through the left gutter, so that no box is crossed
        g = _GUTTER / 2 + jitter
        d = (f"M {x1:.1f} {ya + bh:.1f} L {x1:.1f} {lane[ja] + jitter:.1f} L {g:.1f} {lane[ja] + jitter:.1f} "
             f"L {g:.1f} {lane[jb - 1] + jitter:.1f} L {x2:.1f} {lane[jb - 1] + jitter:.1f} L {x2:.1f} {yb - 2:.1f}")
    return d, x1 + 4, lane[ja] + jitter - 16, "start"


def _arrows(parts: list[dict], tensors: Mapping[str, Any], lay: _Layout) -> tuple[list[str], list[str]]:
    """(the arrows, their labels) for the tensors handed from one partition to another."""
    paths, labels = [], []
    for e, ((a, b), names_ab) in enumerate(_handovers(parts).items()):
        name, size = tensor_label(names_ab[0], tensors.get(names_ab[0]))
        name += f" +{len(names_ab) - 1}" if len(names_ab) > 1 else ""
        d, lx, ly, anchor = _arrow_path(lay, e, a, b)
        full = ", ".join(" ".join(tensor_label(t, tensors.get(t), 200)) for t in names_ab)
        paths.append(f'<path d="{d}" fill="none" stroke="#444" stroke-width="1.2" marker-end="url(#arrow)">'
                     f'<title>{_esc(full)}</title></path>')
        labels.append(_edge_label(name, size, lx, ly, anchor, lay.grid.total_w, _MARGIN))
    return paths, labels


def _box_svgs(parts: list[dict], pairs: Mapping[str, tuple[str, str]], lay: _Layout) -> list[str]:
    out, boxes = [], lay.grid.boxes
    for k, p in enumerate(parts):
        x, y = lay.pos[k]
        fill, ink = pairs[p["backend"]]
        tip = f"partition {k}: {p['backend']}, {len(p['nodes'])} ops ({op_summary(p.get('ops') or [], 8)})"
        head, info = boxes.lines[k]
        out.append(f'<g><title>{_esc(tip)}</title><rect x="{x:.1f}" y="{y:.1f}" width="{boxes.widths[k]:.1f}" '
                   f'height="{boxes.height}" rx="6" fill="{fill}" stroke="#222" stroke-width="0.8"/>'
                   + svg_text(x + _PAD, y + 16, head, 16, f'fill="{ink}" font-weight="bold"')
                   + svg_text(x + _PAD, y + 16 + 16 * len(head), info, 16, f'fill="{ink}"') + "</g>")
    return out


@dataclass(frozen=True)
class _Strip:
    """Every node in topological order as a cell coloured by its partition's backend: ``nodes`` as (id, backend,
    partition, op), ``per_row`` cells a row, ``title`` lines, ``top`` of the first row, ``height``."""

    nodes: list[tuple[int, str, int, str]]
    per_row: int
    title: list[str]
    top: float
    height: int


def _strip(parts: list[dict], total_w: float, top: float) -> _Strip:
    nodes = sorted((i, p["backend"], k, op) for k, p in enumerate(parts)
                   for i, op in zip(p["nodes"], p.get("ops") or ["?"] * len(p["nodes"])))
    per_row = max(20, int((total_w - 2 * _MARGIN) // _CELL))
    title = wrap(f"All {len(nodes)} nodes in topological order (a dark tick marks where a partition starts)",
                 total_w - 2 * _MARGIN, 13)
    return _Strip(nodes, per_row, title, top + 30 + 17 * (len(title) - 1), math.ceil(len(nodes) / per_row) * _CELL)


def _strip_svgs(strip: _Strip, pairs: Mapping[str, tuple[str, str]]) -> list[str]:
    out = [svg_text(_MARGIN, strip.top - 10 - 17 * (len(strip.title) - 1), strip.title, 17,
                    'font-size="13" font-weight="bold"')]
    last_part = None
    for n, (i, backend, k, op) in enumerate(strip.nodes):
        x = _MARGIN + (n % strip.per_row) * _CELL
        y = strip.top + (n // strip.per_row) * _CELL
        out.append(f'<rect x="{x}" y="{y}" width="{_CELL - 1}" height="{_CELL - 1}" fill="{pairs[backend][0]}">'
                   f'<title>#{i} {_esc(op)} (partition {k}, {_esc(backend)})</title></rect>')
        if k != last_part:
            out.append(f'<rect x="{x}" y="{y}" width="2" height="{_CELL - 1}" fill="#111"/>')
            last_part = k
    return out


def render_svg(manifest: dict, max_width: int = 1100) -> str:
    """The graph coloured by backend, as an SVG string that scales down to its container's width.

    Top: partitions as boxes whose width grows with their measured ms, one column per longest-path layer
    of the partition DAG (parallel partitions stack), columns left to right wrapped into bands; an arrow,
    labelled with the tensor and its size, for each tensor handed from one partition to another. Below:
    every node in topological order as a small square coloured by its partition's backend (hover for the
    op), a dark tick where a partition starts. A legend. Every line of text is wrapped (or cut, with the
    whole in a tooltip) to fit the picture and its box by :func:`collage.report.textfit.text_width`, an
    upper bound over the common fonts; the picture's height follows the number of lines.
    """
    parts = manifest["partitions"]
    names = list(dict.fromkeys(p["backend"] for p in parts))
    pairs = {b: colour_pair(b) for b in names}
    grid = _grid(manifest, max_width)
    total_w = grid.total_w
    header = _Header(wrap(f"{len(parts)} partition(s) in execution order, left to right", total_w - 2 * _MARGIN, 13),
                     wrap("box width: measured ms of the partition; arrows: tensors handed from one partition to the "
                          "next, with shape and size", total_w - 2 * _MARGIN, 11))
    lay = _place(grid, header.bottom(_MARGIN) + 54)  # room for arcs (and their labels) over the first band
    strip = _strip(parts, total_w, lay.bottom)
    legend, legend_bottom = _legend(names, pairs, parts, Counter(b for _, b, _, _ in strip.nodes), _MARGIN,
                                    strip.top + strip.height + 24, total_w - 2 * _MARGIN)
    height = legend_bottom + _MARGIN
    paths, labels = _arrows(parts, manifest.get("tensors") or {}, lay)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {height:.0f}" style="max-width:100%;height:auto" '
        'font-family="sans-serif" font-size="11" role="img">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>',
        *header.svg(_MARGIN, _MARGIN), *paths, *_box_svgs(parts, pairs, lay),
        *labels,  # over the arrows and boxes
        *_strip_svgs(strip, pairs), *legend, "</svg>"])


# ---------------------------------------------------------------------- bar chart
def _chosen_ms(r: Mapping[str, Any]) -> float | None:
    """The chosen backend's ms that its runner-up is weighed against: the partition's predicted price where the
    runner-up's ms is a predicted one (``ratio_of``), else its (measured) ms."""
    return num(r.get("predicted_ms")) if r.get("ratio_of") == "predicted" else num(r.get("ms"))


def render_bars(rows: Sequence[Mapping[str, Any]], width: int = 900) -> str:
    """Time per partition (its backend's colour) against the runner-up backend's time for the same nodes
    (grey), one pair of bars per partition. ``rows``: dicts with partition, backend, ms, runner_up, runner_up_ms,
    and as ``collage.report.render.partition_table`` gives them, ``ratio_of`` ("measured": both bars measured;
    "predicted": both the search's prices, the chosen one ``predicted_ms``) and ``runner_up_ratio`` (shown as
    it is: the table's number).

    The labels' column is as wide as the widest '#k backend' (up to 260 px; a longer one takes two lines,
    cut with '…', the whole in the bar's tooltip), the bars' as wide as ``width`` leaves once the longest
    text after a bar fits (``width`` grows when that leaves under 300 px), by
    :func:`collage.report.textfit.text_width`."""
    rows = list(rows)
    vals = [v for r in rows for v in (_chosen_ms(r), num(r.get("runner_up_ms"))) if v is not None]
    top = max(vals, default=0.0) or 1.0
    bar_h, gap, margin = 12, 12, 16
    heads = [f"#{r['partition']} {r['backend']}" for r in rows]
    left = margin + 8 + min(260.0, max((text_width(h, 11) for h in heads), default=0.0))
    after = [_after_bars(r) for r in rows]
    right = 4 + margin + max((text_width(t, 11) for pair in after for t in pair), default=0.0)
    width = max(float(width), left + right + 300)
    span = width - left - right
    title = wrap("Time per partition (ms) against the runner-up backend's for the same nodes: both measured, or "
                 "both predicted where the runner-up never ran them", width - 2 * margin, 13)
    y = margin + 20 + 17 * (len(title) - 1)
    height = y + len(rows) * (2 * bar_h + gap) + margin
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
           f'viewBox="0 0 {width:.0f} {height}" style="max-width:100%;height:auto" font-family="sans-serif" '
           'font-size="11" role="img">', svg_text(margin, margin + 4, title, 17, 'font-size="13" font-weight="bold"')]
    for r, head, (value, runner_up) in zip(rows, heads, after):
        ms, ru_ms = _chosen_ms(r), num(r.get("runner_up_ms"))
        fill, _ = colour_pair(str(r["backend"]))
        out.append(svg_text(left - 8, y + bar_h - 2, wrap(head, left - 8 - margin, 11, 2), 13, 'text-anchor="end"'))
        w = 0 if ms is None else max(1.0, span * ms / top)
        out.append(f'<rect x="{left:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{fill}"><title>partition '
                   f'{r["partition"]} on {_esc(r["backend"])}: {"–" if ms is None else f"{ms:.3f}"} ms</title></rect>'
                   + svg_text(left + w + 4, y + bar_h - 2, [value]))
        y += bar_h
        if ru_ms is not None and r.get("runner_up"):
            w2 = max(1.0, span * ru_ms / top)
            out.append(f'<rect x="{left:.1f}" y="{y}" width="{w2:.1f}" height="{bar_h - 3}" fill="#9a9a9a"/>'
                       + svg_text(left + w2 + 4, y + bar_h - 3, [runner_up], 13, 'fill="#333"'))
        else:
            out.append(svg_text(left + 4, y + bar_h - 3, [runner_up], 13, 'fill="#333"'))
        y += bar_h + gap
    out.append("</svg>")
    return "\n".join(out)


def _after_bars(r: Mapping[str, Any]) -> tuple[str, str]:
    """The texts after a row's bars: its ms, and the runner-up's name, ms and ratio (or that none was measured)."""
    ms, ru_ms = _chosen_ms(r), num(r.get("runner_up_ms"))
    how = {"predicted": " predicted", "measured": " measured"}.get(str(r.get("ratio_of")), "")
    value = "unknown" if ms is None else f"{ms:.3f} ms{how}"
    if ru_ms is None or not r.get("runner_up"):
        return value, "no runner-up measured"
    times = num(r.get("runner_up_ratio")) if "runner_up_ratio" in r else (ru_ms / ms if ms else None)
    ratio = f" ({times:.2f}× the chosen)" if times is not None else ""
    return value, f"runner-up {r['runner_up']} {ru_ms:.3f} ms{how}{ratio}"
