"""``train-plan --model stdit3``: OpenSora 1.2's STDiT3-XL/2 trained as its authors train it (ColossalAI ZeRO-2,
optional Ulysses sequence parallelism, block-wise gradient checkpointing, flash attention, bf16), the options mapped
onto :class:`mhlo_cost.studies.plan.stdit3.STDiT3ScaleConfig`."""
from __future__ import annotations

from .common import UserError, positive_int

#: Options of the GPT-style split that STDiT3's plan does not take (its parallelism is data x Ulysses).
NOT_STDIT3 = (("-t", "t", 1), ("-p", "p", 1), ("--sp", "sp", False), ("--interleave", "interleave", 1),
              ("--cp", "cp", 1), ("--dp-shard", "dp_shard", 0), ("--dp-replicate", "dp_replicate", None),
              ("--decoder-first-pipeline-num-layers", "first_stage_layers", 0),
              ("--decoder-last-pipeline-num-layers", "last_stage_layers", 0), ("--seq", "seq", None),
              ("--vocab", "vocab", None), ("--hf", "hf", None), ("--sweep", "sweep", None), ("--fsdp", "fsdp", False),
              ("--precision", "precision", None), ("--account-for-embedding-in-pipeline-split", "account_embedding",
                                                   False),
              ("--account-for-loss-in-pipeline-split", "account_loss", False), ("--dp-overlap", "dp_overlap", False),
              ("--cp-comm-type", "cp_comm_type", "p2p"), ("--execution", "execution", "compiled"),
              ("--inductor-comm-reorder", "inductor_comm_reorder", False),
              ("--cp-kv-repeat", "cp_kv_repeat", False), ("--fsdp-version", "fsdp_version", "1"),
              ("--loss-upcast", "loss_upcast", False), ("--dp-reduce", "dp_reduce", "reduce_scatter"),
              ("--share-embeddings-and-output-weights", "tied_embedding", False),
              ("--grad-accum-pass", "grad_accum_pass", False), ("--tp-comm-overlap", "tp_comm_overlap", False),
              ("--tp-comm-overlap-rs", "tp_comm_overlap_rs", "pipeline"), ("--pipeline-split", "pipeline_split",
                                                                         "megatron"), ("--async-tp", "async_tp", False),
              ("--overlap-grad-reduce", "overlap_grad_reduce", False),
              ("--overlap-param-gather", "overlap_param_gather", False), ("--ddp-bucket-size", "ddp_bucket_size", None),
              ("--cross-entropy", "cross_entropy", "fused"), ("--activation", "activation", "gelu"),
              ("--activation-kernel", "activation_kernel", "compiled"),
              ("--attention-kernel", "attention_kernel", "compiled"),
              ("--use-nccl-ub", "use_nccl_ub", False),
              ("--torch-ddp", "torch_ddp", False), ("--launch-blocking", "launch_blocking", False),
              ("--loss-scale", "loss_scale", False), ("--clip-grad", "clip_grad", None),
              ("--dist-optimizer", "dist_optimizer", "megatron"),
              ("--no-gradient-accumulation-fusion", "no_gradient_accumulation_fusion", False),
              ("--recompute-num-layers", "recompute_num_layers", 0), ("--recompute-every", "recompute_every", 0),
              ("--fsdp-float8-all-gather", "fsdp_float8_all_gather", False),
              ("--fsdp-float8-precompute-scale", "fsdp_float8_precompute_scale", False),
              ("--fp8-amax-history", "fp8_amax_history", None),
              # the mixture-of-experts options (a dense video transformer has no experts)
              ("--num-experts", "num_experts", None), ("--moe-router-topk", "moe_router_topk", None),
              ("--moe-ffn-hidden-size", "moe_ffn_hidden_size", None), ("--ep", "ep", None),
              ("--moe-shared-experts", "moe_shared_experts", None), ("--moe-dense-layers", "moe_dense_layers", None),
              ("--moe-expert-capacity-factor", "moe_expert_capacity_factor", None),
              ("--moe-imbalance", "moe_imbalance", None), ("--moe-a2a-overlap", "moe_a2a_overlap", None),
              ("--expert-tensor-parallel-size", "expert_tensor_parallel_size", None))


def register(p) -> None:
    """STDiT3's own options on the train-plan parser."""
    p.add_argument("--shape", metavar="FRAMES_WIDTH_HEIGHT",
                   help="with --model stdit3: the video (as lower --shape: 51_1280_720 is 51 frames of 1280x720; "
                        "default 204_640_360); --micro-batch is OpenSora's batch per GPU")
    p.add_argument("--bucket", metavar="RES:FRAMES",
                   help="with --model stdit3: an OpenSora 1.2 bucket instead of --shape (720p:51 is 51_1280_720: the "
                        "resolution at its base aspect ratio, 9:16 landscape or 1:1 for 256/512/1024/2048)")
    p.add_argument("--ulysses", "--sp-size", dest="ulysses", type=positive_int, metavar="N",
                   help="with --model stdit3: Ulysses sequence-parallel degree (OpenSora's sp_size, plugin "
                        "zero2-seq): each frame's tokens split N ways, 6 all_to_all per spatial block each way")


def defaults(args) -> None:
    """STDiT3's defaults where the options are not given: OpenSora 1.2's grad_checkpoint=True and flash attention."""
    if args.model == "stdit3" and args.recompute is None:
        args.recompute = "full"
    if args.attention is None:
        args.attention = "fused" if args.model == "stdit3" else "unfused"
    if args.model != "stdit3":
        for opt, v in (("--shape", args.shape), ("--bucket", args.bucket), ("--ulysses/--sp-size", args.ulysses)):
            if v is not None:
                raise UserError(f"{opt} goes with --model stdit3")
        if args.global_batch is None:
            args.global_batch = 1


def config(args, zero_stage: int | None):
    """The STDiT3ScaleConfig of the options (``zero_stage``: the one the ZeRO options name, None: not given)."""
    from ..studies.plan.stdit3 import bucket_shape, stdit3_config

    given = [opt for opt, dest, default in NOT_STDIT3 if getattr(args, dest, default) not in (None, False, default)]
    if given:
        raise UserError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not go with --model stdit3, "
                        "which trains with data and Ulysses sequence parallelism (-d, --ulysses)")
    if args.recompute in ("selective", "op"):
        raise UserError("--model stdit3 recomputes whole blocks (OpenSora's grad_checkpoint): --recompute full or none")
    if zero_stage == 3:
        raise UserError("--model stdit3 runs OpenSora's ColossalAI ZeRO (stages 0-2), not FSDP")
    mb = args.micro_batch
    if args.global_batch is not None and args.global_batch != mb * args.d:
        raise UserError(f"--global-batch {args.global_batch}: OpenSora steps once per batch, so the global batch is "
                        f"--micro-batch x -d ({mb} x {args.d} = {mb * args.d})")
    sizes = {k: v for k, v in (("layers", args.layers), ("hidden", args.hidden), ("heads", args.heads)) if v}
    if "hidden" in sizes:
        sizes["ffn"] = 4 * sizes["hidden"]
    if args.shape and args.bucket:
        raise UserError("give --shape or --bucket, not both")
    try:
        shape = bucket_shape(args.bucket) if args.bucket else args.shape or "204_640_360"
        cfg = stdit3_config(shape, d=args.d, cp=args.ulysses or 1, micro_batch=mb,
                            global_batch=mb * args.d, recompute=args.recompute, attention=args.attention,
                            attention_library=args.attention_library or "",
                            zero=2 if zero_stage is None else zero_stage, **sizes)
    except ValueError as e:
        raise UserError(str(e)) from None
    why = cfg.invalid()
    if why:
        raise UserError(f"invalid training configuration: {why}")
    return cfg
