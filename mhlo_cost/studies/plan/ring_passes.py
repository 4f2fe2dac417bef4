"""PyTorch ring attention's own memory passes beside its attention kernels (``cp_comm`` torch-allgather / alltoall).

PyTorch's context parallel (``torch/distributed/tensor/experimental/_attention.py``: ``_templated_ring_attention``,
its ``_SDPAMerger`` and ``_templated_ring_attention_backward``; read at pytorch/pytorch 0123248a, the same loop as
the torch 1963fc8 torchtitan's 2412 tables ran) calls the flash kernel once per ring step, on 1/cp of the keys, and
between the calls runs elementwise work of its own that a single attention kernel does not:

forward (per layer and micro-batch, one rank)
  * ``key.contiguous()``, ``value.contiguous()`` (the keys and values come transposed out of the projection):
    each read and written once, bf16;
  * the rotater's buffer ``torch.cat([key.flatten(), value.flatten()])``: with ALL_TO_ALL every step but the
    last; with ALL_GATHER (the default ``rotate_method``) only the first step's is sent
    (``_AllGatherRotater.exchange_buffers`` ignores the later ones), but the loop builds it before every call of
    ``exchange_buffers`` all the same: PyTorch eager (``execution`` eager) runs each of the cp - 1 cats; traced by
    torch.compile the later ones have no user and are dropped as dead code, one is left;
  * ``_SDPAMerger.step``: the first block's output converted to fp32 (``convert_to_f32``, default True), then each
    later block merged into it, ``out = out - sigmoid(block_lse - lse) * (out - block_out)`` and
    ``lse = lse - logsigmoid(lse - block_lse)``: the fp32 accumulator read and written, the block's bf16 output
    read, the fp32 log-sum-exps read and written; ``results()`` casts the accumulator back to bf16;

backward
  * the fp32 accumulators ``grad_query``, ``grad_key``, ``grad_value`` start from ``torch.zeros_like`` (folded into
    their first add), the keys and values made contiguous again and (as forward) cat into the rotater's buffer;
  * each of the cp steps: ``grad_query += grad_query_`` (fp32 read and written, the block's bf16 dQ read); the
    dK/dV received (fp32) updated with the block's (``_partial_update``: one half, then the halves cat back) and
    cat into the next send buffer (``torch.cat([grad_key.flatten(), grad_value.flatten()])``);
  * after the loop dQ and the last dK/dV cast to bf16;
  * each flash backward call runs its two memory-bound passes (D = rowsum(dO * O), the fp32 dQ accumulator:
    :func:`mhlo_cost.machines.kernels.backward_pass_bytes`) over its query rows; the layer's single attention
    kernel prices them once, the ring's cp - 1 further calls add theirs.

Which rank: the last (rank cp - 1) sets the pace: with the load-balanced causal split every later step of it
is an ``i <= rank`` step (its full queries against the first half of the received keys: the merge over the whole
output, the dK/dV update over half), the most merge work of any rank; the attention's FLOPs are the same on
every rank.

Bytes are the least these statements move, each statement group one kernel that reads its inputs once and writes
its outputs once (what Inductor makes of them under torch.compile, which traces the ring loop in torchtitan's
compiled blocks); PyTorch eager runs each operator as its own kernel and moves more (not priced here beyond the
cats it does not drop: a lower bound there). Counts are exact ints; times are the profile's memory model.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...machines.kernels import backward_pass_bytes
from .config import CP_TORCH, ScaleConfig


@dataclass(frozen=True)
class RingPasses:
    """One layer, one micro-batch, one rank: bytes and kernels of the ring's own passes by phase."""

    forward_bytes: int = 0
    forward_kernels: int = 0
    backward_bytes: int = 0
    backward_kernels: int = 0

    def seconds(self, hw) -> tuple[float, float]:
        """(forward, backward) seconds on ``hw``'s memory model (0 without a profile or passes)."""
        if hw is None or not self.forward_bytes:
            return 0.0, 0.0
        return (hw.memory_time(self.forward_bytes, self.forward_kernels),
                hw.memory_time(self.backward_bytes, self.backward_kernels))


def _sizes(cfg: ScaleConfig) -> tuple[int, int, int, int]:
    """(E, Ekv, L, d): elements of the local queries / output (b x heads/t x s/cp x d), of one of K or V as the
    attention call gets them (heads/t with ``kv_repeat``, else kv/t), log-sum-exp rows (b x heads/t x s/cp), the
    head dim."""
    d = cfg.hidden // cfg.heads
    rows = cfg.micro_batch * (cfg.heads // cfg.t) * cfg.local_seq
    kv_heads = cfg.heads if cfg.kv_repeat else cfg.kv
    return rows * d, cfg.micro_batch * (kv_heads // cfg.t) * cfg.local_seq * d, rows, d


def ring_passes(cfg: ScaleConfig) -> RingPasses:
    """The :class:`RingPasses` of ``cfg`` (none without PyTorch's context parallel)."""
    if cfg.cp == 1 or cfg.cp_comm not in CP_TORCH:
        return RingPasses()
    e, ekv, lse, d = _sizes(cfg)
    later = cfg.cp - 1  # steps after the local one
    # the K/V send buffer's cats: every step but the last, save under a trace with ALL_GATHER (only the first used)
    cats = 1 if cfg.cp_comm == "torch-allgather" and cfg.execution != "eager" else later
    copies = 2 * (2 + 2) * ekv  # K and V, bf16: read + written (contiguous(); one cat into the send buffer)
    # each merge: the fp32 accumulated output read and written, the block's bf16 output read; the fp32 log-sum-exps
    # (accumulated and the block's) read, the accumulated written. The first block's cast to fp32 fuses into the first
    # merge (it reads that block in bf16: 2 bytes less) and the cast back into the last (it writes bf16: 2 less)
    merges = later * ((4 + 2 + 4) * e + (4 + 4 + 4) * lse) - (2 + 2) * e
    forward = copies + cats * copies + merges
    fwd_kernels = 2 + cats + later
    # dQ: the block's bf16 dQ added to the fp32 accumulator (the zeros_like it starts from folds into the first add:
    # written only; the cast to bf16 into the last: 2 bytes less)
    dq = (2 + 4) * e + later * (4 + 2 + 4) * e - 2 * e
    # dK / dV: the first step's bf16 blocks written as the fp32 send buffer; each later step reads the received fp32
    # buffer, adds the block's bf16 half (_partial_update) and writes the next send buffer, fp32; after the loop the
    # last received buffer is cast to bf16
    dkv = 2 * (2 + 4) * ekv + later * 2 * (4 * ekv + ekv + 4 * ekv) + 2 * (4 + 2) * ekv
    flash_passes = later * backward_pass_bytes(lse, d, 2)  # the further calls' D and dQ-accumulator passes
    backward = copies + cats * copies + dq + dkv + flash_passes
    bwd_kernels = 2 + cats + 2 * cfg.cp + 1 + 2 * later
    return RingPasses(forward, fwd_kernels, backward, bwd_kernels)


def ring_pass_seconds(cfg: ScaleConfig, hw) -> tuple[float, float]:
    """(forward, backward) seconds of :func:`ring_passes` on ``hw`` (its memory model; 0 without a profile)."""
    return ring_passes(cfg).seconds(hw)

