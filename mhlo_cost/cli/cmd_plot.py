"""``mhlo-cost plot``: a picture of the blocks."""
from __future__ import annotations

from pathlib import Path

from .common import (EXIT_OK, UserError, add_common, add_estimate, add_force, claim_output, hardware_from_options,
                     open_study)


def cmd_plot(args, console) -> int:
    try:
        import matplotlib  # noqa: F401  (a clear message before any work)
    except ImportError:
        raise UserError("plot needs matplotlib: pip install 'mhlo-cost[plot]'") from None
    from ..studies.sweep.table import is_table

    if is_table(args.file):  # a table of mhlo-cost sweep: time per strategy, per shape and chip
        return _plot_sweep(args, console)
    from ..studies.compose import blocks_said, estimate_said
    from ..views.plot import plot_blocks

    hw = hardware_from_options(args)
    _check_name(args)
    claim_output(args, console)
    progress = console.progress()
    study = open_study(args.file, args, console, progress, hw)
    analysis = study.analysis
    rf = estimate_said(study, console.say)
    if args.memory:
        return _plot_memory(study, args, console, progress)
    blocks_said(study, console.say)
    df = study.block_frame()
    progress.stage("drawing")
    title = args.title or (f"{Path(analysis.source).name}: per block"
                           + (f", estimated time on {hw.name}" if hw is not None else ", FLOPs"))
    fused = rf is not None and rf.fusion is not None
    return _draw(args, console, lambda path: plot_blocks(df, path, title=title, fused=fused), progress)


def _check_name(args) -> None:
    if not args.output.lower().endswith((".png", ".svg", ".pdf")):
        raise UserError(f"{args.output}: the picture's name must end in .png, .svg or .pdf")


def _draw(args, console, draw, progress=None) -> int:
    """Run ``draw(path)`` through the one writer (:func:`mhlo_cost.files.write.replacing`: the picture drawn
    beside ``args.output``, then put over it), then say what was written."""
    from ..files.write import replacing

    with replacing(args.output) as path:
        draw(path)
    if progress is not None:
        progress.done()
    console.say(f"wrote {args.output}", note=True)
    return EXIT_OK


def _plot_sweep(args, console) -> int:
    from ..views.sweep_plot import plot_sweep
    from ..studies.sweep.table import read

    if args.hardware or args.hardware_file or args.memory:
        raise UserError("a sweep table has its estimates already: --hardware and --memory do not apply")
    _check_name(args)
    claim_output(args, console)

    def draw(path):
        try:
            plot_sweep(read(args.file), path, title=args.title or "")
        except (ValueError, KeyError) as e:
            raise UserError(f"{args.file}: {e}") from None
    return _draw(args, console, draw)


def _plot_memory(study, args, console, progress) -> int:
    from ..roofline.memory import block_labels
    from ..studies.compose import blocks_said
    from ..views.plot import plot_memory

    analysis, hw, fused = study.analysis, study.hardware, study.fused_memory
    blocks = blocks_said(study, console.say)
    labels = block_labels(analysis, blocks)
    kinds = {b.name: b.kind for b in blocks.blocks}
    progress.stage("drawing")
    title = args.title or f"{Path(analysis.source).name}: live bytes per device" + (f", {hw.name}" if hw else "")
    flash = (getattr(args, "attention", None) or "fused") == "fused"
    return _draw(args, console, lambda path: plot_memory(path, labels, kinds, analysis.memory, fused,
                                                         int(hw.hbm_capacity) if hw else None, title,
                                                         "fused elementwise" + (", attention one kernel" if flash
                                                                                else "")), progress)


def register(sub) -> None:
    p = sub.add_parser("plot", help="a picture of the blocks: stacked GEMM / vector / comm time (or FLOPs); "
                                    "of a sweep table: time per strategy")
    add_common(p)
    add_estimate(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="picture to write (.png, .svg, .pdf)")
    add_force(p)
    p.add_argument("--title", help="the picture's title")
    p.add_argument("--memory", action="store_true",
                   help="live bytes against program order instead (blocks as bands; --fuse adds the fused line, "
                        "--hardware the chip's HBM capacity)")
    p.set_defaults(func=cmd_plot)
