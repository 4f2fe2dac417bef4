"""``mhlo-cost lower --model stdit3 --formula``: the bundled STDiT3's counts per block as exact polynomials in B
(batch), T (frames of tokens) and S (tokens per frame), fitted from lowerings at a grid of shapes
(:func:`mhlo_cost.studies.formula.stdit3_formulas`) and printed (or written with ``-o``) instead of the IR."""
from __future__ import annotations

from .common import EXIT_OK, UserError, claim_output, write_output

FORMATS = ("table", "csv", "json", "markdown")


#: (option, dest) of ``lower`` that a formula cannot take: the shape and batch are its symbols; the rest lower
#: something else (another model, a step, a sharded program) or describe IR that is not written.
_NOT_A_FORMULA = (("--shape", "shape"), ("--batch", "batch"), ("--train", "train"), ("--decode", "decode"),
                  ("--prefill", "prefill"), ("--context", "context"), ("--precision", "precision"),
                  ("--module", "module"), ("--hf", "hf"), ("--diffusers", "diffusers"), ("--timm", "timm"),
                  ("--config", "config"), ("--set", "set"), ("--routing", "routing"),
                  ("--expert-parallel", "expert_parallel"), ("--input", "input"), ("--input-shape", "input_shape"),
                  ("--input-value", "input_value"), ("--kwarg", "kwarg"), ("--layers", "layers"), ("--scan", "scan"),
                  ("--devices", "devices"), ("--mesh", "mesh"))


def _refuse_others(args) -> None:
    """Every option given is one the formula applies (--small, --depth, --hidden, --heads, --tokens, --dtype), or
    it is refused, never dropped."""
    given = [opt for opt, dest in _NOT_A_FORMULA if getattr(args, dest, None) not in (None, False, [])]
    given += [opt for opt, on in (("--parallel", args.parallel != "none"),
                                  ("--frontend", args.frontend not in (None, "jax")),
                                  ("--remat", args.remat != "none"), ("--optimizer", args.optimizer != "adamw"),
                                  ("--loss", args.loss != "mse"), ("--no-locations", not args.locations)) if on]
    if given:
        raise UserError(f"--formula fits B, T and S from lowerings at a grid of shapes: it does not go with "
                        f"{given[0]}")


def lower_formula(args, console) -> int:
    from ..lower.frontends import FrontendError, make_config
    from ..studies.formula import FitRefused, stdit3_formulas
    from ..views.render import render

    if args.model != "stdit3":
        raise UserError("--formula goes with --model stdit3 (a symbolic program's formulas: report --formula FILE)")
    _refuse_others(args)
    try:  # the forward lowering's configuration and limits (--dtype honoured; hidden and heads checked)
        from ..studies.limits import check

        for opt, limit in (("depth", "layers"), ("tokens", "positions")):
            if getattr(args, opt) is not None:
                check(limit, getattr(args, opt), f"--{opt}")
        cfg = make_config("stdit3", small=args.small, tokens=args.tokens, dtype=args.dtype, depth=args.depth,
                          hidden=args.hidden, heads=args.heads)
    except (FrontendError, ValueError) as e:
        raise UserError(str(e)) from None
    claim_output(args, console)
    bar = console.progress()
    try:
        formulas = stdit3_formulas(cfg, stage=bar.stage)
    except FitRefused as e:
        raise UserError(str(e)) from None
    bar.close()
    fmt = args.formula_format
    write_output(render(formulas.table("stdit3: counts per block as polynomials in B, T, S"), fmt), args.output)
    return EXIT_OK
