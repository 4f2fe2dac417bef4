"""``mhlo-cost whatif``: a chip profile's parameters set or scaled, and what each block's time does.

The op table is walked once; the profile and each change (and each 10% gain the sensitivities try) only
re-price it (:mod:`mhlo_cost.studies.whatif`). The keys and their units: :mod:`mhlo_cost.machines.whatif`.
"""
from __future__ import annotations

from .common import (EXIT_OK, UserError, add_common, add_estimate, add_output, chip_names, claim_output,
                     hardware_from_options, open_study, write_output)

PICTURES = (".png", ".svg", ".pdf")


def _chips(args) -> list:
    """The profiles --compare names (found in --hardware-file first, as --hardware's)."""
    if args.compare is None:
        return []
    from ..roofline import hardware_from_args

    return [hardware_from_args(n, args.hardware_file) for n in chip_names(args.compare, "--compare")]


def cmd_whatif(args, console) -> int:
    from ..machines.whatif import apply, parse_change, unpriced

    if args.hardware and "," in args.hardware:
        raise UserError("whatif takes one --hardware NAME (the profile changed); name others with --compare a,b,c")
    changes = [parse_change(s) for s in args.set or ()] + [parse_change(s, scale=True) for s in args.scale or ()]
    hw = hardware_from_options(args)
    if hw is None:
        raise UserError("whatif needs a profile to change: --hardware NAME (mhlo-cost hardware lists them)")
    apply(hw, changes)  # a change the profile cannot take is refused before any work
    chips = _chips(args)
    picture = (args.output or "").lower().endswith(PICTURES)
    claim_output(args, console)
    progress = console.progress()
    study = open_study(args.file, args, console, progress, hw, training=True)
    from ..studies.whatif import pareto_table, whatif_table

    table = whatif_table(study, changes)
    if chips:
        from ..views.text import rows_json

        pareto = pareto_table(study, chips, changes)
        table.appendix.append((f"chips compared: time of one step ({study.analysis.source})", pareto))
        table.after["pareto"] = rows_json(pareto.frame)
    if picture:
        for line in unpriced(changes):  # (the text formats carry it as a note)
            console.say(f"note: {line}", note=True)
        return _draw(args, console, table, progress)
    from ..views.render import render

    text = render(table, args.format, args.unit, wide=args.wide)
    progress.done()
    write_output(text, args.output)
    return EXIT_OK


def _draw(args, console, table, progress) -> int:
    from ..files.write import replacing
    from ..views.whatif_plot import plot_whatif

    try:
        import matplotlib  # noqa: F401  (a clear message)
    except ImportError:
        raise UserError("a what-if picture needs matplotlib: pip install 'mhlo-cost[plot]'") from None
    with replacing(args.output) as path:
        plot_whatif(table.frame, path, title=table.title)
    progress.done()
    console.say(f"wrote {args.output}", note=True)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("whatif", help="a chip's parameters set or scaled: per block the bound, the time saved, "
                                      "and which parameter's 10%% gain saves most",
                       description="Set or scale a profile's parameters and see, per block, the bound and time "
                                   "before and after and the sensitivity of time to a 10%% gain in each parameter. "
                                   "Keys: peak.<dtype> (peak = every matrix peak), vector.<dtype> (vector), "
                                   "transcendental, hbm_bw, hbm, link_bw, hop_latency, kernel_overhead, "
                                   "dispatch_overhead, sram (not used by the GPU pricing). Values with units "
                                   "(4.8TB/s, 989TFLOPS, 3us, 256MB) or xF (a factor).")
    add_common(p)
    g = p.add_argument_group("what if")
    g.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set a parameter (hbm_bw=4.8TB/s, peak.bf16=2PFLOPS) or scale it (peak.bf16=x2); repeatable")
    g.add_argument("--scale", action="append", metavar="KEY=FACTOR", help="scale a parameter (hbm_bw=2); repeatable")
    g.add_argument("--compare", metavar="A,B,C", help="also the program's time on these chips (a Pareto table)")
    add_estimate(p)
    add_output(p, formats=("table", "csv", "json", "markdown", "html"))
    p.set_defaults(func=cmd_whatif)
