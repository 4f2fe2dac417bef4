"""The summary of one analysis, once: the ``(metric, value)`` pairs that every format renders (table, CSV,
JSON, Markdown, the HTML page), and the headline made from them. No pandas (``report``'s default view starts
faster for it).

With an estimate of a fused execution (``--fuse``), the figures of that execution come first: each
``*_fused*`` figure stands just before the unfused one it replaces (``est_time_fused_s`` before
``est_time_s``, ``peak_bytes_fused`` before ``peak_bytes``).
"""
from __future__ import annotations

import math

#: Decimal prefixes, largest first.
PREFIXES = (("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3))


def summary_pairs(analysis, *, roofline=None, fused=None, hw=None, blocks=None, steps: int = 1,
                  filtered: bool = False, params: int | None = None) -> list[tuple[str, object]]:
    """The summary of ``analysis``: its counts (with ``macs`` and ``params``), the estimate of ``roofline``
    (not for a ``filtered`` part of the program), where the memory peaks are (``fused``: the fused memory
    profile; ``blocks``: for the peak's block; ``hw``: whether it fits). ``params`` overrides the count (the
    parameters first read in a filtered part)."""
    counts = dict(analysis.summary)
    if params is not None:
        counts["params"] = params
    pairs = list(counts.items())
    if roofline is not None and not filtered:
        pairs += [(k, v) for k, v in roofline.summary(steps).items() if k not in counts]
    if analysis.liveness is not None:
        from .memory.views import summary_lines

        pairs += summary_lines(analysis, blocks, fused, hw)
    return chosen_first(pairs)


def chosen_first(pairs: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Each ``*_fused*`` pair moved just before the unfused pair it replaces, where there is one."""
    names = {m for m, _ in pairs}
    fused = {m.replace("_fused", "", 1): (m, v) for m, v in pairs if "_fused" in m
             and m.replace("_fused", "", 1) in names}
    moved = {m for m, _ in fused.values()}
    out = []
    for m, v in pairs:
        if m in moved:
            continue
        if m in fused:
            out.append(fused[m])
        out.append((m, v))
    return out


def human(value: int, base: str = "") -> str:
    """An exact count with the decimal prefix that suits it, 3 significant digits or more: ``1.88 G``."""
    value = int(value)
    for name, size in PREFIXES:
        if abs(value) >= size:
            q = abs(value) * 100 // size  # hundredths, truncated: no float
            r = abs(value) * 100 % size
            if 2 * r >= size:
                q += 1
            sign = "-" if value < 0 else ""
            return f"{sign}{q // 100}.{q % 100:02d} {name}{base}"
    return f"{value:,} {base}".rstrip()


def human_seconds(seconds: float) -> str:
    for name, size in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= size:
            return f"{seconds / size:.3g} {name}"
    return f"{seconds / 1e-9:.3g} ns"


def headline(pairs: list[tuple[str, object]]) -> str:
    """One line: FLOPs (all, and of the matrix products), MACs, parameters, peak memory and, with an estimate,
    the time; the chosen execution's figures (fused where there is a fused estimate)."""
    s = dict(pairs)
    mm = int(s.get("gemm_flops", 0)) + int(s.get("conv_flops", 0))
    total = mm + int(s.get("vector_flops", 0))
    parts = [f"FLOPs {human(total)} (matmul/conv {human(mm)})", f"MACs {human(int(s.get('macs', mm // 2)))}"]
    if "params" in s:
        parts.append(f"params {human(int(s['params']))}")
    t = s.get("est_time_fused_s", s.get("est_time_s"))
    timed = isinstance(t, float) and math.isfinite(t)
    peak = s.get("peak_bytes_fused", s.get("peak_bytes"))
    if peak is not None:
        fused = "peak_bytes_fused" in s and not timed  # else the time's "fused" says it for both
        parts.append(f"peak memory {human(int(peak), 'B')}" + (" (fused)" if fused else ""))
    if timed:
        on = f" on {s['hardware']}" if s.get("hardware") else ""
        parts.append(f"{human_seconds(t)}{on}" + (", fused" if "est_time_fused_s" in s else ""))
    return " | ".join(parts)
