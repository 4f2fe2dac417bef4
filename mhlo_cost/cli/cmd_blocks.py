"""``mhlo-cost blocks``: the per-block table (CSV by default)."""
from __future__ import annotations

from .common import (EXIT_OK, Progress, add_common, add_estimate, add_output, block_rows, claim_output,
                     hardware_from_options, meta, open_study, regex, study_roofline, write_output)


def cmd_blocks(args) -> int:
    import pandas as pd

    from ..report import render
    from .cmd_report import keep_blocks

    hw = hardware_from_options(args)
    claim_output(args)
    progress = Progress.of(args)
    frames = []
    for path in args.file:
        study = open_study(path, args, progress, hw, training=True)
        analysis = study.analysis
        study_roofline(study, args)
        df = keep_blocks(block_rows(study, args, parts=args.parts), args)
        if len(args.file) > 1:
            df.insert(0, "file", analysis.source)
        frames.append(df)
    progress.done()
    if len(frames) == 1:
        text = render(frames[0], args.format, args.unit, summary=analysis.summary, meta=meta(analysis),
                      wide=args.wide)
    else:
        text = render(pd.concat(frames, ignore_index=True), args.format, args.unit, wide=args.wide,
                      meta={k: v for k, v in meta(analysis).items() if k in ("tool", "version")})
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
    add_estimate(p)
    add_output(p, default="csv")
    p.set_defaults(func=cmd_blocks)
