"""One self-contained HTML page per analysis: ``mhlo-cost report FILE --format html -o report.html``.

* :mod:`.build`: :func:`report_page` (:func:`figures_page`: a program's figures') (header, per-block chart and
  table with details, roofline, shares, memory, summary) and :func:`table_page` (any one tidy table, e.g. a sweep);
* :mod:`.table`: the sortable, filterable table with exact values; :mod:`.fmt`: units and rounding;
* :mod:`.charts`, :mod:`.roofline_chart`, :mod:`.svg`: the charts, as plain SVG written here;
* :mod:`.details`: what a click on a block opens; :mod:`.page`: the document, with
  ``assets/report.css`` and ``assets/report.js`` inline.

The page loads nothing from anywhere (its Content-Security-Policy forbids it), and the same input gives
the same bytes.
"""
from .build import figures_page, report_page, table_page

__all__ = ["figures_page", "report_page", "table_page"]
