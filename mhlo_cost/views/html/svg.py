"""Plain SVG, written as text: scales, axes, ticks. Coordinates to 0.1 px, so the same input gives the same
bytes. Hover text goes in ``data-tip`` (the page's script shows it); ``data-block`` links a mark to a row of
the block table."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .fmt import esc

#: Colours of op kinds, in a fixed order (a kind outside this list takes grey).
KIND_COLOURS = {
    "dot": "#1f5fa8", "conv": "#5b8fd0", "elementwise": "#e08a2e", "transcendental": "#c0504d",
    "reduce": "#7b4fa8", "data": "#8c8c8c", "collective": "#c0392b", "sort": "#2e8b57", "unknown": "#000000",
    "free": "#cccccc",
}
GREY = "#9a9a9a"


def f1(x: float) -> str:
    """A coordinate: one decimal, no ``-0.0``."""
    s = f"{x:.1f}"
    return "0.0" if s == "-0.0" else s


@dataclass(frozen=True)
class Scale:
    """Maps a domain [lo, hi] onto pixels [a, b] (b < a for a y axis), linear or log10."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v: float) -> float:
        lo, hi, v2 = self.lo, self.hi, v
        if self.log:
            lo, hi, v2 = math.log10(lo), math.log10(hi), math.log10(max(v, self.lo))
        if hi == lo:
            return self.a
        return self.a + (v2 - lo) / (hi - lo) * (self.b - self.a)

    def ticks(self) -> list[float]:
        if self.log:
            return [10.0**e for e in range(math.ceil(math.log10(self.lo) - 1e-9),
                                           math.floor(math.log10(self.hi) + 1e-9) + 1)]
        return nice_ticks(self.lo, self.hi)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out, t = [], first
    while t <= hi + step * 1e-9:
        out.append(round(t, 12))
        t += step
    return out


def nice_max(v: float) -> float:
    """The smallest 1-2-2.5-5 x 10^k at or above ``v`` (an axis top)."""
    if v <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    return next(m * mag for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * mag >= v * (1 - 1e-12))


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-2:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    return f"{v:g}"


def open_svg(width: int, height: int, label: str, cls: str = "chart") -> str:
    return (f'<svg class="{cls}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}" '
            'preserveAspectRatio="xMinYMin meet">')


def text(x: float, y: float, s: str, anchor: str = "start", cls: str = "", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{f1(x)}" y="{f1(y)}" text-anchor="{anchor}"{c}{extra}>{esc(s)}</text>'


def rect(x: float, y: float, w: float, h: float, fill: str, extra: str = "") -> str:
    return (f'<rect x="{f1(x)}" y="{f1(y)}" width="{f1(max(w, 0.0))}" height="{f1(max(h, 0.0))}" '
            f'fill="{fill}"{extra}/>')


def line(x1: float, y1: float, x2: float, y2: float, cls: str = "grid", extra: str = "") -> str:
    return f'<line x1="{f1(x1)}" y1="{f1(y1)}" x2="{f1(x2)}" y2="{f1(y2)}" class="{cls}"{extra}/>'


def tip(s: str) -> str:
    return f' data-tip="{esc(s)}"'


def y_axis(scale: Scale, x0: float, x1: float, title: str, fmt=tick_label) -> list[str]:
    """Horizontal grid lines with labels on the left, and the axis title turned along it."""
    out = []
    for t in scale.ticks():
        y = scale(t)
        out.append(line(x0, y, x1, y))
        out.append(text(x0 - 6, y + 4, fmt(t), "end", "tick"))
    mid = (scale.a + scale.b) / 2
    out.append(f'<text x="0" y="0" transform="translate({f1(x0 - 52)},{f1(mid)}) rotate(-90)" '
               f'text-anchor="middle" class="axis">{esc(title)}</text>')
    return out


def x_axis(scale: Scale, y0: float, y1: float, title: str, fmt=tick_label) -> list[str]:
    out = []
    for t in scale.ticks():
        x = scale(t)
        out.append(line(x, y0, x, y1))
        out.append(text(x, y0 + 16, fmt(t), "middle", "tick"))
    out.append(text((scale.a + scale.b) / 2, y0 + 36, title, "middle", "axis"))
    return out


def legend(items: list[tuple[str, str]], x: float, y: float, width: float) -> list[str]:
    """Colour swatches with labels, laid out left to right, wrapping at ``width``."""
    out, cx, cy = [], x, y
    for label, colour in items:
        w = 30 + 7.2 * len(label)
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 18
        out.append(rect(cx, cy - 10, 12, 12, colour, ' class="swatch"'))
        out.append(text(cx + 16, cy, label, "start", "legend"))
        cx += w
    return out
