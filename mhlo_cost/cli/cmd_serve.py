"""``mhlo-cost serve``: what an LLM costs to serve on a chip: the KV cache, time to first token (prefill),
time per output token and tokens/s (decode), memory per device and what fits; with ``--batches`` /
``--contexts`` a sweep (table, ``--plot``). The steps are lowered by :mod:`mhlo_cost.studies.serve`; ``lower
--decode`` / ``--prefill`` writes their IR. Shared by ``lower``: :func:`add_step_options`, :func:`step_request`.
"""
from __future__ import annotations

import contextlib

from .cache import add_cache, cache_note, cache_root
from .common import UserError, add_force, add_progress, add_quiet, claim_output, positive_int
from .cmd_serve_sim import add_sim_options, check_step, cmd_simulate, simulating, write_view


def add_step_options(g, lower: bool = False) -> None:
    """--decode / --prefill, --context (and, for serve, --batch / --tokens, which lower already has)."""
    g.add_argument("--decode", action="store_true", help="one decode step against a static KV cache (an argument)")
    g.add_argument("--prefill", action="store_true", help="the prefill of a prompt of --tokens P into the cache")
    g.add_argument("--context", type=positive_int, metavar="L",
                   help="positions the static cache holds (default 2048; prefill: the prompt's length)")
    g.add_argument("--precision", metavar="RECIPE[,kv-fp8]",
                   help="--model gpt: the precision recipe of the layers' linears and the KV cache: bf16 (default), "
                        "fp8-tensorwise, fp8-rowwise, fp8-blockwise-128, mxfp8, nvfp4, w4a16-awq, w8a8-int8, "
                        "w8a16, kv-fp8 (combine one with kv-fp8: fp8-rowwise,kv-fp8)")
    if not lower:
        g.add_argument("--batch", type=positive_int, help="sequences (default 1)")
        g.add_argument("--tokens", type=positive_int, metavar="P", help="prefill: prompt tokens (default 512)")


def _ints(value: str) -> list:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"expected comma-separated integers, got {value!r}") from None
    if not out or any(v < 1 for v in out):
        raise UserError(f"expected positive integers, got {value!r}")
    return out


def _imbalance(value: str) -> float:
    import argparse
    import math

    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v >= 1):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 1 (1: balanced), got {value!r}")
    return v


def add_eager_expert_options(g) -> None:
    """--execution (compiled or eager: plain transformers generate), --ep and --moe-imbalance."""
    g.add_argument("--execution", choices=("compiled", "eager"), default=None,
                   help="compiled (default): a fusing compiler or serving stack with a static KV cache; eager: "
                        "what plain transformers model.generate runs (--hf): one kernel per op launched from the "
                        "host, no CUDA graphs, transformers' DynamicCache grown by concatenation every step, "
                        "attention as the configuration's attn_implementation says; one step or a sweep, one "
                        "device")
    g.add_argument("--ep", type=positive_int, metavar="N",
                   help="--hf mixture of experts: the routed experts split over N devices (E / N each), tokens "
                        "sent to them and back by an all_to_all per MoE layer; attention over N / tp groups of "
                        "--tp devices (default 1), each running --batch sequences")
    g.add_argument("--moe-imbalance", type=_imbalance, metavar="F",
                   help="with --ep: the busiest device's routed tokens over the mean (default 1.0: balanced)")


def register(sub) -> None:
    p = sub.add_parser("serve", help="LLM inference: KV cache, time to first token, tokens/s, what fits",
                       description="Lower the prefill or a decode step of a causal LM (the bundled gpt or a "
                                   "transformers class) from shapes, with its static KV cache as an argument, and "
                                   "estimate it on a chip: KV cache bytes per layer and in total, time per output "
                                   "token and tokens/s (decode) or time to first token (prefill), intensity vs the "
                                   "ridge point, memory per device and the largest batch / context that fits.")
    m = p.add_argument_group("the model (one of)")
    m.add_argument("--model", choices=["gpt"], help="the bundled gpt (--set layers=.. hidden=.. heads=.. vocab=..)")
    m.add_argument("--hf", metavar="CLASS", help="a transformers causal LM (LlamaForCausalLM, MistralForCausalLM...)")
    m.add_argument("--config", metavar="FILE|TYPE", help="--hf: a config.json or a model type (llama, mistral...)")
    m.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a configuration field (repeat)")
    m.add_argument("--dtype", help="weights and cache dtype (default: the configuration's, else bfloat16)")
    m.add_argument("--routing", metavar="dropless|capacity:F",
                   help="--hf mixture of experts: the routing assumed (default dropless: every token to k experts, "
                        "spread evenly; capacity:1.25: ceil(F x tokens x k / E) rows per expert, the rest dropped)")
    s = p.add_argument_group("the step")
    add_step_options(s)
    s.add_argument("--tp", type=positive_int, metavar="N",
                   help="tensor parallel over N devices (weights and cache split, all_reduce per layer)")
    s.add_argument("--launch", choices=("stream", "cuda-graphs"), default=None,
                   help="stream (default for one step): each fused kernel launched from the host, paying the "
                        "profile's kernel overhead; cuda-graphs (default for a simulation): the step replayed as "
                        "one captured CUDA graph (torch.compile reduce-overhead, vLLM, TensorRT-LLM decode): no "
                        "launch per kernel")
    add_eager_expert_options(s)
    w = p.add_argument_group("a sweep (a table; --plot)")
    w.add_argument("--batches", type=_ints, metavar="B1,B2,..", help="e.g. 1,8,32,128 (instead of --batch; a value "
                                                                      "given twice is one point)")
    w.add_argument("--contexts", type=_ints, metavar="L1,L2,..", help="e.g. 2048,8192,32768 (instead of --context)")
    w.add_argument("--tps", type=_ints, metavar="N1,N2,..", help="tensor-parallel degrees (instead of --tp)")
    w.add_argument("--plot", metavar="FILE.png", help="tokens/s and memory against batch (points that do not fit: x); "
                                                      "a simulation: KV utilisation and batch sizes over time; "
                                                      ".png, .svg or .pdf, under the -o rule")
    w.add_argument("-j", "--jobs", type=int, choices=(1, 2), metavar="N",
                   help="processes, 1 (default) or 2: a fitted compiled sweep's steps lowered in a second one "
                        "while this one walks, fits and prices them (nothing else uses it)")
    add_cache(w, "lowered steps and their figures")
    add_sim_options(p)
    o = p.add_argument_group("output")
    o.add_argument("--hardware", default="h100", metavar="NAME", help="chip profile (default h100)")
    o.add_argument("--hardware-file", metavar="FILE", help="TOML file of your own profiles")
    o.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    o.add_argument("-o", "--output", metavar="OUT", help="write to a file instead of stdout")
    add_force(o)
    add_quiet(o)
    add_progress(o)
    p.set_defaults(func=cmd_serve, verbose=False)


def _eager_cache(args) -> str:
    """The KV cache of the step: transformers' dynamic one under --execution eager (plain generate)."""
    return "dynamic" if getattr(args, "execution", None) == "eager" else "static"


def step_request(args, batch: int | None, tokens: int | None):
    """The StepRequest of --decode / --prefill and the model options (``lower`` and ``serve``)."""
    from ..lower.frontends import FrontendError
    from ..lower.frontends.inputs import parse_assignments
    from ..studies.serve import StepRequest

    if args.decode and args.prefill:
        raise UserError("--decode and --prefill exclude each other: one step at a time")
    mode = "prefill" if args.prefill else "decode"
    if bool(args.model) == bool(args.hf):
        raise UserError("name one model for the inference step: --model gpt or --hf CLASS")
    if args.model and args.model != "gpt":
        raise UserError(f"--decode / --prefill know the bundled gpt and --hf models, not {args.model}")
    if args.model and args.config:
        raise UserError("--config applies to --hf; the bundled gpt is configured with --set layers=.. hidden=..")
    if mode == "decode" and tokens not in (None, 1):
        raise UserError("--tokens is the prefill's prompt; a decode step makes one token per sequence")
    tokens = tokens or (512 if mode == "prefill" and args.context is None else None)
    context = args.context or (tokens if mode == "prefill" else 2048)
    tokens = tokens or context
    try:
        sets = parse_assignments(args.set, "--set")
        from ..lower.frontends.inputs import weight_dtype

        dtype = weight_dtype(args.dtype) if args.dtype is not None else None  # None: the configuration's, else bf16
        req = StepRequest(mode=mode, batch=1 if batch is None else batch, context=context, tokens=tokens,
                          model=args.model, hf=args.hf,
                          config=args.config, overrides=tuple(sorted(sets.items())), dtype=dtype,
                          locations=getattr(args, "locations", True), routing=args.routing,
                          precision=args.precision, cache=_eager_cache(args))
        req.check()
    except (FrontendError, ValueError) as e:
        raise UserError(str(e)) from None
    return req


def _profile(args):
    from ..roofline import hardware_from_args

    hw = hardware_from_args(args.hardware, args.hardware_file)
    if hw is None:
        raise UserError(f"no hardware profile {args.hardware!r} (mhlo-cost hardware lists them)")
    return hw


def _check_sweep(args) -> None:
    """A sweep's list replaces the single value it sweeps; --plot draws a sweep, as a picture file."""
    for many, one in (("batches", "batch"), ("contexts", "context"), ("tps", "tp")):
        if getattr(args, many) is not None and getattr(args, one) is not None:
            raise UserError(f"--{many} sweeps the {one}: give --{many} or --{one}, not both")
    if args.plot is not None and not (args.batches or args.contexts or args.tps):
        raise UserError("--plot draws a sweep: give --batches and/or --contexts")
    if args.plot is not None and not args.plot.lower().endswith((".png", ".svg", ".pdf")):
        raise UserError(f"--plot {args.plot or repr(args.plot)}: the picture's name must end in .png, .svg or .pdf")


def _check_eager_expert(args) -> None:
    """--execution eager and --ep: what they do not go with, in one line, before anything is lowered."""
    from ..studies.serve.eager import check

    execution = args.execution or "compiled"
    try:
        check(execution, hf=bool(args.hf), tp=max(args.tps or [args.tp or 1]), ep=args.ep or 1, launch=args.launch,
              simulating=simulating(args), precision=args.precision)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.ep is not None and simulating(args):
        raise UserError("--ep prices one step or a sweep; the serving simulation runs tensor-parallel steps (--tp)")
    if args.moe_imbalance is not None and args.ep is None:
        raise UserError("--moe-imbalance is the busiest expert-parallel device's load: it goes with --ep N")
    if args.ep is not None and args.model:
        raise UserError("--ep splits the routed experts of a --hf mixture of experts; the bundled gpt has none")


#: Young-generation collections (CPython's middle generation) between two full collections of a serve run at the
#: least (:func:`deferred_full_collections`); CPython's default is 10.
FULL_COLLECTION_EVERY = 1000


@contextlib.contextmanager
def deferred_full_collections():
    """The body run with CPython's full (oldest-generation) collections deferred, its threshold restored on the way
    out. CPython 3.11's collector (Modules/gcmodule.c, ``gc_collect_generations``; ``gc.set_threshold``) collects the
    oldest generation once its count of middle-generation collections passes the third threshold (10) and the
    objects that reached it since its last collection are a quarter of those there before. A serve run's heap is the
    frameworks' half a million objects (torch, transformers, jax, kept for the process's life): frozen after their
    import (:mod:`mhlo_cost.lower.frontends._imports`) but put back in the oldest generation by the first walk
    (:func:`mhlo_cost.files.collector.settle_heap`), so that the full collection the lowerings' survivors then trigger
    traverses them all for a few tens of thousands of cyclic objects: 0.7-0.8 CPU s of the 7B grid's 16
    (``benchmarks/bench_grid.py``, measured with ``gc.callbacks``; 3 such collections in one run at load 5). A
    ``gc.freeze`` here would not last past that walk. With the threshold at :data:`FULL_COLLECTION_EVERY` the grid's
    127 middle collections run none; the young generations are collected as ever (the lowerings' cyclic garbage, a
    hundred thousand objects), and what reaches the oldest waits for a later full collection or the process's end.
    The command line's, never the library's: a test's process keeps CPython's thresholds."""
    import gc

    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, max(old, FULL_COLLECTION_EVERY))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def cmd_serve(args, console) -> int:
    with deferred_full_collections():
        return _serve(args, console)


def _serve(args, console) -> int:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    _check_eager_expert(args)
    if simulating(args):
        return cmd_simulate(args, console, _profile, step_request)
    check_step(args)
    args.launch = args.launch or "stream"
    _check_sweep(args)
    sweeping = args.batches or args.contexts or args.tps
    claim_output(args, console)
    if args.plot is not None:  # ('' too: refused above, never ignored)
        claim_output(args, console, args.plot)
    req = step_request(args, args.batch, args.tokens)
    from ..studies.serve.serve import launched

    hw = launched(_profile(args), args.launch)
    from ..studies.serve.study import ServeOptions, ServeStudy
    from ..views.serve import sweep_plot

    root = cache_root(args, console)
    bar = console.progress()
    study = ServeStudy(ServeOptions(req, hw, tp=args.tp or 1, launch=args.launch, batches=args.batches,
                                    contexts=args.contexts, tps=args.tps, cache=root is not None,
                                    cache_dir=root, execution=args.execution or "compiled", ep=args.ep or 1,
                                    moe_imbalance=args.moe_imbalance or 1.0, jobs=args.jobs or 1),
                       stage=bar.stage, note=cache_note(console))
    if sweeping:
        console.say(f"sweeping {req.describe()} on {hw.name}", note=True)
    return write_view(study, bar, args, console, lambda path: sweep_plot(study.points, path, study.plot_title))
