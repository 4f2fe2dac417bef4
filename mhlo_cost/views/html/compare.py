"""The HTML page of one program's blocks across chips (``report --hardware a,b,c --format html``): the table,
then a chart per block, one bar per chip (its time, its bound and its ratio to the first chip), in the page's
own SVG (:mod:`.svg`)."""
from __future__ import annotations

import math

from .build import table_page
from .fmt import esc, human_time
from .svg import KIND_COLOURS, Scale, open_svg, rect, text, tip

W = 720
#: A bar's colour by its bound.
BOUND_COLOURS = {"compute": KIND_COLOURS["dot"], "memory": KIND_COLOURS["elementwise"],
                 "overhead": KIND_COLOURS["data"], "comm": KIND_COLOURS["collective"], "free": KIND_COLOURS["free"]}


def chip_bars(block: str, bars: list[tuple[str, float, str, float]]) -> str:
    """One block's chart: per chip (name, time in s, bound, ratio to the first chip), in the table's order."""
    top_t = max((t for _, t, _, _ in bars), default=0.0)
    if top_t <= 0:
        return ""
    row_h, left, right = 24, 150, 230
    xs = Scale(0.0, top_t, left, W - right)
    out = [open_svg(W, 16 + row_h * len(bars), f"{block} across chips", "chart share")]
    for i, (chip, t, bound, ratio) in enumerate(bars):
        y = 8 + i * row_h
        shown = f"{human_time(t)}  {bound}" + (f"  x{ratio:.3g}" if math.isfinite(ratio) else "")  # (no time: no ratio)
        out.append(f'<g{tip(f"{block} on {chip}: {shown}")}>')
        out.append(rect(left, y + 3, xs(t) - left, row_h - 7, BOUND_COLOURS.get(bound, "#9a9a9a")))
        out.append(text(left - 8, y + row_h / 2 + 4, chip, "end", "label"))
        out.append(text(xs(t) + 6, y + row_h / 2 + 4, shown, "start", "value"))
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def compare_page(table, unit: str | None = None) -> str:
    """The page of :func:`mhlo_cost.studies.whatif.compare_table`'s table: the rows, then one chart per block."""
    df, chips = table.frame, table.meta["hardware"]
    charts = []
    for i, block in enumerate(df["block"]):
        bars = [(c, float(df[f"{c}_time_s"][i]), str(df[f"{c}_bound"][i]), float(df[f"{c}_ratio"][i]))
                for c in chips]
        svg = chip_bars(str(block), bars)
        if svg:
            charts.append(f"<h3>{esc(str(block))}</h3>{svg}")
    facts = [(k, str(table.meta[k])) for k in ("source", "entry") if k in table.meta]
    note = "".join(f"<p class=\"note\">{esc(n)}</p>" for n in table.notes)
    return table_page(df, table.title or "mhlo-cost", facts=facts, unit=unit,
                      sections=[("chips", "Blocks across chips", note + "".join(charts))])
