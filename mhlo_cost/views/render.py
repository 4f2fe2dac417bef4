"""One renderer per format, each taking any :class:`~.table.Table`: aligned text, CSV, JSON, Markdown, HTML.

:data:`RENDERERS` is the one place a format is chosen (and the one place a new format goes): a function of
``(table, unit, wide)``. Every renderer writes the same table, so every format carries the same figures: the
rows of ``frame`` (the summary's ``pairs``), exact in CSV and JSON, in ``unit`` and rounded in text.
"""
from __future__ import annotations

from .pairs import render_pairs
from .table import Table


def _text(table: Table, unit: str, wide: bool) -> str:
    if table.pairs is not None:
        return render_pairs(table.pairs, "table", unit, meta=table.meta, title=table.title)
    from .text import to_table

    text = (f"{table.title}\n" if table.title else "") + to_table(table.shown, unit, wide=wide)
    text = _under_title(text, table.meta.get("headline")) + "".join(f"{line}\n" for line in table.notes)
    return text + "".join(f"\n{heading}\n" + _text(t, unit, wide) for heading, t in table.appendix)


def _markdown(table: Table, unit: str, wide: bool) -> str:
    if table.pairs is not None:
        return render_pairs(table.pairs, "markdown", unit, meta=table.meta, title=table.title)
    from .text import to_markdown

    text = (f"### {table.title}\n\n" if table.title else "") + to_markdown(table.shown, unit)
    headline = table.meta.get("headline")
    text = _under_title(text, headline and f"\n**{headline}**") + "".join(f"- {line}\n" for line in table.notes)
    return text + "".join(f"\n**{heading}**\n\n" + _markdown(t, unit, wide) for heading, t in table.appendix)


def _under_title(text: str, line: str | None) -> str:
    if not line:
        return text
    head, rest = text.split("\n", 1)
    return f"{head}\n{line}\n{rest}"


def _csv(table: Table, unit: str, wide: bool) -> str:
    if table.pairs is not None:
        return render_pairs(table.pairs, "csv", unit, meta=table.meta, title=table.title)
    from .text import to_csv

    return to_csv(table.frame, unit)


def _json(table: Table, unit: str, wide: bool) -> str:
    """Exact values whatever ``unit`` says."""
    if table.pairs is not None:
        return render_pairs(table.pairs, "json", unit, meta=table.meta, title=table.title)
    from .text import rows_json, to_json

    payload = dict(table.meta)
    if table.summary is not None:
        payload["summary"] = {k: int(v) for k, v in table.summary.items()}
    payload["rows"] = rows_json(table.frame)
    payload.update(table.after)
    return to_json(payload)


def _html(table: Table, unit: str, wide: bool) -> str:
    """A page of the table; a table with a ``page`` (the summary view's: the program's whole report,
    :func:`mhlo_cost.views.html.figures_page`), that page."""
    if table.page is not None:
        return table.page(None if unit == "raw" else unit)
    from .html import table_page

    facts = [(k, str(v)) for k, v in table.meta.items() if k in ("source", "entry")]
    return table_page(table.frame, table.title or "mhlo-cost", facts=facts, unit=None if unit == "raw" else unit)


def _exported(fmt: str):
    """The renderer of a format only some tables have (``dot``, ``graph``: the task graph's export)."""
    def renderer(table: Table, unit: str, wide: bool) -> str:
        if fmt not in table.exports:
            raise ValueError(f"this view has no {fmt} export")
        return table.exports[fmt]()

    return renderer


#: format -> renderer(table, unit, wide)
RENDERERS = {"table": _text, "csv": _csv, "json": _json, "markdown": _markdown, "html": _html,
             "dot": _exported("dot"), "graph": _exported("graph")}


def render(table: Table, fmt: str, unit: str = "raw", wide: bool = False) -> str:
    """``table`` in the format ``fmt`` (a key of :data:`RENDERERS`); several programs' (``parts``) as one."""
    if table.parts is not None:
        from .many import stacked

        table = stacked(table, fmt, unit)
    return RENDERERS[fmt](table, unit, wide)


def render_frame(df, fmt: str, unit: str = "raw", *, summary: dict | None = None, meta: dict | None = None,
                 title: str | None = None, wide: bool = False) -> str:
    """A frame that is a table of its own (a command's other than ``report``'s views) in ``fmt``."""
    return render(Table(title, frame=df, meta=dict(meta or {}), summary=summary), fmt, unit, wide)
