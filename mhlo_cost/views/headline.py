"""The headline: one line of FLOPs, MACs, parameters, peak memory and time, in the units people read, made
from the summary's ``(metric, value)`` pairs (:func:`mhlo_cost.views.figures.summary_pairs`). Pure: nothing of the
analysis is imported, so that the analysis, the views and the pages can all say it."""
from __future__ import annotations

import math

#: Decimal prefixes, largest first.
PREFIXES = (("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3))


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


#: The summary's figures of one step's time, the first present taken: compute plus the communication it cannot
#: hide, of the execution described (:attr:`mhlo_cost.roofline.Roofline.step_name`); the plain sums where a
#: summary has no overlap figure.
STEP = ("est_time_fused_overlap_s", "est_time_overlap_s", "est_time_fused_s", "est_time_s")


def step_time(s: dict):
    """One step's time in the summary ``s`` (a dict of its pairs), None without an estimate."""
    return next((s[k] for k in STEP if k in s), None)


def headline(pairs: list[tuple[str, object]]) -> str:
    """One line: FLOPs (all, and of the matrix products), MACs, parameters, peak memory and, with an estimate,
    the step's time (:func:`step_time`); the chosen execution's figures (fused where there is a fused
    estimate)."""
    s = dict(pairs)
    mm = int(s.get("gemm_flops", 0)) + int(s.get("conv_flops", 0))
    total = mm + int(s.get("vector_flops", 0))
    parts = [f"FLOPs {human(total)} (matmul/conv {human(mm)})", f"MACs {human(int(s.get('macs', mm // 2)))}"]
    if "params" in s:
        parts.append(f"params {human(int(s['params']))}")
    t = step_time(s)
    timed = isinstance(t, float) and math.isfinite(t)
    from ..machines.execution import memory_suffixes

    own = next(("peak_bytes" + x for x in memory_suffixes() if "peak_bytes" + x in s), None)
    peak = s.get(own or "peak_bytes")
    if peak is not None:
        fused = own is not None and not timed  # else the time's "fused" says it for both
        label = s["execution"] if s.get("execution") in ("eager", "inductor") else "fused"
        parts.append(f"peak memory {human(int(peak), 'B')}" + (f" ({label})" if fused else ""))
    if timed:
        on = f" on {s['hardware']}" if s.get("hardware") else ""
        label = s["execution"] if s.get("execution") in ("eager", "inductor") else "fused"
        parts.append(f"{human_seconds(t)}{on}" + (f", {label}" if "est_time_fused_s" in s else ""))
        gain = s.get("compile_gain")
        if isinstance(gain, float) and math.isfinite(gain):  # --execution inductor: eager / inductor
            parts.append(f"compile gain {gain:.2f}x")
    return " | ".join(parts)
