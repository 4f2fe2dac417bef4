"""The roofline chart: every kernel (op, or fused kernel) as a point of arithmetic intensity (FLOPs per byte
of HBM traffic) against the FLOP/s it attains in the estimate, under the chip's roofs (HBM bandwidth x
intensity, and the peak of each unit the program uses).

Kernels that land on the same pixel in the same colour are drawn once; the hover says how many, their
total time and the slowest of them. A point's area follows its share of the time. Kernels with no FLOPs
(data movement) have no place on a log axis: the caption says how many there are and how long they take.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...roofline.optime import vector_dtype
from ...walk.row import short_name
from .fmt import auto_prefix, esc, human_time, plural
from .svg import KIND_COLOURS, GREY, Scale, f1, legend, line, open_svg, text, tip, x_axis, y_axis

W, H = 1100, 520


@dataclass(frozen=True)
class Point:
    name: str
    kind: str
    flops: int  # totals over the kernel's executions
    bytes: int
    time_s: float
    count: int  # executions

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    @property
    def attained(self) -> float:
        return self.flops / self.time_s if self.time_s > 0 else 0.0


def op_name(r) -> str:
    name = short_name(r.op)
    if r.target and name == "custom_call":
        name = f"custom_call({r.target})"
    return f"{r.scope}/{name}" if r.scope else name


def points(rf) -> tuple[list[Point], int, float]:
    """The kernels of the estimate ``rf`` (:class:`~mhlo_cost.roofline.Roofline`) as points, and the
    executions and time of those with no FLOPs or no bytes (not drawn)."""
    rows = rf.analysis.rows
    out, skipped, skipped_s = [], 0, 0.0
    if rf.fusion is not None:
        for k in rf.fusion.kernels:
            ms = [rows[i] for i in k.members]
            flops = sum(r.gemm_flops + r.conv_flops + r.vector_flops for r in ms)
            kind = "dot" if k.has_dot else ms[0].kind
            name = op_name(ms[0]) + (f" +{len(ms) - 1} fused" if len(ms) > 1 else "")
            pt = Point(name, kind, flops, k.bytes_read + k.bytes_written, k.time_s, k.multiplicity)
            if flops and pt.bytes and k.time_s > 0:
                out.append(pt)
            else:
                skipped, skipped_s = skipped + k.multiplicity, skipped_s + k.time_s
        return out, skipped, skipped_s
    for r, t in zip(rows, rf.times):
        if t.overhead_s == 0 and t.compute_s == 0 and t.memory_s == 0:
            continue  # no kernel: reshape, constant, collectives (their time is on the link), unknown
        flops = r.gemm_flops + r.conv_flops + r.vector_flops
        nbytes = r.bytes_read + r.bytes_written
        if flops and nbytes:
            out.append(Point(op_name(r), r.kind, flops, nbytes, t.kernel_s, r.multiplicity))
        else:
            skipped, skipped_s = skipped + r.multiplicity, skipped_s + t.kernel_s
    return out, skipped, skipped_s


def roofs(rf) -> list[tuple[str, float]]:
    """(label, FLOP/s) of each unit the program runs on, highest first."""
    found: dict[float, dict[str, dict[str, None]]] = {}  # peak -> unit -> dtypes, in order of first use
    for r, t in zip(rf.analysis.rows, rf.times):
        if t.peak > 0 and t.unit in ("matrix", "vector"):
            dtype = r.operands[0].dtype if t.unit == "matrix" and r.operands else vector_dtype(r)
            found.setdefault(t.peak, {}).setdefault(t.unit, {})[dtype] = None
    labels = {peak: " / ".join(f"{unit} unit ({', '.join(dts)})" for unit, dts in units.items())
              for peak, units in found.items()}
    return sorted(((label, peak) for peak, label in labels.items()), key=lambda x: -x[1])


def _merge(pts: list[Point], xs: Scale, ys: Scale) -> list[tuple[float, float, str, list[Point]]]:
    groups: dict[tuple, list[Point]] = {}
    for p in pts:
        key = (round(xs(p.intensity)), round(ys(p.attained)), p.kind)
        groups.setdefault(key, []).append(p)
    out = [(xs(g[0].intensity), ys(g[0].attained), key[2], g) for key, g in groups.items()]
    out.sort(key=lambda o: (-math.fsum(p.time_s for p in o[3]), o[0], o[1], o[2]))
    return out


def _hover(g: list[Point], bandwidth: float, peak_of) -> str:
    g = sorted(g, key=lambda p: (-p.time_s, p.name))
    p = g[0]
    roof = min(peak_of(p), bandwidth * p.intensity)
    s = (f"{p.name} [{p.kind}]: {auto_prefix(p.flops, 'FLOP')}, {auto_prefix(p.bytes, 'B')}, "
         f"{p.intensity:.3g} FLOP/B, {p.attained / 1e12:.3g} TFLOP/s ({100 * p.attained / roof:.0f}% of its roof), "
         f"{human_time(p.time_s)}" + (f" over {p.count} runs" if p.count > 1 else ""))
    if len(g) > 1:
        total = math.fsum(q.time_s for q in g)
        others = ", ".join(q.name for q in g[1:3]) + (" ..." if len(g) > 3 else "")
        s += f"; and {len(g) - 1} more here ({others}), {human_time(total)} in all"
    return s


def roofline_svg(pts: list[Point], unit_roofs: list[tuple[str, float]], bandwidth: float, title: str,
                 fused_names: bool = False) -> str:
    if not pts or not unit_roofs:
        return ""
    top_peak = unit_roofs[0][1]
    xlo = 10 ** math.floor(math.log10(min(p.intensity for p in pts)))
    xhi = 10 ** math.ceil(math.log10(max(max(p.intensity for p in pts) * 1.5, 2 * top_peak / bandwidth)))
    ylo = 10 ** math.floor(math.log10(min(p.attained for p in pts)))
    yhi = 10 ** math.ceil(math.log10(top_peak * 1.5))
    left, right, top, bottom = 78, 16, 40, 50
    xs, ys = Scale(xlo, xhi, left, W - right, log=True), Scale(ylo, yhi, H - bottom, top, log=True)
    out = [open_svg(W, H, title)]
    out += y_axis(ys, left, W - right, "attained FLOP/s", _rate_label)
    out += x_axis(xs, H - bottom, top, "arithmetic intensity (FLOP per byte)")
    label_y = -math.inf
    for label, peak in unit_roofs:  # the roof of a unit: bandwidth-bound slope, then its peak
        knee = peak / bandwidth
        x0 = max(xlo, ylo / bandwidth)
        out.append(line(xs(x0), ys(bandwidth * x0), xs(knee), ys(peak), "roof"))
        out.append(line(xs(knee), ys(peak), W - right, ys(peak), "roof"))
        label_y = max(ys(peak) - 5, label_y + 14)  # labels of close roofs one under the other
        out.append(text(W - right - 4, label_y, f"{label}: {peak / 1e12:g} TFLOP/s", "end", "roof"))
    sx = max(xlo, ylo / bandwidth) * 2  # the bandwidth label, along its slope
    px, py = xs(sx), ys(bandwidth * sx)
    angle = math.degrees(math.atan2(ys(bandwidth * sx * 10) - py, xs(sx * 10) - px))
    out.append(f'<text class="roof" transform="translate({f1(px)},{f1(py - 6)}) rotate({angle:.1f})">'
               f"HBM {bandwidth / 1e12:g} TB/s</text>")
    def peak_of(p: Point) -> float:
        unit = "matrix" if p.kind in ("dot", "conv") else "vector"
        return max((v for lbl, v in unit_roofs if unit in lbl), default=top_peak)

    total = math.fsum(p.time_s for p in pts) or 1.0
    for x, y, kind, g in _merge(pts, xs, ys):
        r = 2.5 + 12 * math.sqrt(math.fsum(p.time_s for p in g) / total)
        out.append(f'<circle class="pt" cx="{f1(x)}" cy="{f1(y)}" r="{f1(r)}" fill="{KIND_COLOURS.get(kind, GREY)}"'
                   f'{tip(_hover(g, bandwidth, peak_of))}/>')
    kinds = sorted({p.kind for p in pts}, key=lambda k: list(KIND_COLOURS).index(k) if k in KIND_COLOURS else 99)
    names = {"dot": "dot (GEMM)" + (": kernels with a GEMM" if fused_names else ""), "conv": "convolution"}
    out += legend([(names.get(k, k), KIND_COLOURS.get(k, GREY)) for k in kinds], left, 16, W - left - right)
    out.append("</svg>")
    return "".join(out)


def _rate_label(v: float) -> str:
    for name, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if v >= size:
            return f"{v / size:g} {name}"
    return f"{v:g}"


def caption(pts: list[Point], skipped: int, skipped_s: float, fused: bool) -> str:
    what = plural(len(pts), "fused kernel") if fused else plural(len(pts), "op") + " (each its own kernel)"
    n = sum(p.count for p in pts)
    return esc(f"{plural(n, 'execution')} of {what}; point area ~ time. Not drawn: {plural(skipped, 'execution')} "
               f"with no FLOPs (data movement), {human_time(skipped_s)}.")
