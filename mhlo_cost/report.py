"""Views of an analysis: aligned tables, CSV, JSON and Markdown, in exact integers or display units.

Counts stay exact Python integers until this module turns them into text; ``--unit`` only changes how
they are written (K, M, G, T are decimal: 1e3, 1e6, 1e9, 1e12).
"""
from __future__ import annotations

import io
import json
import math

import pandas as pd

UNITS = {"raw": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}

#: Columns that hold counts (FLOPs, bytes, ops); the unit applies to the FLOP and byte ones.
SCALED = {
    "gemm_flops", "conv_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written", "comm_bytes",
    "flops", "total_flops", "baseline", "now", "delta",
}


def _is_int_column(s: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(s.dtype) or (
        s.dtype == object and len(s) > 0 and all(isinstance(v, int) and not isinstance(v, bool) for v in s))


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


def scaled_column(name: str) -> bool:
    """Whether a column holds FLOPs or bytes (``--unit`` applies): the named ones and any ``*_flops``,
    ``*_bytes`` (the per-phase columns of a training step: ``fwd_gemm_flops``, ...)."""
    return name in SCALED or name.endswith(("_flops", "_bytes"))


def apply_unit(df: pd.DataFrame, unit: str) -> pd.DataFrame:
    if unit == "raw":
        return df
    out = df.copy()
    for c in out.columns:
        if scaled_column(str(c)) and _is_int_column(out[c]):
            out[c] = [scale(v, unit) for v in out[c]]
    return out


def _cell(v) -> str:
    if v is None or v is pd.NA:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.6g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def to_table(df: pd.DataFrame, unit: str = "raw") -> str:
    """An aligned, terminal-friendly table: text left, numbers right, thousands separated."""
    view = apply_unit(df, unit)
    cols = list(view.columns)
    cells = [[_cell(v) for v in row] for row in view.itertuples(index=False, name=None)]
    numeric = [_is_int_column(df[c]) or pd.api.types.is_float_dtype(df[c].dtype) for c in cols]
    widths = [max([len(str(c))] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]

    def line(values):
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line([str(c) for c in cols]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out) + "\n"


def to_markdown(df: pd.DataFrame, unit: str = "raw") -> str:
    view = apply_unit(df, unit)
    cols = [str(c) for c in view.columns]
    numeric = [_is_int_column(df[c]) or pd.api.types.is_float_dtype(df[c].dtype) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in view.itertuples(index=False, name=None):
        lines.append("| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def to_csv(df: pd.DataFrame, unit: str = "raw") -> str:
    buf = io.StringIO()
    apply_unit(df, unit).to_csv(buf, index=False, lineterminator="\n")
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


def rows_json(df: pd.DataFrame, unit: str = "raw") -> list[dict]:
    view = apply_unit(df, unit)
    cols = [str(c) for c in view.columns]
    return [{c: _jsonable(v) for c, v in zip(cols, row)} for row in view.itertuples(index=False, name=None)]


def to_json(payload: dict) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


def summary_frame(summary: dict[str, int]) -> pd.DataFrame:
    from .analysis import int_series

    keys = list(summary)
    return pd.DataFrame({"metric": keys, "value": int_series([summary[k] for k in keys])})


def render(df: pd.DataFrame, fmt: str, unit: str, *, summary: dict | None = None, meta: dict | None = None,
           title: str | None = None) -> str:
    """Render one grouping in ``fmt`` (table, csv, json, markdown, html: a page of the table)."""
    if fmt == "html":
        from .html import table_page

        facts = [(k, str(v)) for k, v in (meta or {}).items() if k in ("source", "entry")]
        return table_page(df, title or "mhlo-cost", facts=facts, unit=None if unit == "raw" else unit)
    if fmt == "csv":
        return to_csv(df, unit)
    if fmt == "json":
        payload = dict(meta or {})
        payload["unit"] = unit
        if summary is not None:
            payload["summary"] = {k: int(v) for k, v in summary.items()}
        payload["rows"] = rows_json(df, unit)
        return to_json(payload)
    if fmt == "markdown":
        head = f"### {title}\n\n" if title else ""
        return head + to_markdown(df, unit)
    head = f"{title}\n" if title else ""
    return head + to_table(df, unit)
