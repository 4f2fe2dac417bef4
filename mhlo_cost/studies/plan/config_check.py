"""The checks of a :class:`~.config.ScaleConfig` (why a configuration cannot run, one sentence) and the values its
fields take; :mod:`.config` re-exports both (split out of it to keep that module short).
"""
from __future__ import annotations

from ...machines.kernels import LIBRARIES
from .attention_check import refusal as attention_kernel_invalid
from .megatron_passes import passes_invalid
from .grad_clip import clip_invalid
from .partial_recompute import partial_invalid
from .sharding_check import blocking_invalid, cp_invalid, sharding_invalid

RECOMPUTE = ("none", "selective", "full", "op")
DP_COMM = ("all_reduce", "zero")
CP_COMM = ("p2p", "all_gather", "a2a", "torch-allgather", "torch-alltoall")  # a2a: Ulysses (STDiT3, .stdit3)
ATTENTION = ("unfused", "fused")
#: The loss: the head program's own (fused), Megatron-LM's eager kernels, Megatron-Core's compiled fusion
CROSS_ENTROPY = ("fused", "megatron", "megatron-fused")
#: How TE's userbuffers overlap a row-parallel GEMM's reduce_scatter (:mod:`.tp_overlap`)
TP_OVERLAP_RS = ("pipeline", "ring_exchange")
#: How the training step runs (:mod:`mhlo_cost.machines.execution`): ``compiled`` (fused kernels: Megatron's fused
#: kernels, XLA), ``eager`` (PyTorch eager, one kernel per framework op), ``inductor`` (torch.compile).
EXECUTION = ("compiled", "eager", "inductor")
#: The layer's architecture (:mod:`.layer`, :mod:`.llama_layer`): ``gpt`` (LayerNorm with biases, biased linears, no
#: rotary embedding) or ``llama`` (RMSNorm, no biases, rotary embedding of q and k).
ARCH = ("gpt", "llama")


def model_invalid(cfg) -> str | None:
    """Why the model itself (whatever its split) cannot run, in one sentence; None where it can."""
    for k in ("layers", "hidden", "heads", "seq", "vocab", "t", "p", "d", "interleave", "micro_batch",
              "global_batch", "cp"):
        v = getattr(cfg, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            return f"{k} must be a positive integer, got {v!r}"
    for k in ("ffn", "kv_heads", "zero", "dp_shard", "first_stage_layers", "last_stage_layers"):
        v = getattr(cfg, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"{k} must be a positive integer (0: the default), got {v!r}"
    if cfg.recompute not in RECOMPUTE:
        return f"recompute must be one of {', '.join(RECOMPUTE)}, got {cfg.recompute!r}"
    if cfg.dp_comm not in DP_COMM:
        return f"dp_comm must be one of {', '.join(DP_COMM)}, got {cfg.dp_comm!r}"
    if cfg.zero > 3:
        return f"zero (the ZeRO stage) must be 0, 1, 2 or 3, got {cfg.zero}"
    if cfg.cp_comm not in CP_COMM:
        return f"cp_comm must be one of {', '.join(CP_COMM)}, got {cfg.cp_comm!r}"
    if cfg.attention not in ATTENTION:
        return f"attention must be one of {', '.join(ATTENTION)}, got {cfg.attention!r}"
    if cfg.execution not in EXECUTION:
        return f"execution must be one of {', '.join(EXECUTION)}, got {cfg.execution!r}"
    if cfg.execution != "compiled" and cfg.attention != "fused":
        return (f"{cfg.execution} execution runs the attention as PyTorch's SDPA call: it needs fused attention, "
                f"got {cfg.attention}")
    if cfg.attention_library and (cfg.attention_library not in LIBRARIES or cfg.attention != "fused"):
        return (f"attention_library must be one of {', '.join(LIBRARIES)} with fused attention, "
                f"got {cfg.attention_library!r} with {cfg.attention} attention")
    if cfg.hidden % cfg.heads:
        return f"heads {cfg.heads} do not divide hidden {cfg.hidden}"
    if cfg.arch not in ARCH:
        return f"arch must be one of {', '.join(ARCH)}, got {cfg.arch!r}"
    if cfg.mlp_kind not in ("gelu", "swiglu"):
        return f"mlp_kind must be gelu or swiglu, got {cfg.mlp_kind!r}"
    if cfg.heads % cfg.kv:
        return f"key/value heads {cfg.kv} must divide heads {cfg.heads}"
    from ...machines.precision import PrecisionError, training_recipe

    try:
        training_recipe(cfg.precision)
    except PrecisionError as e:
        return str(e)
    return fp8_invalid(cfg)


def fp8_invalid(cfg) -> str | None:
    """Why the fp8 state options cannot hold (:mod:`.fp8_state`, :mod:`.fp8_weights`); None where they can."""
    v = cfg.fp8_amax_history
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        return f"fp8_amax_history must be a positive integer, got {v!r}"
    if cfg.fsdp_float8_all_gather and (cfg.precision != "fp8-tensorwise" or cfg.fp8_weight_cache
                                       or cfg.zero_stage != 3 or cfg.fsdp_version != 2 or cfg.experts):
        return ("the FSDP float8 all-gather (torchao's enable_fsdp_float8_all_gather) needs FSDP2 (ZeRO 3, "
                "--fsdp-version 2: it works through fully_shard's all-gather hooks), the fp8-tensorwise recipe "
                "(torchao: tensorwise scaling only), no fp8 weight cache (TE's) and a dense model (a MoE's expert "
                "gathers are not priced in fp8)")
    if (cfg.precision == "fp8-tensorwise" and not cfg.fp8_weight_cache and cfg.execution == "eager"
            and cfg.recompute == "op" and getattr(cfg, "lower_layer", None) is None):  # (.torchao_casts)
        return ("torchao's eager fp8-tensorwise casts under op-level recompute are not modelled (the recompute "
                "re-runs each linear's own input and weight cast): use execution inductor or another recompute")
    if cfg.fsdp_float8_precompute_scale and not cfg.fsdp_float8_all_gather:
        return ("the precomputed FSDP float8 scales (torchao's precompute_float8_dynamic_scale_for_fsdp) need the "
                "FSDP float8 all-gather (torchtitan ignores them without it)")
    return None


def loss_upcast_invalid(cfg) -> str | None:
    """Why torchtitan's loss cannot be priced in memory (:mod:`.torch_peak`); None where it can."""
    if not cfg.loss_upcast:
        return None
    if cfg.t > 1 or cfg.p > 1 or cfg.zero_stage != 3 or cfg.fsdp_version != 2 or cfg.experts:
        return ("loss_upcast (torchtitan's fp32 loss and FSDP2 root in memory) is priced with FSDP2 (ZeRO 3, "
                "fsdp_version 2), a dense model and no tensor or pipeline parallelism (loss_parallel's vocabulary-"
                "sharded loss and the last stage's are not modelled)")
    if cfg.global_batch % (cfg.micro_batch * cfg.d) == 0 and cfg.micro_batches > 1:
        return (f"loss_upcast (torchtitan 9dec370's step) runs one micro-batch a step, no gradient accumulation: "
                f"got {cfg.micro_batches} (global batch {cfg.global_batch} / (micro-batch {cfg.micro_batch} x data "
                f"degree {cfg.d}))")
    if cfg.tied_embedding:
        return ("loss_upcast is priced with torchtitan's untied tok_embeddings and output weights (its Llama "
                "model.py): not with tied_embedding")
    return None


def invalid(cfg) -> str | None:
    """Why this configuration cannot run, in one sentence; None where it can."""
    why = model_invalid(cfg)
    if why:
        return why
    if cfg.heads % cfg.t:
        return f"tensor degree {cfg.t} does not divide heads {cfg.heads}"
    if cfg.heads % cfg.kv or cfg.kv % cfg.t:
        return (f"key/value heads {cfg.kv} must divide heads {cfg.heads} and be divisible by the tensor "
                f"degree {cfg.t}")
    if cfg.mlp % cfg.t:
        return f"tensor degree {cfg.t} does not divide the MLP width {cfg.mlp}"
    if cfg.sp and cfg.seq % cfg.t:
        return f"sequence parallelism: tensor degree {cfg.t} does not divide seq {cfg.seq}"
    if cfg.sp and cfg.t == 1:
        return "sequence parallelism needs a tensor degree above 1"
    if cfg.tp_overlap_rs not in TP_OVERLAP_RS:
        return f"tp_overlap_rs must be one of {', '.join(TP_OVERLAP_RS)}, got {cfg.tp_overlap_rs!r}"
    if cfg.cross_entropy not in CROSS_ENTROPY:
        return f"cross_entropy must be one of {', '.join(CROSS_ENTROPY)}, got {cfg.cross_entropy!r}"
    why = (passes_invalid(cfg) or blocking_invalid(cfg) or attention_kernel_invalid(cfg)  # (.megatron_passes,
           or clip_invalid(cfg))  # .sharding_check, .attention_kernels, .grad_clip)
    if why:
        return why
    if cfg.tp_comm_overlap and cfg.t > 1 and not cfg.sp:
        return "tensor-parallel communication overlap (userbuffers) needs sequence parallelism"
    why = async_tp_invalid(cfg) or loss_upcast_invalid(cfg)
    if why:
        return why
    if cfg.tp_comm_overlap and cfg.execution == "inductor":  # (TE's modules are not traced by Dynamo)
        return ("tp_comm_overlap (Transformer Engine's userbuffers, in TE's own modules) is not run under "
                "torch.compile by any framework: not priced with execution inductor")
    why = (pipeline_invalid(cfg) or sharding_invalid(cfg) or cp_invalid(cfg) or moe_invalid_of(cfg)
           or partial_invalid(cfg))
    if why:
        return why
    if cfg.interleave > 1 and cfg.p == 1:
        return "interleaving needs a pipeline degree above 1"
    if cfg.global_batch % (cfg.micro_batch * cfg.d):
        return (f"micro-batch {cfg.micro_batch} x data degree {cfg.d} does not divide global batch "
                f"{cfg.global_batch}")
    if cfg.interleave > 1 and cfg.micro_batches % cfg.p:
        return (f"the interleaved schedule needs micro-batches ({cfg.micro_batches}) to be a multiple of "
                f"the pipeline degree {cfg.p}")
    return None

def pipeline_invalid(cfg) -> str | None:
    if not cfg.stage_layers():
        given = cfg.first_stage_layers or cfg.last_stage_layers
        extra = int(cfg.account_embedding) + int(cfg.account_loss)
        return (f"pipeline degree {cfg.p}: first/last stage layers {cfg.first_stage_layers}/"
                f"{cfg.last_stage_layers} leave no even split of the other stages' layers of {cfg.layers}"
                if given else f"pipeline degree {cfg.p} does not divide layers {cfg.layers}"
                + (f" + {extra} (embedding/loss counted)" if extra else "")
                + "; give --decoder-first/last-pipeline-num-layers or "
                "--account-for-embedding/loss-in-pipeline-split")
    counted = cfg.account_embedding or cfg.account_loss  # Megatron-Core's rule for these: interleave_invalid
    if (cfg.interleave > 1 and not cfg.uneven and not counted and cfg.pipeline_split == "megatron"
            and cfg.layers % (cfg.p * cfg.interleave)):
        return (f"pipeline degree {cfg.p} x interleave {cfg.interleave} does not divide "
                f"layers {cfg.layers}")
    from .pipeline_split import interleave_invalid

    return interleave_invalid(cfg)

def moe_invalid_of(cfg) -> str | None:
    if (not cfg.experts and cfg.ep == 1 and not cfg.ep_overlap and cfg.top_k == cfg.expert_ffn ==
            cfg.shared_experts == cfg.dense_layers == cfg.expert_tp == 0 and cfg.capacity_factor == 0
            and cfg.expert_imbalance == 1):
        return None
    from .moe_checks import moe_invalid

    return moe_invalid(cfg)


def async_tp_invalid(cfg) -> str | None:
    """PyTorch's async TP (:mod:`.async_tp`): an Inductor pass over sequence-parallel all_gathers and
    reduce_scatters of a tensor group."""
    if not cfg.async_tp:
        return None
    if cfg.t == 1 or not cfg.sp:
        return ("async tensor parallelism fuses the sequence-parallel collectives: it needs t > 1 and sequence "
                "parallelism")
    if cfg.execution != "inductor":
        return (f"async tensor parallelism is an Inductor pass (torch.compile): it needs execution inductor, "
                f"not {cfg.execution}")
    if cfg.tp_comm_overlap:
        return "async tensor parallelism (PyTorch's) and tp_comm_overlap (Transformer Engine's) do not go together"
    if cfg.experts:  # (a MoE block's output is routed + shared, an add: the pass finds no producer matmul)
        return "async tensor parallelism is priced for dense layers only, not a mixture of experts"
    return None
