"""Frames as text: aligned tables, CSV, JSON and Markdown, in exact integers or display units (the renderers of
:mod:`mhlo_cost.views.render` write a view's table with these).

Counts stay exact Python integers until this module turns them into text; ``--unit`` only changes how
they are written (K, M, G, T are decimal: 1e3, 1e6, 1e9, 1e12) and the column says so
(``gemm_flops[G]``, ``bytes_read[GB]``). Tables and Markdown round to 3 decimals; CSV writes the exact
decimal (an integer count divided by a power of ten is a finite decimal); JSON always holds the exact
integers. Times (columns ``*_s``) are exact seconds in CSV and JSON, and in tables a human unit per
column (``est_time[us]``). A table is cut to 120 characters unless ``wide``: the columns left out are
named under it.
"""
from __future__ import annotations

import io
import math

import pandas as pd

from ..files.outtext import csv_safe_frame, json_text

from .units import SCALED, TIME_UNITS, UNITS, exact_scale, is_time_column, scale, scaled_column, time_unit, unit_name

#: A table's width unless ``wide``.
TABLE_WIDTH = 120

#: Columns a narrow table leaves out first (after those that are zero or empty everywhere).
LESS_IMPORTANT = ("index", "transcendentals", "conv_flops", "comm_ops", "live_out_bytes", "live_out_bytes_fused",
                  "live_out_bytes_eager",
                  "location", "num_groups", "dtype", "est_compute_s", "est_memory_s", "est_overhead_s", "inputs",
                  "weights", "compute_bound_s", "compute_bound_fused_s", "live_bytes", "depth",
                  "execution")
#: Columns a narrow table keeps longest (the first column always stays).
IMPORTANT = ("status", "est_time_s", "est_time_fused_s", "compile_gain", "bound", "latency_us", "utilisation", "gflops", "gemm_flops",
             "vector_flops", "kind", "operation", "output", "shape", "percent", "ops", "comm_bytes")


def is_int_column(s: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(s.dtype) or (
        s.dtype == object and len(s) > 0 and all(isinstance(v, int) and not isinstance(v, bool) for v in s))


def apply_unit(df: pd.DataFrame, unit: str, exact: bool = False) -> pd.DataFrame:
    """The counts of ``df`` in ``unit`` (rounded to 3 decimals, or ``exact``), their columns renamed
    with the unit."""
    if unit == "raw":
        return df
    out = df.copy()
    conv = exact_scale if exact else scale
    for c in out.columns:
        if scaled_column(str(c)) and is_int_column(out[c]):
            out[c] = [conv(v, unit) for v in out[c]]
    return out.rename(columns={c: unit_name(str(c), unit) for c in out.columns
                               if scaled_column(str(c)) and is_int_column(df[c])})


def _cell(v) -> str:
    if v is None or v is pd.NA:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _fixed(v, size: float, decimals: int = 2) -> str:
    """A number divided by ``size`` with ``decimals`` decimals; anything else as it is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "" if isinstance(v, float) and math.isnan(v) else f"{v / size:.{decimals}f}"
    return _cell(v)


def decimals_for(values, size: float, least: int = 2, most: int = 5) -> int:
    """Decimals that show the smallest non-zero of ``values`` / ``size`` with two significant digits
    (``least`` to ``most``): a small time in a table whose unit suits its largest does not read 0.00."""
    small = min((abs(v) / size for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                 and math.isfinite(v) and v != 0), default=None)
    if small is None or small >= 1:
        return least
    return max(least, min(most, 1 - math.floor(math.log10(small))))


def _text_view(df: pd.DataFrame, unit: str) -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, cells and which columns are numbers, as tables and Markdown show them: counts in ``unit``
    (3 decimals), times in one human unit for the whole table."""
    view = apply_unit(df, unit)
    headers, columns, numeric = [], [], []
    # one unit for every time column of the table (est_time and est_time_fused read alike)
    seconds = [v for c in view.columns if is_time_column(str(c)) and pd.api.types.is_float_dtype(view[c].dtype)
               for v in view[c]]
    tu, size = time_unit(seconds)
    for orig, name in zip(df.columns, view.columns):
        values = list(view[name])
        name, col = str(name), df[orig]
        is_num = is_int_column(col) or pd.api.types.is_float_dtype(col.dtype)
        if is_time_column(name) and pd.api.types.is_float_dtype(col.dtype):
            headers.append(f"{name[:-2]}[{tu}]")
            decimals = decimals_for(values, size)  # (once per column: per cell it was quadratic in the rows)
            columns.append([_fixed(v, size, decimals) for v in values])
        elif name == "percent":
            headers.append(name)
            columns.append([_fixed(v, 1.0) for v in values])
        else:
            headers.append(name)
            columns.append([_cell(v) for v in values])
        numeric.append(is_num)
    cells = [list(r) for r in zip(*columns)] if columns else []
    return headers, cells, numeric


def _idle(values: list[str]) -> bool:
    return all(v.replace("0", "").replace(".", "").replace(",", "") == "" for v in values)


def fit_columns(headers: list[str], cells: list[list[str]], limit: int = TABLE_WIDTH) -> list[int]:
    """Indices of the columns to keep so that the table fits in ``limit`` characters: columns zero or empty
    everywhere go first (right to left), then the :data:`LESS_IMPORTANT`, then from the right; the first
    column always stays."""
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    keep = list(range(len(headers)))

    def width():
        return sum(widths[i] for i in keep) + 2 * (len(keep) - 1)

    base = [h.split("[")[0] for h in headers]

    def named(names):
        return [i for name in names for i in keep[1:] if base[i] in (name, name[:-2])]

    important = named(IMPORTANT)
    order = [i for i in reversed(keep[1:]) if _idle([r[i] for r in cells])]
    order += [i for i in named(LESS_IMPORTANT) if i not in order]
    order += [i for i in reversed(keep[1:]) if i not in order and i not in important]
    order += [i for i in reversed(important) if i not in order]
    for i in order:
        if width() <= limit:
            break
        keep.remove(i)
    return keep


def to_table(df: pd.DataFrame, unit: str = "raw", wide: bool = True) -> str:
    """An aligned, terminal-friendly table: text left, numbers right, thousands separated; narrower than
    :data:`TABLE_WIDTH` unless ``wide`` (a line under it names the columns left out)."""
    headers, cells, numeric = _text_view(df, unit)
    keep = list(range(len(headers))) if wide else fit_columns(headers, cells)
    hidden = [headers[i] for i in range(len(headers)) if i not in keep]
    headers, numeric = [headers[i] for i in keep], [numeric[i] for i in keep]
    cells = [[r[i] for i in keep] for r in cells]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(headers)]

    def line(values):
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    if hidden:
        plural = "s" if len(hidden) > 1 else ""
        out.append(f"({len(hidden)} more column{plural}: {', '.join(hidden)}; --wide shows them)")
    return "\n".join(out) + "\n"


def to_markdown(df: pd.DataFrame, unit: str = "raw") -> str:
    headers, cells, numeric = _text_view(df, unit)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in cells:
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def to_csv(df: pd.DataFrame, unit: str = "raw") -> str:
    """CSV: exact integers (raw), or the exact decimal in ``unit`` under ``name[unit]``; exact seconds; text
    that a spreadsheet would evaluate (``=...``) with a leading apostrophe (:mod:`mhlo_cost.files.outtext`)."""
    buf = io.StringIO()
    csv_safe_frame(apply_unit(df, unit, exact=True)).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def _jsonable(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    if v is pd.NA:
        return None
    return v


def rows_json(df: pd.DataFrame) -> list[dict]:
    """The rows as dicts of exact values (integers, seconds)."""
    cols = [str(c) for c in df.columns]
    return [{c: _jsonable(v) for c, v in zip(cols, row)} for row in df.itertuples(index=False, name=None)]


def to_json(payload: dict) -> str:
    """Strict JSON: a non-finite number is ``null``, with a note (:func:`mhlo_cost.files.outtext.json_text`)."""
    return json_text(payload)
