"""``mhlo-cost blocks``: the per-block table (CSV by default)."""
from __future__ import annotations

from .common import (EXIT_OK, Progress, add_common, add_estimate, add_output, claim_output, hardware_from_options,
                     open_study, regex, study_blocks, study_roofline, write_output)


def cmd_blocks(args) -> int:
    from ..views.by import block_view
    from ..views.render import render
    from ..views.table import ViewRequest, meta

    hw = hardware_from_options(args)
    claim_output(args)
    progress = Progress.of(args)
    request = ViewRequest(by="block", block=args.block, scope=args.scope, parts=args.parts, headline=False)
    tables = []
    for path in args.file:
        study = open_study(path, args, progress, hw, training=True)
        study_roofline(study, args)
        study_blocks(study, args)
        table = block_view(study, request, None, study.analysis)
        table.meta, table.summary = meta(study.analysis), study.analysis.summary
        tables.append(table)
    progress.done()
    table = tables[0] if len(tables) == 1 else _one_table(tables)
    write_output(render(table, args.format, args.unit, wide=args.wide), args.output)
    return EXIT_OK


def _one_table(tables):
    """Several files' block tables as one, ``file`` first."""
    import pandas as pd

    from ..views.table import Table

    def cat(frames):
        out = []
        for t, df in zip(tables, frames):
            df = df.copy()
            df.insert(0, "file", t.meta["source"])
            out.append(df)
        return pd.concat(out, ignore_index=True)

    text = None if all(t.text_frame is None for t in tables) else cat([t.shown for t in tables])
    return Table(None, cat([t.frame for t in tables]), text_frame=text,
                 meta={k: v for k, v in tables[0].meta.items() if k in ("tool", "version")})


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
