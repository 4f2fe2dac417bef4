"""``mhlo-cost blocks``: the per-block table (CSV by default): the one composition
(:func:`mhlo_cost.studies.compose.compose`) of the block view as a bare table (no title, no headline; ``--block``
and ``--scope`` name block rows)."""
from __future__ import annotations

from .common import (EXIT_OK, add_common, add_estimate, add_output, claim_output, compare_chips, compare_output,
                     hardware_from_options, regex, study_options, write_output)


def cmd_blocks(args, console) -> int:
    from ..studies.compose import compose
    from ..views.table import ViewRequest

    chips = compare_chips(args)
    hw = hardware_from_options(args) if chips is None else chips[0]
    claim_output(args, console)
    progress = console.progress()
    if chips is not None:
        text = compare_output(args, console, progress, chips)
        progress.done()
        write_output(text, args.output)
        return EXIT_OK
    request = ViewRequest(by="block", block=args.block, scope=args.scope, parts=args.parts, headline=False,
                          bare=True, unit=args.unit)
    programs = [study_options(args, path, progress, hw, training=True) for path in args.file]
    text = compose(programs, request, args.format, wide=args.wide, strict=args.strict, stage=progress.stage,
                   say=console.say)
    progress.done()
    write_output(text, args.output)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("blocks", help="one row per transformer block (CSV by default)",
                       description="One row per transformer block, TOTAL last (CSV by default). FILE may be '-' "
                                   "(standard input); several files give one table with a file column.")
    add_common(p, many=True)
    p.add_argument("--parts", action="store_true", help="one row per block part (attn, cross_attn, mlp, ...)")
    g = p.add_argument_group("filters")
    g.add_argument("--block", metavar="NAME", help="only this block's row(s)")
    g.add_argument("--scope", metavar="REGEX", type=regex, help="only the rows whose block name matches (re.search)")
    add_estimate(p, many=True)
    add_output(p, default="csv")
    p.set_defaults(func=cmd_blocks)
