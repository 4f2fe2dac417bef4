"""The physical ranges of the numbers of a hardware or system profile, and the one check they all go through.

Every figure of a profile is a finite number (a TOML integer or float; ``true`` is not a number) inside the
range below, in the file's own units. The lower bounds are far below any real part (a calibrated laptop CPU
included) and keep every time estimate finite; the upper bounds are far above any chip or system built so far.
The templates (``data/hardware_template.toml``, ``data/system_template.toml``) state the same ranges.

==========================================  ================  ==================================
figure                                      range             unit
==========================================  ================  ==================================
matrix_tflops.*, vector_tflops.*            [1e-06, 1e+06]    TFLOP/s (1 MFLOP/s to 1 EFLOP/s)
transcendental_tops                         [1e-06, 1e+06]    1e12 results/s
hbm_bandwidth_gb_s, link_bandwidth_gb_s,    [0.001, 1e+06]    GB/s (1 MB/s to 1 PB/s)
bandwidth_gb_s (systems)
nic_gbit_s (systems)                        [0.008, 8e+06]    Gb/s (the same range in bits)
hbm_capacity_gb                             [0.001, 1e+06]    GB (1 MB to 1 PB)
hop_latency_us, kernel_overhead_us,         [0, 1e+06]        us (0 to one second)
dispatch_overhead_us, latency_us,
base_latency_us (systems)
efficiency (gemm, links), gemm curve        [0.0001, 1]       fraction of peak
gemm curve GFLOP                            [1e-09, 1e+09]    GFLOP of one dot (1 FLOP to 1 EFLOP)
memory.efficiency, attention.*.forward,     [0.0001, 1]       fraction of peak
attention.*.backward
memory.half_size_mb, sram_mb                [0, 1e+06]        MB (1e6 bytes)
tdp_w, clock.power_limit_w,                 [0.001, 1e+06]    W
clock.memory_w, clock.idle_w
clock.peak_mhz, clock.<dtype>               [1, 1e+05]        MHz
attention.*.ramp                            [0, 1e+06]        key/value tiles
attention.*.exp_exposed                     [0, 1]            share of the exponentials' time
devices_per_node, nics_per_node, dims,      [1, 1e+06]        whole numbers (mesh: product too)
link_count
==========================================  ================  ==================================
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

#: (lowest, highest, unit) per kind of figure.
RANGES: dict[str, tuple[Decimal, Decimal, str]] = {
    "tflops": (Decimal("1e-6"), Decimal("1e6"), "TFLOP/s"),
    "tops": (Decimal("1e-6"), Decimal("1e6"), "x 1e12/s"),
    "gb_s": (Decimal("0.001"), Decimal("1e6"), "GB/s"),
    "tb_s": (Decimal("1e-6"), Decimal("1e3"), "TB/s"),
    "gbit_s": (Decimal("0.008"), Decimal("8e6"), "Gb/s"),
    "gb": (Decimal("0.001"), Decimal("1e6"), "GB"),
    "us": (Decimal(0), Decimal("1e6"), "us"),
    "ns": (Decimal(0), Decimal("1e6"), "ns"),
    "fraction": (Decimal("0.0001"), Decimal(1), "(fraction of peak)"),
    "gflop": (Decimal("1e-9"), Decimal("1e9"), "GFLOP"),
    "mb": (Decimal(0), Decimal("1e6"), "MB"),
    "count": (Decimal(0), Decimal("1e6"), "(tiles)"),
    "share": (Decimal(0), Decimal(1), "(share)"),
    "w": (Decimal("0.001"), Decimal("1e6"), "W"),
    "mhz": (Decimal(1), Decimal("1e5"), "MHz"),
}
#: The largest whole number of a profile (devices per node, NICs, mesh dimensions and their product).
MAX_COUNT = 1_000_000


def _show(d: Decimal) -> str:
    return f"{d:g}" if d == d.to_integral_value() and abs(d) < 10 ** 6 else f"{float(d):g}"


def describe(kind: str) -> str:
    """``a number in [0.001, 1e+06] GB/s``: the words of an error message."""
    lo, hi, unit = RANGES[kind]
    return f"a number in [{_show(lo)}, {_show(hi)}] {unit}"


def _got(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    return repr(value)


def checked(value: Any, kind: str) -> Decimal:
    """``value`` as an exact Decimal if it is a finite number in the range of ``kind``; else ValueError with
    ``must be a number in [lo, hi] unit, got X`` (the caller puts the file and the key before it)."""
    lo, hi, _ = RANGES[kind]
    if not isinstance(value, bool) and isinstance(value, (int, float, Decimal)):
        try:
            # repr() of a float is its shortest round-trip decimal: 989.4 -> Decimal("989.4") exactly
            d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
            if d.is_finite() and lo <= d <= hi:
                return d
        except (InvalidOperation, ValueError):
            pass
    raise ValueError(f"must be {describe(kind)}, got {_got(value)}")


def checked_count(value: Any, least: int = 1) -> int:
    """A whole number in [least, MAX_COUNT] (``true`` is not one); else ValueError as :func:`checked`."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_COUNT:
        raise ValueError(f"must be a whole number in [{least}, {MAX_COUNT}], got {_got(value)}")
    return value


def known_table(table: Any, where: str, fields: tuple) -> dict:
    """``table`` itself, where it is a TOML table of only ``fields`` (ValueError naming ``where`` otherwise)."""
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table")
    unknown = [k for k in table if k not in fields]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(fields)})")
    return table
