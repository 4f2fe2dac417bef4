"""The summary view, ``metric, value`` pairs, in every format without pandas (``mhlo-cost report``'s
default view starts faster for it): the same text as :func:`mhlo_cost.views.render.render_frame` gives a two-column
frame."""
from __future__ import annotations

import csv
import io
import math

from ..outtext import csv_cell, json_text
from ..units import exact_scale, is_time_column, scale, scaled_column, time_unit, unit_name


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
    return str(v)


def _json(v):
    if hasattr(v, "item"):  # numpy scalars
        v = v.item()
    return None if isinstance(v, float) and math.isnan(v) else v


def render_pairs(pairs: list[tuple[str, object]], fmt: str, unit: str, *, meta: dict, title: str) -> str:
    """The summary (:func:`mhlo_cost.figures.summary_pairs`) as a table, CSV, JSON (exact values, whatever
    ``unit``) or Markdown: the same figures in each; the headline first in a table, Markdown and JSON."""
    from ..headline import headline

    line = headline(pairs)
    if fmt == "json":
        payload = dict(meta)
        payload["headline"] = line
        payload["summary"] = {m: _json(v) for m, v in pairs}
        payload["rows"] = [{"metric": m, "value": _json(v)} for m, v in pairs]
        return json_text(payload)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["metric", "value"])
        w.writerows([(csv_cell(m), "" if v is None else csv_cell(v)) for m, v in in_unit(pairs, unit, exact=True)])
        return buf.getvalue()
    shown = [(m, _cell(v)) for m, v in in_unit(pairs, unit)]
    numeric = all(isinstance(v, int) and not isinstance(v, bool) for _, v in pairs) and unit == "raw"
    if fmt == "markdown":
        lines = [f"### {title}", "", f"**{line}**", "", "| metric | value |",
                 f"|---|{'---:' if numeric else '---'}|"]
        lines += [f"| {m} | {v.replace('|', chr(92) + '|')} |" for m, v in shown]
        return "\n".join(lines) + "\n"
    w0 = max([len("metric")] + [len(m) for m, _ in shown])
    w1 = max([len("value")] + [len(v) for _, v in shown])
    rows = [f"{m.ljust(w0)}  {v.rjust(w1) if numeric else v.ljust(w1)}".rstrip() for m, v in shown]
    return "\n".join([title, line, "", f"{'metric'.ljust(w0)}  {'value'.rjust(w1) if numeric else 'value'}".rstrip(),
                      f"{'-' * w0}  {'-' * w1}", *rows]) + "\n"
