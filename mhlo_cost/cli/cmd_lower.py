"""``mhlo-cost lower``: a model to StableHLO, from shapes alone (no weights, no device).

The model is a bundled one (``--model stdit3``), your own (``--module pkg.mod:factory``, resolved from the
current folder as ``python -m`` does), or a library's, built from a configuration: ``--hf CLASS``
(transformers), ``--diffusers CLASS``, ``--timm NAME``. The argument parsing lives here; the lowering is
:mod:`mhlo_cost.lower.frontends.api` (``LowerRequest``), which a sweep or a script can call directly.
"""
from __future__ import annotations

import sys

from .common import EXIT_OK, UserError, add_force, add_progress, add_quiet, claim_output, positive_int
from .lower_notes import expert_parallel_line, lowered_lines, moe_line

#: --parallel choices (the same as mhlo_cost.lower.models.parallel.STRATEGIES; kept here so --help imports no jax)
PARALLEL = ("none", "megatron", "2d", "ulysses", "ring")
FRONTENDS = ("jax", "torchax", "torch-xla")


def register(sub) -> None:
    p = sub.add_parser("lower", help="lower a model to StableHLO (bundled, your own, transformers, diffusers, timm)",
                       description="Lower a model to StableHLO from shapes alone and write it (.mlir text, "
                                   ".mlirbc bytecode, optionally .gz).")
    what = p.add_argument_group("the model (one of)")
    what.add_argument("--model", choices=["stdit3", "gpt"], help="a bundled model")
    what.add_argument("--module", metavar="PKG.MOD:FACTORY",
                      help="your own: a factory returning a torch.nn.Module, a JAX function or a flax.nnx Module")
    what.add_argument("--hf", metavar="CLASS", help="a transformers model class (LlamaForCausalLM, AutoModel...)")
    what.add_argument("--diffusers", metavar="CLASS", help="a diffusers model class (LatteTransformer3DModel...)")
    what.add_argument("--timm", metavar="NAME", help="a timm model name (convnext_atto, vit_small_patch16_224...)")
    what.add_argument("--list", action="store_true", help="list bundled models and the named video shapes")
    cfg = p.add_argument_group("library configuration (--hf, --diffusers, --timm)")
    cfg.add_argument("--config", metavar="FILE|TYPE",
                     help="a local config.json (or its folder); for --hf also a model type (llama, t5, ...)")
    cfg.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override one configuration field (repeat): num_hidden_layers=2, depths=[2,2,6,2]; for "
                          "--hf also a keyword the configuration class reads from **kwargs "
                          "(global_attn_every_n_layers=2); other keys are refused")
    cfg.add_argument("--routing", metavar="dropless|capacity:F",
                     help="mixture of experts: the routing assumed (default dropless: every token to k experts, "
                          "spread evenly; capacity:1.25: ceil(F x tokens x k / E) rows per expert, the rest dropped)")
    cfg.add_argument("--expert-parallel", type=positive_int, metavar="N",
                     help="mixture of experts: say the all_to_all bytes of splitting the experts over N devices")
    _input_options(p)
    _bundled_options(p)
    how = p.add_argument_group("how")
    how.add_argument("--frontend", choices=FRONTENDS,
                     help="jax, torchax or torch-xla (default: torchax for torch modules, jax otherwise)")
    how.add_argument("--dtype", metavar="DTYPE", help="cast the model and bare-shape inputs: bf16, f16, f32, ...")
    how.add_argument("--amp", choices=("float16", "bfloat16"),
                     help="run a torch module's forward under CUDA autocast to this dtype (torch.autocast('cuda'), "
                          "timm's benchmark.py --amp): parameters kept as built, cast per call where autocast casts")
    how.add_argument("--no-locations", dest="locations", action="store_false",
                     help="omit op locations (scope names) from the output")
    how.add_argument("-o", "--output", metavar="FILE", help=".mlir / .mlirbc, optionally .gz (default: stdout)")
    add_force(how)
    how.add_argument("-v", "--verbose", action="store_true", help="let the libraries' warnings through")
    add_quiet(how)
    add_progress(how)
    # Options that change *what* is lowered: a training step around the forward.
    train = p.add_argument_group("a training step instead of the forward (any model; torch modules through torchax)")
    train.add_argument("--train", action="store_true",
                       help="loss, gradients and an optimizer update, parameters and optimizer state donated")
    train.add_argument("--remat", choices=("none", "block"), default="none",
                       help="--model: recompute each block in the backward (jax.checkpoint) or keep everything")
    train.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default="adamw", help="default adamw")
    train.add_argument("--loss", default="mse", metavar="mse|xent|PKG.MOD:FN",
                       help="the loss on the output (a ModelOutput's logits, else last_hidden_state, sample...) "
                            "against a target of its shape (default mse; bundled models have their own)")
    from .cmd_serve import add_step_options

    add_step_options(p.add_argument_group("an inference step instead of the forward (--model gpt, --hf; see "
                                          "serve)"), lower=True)
    p.set_defaults(func=cmd_lower)


def _input_options(p) -> None:
    inp = p.add_argument_group("inputs (--module, --hf, --diffusers, --timm)")
    inp.add_argument("--input", action="append", default=[], metavar="[NAME=]SHAPE[:DTYPE]",
                     help="one input, positional in order or by keyword: 2x128:int64, attention_mask=2x128:int64, "
                          "timestep=scalar:int64 (dtype default: the model's)")
    inp.add_argument("--input-shape", action="append", default=[], metavar="D0,D1,...",
                     help="a positional input's shape (the same as --input D0xD1...)")
    inp.add_argument("--input-value", action="append", default=[], metavar="NAME=VALUE[:DTYPE]",
                     help="a keyword input the model reads in Python, given by its value (a JSON list; a constant "
                          "of the lowered program): image_grid_thw=[[1,16,16]]:int64. Qwen2-VL / Qwen2.5-VL with a "
                          "T x H x W grid of patches take pixel_values=(T*H*W)x(C*tp*p*p) (a 224x224 image, patch "
                          "p=14, temporal patch tp=2, C=3: grid [[1,16,16]], pixel_values=256x1176), input_ids by "
                          "value holding T*H*W/4 image tokens (spatial merge 2), and mm_token_type_ids by value "
                          "(1 on those tokens, else 0); LLaVA, PaliGemma, Gemma 3 take input_ids by value")
    inp.add_argument("--kwarg", action="append", default=[], metavar="KEY=VALUE",
                     help="a plain keyword argument of forward: return_dict=false, use_cache=false")


def _bundled_options(p) -> None:
    g = p.add_argument_group("bundled models (--model)")
    g.add_argument("--shape", help="stdit3 video shape FRAMES_WIDTH_HEIGHT (default 204_640_360)")
    g.add_argument("--batch", type=positive_int, help="batch size (default 2; --decode / --prefill: 1)")
    g.add_argument("--tokens", type=positive_int,
                   help="caption tokens (stdit3, default 300) / sequence length (gpt) / --prefill: prompt tokens")
    g.add_argument("--depth", type=positive_int, help="stdit3: spatial (= temporal) blocks (default 28)")
    g.add_argument("--hidden", type=positive_int, help="hidden size")
    g.add_argument("--heads", type=positive_int, help="attention heads")
    g.add_argument("--layers", type=positive_int, help="gpt: layers")
    g.add_argument("--scan", action="store_true", help="gpt: run the layers as one lax.scan")
    g.add_argument("--small", action="store_true", help="stdit3: the reduced test configuration")
    g.add_argument("--deployed", action="store_true",
                   help="stdit3: the torch module as OpenSora 1.2's sampling runs it (all-ones temporal mask, fused "
                        "LayerNorm, flash where it calls flash, the temporal attention written out, per-sample "
                        "cross-attention), lowered with torchax: the one to price with --execution eager; without "
                        "it, the JAX model (the counts; the parallel strategies)")
    g.add_argument("--parallel", choices=PARALLEL, default="none",
                   help="stdit3: lower under a parallel strategy with explicit collectives (default none)")
    g.add_argument("--devices", type=positive_int, metavar="N", help="devices of the parallel strategy (e.g. 16)")
    g.add_argument("--mesh", metavar="NXxNY", help="2d: the mesh, N_x (batch) x N_y (default 2 x N/2)")
    g.add_argument("--formula", nargs="?", const="table", choices=("table", "csv", "json", "markdown"),
                   dest="formula_format", help="stdit3: print the counts per block as polynomials in B, T, S (fitted "
                                               "from lowerings at a grid of shapes) instead of the IR, as a table "
                                               "or csv, json, markdown")


def list_models(out=sys.stdout) -> None:
    from ..lower.frontends import FRONTENDS as known, MODELS
    from ..lower.models.config import NAMED_SHAPES, STDiT3Config, VideoShape

    print("models: " + ", ".join(MODELS), file=out)
    print("frontends: " + ", ".join(known), file=out)
    print("libraries: --hf CLASS (transformers), --diffusers CLASS, --timm NAME (pip install 'mhlo-cost[models]')",
          file=out)
    print("stdit3 video shapes (latent T x H x W -> tokens T, S):", file=out)
    for name in NAMED_SHAPES:
        c = STDiT3Config().with_shape(VideoShape.parse(name))
        print(f"  {name:<14} latent {c.latent_t}x{c.latent_h}x{c.latent_w}  T={c.tokens_t}  S={c.tokens_s}  "
              f"tokens/sample={c.tokens_t * c.tokens_s}", file=out)


def _list_alone(args) -> None:
    """--list lists; a model, a step or an output given with it would be dropped, so it is refused."""
    given = [o for o, d in (("--model", "model"), ("--module", "module"), ("--hf", "hf"), ("--diffusers", "diffusers"),
                            ("--timm", "timm"), ("--decode", "decode"), ("--prefill", "prefill"), ("--train", "train"),
                            ("--formula", "formula_format"), ("-o", "output")) if getattr(args, d)]
    if given:
        raise UserError(f"--list lists the bundled models and shapes; it does not go with {', '.join(given)}")


def _library(args) -> tuple[str, str] | None:
    for lib in ("hf", "diffusers", "timm"):
        if getattr(args, lib):
            return lib, getattr(args, lib)
    return None


def _inputs(args):
    from ..lower.frontends import FrontendError
    from ..lower.frontends.inputs import TensorSpec, parse_input, parse_input_value, parse_shape, split_inputs

    specs = [TensorSpec(parse_shape(s)) for s in args.input_shape] + [parse_input(s) for s in args.input]
    positional, keyword = split_inputs(specs)
    values = {}
    for text in args.input_value:
        v = parse_input_value(text)
        if v.name in values or v.name in keyword:
            raise FrontendError(f"{v.name} is given twice (--input / --input-value)")
        values[v.name] = v
    return positional, keyword, values


def _request(args):
    """The LowerRequest the options describe, and a one-line description of it."""
    req, text = _forward_request(args)
    given = [o for o, v in (("--remat", args.remat != "none"), ("--optimizer", args.optimizer != "adamw"),
                            ("--loss", args.loss != "mse")) if v]
    if args.train and args.amp:
        raise UserError("--amp lowers the forward under autocast; it does not go with --train yet")
    if not args.train:
        if given:
            raise UserError(f"{', '.join(given)} go(es) with --train")
        return req, text
    from ..lower.training import TrainOptions

    req.train = TrainOptions(remat=args.remat, optimizer=args.optimizer, loss=args.loss)
    return req, f"the training step ({args.optimizer}, remat {args.remat}) of {text}"


def _forward_request(args):
    """The LowerRequest of the model's forward, and a one-line description of it."""
    from ..lower.frontends import DTYPES
    from ..lower.frontends.api import LowerRequest, describe_request
    from ..lower.frontends.bundled import bundled_config
    from ..lower.frontends.inputs import parse_assignments, weight_dtype

    named = [o for o, v in (("--model", args.model), ("--module", args.module), ("--hf", args.hf),
                            ("--diffusers", args.diffusers), ("--timm", args.timm)) if v]
    if len(named) != 1:
        raise UserError("name one model: --model, --module, --hf, --diffusers or --timm (or --list)"
                        if not named else f"{' and '.join(named)} exclude each other: name one model")
    dtype = weight_dtype(args.dtype) if args.dtype is not None else None  # ('' refused, not the default)
    if args.precision is not None:
        raise UserError(f"--precision {args.precision}: the recipes are lowered for the bundled gpt's inference "
                        "steps (lower --model gpt --decode / --prefill, serve); the forward and training lowerings "
                        "run in one --dtype")
    _bounded(args)
    if args.model:
        _refuse(args, ("--input", args.input or args.input_shape), ("--input-value", args.input_value),
                ("--kwarg", args.kwarg), ("--set", args.set),
                ("--config", args.config), ("--routing", args.routing),
                ("--expert-parallel", args.expert_parallel is not None), ("--amp", args.amp),
                why="--model (a bundled model has its own inputs)")
        frontend = args.frontend or ("torchax" if args.deployed else "jax")
        if args.deployed:
            from ..lower.frontends.bundled import check_deployed

            check_deployed(args.model, frontend, args.parallel, args.train)
        short = {v: k for k, v in DTYPES.items()}
        cfg, plan = bundled_config(args.model, frontend=frontend, parallel=args.parallel, devices=args.devices,
                                   mesh=args.mesh, shape=args.shape, small=args.small, batch=args.batch,
                                   tokens=args.tokens, dtype=short.get(dtype, dtype), depth=args.depth,
                                   hidden=args.hidden, heads=args.heads, layers=args.layers, scan=args.scan)
        req = LowerRequest(model=args.model, config=cfg, frontend=frontend, locations=args.locations,
                           verbose=args.verbose, deployed=args.deployed)
        return req, describe_request(req) + plan
    _refuse_bundled(args, "--module, --hf, --diffusers and --timm")
    positional, keyword, values = _inputs(args)
    lib = _library(args)
    if lib is None:
        _refuse(args, ("--config", args.config), why="--module (configure your factory instead)")
    if args.routing is not None:
        from ..lower.frontends.moe import Routing

        Routing.parse(args.routing)  # a bad one before a minute of imports
    req = LowerRequest(module=args.module, library=lib and lib[0], name=lib and lib[1], config=args.config,
                       overrides=parse_assignments(args.set, "--set"), inputs=tuple(positional),
                       input_kwargs=keyword, input_values=values, kwargs=parse_assignments(args.kwarg),
                       frontend=args.frontend,
                       dtype=dtype, locations=args.locations, verbose=args.verbose, routing=args.routing,
                       amp=args.amp)
    return req, describe_request(req)


#: (option's dest, the limit it counts against) of a forward or training lowering, and of an inference step.
_MODEL_COUNTS = (("layers", "layers"), ("depth", "layers"), ("batch", "batch"), ("tokens", "positions"),
                 ("devices", "devices"), ("expert_parallel", "devices"))
_STEP_COUNTS = (("batch", "batch"), ("tokens", "positions"), ("context", "positions"))


def _bounded(args, counts=_MODEL_COUNTS) -> None:
    """The counts given within the studies' limits (:mod:`mhlo_cost.studies.limits`)."""
    from ..studies.limits import check

    for opt, limit in counts:
        if getattr(args, opt) is not None:
            check(limit, getattr(args, opt), f"--{opt.replace('_', '-')}")


#: What an inference step (--decode / --prefill) is not made of: the options of a forward or a training step.
_NOT_A_STEP = (("--train", "train"), ("--module", "module"), ("--diffusers", "diffusers"), ("--timm", "timm"),
               ("--input", "input"), ("--input-shape", "input_shape"), ("--input-value", "input_value"),
               ("--kwarg", "kwarg"), ("--amp", "amp"),
               ("--expert-parallel", "expert_parallel"), ("--frontend", "frontend"), ("--shape", "shape"),
               ("--depth", "depth"), ("--hidden", "hidden"), ("--heads", "heads"), ("--layers", "layers"),
               ("--scan", "scan"), ("--small", "small"), ("--deployed", "deployed"), ("--devices", "devices"),
               ("--mesh", "mesh"))


def _step_only(args) -> None:
    """--decode / --prefill: every option given is one the step takes (the bundled gpt is configured with --set,
    a transformers model with --config and --set), or it is refused, never dropped."""
    given = [opt for opt, dest in _NOT_A_STEP if getattr(args, dest) not in (None, False, [])]
    given += [o for o, v in (("--parallel", args.parallel != "none"), ("--remat", args.remat != "none"),
                             ("--optimizer", args.optimizer != "adamw"), ("--loss", args.loss != "mse")) if v]
    if given:
        step = "--decode" if args.decode else "--prefill"
        raise UserError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to {step} (an "
                        "inference step of --model gpt, configured with --set, or of --hf CLASS with --config and --set)")
    _bounded(args, _STEP_COUNTS)


def _refuse(args, *given, why: str) -> None:
    for opt, value in given:
        if value:
            raise UserError(f"{opt} does not apply to {why}")


def _refuse_bundled(args, what: str) -> None:
    bundled = {"--shape": args.shape, "--batch": args.batch, "--tokens": args.tokens, "--depth": args.depth,
               "--hidden": args.hidden, "--heads": args.heads, "--layers": args.layers, "--scan": args.scan,
               "--small": args.small, "--deployed": args.deployed, "--parallel": args.parallel != "none",
               "--devices": args.devices,
               "--mesh": args.mesh}
    given = [k for k, v in bundled.items() if v]
    if given:
        raise UserError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to bundled models (--model), "
                        f"not to {what}: use --set KEY=VALUE for a library model's configuration")


def _shape_note(args, console) -> None:
    """A STDiT3 shape that is not a published one: a warning (never hidden) with the tokens it means."""
    if args.model == "stdit3" and args.shape:
        from ..lower.models.config import VideoShape, unpublished_shape_note

        try:
            VideoShape.parse(args.shape)
        except ValueError:
            return  # the request says so, as an error
        note = unpublished_shape_note(args.shape)
        if note:
            console.say(f"warning: {note}")


def _lower_step(args, console, bar) -> int:
    """``--decode`` / ``--prefill``: the inference step (:mod:`mhlo_cost.studies.serve`), its IR written."""
    from ..lower.frontends import FrontendError, write
    from ..lower.frontends.api import LowerFailed
    from ..studies.serve import lower_step
    from .cmd_serve import step_request

    _step_only(args)
    req = step_request(args, args.batch, args.tokens)
    console.say(f"lowering {req.describe()} -> {args.output or 'stdout'}", note=True)
    bar.stage("lowering the step")
    try:
        from ..studies.limits import check

        check("layers", req.facts().layers, "the model's layer count")
        step = lower_step(req)
        res = write(step.lowered, args.output, locations=args.locations)
    except (FrontendError, LowerFailed, ValueError) as e:
        raise UserError(str(e)) from None
    bar.close()
    if args.output is None:
        sys.stdout.write(res.text)
    console.say(f"KV cache {step.layout.nbytes:,} B ({step.layout.describe()}), weights {step.weight_bytes:,} B",
                note=True)
    moe_line(console, step.lowered.info)
    return EXIT_OK


def cmd_lower(args, console) -> int:
    import os

    if not args.verbose:  # before jax is first imported: XLA's C++ start-up lines
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
    if args.list:
        _list_alone(args)
        list_models()
        return EXIT_OK
    if args.formula_format:
        from .cmd_formula import lower_formula

        return lower_formula(args, console)
    from ..lower.frontends import FrontendError, write
    from ..lower.frontends.api import LowerFailed
    from ..lower.frontends.preflight import check_request
    from ..lower.run import lower_request

    bar = console.progress()
    try:
        bar.stage("checking the options")
        claim_output(args, console)  # the output first: it costs nothing (a missing folder is made when written)
        if args.decode or args.prefill:
            return _lower_step(args, console, bar)
        if args.context:
            raise UserError("--context goes with --decode or --prefill")
        req, text = _request(args)  # shapes, dtypes, configuration: before any heavy import
        check_request(req)  # the extras installed, a library's class name
        _shape_note(args, console)
        console.say(f"lowering {text} -> {args.output or 'stdout'}", note=True)
        low = lower_request(req, stage=bar.stage)
        ep_line = expert_parallel_line(args, low.info)
        bar.stage(f"writing {args.output or 'stdout'}")
        res = write(low, args.output, locations=args.locations)
    except (FrontendError, LowerFailed, ValueError) as e:
        raise UserError(str(e)) from None
    bar.close()
    if args.output is None:
        sys.stdout.write(res.text)
    lowered_lines(console, args, res, low.info, ep_line)
    return EXIT_OK
