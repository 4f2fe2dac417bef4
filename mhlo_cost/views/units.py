"""Display units without pandas: counts in K, M, G, T (decimal) as exact decimals, column names with their
unit, seconds in a human unit. Counts never pass through a float."""
from __future__ import annotations

import math

UNITS = {"raw": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
#: Columns that hold counts (FLOPs, bytes, ops); the unit applies to the FLOP and byte ones.
SCALED = {
    "gemm_flops", "conv_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written", "comm_bytes",
    "flops", "total_flops", "baseline", "now", "delta", "macs", "params",
}
#: Time columns' display units, largest first.
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def scale(value, unit: str) -> str | int:
    """An exact integer in ``unit``: itself for raw, else a decimal string rounded to 3 decimals
    (half away from zero), computed in integers so that no count passes through a float."""
    value = int(value)
    if unit == "raw":
        return value
    sign = "-" if value < 0 else ""
    q, r = divmod(abs(value) * 1000, UNITS[unit])
    if 2 * r >= UNITS[unit]:
        q += 1
    return f"{sign}{q // 1000}.{q % 1000:03d}"


def exact_scale(value, unit: str) -> str | int:
    """An exact integer in ``unit`` with every digit kept: ``exact_scale(1234, "K") == "1.234"``."""
    value = int(value)
    if unit == "raw":
        return value
    digits = len(str(UNITS[unit])) - 1
    sign = "-" if value < 0 else ""
    q, r = divmod(abs(value), UNITS[unit])
    frac = f"{r:0{digits}d}".rstrip("0")
    return f"{sign}{q}" + (f".{frac}" if frac else "")


def scaled_column(name: str) -> bool:
    """Whether a column holds FLOPs or bytes (``--unit`` applies): the named ones and any ``*_flops``,
    ``*_bytes`` (the per-phase columns of a training step: ``fwd_gemm_flops``, ...), and the ``_fused`` twin of
    each (``peak_bytes_fused``, ``during_bytes_fused``)."""
    for suffix in ("_a", "_b", "_delta"):  # diff's columns: gemm_flops_a, gemm_flops_b, gemm_flops_delta
        if name.endswith(suffix) and name[:-len(suffix)] not in ("ops", "comm_ops"):
            name = name[:-len(suffix)]
            break
    from ..machines.execution import memory_suffixes

    for sfx in memory_suffixes():  # an execution model's twin of a figure (peak_bytes_eager): the same unit
        name = name.removesuffix(sfx)
    return name in SCALED or name.endswith(("_flops", "_bytes"))


def unit_name(name: str, unit: str) -> str:
    """``name`` with its unit: ``gemm_flops[G]``, ``bytes_read[GB]`` (unchanged for raw)."""
    if unit == "raw" or not scaled_column(name):
        return name
    return f"{name}[{unit}B]" if "bytes" in name else f"{name}[{unit}]"


def is_time_column(name: str) -> bool:
    """A column of seconds: ``est_time_s``, ``comm_time_fused_s`` (not a bandwidth: ``hbm_gb_s``)."""
    return name.endswith("_s") and not name.endswith(("_gb_s", "_gbit_s", "_per_s"))


def time_unit(values) -> tuple[str, float]:
    """The unit for a column of seconds: that of its largest magnitude (ns, us, ms or s)."""
    top = max((abs(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0)
    for name, size in TIME_UNITS:
        if top >= size:
            return name, size
    return ("ns", 1e-9) if top else ("s", 1.0)


