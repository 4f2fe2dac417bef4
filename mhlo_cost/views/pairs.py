"""The summary view, ``metric, value`` pairs, in every format without pandas (``mhlo-cost report``'s
default view starts faster for it): the same text as :func:`mhlo_cost.views.render.render_frame` gives a two-column
frame. A pair made by :func:`heading` starts a section (``mhlo-cost serve``'s KV cache, memory, time, blocks):
a heading line in the text and Markdown, a ``section`` column in CSV and key in JSON's rows."""
from __future__ import annotations

import csv
import io
import math

from ..files.outtext import csv_cell, json_text
from .units import exact_scale, is_time_column, scale, scaled_column, time_unit, unit_name


class Heading:
    """The value of a pair that heads a section: the pairs after it, up to the next heading, are its figures."""

    def __repr__(self) -> str:
        return "HEADING"


HEADING = Heading()


def heading(title: str) -> tuple[str, Heading]:
    """The pair that starts the section ``title``."""
    return (title, HEADING)


def sectioned(pairs: list[tuple[str, object]]) -> list[tuple[str | None, str, object]]:
    """``(section, metric, value)`` of each figure of ``pairs`` (section None before the first heading)."""
    out, current = [], None
    for m, v in pairs:
        if v is HEADING:
            current = m
        else:
            out.append((current, m, v))
    return out


def in_unit(pairs: list[tuple[str, object]], unit: str, exact: bool = False) -> list[tuple[str, object]]:
    """FLOP and byte counts in ``unit`` (the metric renamed: ``gemm_flops[T]``; ``exact``: every digit, for
    CSV) and, unless ``exact``, seconds in a human unit (``79.99 us``); other values as they are."""
    out = []
    for m, v in pairs:
        if unit != "raw" and scaled_column(m) and isinstance(v, int) and not isinstance(v, bool):
            out.append((unit_name(m, unit), (exact_scale if exact else scale)(v, unit)))
        elif not exact and is_time_column(m) and isinstance(v, float) and math.isfinite(v):
            tu, size = time_unit([v])
            out.append((m, f"{v / size:.2f} {tu}"))
        else:
            out.append((m, v))
    return out


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):  # a list of counts: "2 x 16,384" (each distinct value, how often)
        seen = {x: sum(1 for y in v if y == x) for x in v}
        return "; ".join(_cell(x) if n == 1 else f"{n} x {_cell(x)}" for x, n in seen.items())
    return str(v)


def _json(v):
    if hasattr(v, "item"):  # numpy scalars
        v = v.item()
    return None if isinstance(v, float) and math.isnan(v) else v


def render_pairs(pairs: list[tuple[str, object]], fmt: str, unit: str, *, meta: dict, title: str) -> str:
    """The summary (:func:`mhlo_cost.views.figures.summary_pairs`) as a table, CSV, JSON (exact values, whatever
    ``unit``) or Markdown: the same figures in each; the headline first in a table, Markdown and JSON (the
    program's, or ``meta["headline"]`` where a view says its own). Sections (:func:`heading`) where the pairs
    have them."""
    from .headline import headline

    rows = sectioned(pairs)
    split = len(rows) < len(pairs)
    figures = [(m, v) for _, m, v in rows]
    line = meta.get("headline") or headline(figures)
    if fmt == "json":
        payload = dict(meta)
        payload["headline"] = line
        payload["summary"] = {m: _json(v) for m, v in figures}
        payload["rows"] = [({"section": s} if split else {}) | {"metric": m, "value": _json(v)} for s, m, v in rows]
        return json_text(payload)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow((["section"] if split else []) + ["metric", "value"])
        w.writerows([([csv_cell(s or "")] if split else []) + [csv_cell(m), "" if v is None else csv_cell(v)]
                     for s, (m, v) in zip([s for s, _, _ in rows], in_unit(figures, unit, exact=True))])
        return buf.getvalue()
    shown = _shown(rows, in_unit(figures, unit), "" if fmt == "markdown" else "  ")
    numeric = all(isinstance(v, int) and not isinstance(v, bool) for _, v in figures) and unit == "raw"
    if fmt == "markdown":
        lines = [f"### {title}", "", f"**{line}**", "", "| metric | value |",
                 f"|---|{'---:' if numeric else '---'}|"]
        lines += [f"| {m} | {v.replace('|', chr(92) + '|')} |" if v is not None else f"| **{m}** | |"
                  for m, v in shown]
        return "\n".join(lines) + "\n"
    w0 = max([len("metric")] + [len(m) for m, v in shown if v is not None])
    w1 = max([len("value")] + [len(v) for _, v in shown if v is not None])
    body = [m if v is None else f"{m.ljust(w0)}  {v.rjust(w1) if numeric else v.ljust(w1)}".rstrip() for m, v in shown]
    return "\n".join([title, line, "", f"{'metric'.ljust(w0)}  {'value'.rjust(w1) if numeric else 'value'}".rstrip(),
                      f"{'-' * w0}  {'-' * w1}", *body]) + "\n"


def _shown(rows: list, pairs: list, indent: str) -> list[tuple[str, str | None]]:
    """The lines of a table or Markdown: (metric, cell); a section's heading as (title, None) before its
    figures, which are ``indent``-ed."""
    out, current = [], None
    for (s, _, _), (m, v) in zip(rows, pairs):
        if s != current:
            current = s
            out.append((s, None))
        out.append(((m if s is None else indent + m), _cell(v)))
    return out
