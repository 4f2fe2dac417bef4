"""Why a configuration's data-parallel overlap options (:mod:`.dp_overlap`) cannot run, in one sentence."""
from __future__ import annotations

#: How the data-parallel reduction overlaps the backward (``ScaleConfig.ddp``): "" hides it under one model
#: chunk's last backward; ``megatron``: Megatron-Core's DistributedDataParallel (buckets, chunks, :mod:`.dp_overlap`)
DDP = ("", "megatron")


def ddp_invalid(cfg) -> str | None:
    """Why ``cfg``'s ``ddp``, ``ddp_bucket_size`` and ``overlap_param_gather`` cannot go together; None where they can."""
    if cfg.ddp not in DDP:
        return f"ddp must be one of {', '.join(repr(d) for d in DDP)}, got {cfg.ddp!r}"
    size = cfg.ddp_bucket_size
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"ddp_bucket_size must be a positive integer (0: Megatron-Core's default), got {size!r}"
    if cfg.ddp == "megatron" and (not cfg.dp_overlap or cfg.zero_stage > 1 or cfg.dp_reduce != "reduce_scatter"):
        return ("ddp megatron (Megatron-Core's overlapped gradient reduction) needs dp_overlap and ZeRO 0 or 1 with "
                "the reduce_scatter reduction")
    if cfg.ddp == "megatron" and cfg.experts:
        return "ddp megatron (Megatron-Core's overlapped gradient reduction) is not priced with experts yet"
    if cfg.ddp == "megatron" and cfg.replicate_degree > 1:
        return ("ddp megatron with a sharding group (dp_shard, HSDP) is not priced: its replica all_reduce is not in "
                "the bucket schedule")
    if (size or cfg.overlap_param_gather) and cfg.ddp != "megatron":
        return "ddp_bucket_size and overlap_param_gather are Megatron-Core's options: they need ddp megatron"
    if cfg.overlap_param_gather and cfg.zero_stage != 1:
        return "overlap_param_gather needs the distributed optimizer (ZeRO 1)"
    return None
