"""``mhlo-cost report``: counts, grouped, with the roofline estimate when a profile is given."""
from __future__ import annotations

import argparse

from .common import (EXIT_OK, Progress, UserError, add_common, add_estimate, add_output, block_frame, find_blocks,
                     fused_memory, hardware_from_options, load_analysis, make_roofline, meta, write_output)

def _parse_by(value: str) -> tuple[str, int | None]:
    by, _, depth = value.partition(":")
    choices = ("summary", "op", "kind", "scope", "block", "comm", "phase", "memory")
    if by not in choices:
        raise argparse.ArgumentTypeError(f"--by must be one of {', '.join(choices)} (scope:DEPTH), got {value!r}")
    if depth:
        if by != "scope" or not depth.isdigit() or int(depth) < 1:
            raise argparse.ArgumentTypeError(f"only scope takes a depth, a positive integer: got {value!r}")
        return by, int(depth)
    return by, None



def _timed_group(analysis, rf, by: str, depth, df):
    """est_time_s (and est_time_fused_s) per group of a --by kind/op/scope table."""
    keys = analysis.keys(by, depth)
    label = df.columns[0]
    acc: dict = {}
    fused: dict = {}
    for r, k, t in zip(analysis.rows, keys, rf.times):
        acc[k] = acc.get(k, 0.0) + t.time_s
        if rf.fusion is not None:
            fused[k] = fused.get(k, 0.0) + rf.fusion.row_time[r.index] + t.comm_s
    df = df.copy()
    df["est_time_s"] = [acc.get(k, 0.0) for k in df[label]]
    if rf.fusion is not None:
        df["est_time_fused_s"] = [fused.get(k, 0.0) for k in df[label]]
    return df


def _comm_frame(analysis):
    import pandas as pd

    from ..analysis import int_series

    rows = [r for r in analysis.rows if r.kind == "collective"]
    return pd.DataFrame({
        "op": [r.comm_kind for r in rows],
        "scope": [r.scope for r in rows],
        "group_size": int_series([r.group_size for r in rows]),
        "num_groups": int_series([r.num_groups for r in rows]),
        "shape": [r.shape for r in rows],
        "dtype": [r.dtype for r in rows],
        "multiplicity": int_series([r.multiplicity for r in rows]),
        "comm_bytes": int_series([r.comm_bytes for r in rows]),
        "location": [r.location for r in rows],
    })


def _memory_view(analysis, args, rf, by: str, fused, hw):
    """The summary (counts, estimate, then where the memory peak is and whether it fits) or the live-bytes
    timeline (``--by memory``)."""
    import pandas as pd

    from ..memory.views import summary_lines, timeline_frame
    from ..report import summary_frame

    blocks = find_blocks(analysis, args, quiet=by == "summary")
    if by == "memory":
        return timeline_frame(analysis, blocks, fused)
    df = rf.summary_frame(args.steps or 1, counts=analysis.summary) if rf is not None else summary_frame(
        analysis.summary)
    lines = summary_lines(analysis, blocks, fused, hw)
    extra = pd.DataFrame({"metric": [k for k, _ in lines], "value": pd.Series([v for _, v in lines], dtype=object)})
    return pd.concat([df.astype({"value": object}), extra], ignore_index=True)


def cmd_report(args) -> int:
    from ..report import render

    hw = hardware_from_options(args)
    by, depth = args.by
    if args.top is not None and by != "op" and args.format != "html":
        raise UserError("--top goes with --by op (or --format html: top ops per block)")
    if args.steps is not None and by != "summary":
        raise UserError("--steps goes with --by summary (a run's total time and utilisation)")
    progress = Progress(enabled=not args.quiet)
    analysis = load_analysis(args.file, args, progress, dataflow=hw is not None or args.fuse != "none",
                             training={"block": True, "phase": "always"}.get(by, False))
    rf = make_roofline(analysis, hw, args, progress) if hw is not None else None
    if args.format == "html" and by == "summary":  # the whole report: one page
        write_output(_html_report(analysis, rf, args, progress), args.output)
        progress.done()
        return EXIT_OK
    progress.stage("grouping")
    fused = fused_memory(analysis, args, rf)
    if by in ("summary", "memory"):
        df = _memory_view(analysis, args, rf, by, fused, hw)
    elif rf is not None and by == "op":
        if rf.fusion is not None:
            df = rf.kernel_frame(args.top)
        else:
            df = rf.op_frame(args.top)
            df["live_bytes"] = [analysis.memory.after[i] for i in df["index"]]  # once the op is done
    elif by == "block":
        df = block_frame(analysis, args, roofline=rf, fused_memory=fused)
    elif by == "phase":  # a training step: forward, backward (dgrad, wgrad), recompute, optimizer
        from ..training.analysis import phase_report

        df, lines, facts = phase_report(analysis, rf.times if rf is not None else None)
    elif by == "comm":
        df = _comm_frame(analysis)
        if rf is not None:  # where each collective runs, how, how long, and how much of it compute cannot hide
            idx = [r.index for r in analysis.rows if r.kind == "collective"]
            details = [rf.comm_detail(i) for i in idx]
            df.insert(4, "tier", [d.tier for d in details])
            df.insert(5, "algorithm", [d.algorithm for d in details])
            exposed = rf.exposure(fused=rf.fusion is not None).exposed
            df["comm_time_s"] = [rf.times[i].comm_s for i in idx]
            df["comm_exposed_s"] = [exposed[i] for i in idx]
    elif by == "op" and args.format != "table":
        df = analysis.ops  # every op occurrence
    else:
        df = analysis.group("op" if by == "op" else by, depth)
        if rf is not None:
            df = _timed_group(analysis, rf, "op" if by == "op" else by, depth, df)
    title = f"{analysis.source} (entry @{analysis.entry}), by {by}" + (f":{depth}" if depth else "")
    if rf is not None:
        title += f", on {hw.name}" + (", fused elementwise" if rf.fusion is not None else "")
    info = meta(analysis) | ({"phases": facts} if by == "phase" else {})
    text = render(df, args.format, args.unit, summary=analysis.summary, meta=info, title=title)
    if by == "phase" and args.format in ("table", "markdown"):
        text += "".join(f"{'- ' if args.format == 'markdown' else ''}{line}\n" for line in lines)
    progress.done()
    write_output(text, args.output)
    return EXIT_OK



def _html_report(analysis, rf, args, progress) -> str:
    from ..html import report_page
    from ..memory.views import profiles

    blocks = find_blocks(analysis, args)
    memory = profiles(analysis, fused_memory(analysis, args, rf))
    timeline = {f"live_bytes{suffix}": prof.after for suffix, prof in memory}
    progress.stage("writing the page")
    return report_page(analysis, blocks, roofline=rf, unit=None if args.unit == "raw" else args.unit,
                       top=args.top or 10, timeline=timeline, memory=memory)


def register(sub) -> None:
    p = sub.add_parser("report", help="what a model costs: summary, or grouped by op, kind, scope or block")
    add_common(p)
    p.add_argument("--by", type=_parse_by, default=("summary", None),
                   help="summary (default), op, kind, scope[:DEPTH], block, comm, phase (a training step) or memory "
                        "(live bytes per op)")
    add_estimate(p, steps=True, top=True)
    add_output(p, formats=("table", "csv", "json", "markdown", "html"))
    p.set_defaults(func=cmd_report)
