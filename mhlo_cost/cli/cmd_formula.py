"""``mhlo-cost lower --model stdit3 --formula``: the bundled STDiT3's counts per block as exact polynomials in B
(batch), T (frames of tokens) and S (tokens per frame), fitted from lowerings at a grid of shapes
(:func:`mhlo_cost.studies.formula.stdit3_formulas`) and printed (or written with ``-o``) instead of the IR."""
from __future__ import annotations

from .common import EXIT_OK, UserError, claim_output, write_output

FORMATS = ("table", "csv", "json", "markdown")


def lower_formula(args, console) -> int:
    from dataclasses import replace

    from ..lower.models.config import STDiT3Config
    from ..studies.formula import FitRefused, stdit3_formulas
    from ..views.render import render

    if args.model != "stdit3":
        raise UserError("--formula goes with --model stdit3 (a symbolic program's formulas: report --formula FILE)")
    given = [name for name, on in (("--shape", args.shape), ("--batch", args.batch), ("--train", args.train),
                                   ("--parallel", args.parallel != "none"), ("--decode", args.decode),
                                   ("--prefill", args.prefill), ("--frontend", args.frontend not in (None, "jax")))
             if on]
    if given:
        raise UserError(f"--formula fits B, T and S from lowerings at a grid of shapes: it does not go with "
                        f"{given[0]}")
    claim_output(args, console)
    cfg = STDiT3Config().small() if args.small else STDiT3Config()
    for name in ("depth", "hidden", "heads"):
        if getattr(args, name, None):
            cfg = replace(cfg, **{name: getattr(args, name)})
    if args.tokens:
        cfg = replace(cfg, caption_tokens=args.tokens)
    bar = console.progress()
    try:
        formulas = stdit3_formulas(cfg, stage=bar.stage)
    except FitRefused as e:
        raise UserError(str(e)) from None
    bar.close()
    fmt = args.formula_format
    write_output(render(formulas.table("stdit3: counts per block as polynomials in B, T, S"), fmt), args.output)
    return EXIT_OK
