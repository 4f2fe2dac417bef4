"""Whether a configuration's attention can be priced as Megatron's own kernels (:mod:`.attention_kernels`): the
checks alone, importing nothing of the plan, so that :mod:`.config_check` can ask without importing the pricing."""
from __future__ import annotations

#: ``ScaleConfig.attention_kernel``: compiled (the lowered ops under the fusion model) | megatron (Megatron-LM's
#: scaled_upper_triang_masked_softmax and PyTorch's fused dropout)
ATTENTION_KERNEL = ("compiled", "megatron")
#: Megatron's custom_kernel_constraint on the key length (fused_softmax.py at de7dc40)
MAX_SEQ = 2048
#: Above this key length the kernel runs 4 matrices a block and vectors of 4 at de7dc40 and 28b6ffce alike
#: (scaled_upper_triang_masked_softmax.h: batches_per_warp, ELEMENTS_PER_LDG_STG); priced there only
MIN_SEQ = 128
#: The score dtypes of Megatron's custom softmax path (fused_softmax.py: input_in_float16)
DTYPES = ("bfloat16", "float16")


def refusal(cfg) -> str | None:
    """Why ``cfg``'s attention cannot be priced as Megatron's kernels (one sentence), or None."""
    if cfg.attention_kernel not in ATTENTION_KERNEL:
        return f"attention_kernel must be compiled or megatron, got {cfg.attention_kernel!r}"
    if getattr(cfg, "alibi", False) and cfg.attention_kernel != "megatron":
        return "alibi (Megatron-DeepSpeed's bias through baddbmm's beta) is priced with attention_kernel megatron"
    if cfg.attention_kernel == "compiled":
        return None
    if getattr(cfg, "lower_layer", None) is not None:  # a model with its own layer (STDiT3: .stdit3)
        return ("attention_kernel megatron (Megatron-LM's causal softmax kernels) is priced for the GPT-style "
                "layer only, not a model with its own layer (STDiT3 runs flash attention)")
    if cfg.attention != "unfused" or cfg.execution != "compiled" or cfg.cp > 1 or cfg.kv != cfg.heads:
        return ("attention_kernel megatron (Megatron-LM's unfused attention kernels) is priced for the unfused "
                "attention under the compiled execution model, without context parallelism or grouped-query heads")
    if cfg.dtype not in DTYPES:
        return f"attention_kernel megatron: Megatron's fused softmax runs on fp16 / bf16 scores, not {cfg.dtype}"
    b, s = cfg.micro_batch * (cfg.heads // cfg.t), cfg.local_seq
    if not (MIN_SEQ < s <= MAX_SEQ and s % 4 == 0 and b % 4 == 0):
        return (f"attention_kernel megatron is priced where Megatron's fused causal softmax runs with 4 score "
                f"matrices a block ({MIN_SEQ} < seq <= {MAX_SEQ}, seq and micro-batch x heads/t multiples of 4), "
                f"not seq {s} with {b} score matrices")
    return None
