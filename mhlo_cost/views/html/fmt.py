"""How a column of numbers reads on the page: its unit (in the header) and its cells (display rounding only).

Every cell keeps its exact value beside the rounded text: integers as their decimal digits (never through
a float), floats as Python's ``repr`` (the shortest text that reads back to the same float). The page sorts
and sums by those, so display rounding never changes an order or a total.

Columns are recognised by name, the way the project names them: ``*_flops`` are FLOPs, ``bytes_*`` and
``*_bytes`` bytes, ``*_s`` seconds, ``*utilisation*`` a fraction shown in percent, ``ops``, ``*_ops``,
``kernels`` and ``multiplicity`` plain counts; the disassembly table's ``gflops`` and ``latency_us`` are
already scaled. A column of another name that holds numbers is shown as it is.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

import pandas as pd

from ...machines.execution import memory_suffixes

#: Decimal prefixes, as everywhere in the project (1 G = 1e9).
PREFIXES = (("", 1), ("K", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12), ("P", 10**15), ("E", 10**18))
#: Time units and their length in seconds, shortest first.
TIME_UNITS = (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def time_unit(top: float) -> tuple[str, float]:
    """The largest of :data:`TIME_UNITS` not above ``top`` seconds (the smallest for less): an axis's unit."""
    unit = TIME_UNITS[0]
    for u in TIME_UNITS:
        if top >= u[1]:
            unit = u
    return unit

_COUNTS = {"ops", "kernels", "multiplicity", "index", "group_size", "num_groups", "comm_steps", "devices",
           "steps", "fused_kernels", "free_ops"}
#: Already-scaled columns of the disassembly table: name -> unit shown in the header.
_FIXED = {"gflops": "GFLOP", "latency_us": "us", "reference_peak_tflops": "TFLOP/s"}


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def family(name: str) -> str:
    """``flops``, ``bytes``, ``count`` (transcendentals: a count that a prefix helps), ``plain`` (a count
    written out), ``time``, ``ratio``, ``fixed`` or ``other`` for a column called ``name``."""
    n = name.lower()
    for sfx in memory_suffixes():  # peak_bytes_fused, peak_bytes_eager: a peak's bytes, as peak_bytes
        if n.endswith(sfx) and n != sfx:
            n = n[: -len(sfx)]
    if n in _FIXED:
        return "fixed"
    if n.endswith("_flops") or n in ("flops", "run_flops"):
        return "flops"
    if n.startswith("bytes_") or n.endswith("_bytes") or n == "bytes":
        return "bytes"
    if n == "transcendentals" or n.endswith("_transcendentals"):
        return "count"
    if n in _COUNTS or n.endswith("_ops") or n.endswith("_count"):
        return "plain"
    if n.endswith("_s"):
        return "time"
    if "utilisation" in n or "utilization" in n or n.endswith("_share"):
        return "ratio"
    return "other"


_BASE = {"flops": "FLOP", "bytes": "B", "count": ""}


def is_exact_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or (hasattr(v, "dtype") and v.dtype.kind in "iu")


def exact(v) -> str:
    """The exact text of a value for ``data-v``: integer digits, ``repr`` of a float, "" for missing."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if is_exact_int(v):
        return str(int(v))
    if isinstance(v, float) or (hasattr(v, "dtype") and v.dtype.kind == "f"):
        return repr(float(v))
    return str(v)


def prefix_for(magnitude: int | float) -> tuple[str, int]:
    chosen = PREFIXES[0]
    for p in PREFIXES:
        if magnitude >= p[1]:
            chosen = p
    return chosen


def scaled_text(value: int, div: int, decimals: int = 3) -> str:
    """``value / div`` rounded half away from zero to ``decimals``, in integer arithmetic."""
    sign = "-" if value < 0 else ""
    scale = 10**decimals
    q, r = divmod(abs(value) * scale, div)
    if 2 * r >= div:
        q += 1
    whole, frac = divmod(q, scale)
    text = f"{sign}{whole:,}" + (f".{frac:0{decimals}d}" if decimals else "")
    if q == 0 and value != 0:
        return f"{sign}<{1 / scale:.{decimals}f}"
    return text


def auto_prefix(value: int, base: str) -> str:
    """A value with the prefix that suits it alone: ``4.661 TFLOP`` (for tooltips)."""
    name, div = prefix_for(abs(value))
    if div == 1:
        return f"{value:,} {base}".rstrip()
    return f"{scaled_text(value, div)} {name}{base}".rstrip()


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 execution``, ``2 executions``: the count written out, then the word."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def human_time(seconds: float) -> str:
    if seconds == 0:
        return "0 s"
    for name, length in reversed(TIME_UNITS):
        if abs(seconds) >= length or name == "ns":
            return f"{seconds / length:.4g} {name}"
    return f"{seconds:.4g} s"  # pragma: no cover


@dataclass(frozen=True)
class Column:
    """How one column is shown: ``unit`` for the header, ``div`` and ``decimals`` for the cells."""

    name: str
    family: str
    numeric: bool
    unit: str = ""
    div: float = 1
    decimals: int = 0

    def header(self) -> str:
        return f"{self.name} ({self.unit})" if self.unit else self.name

    def cell(self, v) -> str:
        """The rounded text of one value."""
        text = exact(v)
        if text == "" or not self.numeric:
            return text
        if self.family in ("flops", "bytes", "count", "plain") and is_exact_int(v):
            if int(v) == 0:
                return "0"
            return scaled_text(int(v), int(self.div), self.decimals) if self.div != 1 else f"{int(v):,}"
        x = float(v)
        if self.family == "ratio":
            return f"{100 * x:.1f}"
        if self.family in ("time",):
            y = x / self.div
            return "0" if x == 0 else (f"{y:.3f}" if abs(y) >= 0.0005 else ("-" if y < 0 else "") + "<0.001")
        if self.family == "fixed" or not float(x).is_integer():
            return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"
        return f"{int(x):,}"

    def tip(self, v) -> str:
        """The hover text of one cell: the exact value in its base unit."""
        text = exact(v)
        if text == "" or not self.numeric:
            return ""
        if self.family in _BASE and is_exact_int(v):
            exact_text = f"{int(v):,} {_BASE[self.family]}".rstrip()
            return exact_text if abs(int(v)) < 1000 else f"{exact_text} = {auto_prefix(int(v), _BASE[self.family])}"
        if self.family == "time":
            return f"{human_time(float(v))} ({text} s)"
        if self.family == "ratio":
            return f"{100 * float(v):.3f}%"
        return text


def _is_numeric(s: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(s.dtype):
        return False
    if pd.api.types.is_numeric_dtype(s.dtype):
        return True
    vals = [v for v in s if exact(v) != ""]
    return bool(vals) and all(is_exact_int(v) or isinstance(v, float) for v in vals)


def column(name: str, s: pd.Series, unit: str | None = None, body: pd.Series | None = None) -> Column:
    """The :class:`Column` for ``s``. ``unit`` (K, M, G, T) fixes the prefix of FLOP and byte columns;
    otherwise it is chosen from the largest value of ``body`` (the rows without the TOTAL, by default
    ``s``), so that a block's figure reads with three decimals and the total next to it."""
    fam = family(name)
    if not _is_numeric(s):
        return Column(name, "text", False)
    body = s if body is None else body
    vals = [v for v in body if exact(v) != ""]
    if fam in ("flops", "bytes", "count"):
        if not all(is_exact_int(v) for v in vals):
            return Column(name, fam, True)
        if unit and unit != "raw":
            div = dict(PREFIXES)[unit]
        else:
            div = prefix_for(max((abs(int(v)) for v in vals), default=0))[1]
        prefix = {d: p for p, d in PREFIXES}[div]
        label = f"{prefix}{_BASE[fam]}" or ""
        return Column(name, fam, True, label, div, 3 if div > 1 else 0)
    if fam == "time":
        top = max((abs(float(v)) for v in vals), default=0.0)
        uname, length = TIME_UNITS[0]
        for n, ln in TIME_UNITS:
            if top >= ln:
                uname, length = n, ln
        return Column(name, fam, True, uname, length, 3)
    if fam == "ratio":
        return Column(name, fam, True, "%", 1, 1)
    if fam == "fixed":
        return Column(name, fam, True, _FIXED[name.lower()])
    return Column(name, fam if fam == "plain" else "other", True)
