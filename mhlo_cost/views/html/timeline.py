"""The k-stream schedule of a task graph as a timeline (``report --by critical-path --format html``): a lane
per stream and one for the link, a bar per task from its start to its end, coloured by the resource that bounds
it, the critical path's tasks outlined; hover a bar for the task."""
from __future__ import annotations

from .svg import Scale, legend, open_svg, rect, text, tip, x_axis

#: Colours of a task's bound (its resource).
RESOURCE_COLOURS = {"compute": "#1f5fa8", "memory": "#e08a2e", "link": "#c0392b"}
WIDTH, LANE, LEFT, TOP = 1100, 26, 90, 30


def timeline_svg(graph, schedule, chain) -> str:
    """The SVG of ``schedule`` (:class:`mhlo_cost.roofline.tasks.Schedule`) of ``graph``; ``chain``: the
    critical path's tasks."""
    lanes = list(range(schedule.k)) + ([-1] if -1 in schedule.stream else [])
    row = {s: i for i, s in enumerate(lanes)}
    span = schedule.makespan_s or 1.0
    x = Scale(0.0, span * 1e3, LEFT, WIDTH - 20)
    height = TOP + LANE * len(lanes) + 70
    on_path = set(chain)
    out = [open_svg(WIDTH, height, f"the {schedule.k}-stream schedule")]
    for s, i in row.items():
        out.append(text(LEFT - 8, TOP + LANE * i + LANE * 0.65, "link" if s < 0 else f"stream {s}", "end", "tick"))
    for t in graph.tasks:
        i = t.id
        y = TOP + LANE * row[schedule.stream[i]] + 3
        x0, x1 = x(schedule.start[i] * 1e3), x(schedule.end[i] * 1e3)
        edge = ' stroke="#000" stroke-width="1"' if i in on_path else ""
        what = (f"{i} {t.name} ({t.block or '(top)'}, {t.phase or 'no phase'}): {t.time_s * 1e6:.4g} us alone, "
                f"{schedule.start[i] * 1e6:.4g} to {schedule.end[i] * 1e6:.4g} us")
        out.append(rect(x0, y, max(x1 - x0, 0.3), LANE - 6, RESOURCE_COLOURS.get(t.resource, "#9a9a9a"),
                        edge + tip(what)))
    bottom = TOP + LANE * len(lanes)
    out += x_axis(x, bottom, TOP, "time (ms)")
    out += legend([(k, c) for k, c in RESOURCE_COLOURS.items()] + [("critical path (outlined)", "#ffffff")],
                  LEFT, bottom + 52, WIDTH - LEFT)
    out.append("</svg>")
    return "".join(out)
