"""A chip profile as a datasheet: every figure in the file's own units, with the source or ESTIMATE note of each.

:func:`chip_rows` is what ``mhlo-cost hardware show`` prints for a chip (and, below a system's own rows, for
its chip) and what ``hardware diff`` compares: one :class:`Row` per figure, in the order of the file's schema,
the figure in the unit the TOML file writes it in (TFLOP/s, GB/s, GB, us, MB, W), its note taken from the
profile's ``[sources]`` table (the documents its tags name are :attr:`Hardware.references`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .profile import DTYPE_KEYS, Hardware

__all__ = ["Row", "chip_rows", "figure"]


@dataclass(frozen=True)
class Row:
    """One figure: its key in the TOML file, its value (a number in ``unit``, or text), its source note."""

    key: str
    value: Any
    unit: str
    note: str


def figure(value: Any) -> str:
    """A value as ``show`` prints it: numbers to 6 significant digits (no float noise), the rest as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return " x ".join(figure(v) for v in value)
    return str(value)


_TB = 1e12
#: file key -> (unit, the figure in that unit, or None where the profile has none)
_SCALARS: tuple[tuple[str, str, Callable[[Hardware], Any]], ...] = (
    ("hbm_bandwidth_gb_s", "GB/s", lambda h: h.hbm_bandwidth / 1e9),
    ("hbm_capacity_gb", "GB", lambda h: h.hbm_capacity / 1e9),
    ("sram_mb", "MB", lambda h: None if h.sram is None else h.sram / 1e6),
    ("link_bandwidth_gb_s", "GB/s, one direction", lambda h: h.link_bandwidth / 1e9),
    ("link_generation", "", lambda h: h.link_generation or None),
    ("link_count", "links", lambda h: h.link_count),
    ("tdp_w", "W", lambda h: h.tdp),
    ("hop_latency_us", "us", lambda h: h.hop_latency * 1e6),
    ("kernel_overhead_us", "us", lambda h: h.kernel_overhead * 1e6),
    ("dispatch_overhead_us", "us", lambda h: None if h.dispatch_overhead is None else h.dispatch_overhead * 1e6),
    ("transcendental_tops", "1e12/s", lambda h: h.transcendental_rate / _TB),
    ("f32_matmul", "", lambda h: h.f32_matmul),
)
_TABLE_UNITS = {"efficiency": "fraction", "compute_units": "units", "tile": "rows x cols", "k_half": "steps",
                "split_k": "", "half_size_mb": "MB", "generic_tbps": "TB/s", "convert_tbps": "TB/s",
                "reduce_row_ns": "ns", "l2_mib": "MiB", "library": "", "power_limit_w": "W",
                "memory_w": "W", "idle_w": "W"}


def _rates(hw: Hardware) -> list[Row]:
    out = []
    for table, rates in (("matrix_tflops", hw.matrix_flops), ("vector_tflops", hw.vector_flops)):
        unit = "TFLOP/s dense" if table == "matrix_tflops" else "TFLOP/s"
        for k in DTYPE_KEYS:
            if k in rates:
                key = f"{table}.{k}"
                out.append(Row(key, rates[k] / _TB, "TOP/s" if k.startswith("int") else unit, hw.notes.get(key, "")))
    return out


def _models(hw: Hardware) -> list[Row]:
    """The efficiency tables (gemm, memory, attention) as rows of their TOML keys; a table inside one (an attention
    library, a GEMM curve) as a row per entry."""
    out = []
    for name, model in (("gemm", hw.gemm), ("memory", hw.memory), ("attention", hw.attention),
                        ("clock", getattr(hw, "clock", None))):
        if model is None:
            continue
        for k, v in model.as_toml().items():
            key = f"{name}.{k}"
            note = hw.notes.get(key, "")
            if isinstance(v, dict):
                for sub, x in v.items():
                    unit = "key tiles" if sub == "ramp" else ("fraction of peak" if name == "attention" else "")
                    out.append(Row(f"{key}.{sub}", float(x) if isinstance(x, (int, float)) else x, unit, note))
                continue
            unit = "keys" if key == "attention.tile" else _TABLE_UNITS.get(k, "MHz" if name == "clock" else "")
            out.append(Row(key, float(v) if isinstance(v, float) else v, unit, note))
    return out


def chip_rows(hw: Hardware) -> list[Row]:
    """Every figure of ``hw`` with its unit and note (a figure without a note cites the profile's ``source``)."""
    rows = [Row(key, v, unit, hw.notes.get(key, "")) for key, unit, get in _SCALARS if (v := get(hw)) is not None]
    return rows + _rates(hw) + _models(hw)
