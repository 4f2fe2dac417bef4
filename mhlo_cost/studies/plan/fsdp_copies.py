"""FSDP2's copies on the compute stream (``fsdp_version`` 2: ``torch.distributed.fsdp.fully_shard``, torchtitan's FSDP).

FSDP2 gathers a layer's parameters into one flat buffer and copies them out into the per-parameter unsharded
tensors, and copies the unsharded gradients into one flat reduce-scatter buffer, both on the compute stream
(``torch/distributed/_composable/fsdp/_fsdp_collectives.py``, torch 2.5-2.6, as torchtitan's 2024 tables ran it):

* before each all-gather, ``foreach_all_gather`` copies the rank's shards into the all-gather input, cast to the
  ``param_dtype`` (fp32 shard read, bf16 written: 1/shard of the layer) - on the all-gather copy-in stream, beside
  the previous layer's compute: not on the compute stream, not priced here;
* after it, ``foreach_all_gather_copy_out`` (called from ``FSDPParamGroup.wait_for_unshard`` on the current stream)
  ``torch.split_with_sizes_copy`` the gathered bf16 buffer into the parameters' unsharded storage: the layer's bf16
  weights read and written, once per all-gather (forward, and backward where the parameters were resharded after
  the forward);
* with torchao's fp8 all-gather (``fsdp_float8_all_gather``, torchao eab345c ``WeightWithDynamicFloat8CastTensor``):
  ``fsdp_pre_all_gather`` casts the fp32 shard to fp8 and hands FSDP ``float8_tensor._data`` (its amax all-reduce:
  :mod:`.fp8_gather`), inside ``foreach_all_gather``'s copy-in stream, so the cast kernels sit with the copy-in,
  off the compute stream; the copy-out splits the gathered buffer into each parameter's all-gather output at that
  input's dtype (``init_all_gather_outputs(..., all_gather_input_dtypes, ...)``), so the fp8 linears' weights are
  read and written at 1 byte an element (the norms at 2: :func:`.fp8_weights.gathered_bytes`), and
  ``fsdp_post_all_gather`` wraps that uint8 output as a ``Float8Tensor`` without a copy. ``Float8Linear`` then
  takes the weight as already cast (``cast_weight_to_float8_t``: ``tensor_already_casted_to_fp8``) and its
  backward reads the fp8 weight it saved: the layer program's weight casts run on no stream of the step
  (:func:`.fp8_weights.per_micro_batch` takes them out);
* after the backward, ``foreach_reduce`` copies the unsharded bf16 gradients into the reduce-scatter input in the
  ``reduce_dtype`` (``foreach_reduce_scatter_copy_in``: ``torch._chunk_cat``; bf16 read, ``grad_bytes`` written) on
  the current stream before handing it to the reduce-scatter stream (the predivide, ``_div_if_needed``, runs there,
  beside the compute: not priced here).

FSDP1 (``FullyShardedDataParallel``'s FlatParameter) all-gathers straight into the flat parameter's unsharded
storage that the parameters view, and casts and divides its gradients on its post-backward stream: none of these
copies on the compute stream (``fsdp_version`` 1, the default, as ZeRO 3 is priced elsewhere).

Counts are exact ints, per layer and micro-batch on one device, in step with the all-gathers and reduce-scatters
:func:`.sharding.dp_collectives` prices; times are the profile's memory model, one kernel each.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import ScaleConfig
from .fp8_weights import gathered_bytes


@dataclass(frozen=True)
class FsdpCopies:
    """One layer, one micro-batch, one device: bytes and kernels of FSDP2's copies by phase."""

    forward_bytes: int = 0
    forward_kernels: int = 0
    backward_bytes: int = 0
    backward_kernels: int = 0


def fsdp_copies(cfg: ScaleConfig, weight_elems: int) -> FsdpCopies:
    """The :class:`FsdpCopies` of ``cfg``'s layer of ``weight_elems`` bf16 weights on this device (none unless
    FSDP2 shards over more than one rank)."""
    if cfg.fsdp_version != 2 or cfg.zero_stage != 3 or cfg.cp * cfg.d == 1:
        return FsdpCopies()
    copy_out = 2 * gathered_bytes(cfg, 2 * weight_elems)  # the gathered buffer read, the unsharded parameters written
    copy_in = weight_elems * (2 + cfg.grad_bytes)  # bf16 gradients read, the reduce-scatter input written
    again = 1 if cfg.reshard_after_forward else 0  # the backward's all-gather
    return FsdpCopies(copy_out, 1, again * copy_out + copy_in, again + 1)


def fsdp_copy_seconds(cfg: ScaleConfig, hw, weight_elems: int) -> tuple[float, float]:
    """(forward, backward) seconds of :func:`fsdp_copies` on ``hw`` (0 without a profile)."""
    c = fsdp_copies(cfg, weight_elems)
    if hw is None or not c.forward_bytes:
        return 0.0, 0.0
    return hw.memory_time(c.forward_bytes, c.forward_kernels), hw.memory_time(c.backward_bytes, c.backward_kernels)
