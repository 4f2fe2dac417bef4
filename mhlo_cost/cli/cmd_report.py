"""``mhlo-cost report``: counts, grouped, with the roofline estimate when a profile is given.

The same ``--by`` gives the same rows in every format: ``op`` one row per op occurrence (program order),
``opname`` the sum per op name, ``kind``/``scope``/``tree``/``comm`` a TOTAL row last. Several files give one
table with a ``file`` column first (:func:`mhlo_cost.views.many.joined`); ``--format html`` of the summary is
the study's whole report page (the summary view's page). This module maps the arguments onto the study's
options, a view request and a format, nothing more.
"""
from __future__ import annotations

import argparse

from ..studies.compose import compose
from ..views.by import VIEWS
from ..views.table import ViewRequest
from .common import (EXIT_OK, UserError, add_common, add_estimate, add_filters, add_output, claim_output,
                     compare_chips, compare_output, hardware_from_options, study_options, write_output)

#: --by's names: the views' (:data:`mhlo_cost.views.by.VIEWS`, the one place a view is chosen)
BY = tuple(VIEWS)


def _parse_by(value: str) -> tuple[str, int | None]:
    by, _, depth = value.partition(":")
    if by not in VIEWS:
        raise argparse.ArgumentTypeError(f"--by must be one of {', '.join(VIEWS)} (scope:DEPTH, tree:DEPTH), "
                                         f"got {value!r}")
    if depth:
        if by not in ("scope", "tree") or not depth.isdigit() or int(depth) < 1:
            raise argparse.ArgumentTypeError(f"only scope and tree take a depth, a positive integer: got {value!r}")
        return by, int(depth)
    return by, None


#: The task graph's views: with ``-o NAME.dot`` / ``-o NAME.json`` they write the graph (DOT, node/edge list).
TASK_VIEWS = ("critical-path", "overlap")
GRAPH_FORMATS = ((".dot", "dot"), (".json", "graph"))  # (a tuple: the command line keeps no state)


def _graph_format(args, hw, by: str, filtered) -> str:
    """The format to render: ``--format``, or the task graph's export where a task view writes to a file
    named ``.dot`` or ``.json``; the task views' own checks."""
    if by not in TASK_VIEWS:
        return args.format
    if hw is None:
        raise UserError(f"--by {by} needs a profile (--hardware NAME): a task's time is its estimate")
    if filtered:
        raise UserError(f"--by {by} is the whole program's task graph: it does not go with --block or --scope")
    if len(args.file) > 1:
        raise UserError(f"--by {by} takes one file")
    import os

    suffix = os.path.splitext(args.output or "")[1].lower()
    return dict(GRAPH_FORMATS).get(suffix, args.format)


def _formula(args, console, hw) -> int:
    """``report --formula FILE``: the counts per block as polynomials in a symbolic program's shape symbols."""
    from ..studies.formula import FitRefused, fit, symbolic_program
    from ..views.render import render

    asked = [name for name, on in (("--hardware", hw is not None), ("--top", args.top is not None),
                                   ("--steps", args.steps is not None), ("--parts", args.parts),
                                   ("--block", getattr(args, "block", None)), ("--scope", getattr(args, "scope", None)),
                                   (f"--by {args.by[0]}", args.by[0] not in ("summary", "block"))) if on]
    if asked:
        raise UserError(f"--formula gives the counts per block as polynomials: it does not go with {asked[0]}")
    if len(args.file) > 1:
        raise UserError("--formula takes one file")
    if args.format == "html":
        raise UserError("--formula writes table, csv, json or markdown")
    claim_output(args, console)
    progress = console.progress()
    options = study_options(args, args.file[0], progress)
    try:
        formulas = fit(symbolic_program(options, start=dict(args.shapes or ())), stage=progress.stage)
    except FitRefused as e:
        raise UserError(str(e)) from None
    progress.done()
    write_output(render(formulas.table(), args.format, wide=args.wide), args.output)
    return EXIT_OK


def cmd_report(args, console) -> int:
    chips = compare_chips(args)
    if chips is not None:
        return _compare(args, console, chips)
    hw = hardware_from_options(args, top_needs_hardware=False)
    if args.formula:
        return _formula(args, console, hw)
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
    fmt = _graph_format(args, hw, by, filtered)
    claim_output(args, console)
    progress = console.progress()
    request = ViewRequest(by=by, depth=depth, block=getattr(args, "block", None), scope=getattr(args, "scope", None),
                          top=args.top, parts=args.parts, unit=args.unit)
    training = {"block": True, "phase": "always"}.get(by, by in TASK_VIEWS)
    programs = [study_options(args, path, progress, hw, training) for path in args.file]
    text = compose(programs, request, fmt, wide=args.wide, strict=args.strict, stage=progress.stage,
                   say=console.say)
    progress.done()
    write_output(text, args.output)
    return EXIT_OK


def _compare(args, console, chips) -> int:
    """``--hardware a,b,c``: the blocks across chips (``--by summary`` or ``block``)."""
    if args.by[0] not in ("summary", "block"):
        raise UserError(f"--hardware a,b,c gives the blocks across chips: it goes with --by block (or the "
                        f"summary), not --by {args.by[0]}")
    claim_output(args, console)
    progress = console.progress()
    text = compare_output(args, console, progress, chips)
    progress.done()
    write_output(text, args.output)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("report", help="what a model costs: summary, or grouped by op, kind, scope, tree or block",
                       description="What a model costs: the summary, or the ops grouped. FILE may be '-' (standard "
                                   "input); several files give one table with a file column.")
    add_common(p, many=True)
    p.add_argument("--by", type=_parse_by, default=("summary", None),
                   help="summary (default); op: every op occurrence in program order; opname: summed per op name; "
                        "kind; scope[:DEPTH]; tree[:DEPTH]: scopes as an indented tree with subtotals and percent; "
                        "block; comm: every collective; phase (a training step); memory: live bytes per op; "
                        "critical-path: the chain of tasks that sets the time, with the serial, critical-path and "
                        "2-stream times (and a training step's task-based scenarios); overlap: the same per block "
                        "(both need --hardware; -o NAME.dot or NAME.json writes the task graph)")
    p.add_argument("--parts", action="store_true", help="--by block: one row per block part (attn, mlp, ...)")
    p.add_argument("--formula", action="store_true",
                   help="a symbolic program's counts per block (and in total) as exact polynomials in its shape "
                        "symbols: fitted from the program refined on a grid of points (nodes per symbol above a "
                        "degree bound read from the program) and checked at two points off the grid; a count that "
                        "fails its check is an error, never a formula. Shown with the common factor of the terms "
                        "taken out (2*b*s*(64*s + 8192)); csv and json also give the expanded form. --shapes: where "
                        "the grid starts (default 2 for each symbol)")
    add_filters(p)
    add_estimate(p, steps=True, top=True, many=True)
    add_output(p, formats=("table", "csv", "json", "markdown", "html"))
    p.set_defaults(func=cmd_report)
