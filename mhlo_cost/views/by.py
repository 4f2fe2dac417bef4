"""One view per question (``report --by NAME``): each a function of a program's figures (:class:`.figures.Figures`,
which a study makes; never the study itself), the request and the rows kept (``keep``: positions, None for all;
``part``: their analysis) that returns one :class:`~.table.Table`.

:data:`VIEWS` is the one place a view is chosen (and the one place a new view goes); :func:`view` adds what
every view shares: the ``--block`` / ``--scope`` filter, the title, the program's counts.
"""
from __future__ import annotations

from functools import partial

from .frames import (comm_frame, keep_blocks, keep_ops, mark_overhead, op_list, select_rows, sub_roofline, subset,
                     timed_group, tree_frame, with_total)
from .table import Table, ViewRequest

UNIT_SIZE = {"K": "1e3", "M": "1e6", "G": "1e9", "T": "1e12"}


def summary_view(fig, req: ViewRequest, keep, part) -> Table:
    """The summary's (metric, value) pairs; no pandas unless a profile's estimate is asked for. Its page (the
    HTML renderer's) is the program's whole report, with the ``top`` (10) slowest ops of each block."""
    table = Table(None, pairs=fig.summary(keep, part))
    table.page = partial(report_page, fig, req.top or 10)
    return table


def report_page(fig, top: int, unit: str | None) -> str:
    from .html import figures_page

    return figures_page(fig, unit=unit, top=top)


def memory_view(fig, req, keep, part) -> Table:
    """Live bytes per op, in program order."""
    from ..roofline.memory import timeline_frame

    analysis = fig.analysis
    df = timeline_frame(analysis, fig.blocks, fig.fused_memory if keep is None else None)
    df["execution"] = fig.execution  # the model of the _fused columns (unfused: none)
    return Table(None, df if keep is None else df[df["index"].isin({analysis.rows[i].index for i in keep})])


def op_view(fig, req, keep, part) -> Table:
    """Every op occurrence (every kernel where the estimate fuses), or the ``top`` slowest."""
    rf, analysis = fig.roofline, fig.analysis
    if rf is None:
        return Table(None, op_list(part, req.top))
    top = req.top if keep is None else None
    df = rf.kernel_frame(top) if rf.fusion is not None else rf.op_frame(top)
    if keep is not None:  # the block's (or scopes') ops in program order; --top among them
        df = keep_ops(df, analysis, keep, req.top)
    df = mark_overhead(df, rf) if rf.fusion is None else df
    if rf.fusion is None and analysis.liveness is not None:
        pos = {r.index: i for i, r in enumerate(analysis.rows)}
        df["live_bytes"] = [analysis.memory.after[pos[int(i)]] for i in df["index"]]  # once the op is done
    return Table(None, df)


def block_view(fig, req, keep, part) -> Table:
    """One row per block (per block part), TOTAL last; the whole program's headline over it."""
    whole = fig.block_frame(req.parts)
    table = Table(None, keep_blocks(whole, req))
    if fig.phases is not None:  # the terminal's view: the phase columns, not the sums they add up to
        from ..analysis.blocks import phase_view

        table.text_frame = keep_blocks(phase_view(whole), req)
    if req.headline and not req.bare and keep is None and not req.scope:
        from .headline import headline

        line = headline(fig.summary())
        if line:
            table.meta["headline"] = line
    return table


def phase_table(fig, req, keep, part) -> Table:
    """A training step: forward, backward (dgrad, wgrad), recompute, optimizer."""
    from ..analysis.training import phase_report

    rf = fig.roofline
    if rf is None:
        df, lines, facts = phase_report(fig.analysis)
    else:  # op by op, and the fused (eager) execution's share of each row; the TOTAL row the summary's
        fused = None if rf.fusion is None else [f + t.comm_s for f, t in zip(rf.fusion.row_time, rf.times)]
        df, lines, facts = phase_report(fig.analysis, rf.times, fused, rf.totals())
        df["execution"] = rf.execution  # the model of the est_time_fused_s column (unfused: none)
    return Table(None, df, notes=list(lines), meta={"phases": facts})


def comm_view(fig, req, keep, part) -> Table:
    """Every collective, TOTAL last (the summary's times where the whole program is shown)."""
    rf = fig.roofline
    totals = rf.totals() if rf is not None and keep is None else None
    df = with_total(comm_frame(part, rf), "op", totals)
    if rf is not None:  # the model of the comm_exposed_fused_s column (unfused: none)
        df["execution"] = rf.execution
    return Table(None, df)


def tree_view(fig, req, keep, part) -> Table:
    """Scopes as an indented tree with subtotals and percent."""
    analysis = fig.analysis
    rows = analysis.memory.param_rows if analysis.liveness is not None else None
    params = None if rows is None else [rows.get(i, 0) for i in (keep or range(len(analysis.rows)))]
    return Table(None, tree_frame(part, req.depth, params))


def group_view(fig, req, keep, part) -> Table:
    """Summed per kind, scope (to a depth) or op name, TOTAL last."""
    key = "op" if req.by == "opname" else req.by
    df = part.group(key, req.depth)
    if fig.roofline is not None:
        df = timed_group(part, sub_roofline(fig.roofline, keep), key, req.depth, df)
    totals = fig.roofline.totals() if fig.roofline is not None and keep is None else None
    df = with_total(df.rename(columns={"op": "opname"}) if key == "op" else df, totals=totals)
    if fig.roofline is not None:  # the model of the est_time_fused column (unfused: none)
        df["execution"] = fig.roofline.execution
    return Table(None, df)


def _tasks_view(name: str, fig, req, keep, part) -> Table:
    """The task graph's views (:mod:`.tasks`: the critical path, the per-block overlap table)."""
    from . import tasks

    return getattr(tasks, name)(fig, req, keep, part)


#: --by NAME -> the view
VIEWS = {"summary": summary_view, "op": op_view, "opname": group_view, "kind": group_view, "scope": group_view,
         "tree": tree_view, "block": block_view, "comm": comm_view, "phase": phase_table, "memory": memory_view,
         "critical-path": partial(_tasks_view, "critical_path_view"), "overlap": partial(_tasks_view, "overlap_view")}


def view(fig, req: ViewRequest) -> Table:
    """The table that answers ``req`` about the figures ``fig`` (:class:`.figures.Figures`)."""
    from .table import meta

    analysis = fig.analysis
    keep = None if req.bare else select_rows(fig, req)
    table = VIEWS[req.by](fig, req, keep, subset(analysis, keep))
    table.title = None if req.bare else title(fig, req)
    table.meta = meta(analysis) | table.meta
    if table.summary is None:
        table.summary = analysis.summary
    return table


def title(fig, req: ViewRequest) -> str:
    analysis, rf = fig.analysis, fig.roofline
    text = f"{analysis.source} (entry @{analysis.entry}), by {req.by}" + (f":{req.depth}" if req.depth else "")
    if rf is not None:
        text += f", on {rf.hw.name}" + {"compiled": ", fused elementwise", "eager": ", eager",
                                        "inductor": ", inductor"}.get(rf.execution, "")
    for opt in ("block", "scope"):
        if getattr(req, opt):
            text += f", --{opt} {getattr(req, opt)}"
    if req.unit != "raw":
        text += f", FLOPs and bytes in {req.unit} ({UNIT_SIZE[req.unit]})"
    return text
