"""Transformer Engine's amax reduction and scale update at each ``fp8_autocast`` exit (delayed scaling).

Under TE's ``DelayedScaling`` each fp8 cast records its tensor's amax in its module's amax history as it casts
(:mod:`.te_amax`); the histories are reduced and the scales recomputed apart, once per outermost ``fp8_autocast``
exit and direction, not once a step (``transformer_engine/pytorch/fp8.py`` at tag v1.8, 3ec998e9:
``FP8GlobalStateManager.reduce_and_update_fp8_tensors``):

* when: ``fp8_autocast_exit`` at depth 0 (forward; Megatron-Core core_r0.8.0, baf94af3,
  ``megatron/core/transformer/transformer_block.py`` wraps each model chunk's layers in one ``fp8_autocast``, so
  each micro-batch's forward of each chunk), and in the backward of the chunk's first fp8 module, the last to run
  (``module/layernorm_linear.py`` ``ctx.reduce_and_update_bwd_fp8_tensors``: ``is_first_fp8_module``);
* what: each module that ran under the autocast put its ``amax_history[0]`` into the global buffer
  (``module/base.py`` ``prepare_forward`` -> ``add_fp8_tensors_to_global_buffer``): ``num_gemms x 3`` forward
  amaxes and ``num_gemms x 2`` backward (``set_meta_tensor``), fp32. A Megatron-Core layer's modules: its fp8
  linears (:func:`.fp8_state.layer_gemms`, one GEMM each) and, under TE's fused attention, ``DotProductAttention``
  (``attention.py``: ``prepare_forward(..., num_gemms=3)``, its amaxes registered whenever fp8 is on);
* three steps on the compute stream, one after the other:

  1. ``torch.cat(amax_buffer)``: one fp32 read and one written per amax, in ``ceil(modules / 128)`` kernels
     (PyTorch ``aten/src/ATen/native/cuda/Shape.cu``: ``CAT_ARRAY_BATCH_SIZE = 128`` inputs a launch);
  2. ``torch.distributed.all_reduce(op=MAX, async_op=False)`` of the concatenated amaxes over the autocast's
     ``fp8_group``, only where the group has more than one rank: Megatron-Core's
     ``get_amax_reduction_group(with_context_parallel=True)`` (``parallel_state.py``), the tensor x context
     parallel ranks (``t x cp`` consecutive ranks in Megatron's order);
  3. ``tex.fused_amax_and_scale_update_after_reduction`` (``common/recipe/delayed_scaling.cu``
     ``kernel_bulk``: one block per module, up to ``AMAX_PARAMS_LIMIT`` = (32768 - 24) / 32 = 1023 modules a
     launch): per amax it rolls the history (``L - 1`` fp32 read, ``L`` written), reads the reduced amax and writes
     the scale and its inverse: ``4 (L - 1) + 4`` bytes read and ``4 L + 8`` written, ``8 (L + 1)`` in all, for a
     history of ``L`` (``fp8_amax_history``).

All three wait for the layers before them and hold the layers after them (the all-reduce is synchronous), so they
are priced exposed: per micro-batch and model chunk, a forward exit and a backward one (:func:`stage_seconds`).
Bytes and counts are exact ints (:func:`exit_counts`); seconds are the profile's memory model and its network's
all-reduce. Applies where TE's delayed scaling runs (:func:`.fp8_weights.delayed`), to a dense layer of the
plan's own (not a MoE's experts, not a model's own layer: :func:`.fp8_state.layer_gemms` 0).
"""
from __future__ import annotations

from ...network import estimate
from .fp8_state import FP32, layer_gemms
from .fp8_weights import delayed

#: Inputs one ``torch.cat`` launch takes (PyTorch aten/src/ATen/native/cuda/Shape.cu ``CAT_ARRAY_BATCH_SIZE``).
CAT_BATCH = 128
#: Modules one ``kernel_bulk`` launch takes (TE v1.8 delayed_scaling.cu: 32 KiB of constant memory less the 24-byte
#: ``OtherParams``, over the 32-byte ``AmaxParam``: an int padded to 8 and three pointers).
AMAX_PARAMS_LIMIT = (32768 - 24) // 32
#: Amaxes per GEMM of a module: forward (input, weight, output), backward (grad_output, grad_input).
PER_GEMM = {"forward": 3, "backward": 2}
#: GEMMs TE's DotProductAttention registers (attention.py v1.8 ``prepare_forward(num_gemms=3)``).
ATTENTION_GEMMS = 3


def layer_modules(cfg) -> tuple[int, int]:
    """(modules, fp8 GEMMs) of one layer in TE's global amax buffer: the layer's fp8 linears and, under fused
    attention, TE's DotProductAttention; (0, 0) where :func:`.fp8_weights.delayed` does not hold or the layer is not
    the plan's dense one."""
    if not delayed(cfg) or getattr(cfg, "experts", 0):
        return 0, 0
    linears = layer_gemms(cfg)
    if not linears:
        return 0, 0
    attn = cfg.attention == "fused"
    return linears + attn, linears + ATTENTION_GEMMS * attn


def exit_counts(cfg, layers: int, phase: str) -> dict:
    """Exact counts of one exit (``phase``: forward or backward) of a chunk of ``layers`` layers: ``amaxes``, the
    all-reduce's ``bytes`` (0 with a group of one rank), the ``cat`` and ``update`` kernels' bytes and kernels."""
    modules, gemms = layer_modules(cfg)
    modules, amaxes = modules * layers, gemms * layers * PER_GEMM[phase]
    if not modules:
        return {"amaxes": 0, "bytes": 0, "cat_bytes": 0, "cat_kernels": 0, "update_bytes": 0, "update_kernels": 0}
    history = cfg.fp8_amax_history
    return {"amaxes": amaxes, "bytes": FP32 * amaxes if cfg.t * cfg.cp > 1 else 0,
            "cat_bytes": 2 * FP32 * amaxes, "cat_kernels": -(-modules // CAT_BATCH),
            "update_bytes": 2 * FP32 * (history + 1) * amaxes, "update_kernels": -(-modules // AMAX_PARAMS_LIMIT)}


def exit_seconds(cfg, hw, layers: int, phase: str) -> float:
    """Seconds of one exit on ``hw``: the cat and the update in the profile's memory model, the all-reduce (MAX)
    over the ``t x cp`` ranks on its network (none without one); 0 where nothing applies."""
    c = exit_counts(cfg, layers, phase)
    if not c["amaxes"] or hw is None:
        return 0.0
    s = hw.memory_time(c["cat_bytes"], c["cat_kernels"]) + hw.memory_time(c["update_bytes"], c["update_kernels"])
    topo = getattr(hw, "topology", None)
    if c["bytes"] and topo is not None:
        s += estimate(topo, "all_reduce", c["bytes"], (tuple(range(cfg.t * cfg.cp)),)).time_s
    return s


def chunks(layers: int, v: int) -> list[int]:
    """A stage's ``layers`` in its ``v`` model chunks (as even as they divide; the first ones one more)."""
    v = max(1, v)
    return [layers // v + (i < layers % v) for i in range(v)]


def stage_seconds(cfg, hw, layers: int) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch of a stage of ``layers`` layers: one exit each way per model
    chunk (``interleave`` of them)."""
    parts = [n for n in chunks(layers, cfg.interleave) if n]
    return (sum(exit_seconds(cfg, hw, n, "forward") for n in parts),
            sum(exit_seconds(cfg, hw, n, "backward") for n in parts))
