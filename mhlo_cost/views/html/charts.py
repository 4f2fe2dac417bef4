"""The page's bar and line charts, as SVG text: per-block stacked bars, shares, memory over the program."""
from __future__ import annotations

import math

import pandas as pd

from ..plot import FAMILIES, GREYS, block_label
from .fmt import prefix_for, auto_prefix, esc, human_time, time_unit
from .svg import KIND_COLOURS, GREY, Scale, f1, legend, line, nice_max, open_svg, rect, text, tip, y_axis

W = 1100
COMM = "#c0392b"


def _families(kinds) -> dict[str, tuple[str, str]]:
    named = [k for k in dict.fromkeys(kinds) if k]
    return {k: FAMILIES[i % len(FAMILIES)] for i, k in enumerate(named)}


def bar_layers(d: pd.DataFrame, fused: bool) -> tuple[list[tuple[str, list[float], int]], str, str, float]:
    """The stacked layers of the per-block chart: (label, values, shade) per layer, the quantity, its unit
    and the unit's size. Time (GEMM, other kernels, communication) with an estimate, else GFLOPs."""
    if {"gemm_time_s", "vector_time_s", "comm_time_s"} <= set(d.columns):
        sfx = "_fused_s" if fused and "gemm_time_fused_s" in d.columns else "_s"
        comm = "comm_exposed_s" if "comm_exposed_s" in d.columns else "comm_time_s"
        layers = [("GEMM / conv kernels", [float(v) for v in d[f"gemm_time{sfx}"]], 0),
                  ("other kernels (vector, memory)", [float(v) for v in d[f"vector_time{sfx}"]], 1),
                  ("communication" + (" (exposed)" if comm == "comm_exposed_s" else ""),
                   [float(v) for v in d[comm]], 2)]
        top = max((sum(v) for v in zip(*(lay[1] for lay in layers))), default=0.0)
        name, size = time_unit(top)
        eager = "execution" in d.columns and "eager" in set(d["execution"])
        what = "estimated time per block" + ((", eager" if eager else ", elementwise fused") if sfx == "_fused_s"
                                             else ", op by op")
        return layers, what, name, size
    gemm = [int(a) + int(b) for a, b in zip(d["gemm_flops"], d["conv_flops"])]
    layers = [("GEMM / conv FLOPs", gemm, 0), ("vector FLOPs", [int(v) for v in d["vector_flops"]], 1)]
    return layers, "FLOPs per block", "GFLOP", 1e9


def block_bars(df: pd.DataFrame, fused: bool = False) -> str:
    """One stacked bar per row of the block table (TOTAL left out), in program order; a click on a bar
    opens the block's row in the table."""
    d = df[df["block"] != "TOTAL"].reset_index(drop=True)
    n = len(d)
    if n == 0:
        return ""
    layers, what, uname, usize = bar_layers(d, fused)
    fam = _families(d["kind"])
    h, left, right, top, bottom = 380, 78, 16, 46, 74
    stacks = [[(float(vals[i]) / usize, label, shade) for label, vals, shade in layers if float(vals[i]) > 0]
              for i in range(n)]
    ys = Scale(0.0, nice_max(max(sum(v for v, _, _ in s) for s in stacks)), h - bottom, top)
    step = (W - left - right) / n
    out = [open_svg(W, h, f"{what} ({uname}), one bar per block")]
    out += y_axis(ys, left, W - right, f"{what.split(',')[0]} ({uname})")
    for i, (block, kind, index) in enumerate(zip(d["block"], d["kind"], d["index"])):
        out.append(_bar((block, kind, index), stacks[i], left + i * step, step, ys, fam.get(kind, GREYS), uname))
    items = [(label, COMM if shade == 2 else GREYS[shade]) for label, vals, shade in layers
             if any(float(v) > 0 for v in vals)]
    items = [(a if c == COMM else f"{a} ({'dark' if c == GREYS[0] else 'light'} shade)", c) for a, c in items]
    items += [(f"{k} blocks ({k[:1].upper()}n)", fam[k][0]) for k in fam]
    if any(not k for k in d["kind"]):
        items.append(("outside blocks", GREYS[0]))
    out += legend(items, left, 16, W - left - right)
    out.append("</svg>")
    return "".join(out)


def _bar(name: tuple, stack, x0: float, step: float, ys: Scale, colours, uname: str) -> str:
    bw = min(48.0, max(1.0, step * 0.78))
    x = x0 + (step - bw) / 2
    acc, segs = 0.0, []
    for v, _, shade in stack:
        ya, yb = ys(acc), ys(acc + v)
        segs.append(rect(x, yb, bw, ya - yb, COMM if shade == 2 else colours[shade]))
        acc += v
    desc = "; ".join(f"{label} {_val(v, uname)}" for v, label, _ in stack) or "nothing"
    block, kind, index = name
    head = block + (f" ({kind} {int(index)})" if kind and not pd.isna(index) else "")
    hit = rect(x0, ys.b, step, ys(0.0) - ys.b, "transparent", ' class="hit"')
    lab = block_label(block, kind, index)
    return (f'<g class="bar" data-block="{esc(block)}"'
            f'{tip(f"{head}: {desc}; total {_val(acc, uname)}. Click: its parts and top ops")}>'
            + hit + "".join(segs)
            + f'<text class="xlab" transform="translate({f1(x + bw / 2 + 3)},{f1(ys(0.0) + 6)}) rotate(-90)" '
            f'text-anchor="end" fill="{colours[0]}">{esc(lab)}</text></g>')


def _val(v: float, unit: str) -> str:
    return f"{v:.4g} {unit}"


def share_bars(items: list[tuple[str, float]], unit: str, title: str, colours: dict | None = None) -> str:
    """Horizontal bars, largest first: a label, its value and its percent of the whole."""
    items = [(k, v) for k, v in items if v > 0]
    if not items:
        return ""
    items.sort(key=lambda kv: (-kv[1], kv[0]))
    whole = math.fsum(v for _, v in items)
    colours = colours or {}
    row_h, left, right, top = 24, 150, 190, 8
    h = top + row_h * len(items) + 8
    xs = Scale(0.0, items[0][1], left, W - right)
    out = [open_svg(W, h, title, "chart share")]
    for i, (k, v) in enumerate(items):
        y = top + i * row_h
        pct = 100 * v / whole if whole else 0.0
        shown = human_time(v) if unit == "s" else f"{auto_prefix(int(v), unit)}"
        out.append(f'<g{tip(f"{k}: {shown}, {pct:.1f}% of {title}")}>')
        out.append(rect(left, y + 3, xs(v) - left, row_h - 7, colours.get(k, GREY)))
        out.append(text(left - 8, y + row_h / 2 + 4, k, "end", "label"))
        out.append(text(xs(v) + 6, y + row_h / 2 + 4, f"{shown}  {pct:.1f}%", "start", "value"))
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def kind_colours(keys) -> dict[str, str]:
    return {k: KIND_COLOURS.get(k, GREY) for k in keys}


def _downsample(values: list[int], buckets: int) -> list[tuple[int, int, int]]:
    """(first index, min, max) per bucket of consecutive values: every peak survives."""
    n = len(values)
    if n <= buckets:
        return [(i, v, v) for i, v in enumerate(values)]
    out = []
    for b in range(buckets):
        i0, i1 = b * n // buckets, (b + 1) * n // buckets
        chunk = values[i0:i1]
        out.append((i0, min(chunk), max(chunk)))
    return out


def memory_timeline(series: dict[str, list[int]], bands: list[tuple], capacity: float = 0.0,
                    title: str = "live bytes over the program", steps: bool = False, place: str = "op") -> str:
    """Live bytes (one line per series; op ``i`` spans [i, i + 1]) against the place in program order;
    ``bands`` (first, end, name, kind, label) shade the blocks; the peak of each series is marked, and the
    chip's memory drawn as a line when ``capacity`` is given and within reach. ``steps``: one level per
    place (a value per block), else the line through the values (downsampled keeping every peak)."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return ""
    n = max(len(v) for v in series.values())
    peak = max(max(v) for v in series.values())
    show_cap = bool(capacity) and capacity < 4 * peak
    prefix, div = prefix_for(max(peak, capacity if show_cap else 0))
    h, left, right, top, bottom = 340, 78, 16, 40, 44
    xs, ys = Scale(0, n, left, W - right), Scale(0.0, nice_max(max(peak, capacity * show_cap) / div), h - bottom, top)
    out = [open_svg(W, h, title)] + _bands(bands, xs, ys, top)
    out += y_axis(ys, left, W - right, f"live memory ({prefix}B)")
    out.append(text((left + W - right) / 2, h - 10, f"{place}s in program order", "middle", "axis"))
    items = []
    for j, (name, vals) in enumerate(series.items()):
        colour = _PALETTE[j % len(_PALETTE)]
        if steps:
            pts = [f"{f1(xs(i + d))},{f1(ys(v / div))}" for i, v in enumerate(vals) for d in (0, 1)]
        else:
            pts = [f"{f1(xs(i0 + 0.5))},{f1(ys(v / div))}" for i0, lo, hi in _downsample(vals, 1200)
                   for v in ((hi,) if lo == hi else (hi, lo))]
        out.append(f'<polyline class="series" fill="none" stroke="{colour}" points="{" ".join(pts)}"/>')
        at = vals.index(max(vals))
        peak_text = f"{name} peak {auto_prefix(vals[at], 'B')}"
        where = bands_at(bands, at)
        out.append(f'<circle cx="{f1(xs(at + 0.5))}" cy="{f1(ys(vals[at] / div))}" r="4" fill="{colour}"'
                   f'{tip(f"{peak_text} at {place} {at}" + (f", in {where}" if where else ""))}/>')
        items.append((peak_text, colour))
    if show_cap:
        out.append(line(left, ys(capacity / div), W - right, ys(capacity / div), "cap"))
        out.append(text(W - right - 4, ys(capacity / div) - 4, f"memory of the chip {auto_prefix(int(capacity), 'B')}",
                        "end", "roof"))
    out += legend(items, left, 16, W - left - right)
    out.append("</svg>")
    return "".join(out)


_PALETTE = ["#1f5fa8", "#d2691e", "#2e8b57", "#7b4fa8"]


def bands_at(bands: list[tuple], i: int) -> str:
    return next((b[2] for b in bands if b[0] <= i < b[1]), "")


def _bands(bands: list[tuple], xs: Scale, ys: Scale, top: float) -> list[str]:
    """Shaded spans of the blocks, each with its short label (S0, T0) on top where it fits."""
    fam = _families(b[3] for b in bands)
    out = []
    for i, (a, b, name, kind, label) in enumerate(bands):
        x0, x1 = xs(a), xs(b)
        shade = fam.get(kind, GREYS)[1]
        mark = text((x0 + x1) / 2, top + 11, label, "middle", "tick") if x1 - x0 >= 7 * len(label) + 4 else ""
        out.append(f'<g data-block="{esc(name)}"{tip(f"{name}: {a} to {b - 1}")}>'
                   + rect(x0, top, x1 - x0, ys(0.0) - top, shade, f' class="band b{i % 2}"') + mark + "</g>")
    return out


def block_lines(df: pd.DataFrame, cols: list[str], title: str) -> str:
    """Per-block memory columns (``peak_bytes``, ``live_out_bytes``, ...) as one level per block."""
    d = df[df["block"] != "TOTAL"].reset_index(drop=True)
    if not len(d) or not cols:
        return ""
    series = {c: [int(v) if not pd.isna(v) else 0 for v in d[c]] for c in cols}
    bands = [(i, i + 1, b, k, block_label(b, k, x)) for i, (b, k, x) in enumerate(zip(d["block"], d["kind"], d["index"]))]
    return memory_timeline(series, bands, title=title, steps=True, place="block")
