"""Transformer Engine's context-parallel ring: its own memory passes beside the attention kernels (``cp_comm`` p2p).

Megatron-Core's ``--cp-comm-type p2p`` (the default) runs TE's ``AttnFuncWithCP`` (``transformer_engine/pytorch/
attention.py`` at tag v1.8, July 2024; the same statements at v1.7 and v1.9, which bracket NeMo's 24.07 container;
moved to ``attention/dot_product_attention/context_parallel.py`` later), which calls the fused attention kernel once
per ring step, on the load-balanced chunks, and between the calls runs elementwise work of its own that the layer's
single attention kernel does not. The causal, ``sbhd`` (Megatron's) path, on rank ``cp - 1``: with the load-balanced
split every later step of it is an ``i <= rank`` step (its full queries against the first half of the received keys,
the output merged whole), the most bytes of any rank (forward and backward together); the attention's FLOPs are the
same on every rank.

forward (per layer and micro-batch)
  * ``p2p_comm_buffers[0] = torch.cat((k.unsqueeze(0), v.unsqueeze(0)))``: K and V read and written, bf16;
  * each later step: ``kv_inputs[i % 2][:, 0, ...].contiguous()``, the first half of the received K and V copied;
  * ``out = torch.empty_like(q).zero_()`` (bf16) and ``torch.clone(softmax_lse_per_step[0]).to(torch.double)``
    (fp32 copied, then widened to fp64);
  * each later step's ``flash_attn_fwd_softmax_lse_correction`` (the fp64 log-sum-exps read and written, the
    step's fp32 read), then ``softmax_lse.to(torch.float)``;
  * each step's ``flash_attn_fwd_out_correction``: ``out.add_(out_per_step * exp(lse_step - lse))``, the bf16
    output read and written, the step's output read, both log-sum-exps (fp32) read;

backward
  * ``softmax_lse_[..., 1, :].contiguous()`` (the second half's fp32 log-sum-exps) and
    ``p2p_comm_buffers[0][0].copy_(kv)`` (K and V into the send buffer);
  * each step but the local one: ``kv[:, 0, ...].contiguous()`` (half of K and V copied);
  * each step: ``dkv_ = torch.cat((dk_, dv_))`` (the local step's whole, the others' half), dQ copied
    (the first step) or added (``dq.add_(dq_)``: read twice, written once) and dK/dV copied into the first half
    (the first step), added into it (the middle steps) or added whole (the local step, last);
  * each further fused backward call runs its two memory-bound passes (D = rowsum(dO * O), the fp32 dQ
    accumulator: :func:`mhlo_cost.machines.kernels.backward_pass_bytes`) over the full query rows; the layer's
    single attention kernel prices them once, the ring's ``cp - 1`` further calls add theirs.

Bytes are the least these statements move (each statement one kernel that reads its inputs once and writes its
outputs once; ``jit_fuser``'s corrections one kernel each). K and V keep the model's ``kv`` heads (TE's fused
attention takes grouped heads as they are). The extra reads of Q and writes of each step's output by the attention
calls themselves run inside compute-bound kernels and are not added. Counts are exact ints; times are the profile's
memory model.
"""
from __future__ import annotations

from ...machines.kernels import backward_pass_bytes
from .config import ScaleConfig
from .ring_passes import RingPasses


def _sizes(cfg: ScaleConfig) -> tuple[int, int, int, int]:
    """(E, K, L, d): elements of the local queries / output (b x heads/t x s/cp x d), of one of K or V
    (b x kv/t x s/cp x d), the log-sum-exp rows (b x heads/t x s/cp), the head dim."""
    d = cfg.hidden // cfg.heads
    rows = cfg.micro_batch * (cfg.heads // cfg.t) * cfg.local_seq
    return rows * d, cfg.micro_batch * (cfg.kv // cfg.t) * cfg.local_seq * d, rows, d


def te_cp_passes(cfg: ScaleConfig) -> RingPasses:
    """The passes of TE's p2p ring for ``cfg`` (none without context parallelism, with another ``cp_comm``, or with
    unfused attention: ``AttnFuncWithCP`` runs under TE's fused attention only)."""
    if cfg.cp == 1 or cfg.cp_comm != "p2p" or cfg.attention != "fused":
        return RingPasses()
    e, k, lse, d = _sizes(cfg)
    n = cfg.cp
    # cat of K, V (2 + 2 bytes each); each later step's half K/V copy; out zeroed; lse clone (4 + 4) and widened
    # (4 + 8); n - 1 lse corrections (fp64 read and written, the step's fp32 read); lse narrowed (8 + 4); n output
    # corrections (bf16 out read and written, the step's out read, two fp32 log-sum-exps read)
    forward = (8 * k + (n - 1) * 4 * k + 2 * e + (4 + 4 + 4 + 8) * lse + (n - 1) * (8 + 4 + 8) * lse
               + (8 + 4) * lse + n * (6 * e + 8 * lse))
    fwd_kernels = 1 + (n - 1) + 1 + 2 + (n - 1) + 1 + n
    # second half's lse copied (2 x 4 bytes over lse / 2 rows); K, V into the send buffer; n - 1 half K/V copies;
    # dK/dV cat (the local step whole, the others half); dQ copied once and added n - 1 times; dK/dV copied into the
    # first half (first step), added into it (middle steps), added whole (local step); the further calls' passes
    cats = 8 * k + (n - 1) * 4 * k
    dq = 4 * e + (n - 1) * 6 * e
    dkv = 4 * k + (n - 2) * 6 * k + 12 * k
    backward = (4 * lse + 8 * k + (n - 1) * 4 * k + cats + dq + dkv
                + (n - 1) * backward_pass_bytes(lse, d, 2))
    bwd_kernels = 1 + 1 + (n - 1) + 3 * n + 2 * (n - 1)
    return RingPasses(forward, fwd_kernels, backward, bwd_kernels)


def te_cp_pass_seconds(cfg: ScaleConfig, hw) -> tuple[float, float]:
    """(forward, backward) seconds of :func:`te_cp_passes` on ``hw`` (its memory model; 0 without a profile)."""
    return te_cp_passes(cfg).seconds(hw)
