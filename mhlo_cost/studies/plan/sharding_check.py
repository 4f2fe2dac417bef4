"""Why a configuration's data-parallel sharding and context parallelism cannot run, in one sentence
(:meth:`.config.ScaleConfig.invalid` asks these after its model and tensor-split checks)."""
from __future__ import annotations

from .dp_overlap_check import ddp_invalid

#: PyTorch's context parallel (torch.distributed.tensor.experimental context_parallel, as torchtitan runs it), by
#: its rotate method (torchtitan's ``context_parallel_rotate_method``: allgather, the default, or alltoall)
CP_TORCH = ("torch-allgather", "torch-alltoall")
#: How ZeRO 1 reduces the gradients: reduce_scatter (Megatron's distributed optimizer) or all_reduce (DeepSpeed's
#: pipeline engine with its BF16 optimizer: the fp32 gradients all-reduced whole, each rank stepping its shard)
DP_REDUCE = ("reduce_scatter", "all_reduce")


def sharding_invalid(cfg) -> str | None:
    """Why ``cfg``'s data-parallel sharding (ZeRO stage, HSDP group, FSDP version, DP reduction) cannot run; None
    where it can."""
    if ddp_invalid(cfg):
        return ddp_invalid(cfg)
    if cfg.dp_comm == "zero" and cfg.zero not in (0, 1):
        return f"dp_comm zero is ZeRO stage 1; it does not go with zero {cfg.zero}"
    if cfg.dp_shard and not cfg.zero_stage:
        return "a sharding group (dp_shard, HSDP) needs a ZeRO stage (zero 1-3)"
    if cfg.dp_shard and cfg.d % cfg.dp_shard:
        return f"sharding group {cfg.dp_shard} does not divide the data degree {cfg.d}"
    if not cfg.reshard_after_forward and cfg.zero_stage != 3:
        return "reshard-after-forward off applies to FSDP (zero 3) only"
    if cfg.fsdp_version not in (1, 2) or (cfg.fsdp_version == 2 and cfg.zero_stage != 3):
        return f"fsdp_version must be 1 or 2, and 2 (fully_shard) with FSDP (zero 3), got {cfg.fsdp_version}"
    if cfg.dp_reduce not in DP_REDUCE:
        return f"dp_reduce must be one of {', '.join(DP_REDUCE)}, got {cfg.dp_reduce!r}"
    if cfg.dp_reduce == "all_reduce" and cfg.zero_stage != 1:
        return "dp_reduce all_reduce (DeepSpeed's BF16 optimizer) applies to ZeRO 1 only"
    if cfg.experts and (cfg.dp_reduce != "reduce_scatter" or cfg.tied_embedding or cfg.grad_accum_pass
                         or cfg.cp_comm in CP_TORCH or cfg.cross_entropy != "fused" or cfg.loss_scale
                         or cfg.main_grad_add or cfg.scatter_gather):
        return ("dp_reduce all_reduce, a tied embedding, PyTorch's context parallel and Megatron-LM's own passes "
                "(cross_entropy megatron, loss_scale, main_grad_add, scatter_gather) are not planned with experts "
                "yet")
    return main_grad_invalid(cfg)


def main_grad_invalid(cfg) -> str | None:
    """Why Megatron-LM's main-gradient hook (``main_grad_add``) cannot go with ``cfg``: it is the gradient
    accumulation itself, so not beside DeepSpeed's separate pass (``grad_accum_pass``: counted twice), and its
    ``main_grad`` buffers are whole per rank, which FSDP (zero 3) does not keep; None where it can."""
    if cfg.main_grad_add and cfg.grad_accum_pass:
        return "main_grad_add (Megatron-LM's hook) and grad_accum_pass (DeepSpeed's pass) both accumulate the gradients"
    if cfg.main_grad_add and cfg.zero_stage == 3:
        return "main_grad_add (Megatron-LM's local DDP hook) does not go with FSDP (zero 3)"
    return None


def cp_invalid(cfg) -> str | None:
    """Why ``cfg``'s context parallelism cannot run; None where it can."""
    if cfg.cp_comm == "a2a" and not hasattr(cfg, "a2a_collectives"):
        return "cp_comm a2a (Ulysses all_to_all) is planned for --model stdit3 only"
    if cfg.cp > 1 and cfg.seq % (2 * cfg.cp):
        return (f"context parallelism: 2 x cp ({2 * cfg.cp}) does not divide seq {cfg.seq} (load-balanced "
                "causal chunks)")
    if getattr(cfg, "inductor_comm_reorder", False) and cfg.execution != "inductor":
        return "inductor_comm_reorder (Inductor's compute/communication reordering) applies to execution inductor only"
    if cfg.sp and cfg.local_seq % cfg.t:
        return f"sequence parallelism: tensor degree {cfg.t} does not divide seq / cp {cfg.local_seq}"
    return None


def blocking_invalid(cfg) -> str | None:
    """Why ``launch_blocking`` (:mod:`.launch_blocking`) cannot be priced for ``cfg`` (one sentence), or None: it
    is priced on the compiled model's kernels, with every collective exposed; the plans whose collectives are
    priced overlapped (the overlapped gradient reduction, DDP's buckets, tensor-parallel overlap, FSDP's / ZeRO-3's
    and HSDP's prefetched gathers, context parallelism's ring exchange under attention) or not priced for it
    (experts) are refused rather than priced as if the flag changed nothing there."""
    if not getattr(cfg, "launch_blocking", False):
        return None
    if cfg.execution != "compiled":
        return f"launch_blocking is priced on the compiled execution model's kernels, not {cfg.execution}"
    if (cfg.dp_overlap or cfg.ddp or cfg.tp_comm_overlap or cfg.experts or cfg.zero_stage >= 3 or cfg.dp_shard
            or cfg.cp > 1):
        return ("launch_blocking: every collective waits for its kernel, so it cannot overlap compute "
                "(dp_overlap, ddp, tp_comm_overlap, FSDP / ZeRO-3 / dp_shard, cp > 1); not priced with experts")
    return None
