"""``mhlo-cost report``: counts, grouped, with the roofline estimate when a profile is given.

The same ``--by`` gives the same rows in every format: ``op`` one row per op occurrence (program order),
``opname`` the sum per op name, ``kind``/``scope``/``tree``/``comm`` a TOTAL row last. Several files give one
table with a ``file`` column first.
"""
from __future__ import annotations

import argparse

from .common import (EXIT_OK, Progress, UserError, add_common, add_estimate, add_filters, add_output, block_rows,
                     claim_output, hardware_from_options, meta, open_study, study_roofline, write_output)

BY = ("summary", "op", "opname", "kind", "scope", "tree", "block", "comm", "phase", "memory")


def _parse_by(value: str) -> tuple[str, int | None]:
    by, _, depth = value.partition(":")
    if by not in BY:
        raise argparse.ArgumentTypeError(f"--by must be one of {', '.join(BY)} (scope:DEPTH, tree:DEPTH), "
                                         f"got {value!r}")
    if depth:
        if by not in ("scope", "tree") or not depth.isdigit() or int(depth) < 1:
            raise argparse.ArgumentTypeError(f"only scope and tree take a depth, a positive integer: got {value!r}")
        return by, int(depth)
    return by, None


def _timed_group(analysis, rf, by: str, depth, df):
    """est_time_s (and est_time_fused_s) per group of a --by kind/opname/scope table."""
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


def _comm_frame(analysis, rf):
    import pandas as pd

    from ..analysis import int_series

    rows = [r for r in analysis.rows if r.kind == "collective"]
    df = pd.DataFrame({
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
    if rf is not None:  # where each collective runs, how, how long, and how much of it compute cannot hide
        pos = {r.index: i for i, r in enumerate(rf.analysis.rows)}
        idx = [pos[r.index] for r in rows]
        details = [rf.comm_detail(i) for i in idx]
        df.insert(4, "tier", [d.tier for d in details])
        df.insert(5, "algorithm", [d.algorithm for d in details])
        exposed = rf.exposure(fused=rf.fusion is not None).exposed
        df["comm_time_s"] = pd.Series([rf.times[i].comm_s for i in idx], dtype="float64")
        df["comm_exposed_s"] = pd.Series([exposed[i] for i in idx], dtype="float64")
    return df


def _view(study, args, progress):
    """(frame, title, lines under the table, JSON facts) of one file."""
    from .common import study_blocks
    from .views import mark_overhead, op_list, select_rows, subset, tree_frame, with_total

    by, depth = args.by
    analysis, hw = study.analysis, study.hardware
    rf = study_roofline(study, args)
    progress.stage("grouping")
    keep = select_rows(study, args)
    part = subset(analysis, keep)
    lines, facts = [], None
    if by == "summary":
        df = study.summary(keep, part), part.summary  # (pairs, counts)
    elif by == "memory":
        from ..memory.views import timeline_frame

        df = timeline_frame(analysis, study_blocks(study, args), study.fused_memory if keep is None else None)
        df = df if keep is None else df[df["index"].isin({analysis.rows[i].index for i in keep})]
    elif by == "op" and rf is not None:
        df = rf.kernel_frame(args.top if keep is None else None) if rf.fusion is not None else rf.op_frame(
            args.top if keep is None else None)
        if keep is not None:  # the block's (or scopes') ops in program order; --top among them
            df = _keep_ops(df, analysis, keep, args.top)
        df = mark_overhead(df, rf) if rf.fusion is None else df
        if rf.fusion is None and analysis.liveness is not None:
            pos = {r.index: i for i, r in enumerate(analysis.rows)}
            df["live_bytes"] = [analysis.memory.after[pos[int(i)]] for i in df["index"]]  # once the op is done
    elif by == "op":
        df = op_list(part, args.top)
    elif by == "block":
        df = keep_blocks(block_rows(study, args, parts=args.parts), args)
        if keep is None and not getattr(args, "scope", None):  # the whole program's headline over its blocks
            from ..headline import headline

            facts = headline(study.summary())
    elif by == "phase":  # a training step: forward, backward (dgrad, wgrad), recompute, optimizer
        from ..training.analysis import phase_report

        df, lines, facts = phase_report(analysis, rf.times if rf is not None else None)
    elif by == "comm":
        df = with_total(_comm_frame(part, rf), "op")
    elif by == "tree":
        rows = analysis.memory.param_rows if analysis.liveness is not None else None
        params = None if rows is None else [rows.get(i, 0) for i in (keep or range(len(analysis.rows)))]
        df = tree_frame(part, depth, params)
    else:
        key = "op" if by == "opname" else by
        df = part.group(key, depth)
        if rf is not None:
            df = _timed_group(part, _sub_roofline(rf, keep), key, depth, df)
        df = with_total(df.rename(columns={"op": "opname"}) if key == "op" else df)
    title = f"{analysis.source} (entry @{analysis.entry}), by {by}" + (f":{depth}" if depth else "")
    if rf is not None:
        title += f", on {hw.name}" + {"compiled": ", fused elementwise", "eager": ", eager"}.get(rf.execution, "")
    for opt in ("block", "scope"):
        if getattr(args, opt, None):
            title += f", --{opt} {getattr(args, opt)}"
    if args.unit != "raw":
        title += f", FLOPs and bytes in {args.unit} ({ {'K': '1e3', 'M': '1e6', 'G': '1e9', 'T': '1e12'}[args.unit]})"
    return df, title, lines, facts


def _keep_ops(df, analysis, keep, top):
    keep_idx = {analysis.rows[i].index for i in keep}
    df = df[df["index"].isin(keep_idx)].sort_values("index", kind="stable")
    if top is not None:
        df = df.sort_values("latency_us", ascending=False, kind="stable").head(top)
    return df.reset_index(drop=True)


def keep_blocks(df, args):
    import re

    """The rows of the block named by --block, or whose names --scope matches (the program's TOTAL left out)."""
    if getattr(args, "block", None):
        df = df[df["block"] == args.block]
        if len(df) == 0:
            raise UserError(f"no block named {args.block!r}")
    if getattr(args, "scope", None):
        rx = re.compile(args.scope)
        df = df[[bool(rx.search(str(b))) and b != "TOTAL" for b in df["block"]]]
    return df.reset_index(drop=True)


def _sub_roofline(rf, keep):
    """``rf`` with its times cut to the kept rows (for the grouped views of a filtered analysis)."""
    if keep is None:
        return rf

    from types import SimpleNamespace

    return SimpleNamespace(times=[rf.times[i] for i in keep], fusion=rf.fusion)


def cmd_report(args) -> int:
    hw = hardware_from_options(args, top_needs_hardware=False)
    by, depth = args.by
    if args.top is not None and by != "op" and args.format != "html":
        raise UserError("--top goes with --by op (or --format html: top ops per block)")
    if args.steps is not None and by != "summary":
        raise UserError("--steps goes with --by summary (a run's total time and utilisation)")
    if args.parts and by != "block":
        raise UserError("--parts goes with --by block")
    if len(args.file) > 1 and args.format == "html":
        raise UserError("--format html takes one file")
    filtered = getattr(args, "block", None) or getattr(args, "scope", None)
    if filtered and args.format == "html" and by == "summary":
        raise UserError("--block and --scope go with the table views (--by op, block, ...); the HTML report "
                        "shows the whole program")
    if filtered and args.steps is not None:
        raise UserError("--steps is a whole run of the program: it does not go with --block or --scope")
    claim_output(args)
    progress = Progress.of(args)
    frames = []
    for path in args.file:
        study = open_study(path, args, progress, hw, training={"block": True, "phase": "always"}.get(by, False))
        analysis = study.analysis
        if args.format == "html" and by == "summary":  # the whole report: one page
            study_roofline(study, args)
            write_output(_html_report(study, args, progress), args.output)
            progress.done()
            return EXIT_OK
        df, title, lines, facts = _view(study, args, progress)
        info = meta(analysis) | ({"phases": facts} if by == "phase" else {"headline": facts} if facts else {})
        frames.append((analysis, df, title, lines, info))
    progress.done()
    if by == "summary":
        frames = [(a, _pairs_frame(*df, args) if len(frames) > 1 else df, *rest) for a, df, *rest in frames]
    if len(frames) == 1 and by == "summary":
        from .summary import render_pairs

        analysis, (pairs, counts), title, lines, info = frames[0]
        text = render_pairs(pairs, args.format, args.unit, meta=info, title=title)
    elif len(frames) == 1:
        from ..report import render

        analysis, df, title, lines, info = frames[0]
        text = render(df, args.format, args.unit, summary=analysis.summary, meta=info, title=title, wide=args.wide)
        if info.get("headline") and args.format in ("table", "markdown"):  # under the title
            head, rest = text.split("\n", 1)
            line = info["headline"] if args.format == "table" else f"\n**{info['headline']}**"
            text = f"{head}\n{line}\n{rest}"
        if lines and args.format in ("table", "markdown"):
            text += "".join(f"{'- ' if args.format == 'markdown' else ''}{line}\n" for line in lines)
    else:
        text = _render_many(frames, args)
    write_output(text, args.output)
    return EXIT_OK


def _pairs_frame(pairs, counts, args):
    """Several files' summaries: one frame each, in the unit asked (exact values in JSON)."""
    import pandas as pd

    from .summary import in_unit

    if args.format != "json":
        pairs = in_unit(pairs, args.unit, exact=args.format == "csv")
    return pd.DataFrame({"metric": [m for m, _ in pairs], "value": pd.Series([v for _, v in pairs], dtype=object)})


def _render_many(frames, args) -> str:
    """Several files: one table, ``file`` first; JSON: the rows with their file, and each file's summary."""
    import pandas as pd

    from ..report import render

    parts = []
    for analysis, df, *_ in frames:
        df = df.copy()
        df.insert(0, "file", analysis.source)
        parts.append(df)
    # Columns some files lack (a training step's phase columns) are empty there and exact where present:
    # integer columns go through as Python ints (a concat would make them float).
    missing = {c for p in parts for c in p.columns if any(c not in q.columns for q in parts)}
    for i, p in enumerate(parts):
        p = p.copy()
        for c in p.columns:
            if c in missing and (p[c].dtype.kind in "iu" or str(p[c].dtype) == "Int64"):
                p[c] = pd.Series([None if v is pd.NA else int(v) for v in p[c]], index=p.index, dtype=object)
        parts[i] = p
    df = pd.concat(parts, ignore_index=True)
    title = f"{len(frames)} files, by {args.by[0]}" + (f":{args.by[1]}" if args.by[1] else "")
    text = render(df, args.format, args.unit, title=title, wide=args.wide,
                  meta={"tool": frames[0][4]["tool"], "version": frames[0][4]["version"]})
    if args.format == "json":
        import json

        payload = json.loads(text)
        payload["summaries"] = {a.source: {k: int(v) for k, v in a.summary.items()} for a, *_ in frames}
        from ..report import to_json

        text = to_json(payload)
    return text


def _html_report(study, args, progress) -> str:
    from ..html import study_page
    from .common import study_blocks

    study_blocks(study, args)
    page = study_page(study, unit=None if args.unit == "raw" else args.unit, top=args.top or 10, stage=progress.stage)
    return page


def register(sub) -> None:
    p = sub.add_parser("report", help="what a model costs: summary, or grouped by op, kind, scope, tree or block",
                       description="What a model costs: the summary, or the ops grouped. FILE may be '-' (standard "
                                   "input); several files give one table with a file column.")
    add_common(p, many=True)
    p.add_argument("--by", type=_parse_by, default=("summary", None),
                   help="summary (default); op: every op occurrence in program order; opname: summed per op name; "
                        "kind; scope[:DEPTH]; tree[:DEPTH]: scopes as an indented tree with subtotals and percent; "
                        "block; comm: every collective; phase (a training step); memory: live bytes per op")
    p.add_argument("--parts", action="store_true", help="--by block: one row per block part (attn, mlp, ...)")
    add_filters(p)
    add_estimate(p, steps=True, top=True)
    add_output(p, formats=("table", "csv", "json", "markdown", "html"))
    p.set_defaults(func=cmd_report)
