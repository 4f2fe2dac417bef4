"""``mhlo-cost report``: counts, grouped, with the roofline estimate when a profile is given.

The same ``--by`` gives the same rows in every format: ``op`` one row per op occurrence (program order),
``opname`` the sum per op name, ``kind``/``scope``/``tree``/``comm`` a TOTAL row last. Several files give one
table with a ``file`` column first.
"""
from __future__ import annotations

import argparse

from ..views.by import view
from ..views.render import render
from ..views.table import ViewRequest
from .common import (EXIT_OK, Progress, UserError, add_common, add_estimate, add_filters, add_output, claim_output,
                     hardware_from_options, open_study, study_blocks, study_roofline, write_output)

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
    request = ViewRequest(by=by, depth=depth, block=getattr(args, "block", None), scope=getattr(args, "scope", None),
                          top=args.top, parts=args.parts, unit=args.unit)
    tables = []
    for path in args.file:
        study = open_study(path, args, progress, hw, training={"block": True, "phase": "always"}.get(by, False))
        study_roofline(study, args)
        if args.format == "html" and by == "summary":  # the whole report: one page
            write_output(_html_report(study, args, progress), args.output)
            progress.done()
            return EXIT_OK
        progress.stage("grouping")
        tables.append(view(study, request))
        if by in ("block", "memory"):  # what was found (said once the view is made: a bad --block first)
            study_blocks(study, args)
    progress.done()
    if len(tables) == 1:
        text = render(tables[0], args.format, args.unit, wide=args.wide)
    else:
        if by == "summary":
            for t in tables:
                t.frame, t.pairs = _pairs_frame(t.pairs, args), None
        text = _render_many(tables, args)
    write_output(text, args.output)
    return EXIT_OK


def _pairs_frame(pairs, args):
    """Several files' summaries: one frame each, in the unit asked (exact values in JSON)."""
    import pandas as pd

    from ..views.pairs import in_unit

    if args.format != "json":
        pairs = in_unit(pairs, args.unit, exact=args.format == "csv")
    return pd.DataFrame({"metric": [m for m, _ in pairs], "value": pd.Series([v for _, v in pairs], dtype=object)})


def _render_many(tables, args) -> str:
    """Several files: one table, ``file`` first; JSON: the rows with their file, and each file's summary."""
    import pandas as pd

    from ..views.render import render_frame

    parts = []
    for t in tables:
        df = t.frame.copy()
        df.insert(0, "file", t.meta["source"])
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
    title = f"{len(tables)} files, by {args.by[0]}" + (f":{args.by[1]}" if args.by[1] else "")
    text = render_frame(df, args.format, args.unit, title=title, wide=args.wide,
                        meta={"tool": tables[0].meta["tool"], "version": tables[0].meta["version"]})
    if args.format == "json":
        import json

        payload = json.loads(text)
        payload["summaries"] = {t.meta["source"]: {k: int(v) for k, v in t.summary.items()} for t in tables}
        from ..report import to_json

        text = to_json(payload)
    return text


def _html_report(study, args, progress) -> str:
    from ..html import study_page

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
