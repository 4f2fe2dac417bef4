"""``mhlo-cost train-plan``: one training configuration's iteration breakdown and memory per GPU, or
(``--sweep GPUS``) every tensor x pipeline x data split of a model ranked by iteration time among those
that fit. The per-device layer is lowered from shapes once per distinct shape (:mod:`mhlo_cost.studies.plan`)."""
from __future__ import annotations

from . import train_plan_options, train_plan_stdit3, train_plan_sweep
from .cache import add_cache, cache_note, cache_root
from .common import (EXIT_OK, UserError, add_force, add_progress, add_quiet, claim_output, positive_int,
                     write_output)


#: The split's options (-t, -p, ...): a sweep makes every split itself, so none of them goes with --sweep.
SPLIT = (("-t", "t"), ("-p", "p"), ("-d", "d"), ("--sp", "sp"), ("--interleave", "interleave"),
         ("--micro-batch", "micro_batch"), ("--recompute", "recompute"), ("--cp", "cp"), ("--dp-shard", "dp_shard"),
         ("--dp-replicate", "dp_replicate"), ("--decoder-first-pipeline-num-layers", "first_stage_layers"),
         ("--decoder-last-pipeline-num-layers", "last_stage_layers"),
         ("--recompute-num-layers", "recompute_num_layers"), ("--recompute-every", "recompute_every"))
#: Their values where not given.
SPLIT_DEFAULTS = (("t", 1), ("p", 1), ("d", 1), ("sp", False), ("interleave", 1), ("micro_batch", 1),
                  ("recompute", "none"), ("cp", 1), ("dp_shard", 0), ("first_stage_layers", 0),
                  ("last_stage_layers", 0), ("recompute_num_layers", 0), ("recompute_every", 0))


def _check_options(args) -> None:
    """Options that cannot mean anything together: one line, before any work."""
    train_plan_stdit3.defaults(args)  # (--model stdit3's own defaults first)
    if args.sweep is not None:
        given = [opt for opt, dest in SPLIT if getattr(args, dest) not in (None, False)]
        if args.by is not None:
            given.append("--by")
        if given:
            raise UserError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not go with --sweep, which "
                            "ranks every tensor x pipeline x data split, micro-batch, recompute and interleaving")
    train_plan_sweep.check(args)
    if not args.hf:
        for opt, v in (("--set", args.set), ("--config", args.config)):
            if v:
                raise UserError(f"{opt} goes with --hf (a transformers configuration); the bundled sizes are "
                                "--layers, --hidden, --heads, --seq, --vocab")
    for opt, given in (("--ddp-bucket-size", args.ddp_bucket_size), ("--overlap-param-gather",
                                                                       args.overlap_param_gather)):
        if given and not args.overlap_grad_reduce:
            raise UserError(f"{opt} is an option of Megatron-Core's overlapped gradient reduction; give "
                            "--overlap-grad-reduce with it")
    if args.tp_comm_overlap_rs != "pipeline" and not args.tp_comm_overlap:
        raise UserError("--tp-comm-overlap-rs chooses how --tp-comm-overlap runs its reduce-scatters; give "
                        "--tp-comm-overlap with it")
    if args.fp8_amax_history is not None and not args.fp8_weight_cache:
        raise UserError("--fp8-amax-history sizes Transformer Engine's scaling state, counted with --fp8-weight-cache; "
                        "give --fp8-weight-cache with it")
    if args.by is not None and args.format in ("json", "html"):
        raise UserError(f"--by chooses the table; --format {args.format} holds both tables")
    for dest, value in SPLIT_DEFAULTS:
        if getattr(args, dest) is None:
            setattr(args, dest, value)


def _config(args):
    from ..studies.plan.config import MODELS, ScaleConfig, model_config

    if args.model == "stdit3":
        named = args.zero is not None or args.fsdp or args.use_distributed_optimizer or args.dp_comm == "zero"
        return train_plan_stdit3.config(args, _zero_stage(args) if named else None)
    dims = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "seq", "vocab") if getattr(args, k)}
    if args.hf:
        return _hf_config(args, dims)
    try:
        base = model_config(args.model, **dims) if args.model is not None else ScaleConfig(**dims)
    except (TypeError, ValueError) as e:
        raise UserError(f"{e}; models: {', '.join(MODELS)}") from None
    return _split(args, base)


def _hf_config(args, dims: dict):
    """A Llama-family transformers decoder's configuration (mhlo_cost.studies.plan.hf), sizes given overriding it."""
    from ..lower.frontends import FrontendError
    from ..lower.frontends.inputs import parse_assignments
    from ..studies.plan.hf import hf_scale_config

    if args.model is not None:
        raise UserError("give --model or --hf, not both")
    try:
        base = hf_scale_config(args.hf, args.config, parse_assignments(args.set, "--set"), dims.get("seq"))
    except (FrontendError, ValueError) as e:
        raise UserError(str(e)) from None
    return _split(args, base.with_split(**dims))


def _split(args, base):
    from ..studies.plan.config import RECOMPUTE

    if args.recompute not in RECOMPUTE:
        raise UserError(f"--recompute must be one of {', '.join(RECOMPUTE)}")
    cfg = base.with_split(t=args.t, p=args.p, d=args.d, sp=args.sp, interleave=args.interleave,
                          micro_batch=args.micro_batch, global_batch=args.global_batch,
                          recompute=args.recompute, recompute_num_layers=args.recompute_num_layers,
                          recompute_every=args.recompute_every, dp_comm=args.dp_comm,
                          dp_overlap=args.dp_overlap or bool(_ddp(args)), **_sharding(args))
    if args.precision is None:
        return cfg
    from dataclasses import replace

    from ..machines.precision import PrecisionError, training_recipe

    try:
        return replace(cfg, precision=training_recipe(args.precision).name)
    except PrecisionError as e:
        raise UserError(str(e)) from None


def _zero_stage(args) -> int:
    """The one ZeRO stage the options name (--zero N, --fsdp: 3, --use-distributed-optimizer and the old
    --dp-comm zero: 1); two that disagree are refused."""
    named = {f"--zero {args.zero}": args.zero} if args.zero is not None else {}
    if args.fsdp:
        named["--fsdp"] = 3
    if args.use_distributed_optimizer:
        named["--use-distributed-optimizer"] = 1
    if args.dp_comm == "zero":
        named["--dp-comm zero"] = 1
    if len(set(named.values())) > 1:
        raise UserError(f"{' and '.join(named)} name different ZeRO stages; give one")
    return next(iter(named.values()), 0)


def _sharding(args) -> dict:
    """The ScaleConfig fields of the sharding, context-parallel and uneven-pipeline options."""
    shard = args.dp_shard
    if args.dp_replicate is not None:
        if shard or args.d % args.dp_replicate:
            raise UserError(f"--dp-replicate {args.dp_replicate} must divide -d {args.d} (and goes without "
                            "--dp-shard: the shard degree is d / replicate)")
        shard = args.d // args.dp_replicate
    zero = _zero_stage(args)
    return dict(zero=0 if args.dp_comm == "zero" else zero, dp_shard=shard,
                reshard_after_forward=args.fsdp_reshard_after_forward != "never", fsdp_version=int(args.fsdp_version),
                loss_upcast=args.loss_upcast, cp=args.cp,
                cp_comm=args.cp_comm_type, kv_repeat=args.cp_kv_repeat, dp_reduce=args.dp_reduce,
                tied_embedding=args.tied_embedding, grad_accum_pass=args.grad_accum_pass,
                first_stage_layers=args.first_stage_layers,
                last_stage_layers=args.last_stage_layers, account_embedding=args.account_embedding,
                account_loss=args.account_loss, attention=args.attention,
                attention_library=args.attention_library or "",
                grad_reduce_fp32=not args.grad_reduce_in_bf16, execution=args.execution,
                inductor_comm_reorder=args.inductor_comm_reorder,
                tp_comm_overlap=args.tp_comm_overlap, tp_overlap_rs=args.tp_comm_overlap_rs,
                async_tp=args.async_tp,
                pipeline_split=args.pipeline_split, cross_entropy=args.cross_entropy, activation=args.activation,
                activation_kernel=args.activation_kernel, attention_kernel=args.attention_kernel,
                nccl_ub=args.use_nccl_ub,
                torch_ddp=args.torch_ddp,
                loss_scale=args.loss_scale, clip_grad=_clip_grad(args), dist_optimizer=args.dist_optimizer,
                main_grad_add=args.no_gradient_accumulation_fusion,
                scatter_gather=args.scatter_gather_tensors_in_pipeline, launch_blocking=args.launch_blocking,
                fp8_weight_cache=args.fp8_weight_cache, fp8_amax_history=args.fp8_amax_history or 1024,
                fsdp_float8_all_gather=args.fsdp_float8_all_gather,
                fsdp_float8_precompute_scale=args.fsdp_float8_precompute_scale,
                **_ddp(args), **_experts(args))


def _clip_grad(args) -> float | None:
    """The max norm of ``--clip-grad`` (1.0 where not given: every stack's default), None for ``none``."""
    return 1.0 if args.clip_grad is None else (args.clip_grad or None)


def _ddp(args) -> dict:
    """Megatron-Core's overlapped data-parallel reduction (``--overlap-grad-reduce``: ddp megatron), where given."""
    if not (args.overlap_grad_reduce or args.overlap_param_gather or args.ddp_bucket_size):
        return {}
    return dict(ddp="megatron", overlap_param_gather=args.overlap_param_gather,
                ddp_bucket_size=args.ddp_bucket_size or 0)


#: The MoE options and the ScaleConfig fields they set (given ones only: a named model's stay otherwise).
EXPERTS = (("num_experts", "experts"), ("moe_router_topk", "top_k"), ("moe_ffn_hidden_size", "expert_ffn"),
           ("moe_shared_experts", "shared_experts"), ("moe_dense_layers", "dense_layers"), ("ep", "ep"),
           ("moe_expert_capacity_factor", "capacity_factor"), ("moe_imbalance", "expert_imbalance"),
           ("moe_a2a_overlap", "ep_overlap"), ("expert_tensor_parallel_size", "expert_tp"))


def _experts(args) -> dict:
    """The ScaleConfig fields of the mixture-of-experts options that were given."""
    return {field: getattr(args, dest) for dest, field in EXPERTS if getattr(args, dest) is not None}


def cmd_train_plan(args, console) -> int:
    from ..network import resolve_profile
    from ..studies.plan.costs import library_refusal
    from ..studies.plan.study import PlanOptions, PlanStudy
    from ..views.render import render
    from ..views.table import ViewRequest

    _check_options(args)
    claim_output(args, console)
    hw = resolve_profile(args.hardware, args.hardware_file)
    cfg = _config(args)
    why = library_refusal(cfg, hw)
    if why:
        raise UserError(f"--attention-library: {why}")
    progress = console.progress()
    progress.stage(f"planning {cfg.label()} on {hw.name}" if not args.sweep else f"sweeping {args.sweep} GPUs")
    space = train_plan_sweep.space(args, cfg) if args.sweep else None
    options = PlanOptions(cfg, hw, gpus=args.sweep, cache_dir=cache_root(args, console), space=space,  # checked
                          scheduler=args.scheduler, jobs=args.jobs, clock=args.clock)
    study = PlanStudy(options, note=cache_note(console), progress=progress.count if progress.enabled else False)
    table = study.view(ViewRequest(by=args.by or "component"))
    progress.done()
    write_output(render(table, args.format, "raw", wide=True), args.output)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("train-plan", help="a training configuration's iteration time and memory at scale, or a sweep",
                       description="Megatron-style tensor (column/row, optional sequence parallel) x pipeline "
                                   "(1F1B or interleaved) x data parallel training of a GPT-style decoder: the "
                                   "per-device layer is lowered from shapes and analysed once, the iteration "
                                   "composed from it on the system's network.")
    p.add_argument("--model", help="gpt-22b, gpt-175b, gpt-530b, gpt-1t (Korthikanti et al. 2022), deepseek-v3 (a "
                                   "MoE: 256 routed experts, top-8, 1 shared, 3 dense layers of 61); or give the sizes; "
                                   "stdit3: OpenSora 1.2's STDiT3-XL/2 with ZeRO-2 and Ulysses (--shape, --ulysses)")
    for k in ("layers", "hidden", "heads", "seq", "vocab"):
        p.add_argument(f"--{k}", type=positive_int)
    p.add_argument("--hf", metavar="CLASS", help="a Llama-family transformers decoder (LlamaForCausalLM): its sizes, "
                                               "GQA and SwiGLU from --config (a config.json or model type)")
    p.add_argument("--config", metavar="FILE|TYPE", help="with --hf: the configuration (as lower --config)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="with --hf: a configuration field")
    p.add_argument("--hardware", default="selene", help="a system profile (default: selene)")
    p.add_argument("--hardware-file", metavar="FILE", help="TOML file of your own profiles (searched first)")
    p.add_argument("-t", type=positive_int, help="tensor degree (default 1)")
    p.add_argument("-p", type=positive_int, help="pipeline degree (default 1)")
    p.add_argument("-d", type=positive_int, help="data degree (default 1)")
    p.add_argument("--sp", action="store_true", default=None, help="sequence parallelism")
    p.add_argument("--interleave", type=positive_int, help="virtual stages per device (default 1: 1F1B)")
    p.add_argument("--micro-batch", type=positive_int, help="default 1")
    p.add_argument("--global-batch", type=positive_int, help="default 1 (stdit3: --micro-batch x -d)")
    p.add_argument("--recompute", choices=("none", "selective", "full", "op"),
                   help="default none; op: torchtitan's selective op checkpointing (every second linear recomputed)")
    p.add_argument("--recompute-num-layers", type=positive_int, metavar="K",
                   help="with --recompute full: only the first K layers of each model chunk recomputed, the others "
                        "keeping everything (Megatron's --recompute-method block --recompute-num-layers K)")
    p.add_argument("--recompute-every", type=positive_int, metavar="N",
                   help="with --recompute full: only every N-th block recomputed, the others keeping everything "
                        "(torchtitan's selective layer checkpointing, selective_ac_option = N)")
    p.add_argument("--dp-comm", default="all_reduce", choices=("all_reduce", "zero"))
    p.add_argument("--dp-overlap", action="store_true", help="the gradient reduction overlaps the last backward")
    train_plan_options.register_sharding(p)
    train_plan_stdit3.register(p)
    _register_precision(p)
    p.add_argument("--sweep", type=positive_int, metavar="GPUS",
                   help="rank every combination of the sweep's dimensions on GPUS devices that fits (the rejected "
                        "ones after, each with its reason)")
    train_plan_sweep.register(p)
    add_cache(p, "each lowered layer's analysis")
    p.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown", "html"),
                   help="html: a page with a stacked bar per pipeline stage and both tables (-o FILE)")
    p.add_argument("--by", choices=("component", "stage"),
                   help="the table: the busiest device's components (default), or one row per pipeline stage")
    p.add_argument("-o", "--output", metavar="FILE", help="write to a file instead of stdout")
    add_force(p)
    add_quiet(p)
    add_progress(p)
    p.set_defaults(func=cmd_train_plan)


def _register_precision(p) -> None:
    """The linears' precision and what an fp8 recipe keeps (Transformer Engine's copies and scaling state, torchao's
    fp8 all-gather)."""
    p.add_argument("--precision", metavar="RECIPE",
                   help="the linears' precision: bf16 (default), fp8-tensorwise or fp8-rowwise (torchao Float8Linear: "
                        "forward, dgrad and wgrad GEMMs in fp8; weights bf16, master weights and AdamW moments fp32)")
    p.add_argument("--fp8-weight-cache", action="store_true",
                   help="under an fp8 precision, each weight's fp8 copy is made on a step's first micro-batch and "
                        "kept for the others (Transformer Engine's is_first_microbatch, as Megatron-Core and NeMo "
                        "run it); without it the weights are cast at every use (torchao's Float8Linear)")
    p.add_argument("--fp8-amax-history", type=positive_int, metavar="N",
                   help="with --fp8-weight-cache: Transformer Engine's delayed-scaling amax history length, whose "
                        "scales and histories (fp32, five per fp8 GEMM) count in memory (default 1024: TE's "
                        "DelayedScaling and NeMo's; Megatron-Core's --fp8-amax-history-len default is 1; current "
                        "scaling: 1)")
    p.add_argument("--fsdp-float8-all-gather", action="store_true",
                   help="under FSDP2 (--zero 3 --fsdp-version 2) with fp8-tensorwise: torchao's "
                        "enable_fsdp_float8_all_gather, the fp8 linears' weights all-gathered in fp8 (the gathered "
                        "layers' copies 1 byte an element), "
                        "each gather's weight amaxes all-reduced before it")
    p.add_argument("--fsdp-float8-precompute-scale", action="store_true",
                   help="with --fsdp-float8-all-gather: torchao's precompute_float8_dynamic_scale_for_fsdp, every "
                        "fp8 weight's amax in one all-reduce after the optimizer step instead of one per linear "
                        "before each all-gather")
