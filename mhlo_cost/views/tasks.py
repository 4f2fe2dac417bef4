"""The task graph's views (``report --by critical-path``, ``--by overlap``) and its export (DOT, a JSON
node/edge list), from :mod:`mhlo_cost.roofline.tasks`.

Both views print, under the table, the bounds and the training step's task-based scenarios, each with what it
assumes (:func:`bound_notes`). ``-o NAME.dot`` / ``-o NAME.json`` with either view writes the graph itself
(:func:`graph_dot`, :func:`graph_json`) through the one writer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

#: The streams of the schedule the views print (the issue's figure: two streams).
STREAMS = 2


@dataclass
class Tasks:
    """The figures the views read, made once per Figures: the graph, its critical path, the k-stream
    schedule and (a training step) the scenarios."""

    fig: object

    @cached_property
    def graph(self):
        from ..analysis.blocks import row_labels
        from ..roofline.tasks import build

        return build(self.fig.roofline, row_labels(self.fig.blocks))

    @cached_property
    def path(self):
        from ..roofline.tasks import critical_path

        return critical_path(self.graph)

    @cached_property
    def schedule(self):
        from ..roofline.tasks import list_schedule

        return list_schedule(self.graph, STREAMS)

    @cached_property
    def scenarios(self) -> list:
        from ..roofline.tasks.scenarios import scenarios, token_wise

        g = self.graph
        if not any(t.phase == "optimizer" for t in g.tasks):
            return []
        return scenarios(g, STREAMS, token_wise(self.fig.analysis), chunks=2, own=self.schedule.makespan_s)


def tasks_of(fig) -> Tasks:
    """The :class:`Tasks` of ``fig``, made on first use and kept on it."""
    got = fig.__dict__.get("_tasks")
    if got is None:
        if fig.roofline is None:
            raise ValueError("the task graph needs a profile: a task's time is its estimate (--hardware NAME)")
        got = fig.__dict__["_tasks"] = Tasks(fig)
    return got


def bound_notes(t: Tasks) -> list[str]:
    """The bounds and the scenarios, one line each, with what each figure means."""
    g, ex = t.graph, t.graph.execution
    lines = [
        f"execution {ex}: {len(g.tasks)} task(s), {len(g.edges)} dependency edge(s)",
        f"serial {g.serial_s:.6g} s: every task one after another (the summary's time, fork-join)",
        f"critical path {t.path.length_s:.6g} s: unlimited streams, nothing shared (no schedule is shorter)",
        f"{STREAMS}-stream {t.schedule.makespan_s:.6g} s: a list schedule on {STREAMS} streams sharing the "
        "chip's compute and bandwidth (collectives on the link beside them)",
    ]
    if g.barriers:
        lines.append(f"{g.barriers} task(s) wait for every task before them (a source the walk could not follow)")
    if g.unversioned:
        lines.append(f"{g.unversioned} reader(s) of a weight's old version come after its update: not ordered "
                     "before it")
    for s in t.scenarios:
        figure = "-" if s.step_s is None else f"{s.step_s:.6g} s on {STREAMS} streams"
        lines.append(f"scenario {s.name}: {figure} ({s.note})")
    return lines


def critical_path_view(fig, req, keep, part):
    """The chain of tasks that sets the step's time (its earliest starts), bounds and scenarios under it."""
    import pandas as pd

    from .table import Table

    t = tasks_of(fig)
    g, p = t.graph, t.path
    rows = []
    for n, i in enumerate(p.chain):
        task, b = g.tasks[i], p.binding[i]
        rows.append({"step": n, "task": i, "op": task.name, "block": task.block, "phase": task.phase,
                     "resource": task.resource, "start_s": p.start[i], "time_s": task.time_s,
                     "end_s": p.start[i] + task.time_s, "waits_for": "" if b is None else f"{b} {g.tasks[b].name}",
                     "ops": len(task.rows)})
    table = Table(None, pd.DataFrame(rows), notes=bound_notes(t))
    table.exports = _exports(t)
    table.page = lambda unit: _page(t, table, unit)
    return table


def _page(t: Tasks, table, unit: str | None) -> str:
    """The HTML page: the chain's table, the k-stream schedule's timeline and the bounds."""
    from .html import table_page
    from .html.fmt import esc
    from .html.timeline import timeline_svg

    notes = "".join(f"<p>{esc(line)}</p>" for line in table.notes)
    facts = [(k, str(v)) for k, v in table.meta.items() if k in ("source", "entry")]
    return table_page(table.frame, table.title or "mhlo-cost", facts=facts, unit=unit, sections=[
        ("timeline", f"The {STREAMS}-stream schedule", timeline_svg(t.graph, t.schedule, t.path.chain)),
        ("bounds", "Bounds and scenarios", notes)])


def overlap_view(fig, req, keep, part):
    """Per block: its tasks' serial time, their time on the critical path, the least slack, the window of
    the k-stream schedule, and the block whose task sets its first critical task's start."""
    import pandas as pd

    from .table import Table

    t = tasks_of(fig)
    g, p, s = t.graph, t.path, t.schedule
    on_path, slack = set(p.chain), p.slack
    blocks: dict = {}
    for task in g.tasks:
        blocks.setdefault(task.block or "(top)", []).append(task.id)
    rows = []
    for name, ids in blocks.items():
        crit = [i for i in ids if i in on_path]
        first = min(crit) if crit else None
        b = p.binding[first] if first is not None else None
        rows.append({"block": name, "tasks": len(ids), "serial_s": sum(g.tasks[i].time_s for i in ids),
                     "critical_s": sum(g.tasks[i].time_s for i in crit), "slack_min_s": min(slack[i] for i in ids),
                     f"start_{STREAMS}s_s": min(s.start[i] for i in ids),
                     f"end_{STREAMS}s_s": max(s.end[i] for i in ids),
                     "set_by": "" if b is None else (g.tasks[b].block or "(top)")})
    table = Table(None, pd.DataFrame(rows), notes=bound_notes(t))
    table.exports = _exports(t)
    return table


def _exports(t: Tasks) -> dict:
    return {"dot": lambda: graph_dot(t), "graph": lambda: graph_json(t)}


def graph_json(t: Tasks) -> str:
    """The graph as JSON: ``nodes`` (id, op, rows: positions in the analysis' rows, block, phase, resource,
    the times, earliest start, slack, on the critical path) and ``edges`` ([from, to]), with the bounds."""
    g, p, s = t.graph, t.path, t.schedule
    on_path, slack = set(p.chain), p.slack
    nodes = [{"id": x.id, "op": x.name, "rows": list(x.rows), "block": x.block, "phase": x.phase,
              "resource": x.resource, "time_s": x.time_s, "compute_s": x.compute_s, "memory_s": x.memory_s,
              "overhead_s": x.overhead_s, "comm_s": x.comm_s, "start_s": p.start[x.id], "slack_s": slack[x.id],
              "critical": x.id in on_path, f"start_{STREAMS}s_s": s.start[x.id], f"stream_{STREAMS}s": s.stream[x.id]}
             for x in g.tasks]
    doc = {"tool": "mhlo-cost", "execution": g.execution, "serial_s": g.serial_s, "critical_path_s": p.length_s,
           f"streams_{STREAMS}_s": s.makespan_s, "nodes": nodes, "edges": [list(e) for e in g.edges]}
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def graph_dot(t: Tasks) -> str:
    """The graph in Graphviz's DOT: a node per task (its op and time; the critical path in red)."""
    g, p = t.graph, t.path
    on_path = set(p.chain)
    out = ["digraph tasks {", "  node [shape=box, fontsize=10];"]
    for x in g.tasks:
        label = f"{x.id} {x.name}\\n{x.block}\\n{x.time_s * 1e6:.3g} us".replace('"', "'")
        red = ", color=red" if x.id in on_path else ""
        out.append(f'  n{x.id} [label="{label}"{red}];')
    for a, b in g.edges:
        red = " [color=red]" if a in on_path and b in on_path and p.binding[b] == a else ""
        out.append(f"  n{a} -> n{b}{red};")
    out.append("}")
    return "\n".join(out) + "\n"
