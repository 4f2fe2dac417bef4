"""``mhlo-cost blocks``: the per-block table (CSV by default)."""
from __future__ import annotations

from .common import (EXIT_OK, Progress, block_frame, add_common, add_estimate, fused_memory, hardware_from_options, meta,
                     add_output, make_roofline, write_output, load_analysis)

def cmd_blocks(args) -> int:
    from ..report import render

    hw = hardware_from_options(args)
    progress = Progress(enabled=not args.quiet)
    analysis = load_analysis(args.file, args, progress, dataflow=hw is not None or args.fuse != "none",
                             training=True)
    rf = make_roofline(analysis, hw, args, progress) if hw is not None else None
    df = block_frame(analysis, args, parts=args.parts, roofline=rf, fused_memory=fused_memory(analysis, args, rf))
    progress.done()
    fmt = args.format
    write_output(render(df, fmt, args.unit, summary=analysis.summary, meta=meta(analysis)), args.output)
    return EXIT_OK



def register(sub) -> None:
    p = sub.add_parser("blocks", help="one row per transformer block (CSV by default)")
    add_common(p)
    p.add_argument("--parts", action="store_true", help="one row per block part (attn, cross_attn, mlp, ...)")
    add_estimate(p)
    add_output(p, default="csv")
    p.set_defaults(func=cmd_blocks)
