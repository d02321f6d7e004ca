"""How wide a line of SVG text may be in whatever font the viewer has, and text wrapped to fit a width
(used by :mod:`collage.report.svg`; imports nothing of collage).

An SVG picture has a fixed size but its text is laid out in the viewer's fonts: ``font-family="sans-serif"``
is DejaVu Sans on a Debian machine, Liberation Sans (Arial's metrics) elsewhere, and a font that is not
installed falls back to the browser's standard font (a serif). So the width of a line is estimated per
character with the WIDEST advance that character has in any of DejaVu Sans, DejaVu Sans Mono, DejaVu Serif,
Liberation Sans, Liberation Mono and Liberation Serif, regular or bold (measured in Chromium at 100 px,
rounded up into a few classes). The estimate is an upper bound for those fonts: about 20% over DejaVu Sans,
the widest of them for running text, and a line that fits by the estimate fits in all of them.
"""
from __future__ import annotations

import html

#: advance in em of each character (the widest over the fonts above, regular and bold)
_CLASSES = {
    0.62: " !\"'()*,-./:;IJ[\\]_`cfijlrstz|·–?",
    0.70: "xvyaeo$0123456789k",
    0.74: "FLbdgpq{}SYZhnu",
    0.80: "TPEAVXC",
    0.88: "#+<=>R^~×≥≤BGDKOQU",
    0.95: "&NwH",
    1.02: "…—→%@",
    1.13: "mMW",
}
EM = {c: w for w, cs in _CLASSES.items() for c in cs}
#: a character not in the table (accented letters, CJK: one em or less in the fonts above)
OTHER_EM = 1.05
ELLIPSIS = "…"
#: characters after which a line may break (besides spaces): backend names like openvino-int8-bf16
_BREAK_AFTER = "-_/,;:.×"


def text_width(text: str, size: float) -> float:
    """An upper bound of the width in px of ``text`` at font size ``size`` (px) in the common fonts."""
    return size * sum(EM.get(c, OTHER_EM) for c in text)


def _tokens(text: str) -> list[str]:
    """``text`` cut after each space and break character ('openvino-int8 x' -> 'openvino-', 'int8 ', 'x')."""
    out, cur = [], ""
    for c in text:
        cur += c
        if c == " " or c in _BREAK_AFTER:
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


def fit(text: str, width: float, size: float) -> str:
    """``text`` if it fits in ``width`` px, else its longest head that fits with '…' after it."""
    if text_width(text, size) <= width:
        return text
    while text and text_width(text + ELLIPSIS, size) > width:
        text = text[:-1]
    return text.rstrip() + ELLIPSIS if text else ""


def wrap(text: str, width: float, size: float, max_lines: int | None = None) -> list[str]:
    """``text`` as lines that each fit in ``width`` px at font size ``size``: broken at spaces and after
    '-', '_', '/' and the like; a word wider than the whole width is cut where it must. Beyond
    ``max_lines`` lines the last one ends in '…'. Always at least one line."""
    lines: list[str] = []
    cur = ""
    for tok in _tokens(text):
        if text_width((cur + tok).rstrip(), size) <= width:
            cur += tok
            continue
        if cur.strip():
            lines.append(cur.rstrip())
        cur = tok
        while text_width(cur.rstrip(), size) > width and len(cur) > 1:  # a word wider than the line
            k = len(cur) - 1
            while k > 1 and text_width(cur[:k], size) > width:
                k -= 1
            lines.append(cur[:k])
            cur = cur[k:]
    if cur.strip() or not lines:
        lines.append(cur.rstrip())
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [fit(" ".join(lines[max_lines - 1:]) + ELLIPSIS, width, size)]
    return lines


def svg_text(x: float, y: float, lines: list[str], line_h: float = 14, attrs: str = "") -> str:
    """One ``<text>`` element: the first line's baseline at (x, y), each further line ``line_h`` lower
    (a ``<tspan>`` each); ``attrs`` are put on the element as they are."""
    sep = " " if attrs else ""
    body = html.escape(lines[0]) + "".join(f'<tspan x="{x:.1f}" dy="{line_h:g}">{html.escape(s)}</tspan>'
                                           for s in lines[1:])
    return f'<text x="{x:.1f}" y="{y:.1f}"{sep}{attrs}>{body}</text>'
