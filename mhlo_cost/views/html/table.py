"""A table the page can sort, filter and total: HTML written here, behaviour in ``assets/report.js``.

Each numeric cell carries its exact value in ``data-v`` (see :mod:`.fmt`) and shows it rounded; the header
names the unit. Rows whose first cell is ``TOTAL`` go to the footer, where sorting leaves them; a second
footer row, hidden until the filter hides a row, sums the rows still shown.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from .fmt import Column, column, esc, exact

TOTAL = "TOTAL"


def columns_of(df: pd.DataFrame, unit: str | None = None) -> list[Column]:
    """The display of every column of ``df`` (units chosen from the rows other than TOTAL)."""
    first = df.columns[0] if len(df.columns) else None
    body = df[df[first] != TOTAL] if first is not None and len(df) else df
    cols = [column(str(c), df[c], unit, body[c]) for c in df.columns]
    times = [c for c in cols if c.family == "time" and c.numeric]
    if len(times) > 1:  # one unit for every time column: est_time and est_time_fused read alike
        top = max(times, key=lambda c: c.div)
        cols = [replace(c, unit=top.unit, div=top.div) if c in times else c for c in cols]
    return cols


def hidden_by_default(df: pd.DataFrame, cols: list[Column]) -> set[str]:
    """Columns the page hides until asked (its "columns" menu shows them): numbers that are zero in every
    row, and the helper sums behind ``bound`` (``compute_bound*_s``)."""
    out = set()
    for c in cols:
        if not c.numeric:
            continue
        zero = all(exact(v) in ("", "0", "0.0") for v in df[c.name])
        if zero or (c.name.startswith("compute_bound") and c.family == "time"):
            out.add(c.name)
    return out


def _head(cols: list[Column], hidden: set[str] = frozenset()) -> str:
    cells = []
    for i, c in enumerate(cols):
        kind = "num" if c.numeric else "text"
        attrs = f' data-col="{i}" data-type="{kind}"' + (' data-hide="1"' if c.name in hidden else "")
        if c.numeric:
            attrs += f' data-fam="{c.family}" data-div="{exact(c.div)}" data-dec="{c.decimals}"'
        unit = f'<span class="unit">{esc(c.unit)}</span>' if c.unit else ""
        name = esc(c.name).replace("_", "_<wbr>")  # long names may break after an underscore
        cells.append(f'<th{attrs} title="sort by {esc(c.name)}"><span class="name">{name}</span>{unit}</th>')
    return "<thead><tr>" + "".join(cells) + "</tr></thead>"


def _cell(v, c: Column) -> str:
    text = exact(v)
    if not c.numeric:
        return f'<td data-v="{esc(text)}">{esc(text)}</td>'
    tip = c.tip(v)
    tip_attr = f' title="{esc(tip)}"' if tip else ""
    return f'<td class="n" data-v="{esc(text)}"{tip_attr}>{esc(c.cell(v))}</td>'


def _row(values, cols: list[Column], attrs: str = "") -> str:
    return f"<tr{attrs}>" + "".join(_cell(v, c) for v, c in zip(values, cols)) + "</tr>"


def table_html(df: pd.DataFrame, table_id: str, *, unit: str | None = None, caption: str = "",
               row_keys: list[str] | None = None, filter_hint: str = "filter rows") -> str:
    """``df`` as a sortable, filterable table with its TOTAL row (if any) in the footer.

    ``row_keys`` (one per non-TOTAL row) names each row's details template (``<template
    data-key=...>``), which a click on the row opens beneath it.
    """
    cols = columns_of(df, unit)
    first = df.columns[0] if len(df.columns) else None
    body, foot = [], []
    k = 0
    for row in df.itertuples(index=False, name=None):
        if first is not None and row[0] == TOTAL:
            foot.append(_row(row, cols, ' class="total"'))
            continue
        attrs = ""
        if row_keys is not None:
            attrs = f' data-key="{esc(row_keys[k])}" class="has-details" tabindex="0"'
        body.append(_row(row, cols, attrs))
        k += 1
    shown = "<tr class=\"shown\" hidden>" + "".join(
        '<td class="n"></td>' if c.numeric else "<td></td>" for c in cols) + "</tr>"
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    tools = (f'<div class="tools"><input type="search" class="filter" data-for="{esc(table_id)}" '
             f'placeholder="{esc(filter_hint)}" aria-label="{esc(filter_hint)}">'
             f'<span class="count" data-for="{esc(table_id)}"></span>'
             f'<details class="cols" data-for="{esc(table_id)}"><summary>columns</summary><div></div></details>'
             f'<button type="button" class="csv" data-for="{esc(table_id)}" '
             f'title="the exact values of the rows shown, as CSV">CSV</button></div>')
    hidden = hidden_by_default(df, cols)
    return (tools + f'<div class="scroll"><table class="data" id="{esc(table_id)}">{cap}' + _head(cols, hidden)
            + "<tbody>" + "".join(body) + "</tbody><tfoot>" + shown + "".join(foot) + "</tfoot></table></div>")


def plain_table(df: pd.DataFrame, *, unit: str | None = None, cls: str = "mini") -> str:
    """A small static table (block details): units in headers, exact values on hover, no tools."""
    return rows_table(columns_of(df, unit), list(df.itertuples(index=False, name=None)), cls)


def rows_table(cols: list[Column], rows: list[tuple], cls: str = "mini") -> str:
    """:func:`plain_table` of rows given as tuples, shown as ``cols`` say (units chosen beforehand, e.g. for
    every block at once so that blocks read alike)."""
    head = "<thead><tr>" + "".join(
        f'<th>{esc(c.name)}' + (f'<span class="unit">{esc(c.unit)}</span>' if c.unit else "") + "</th>"
        for c in cols)
    return (f'<table class="{cls}">{head}</tr></thead><tbody>' + "".join(_row(r, cols) for r in rows)
            + "</tbody></table>")
