"""Transformer Engine's fp8 scaling state per GPU: its quantizers' scales and amax histories (``fp8_scale_state``).

Each TE module that runs its GEMMs in fp8 holds a recipe state for its forward and one for its backward
(transformer_engine/pytorch/module/base.py at 006257e, ``TransformerEngineBaseModule.set_meta_tensor``:
``num_fp8_tensors = num_gemms * 3 if fwd else num_gemms * 2``, the forward's input, weight and output, the
backward's grad_output and grad_input; ``RecipeState.create(recipe, mode=..., num_quantizers=num_fp8_tensors)``),
so five quantizers per fp8 GEMM weight, each in fp32 (transformer_engine/pytorch/fp8.py at 006257e):

* delayed scaling (``DelayedScalingRecipeState``): ``scale`` (one fp32 per quantizer) and ``amax_history``
  (``recipe.amax_history_len`` x quantizers, fp32): 4 (1 + len) bytes a quantizer. ``amax_history_len`` is the
  recipe's (``fp8_amax_history``): TE's ``DelayedScaling`` default and NeMo-Framework-Launcher's yamls
  (``fp8_amax_history_len: 1024``) 1024, Megatron-Core's ``--fp8-amax-history-len`` default 1;
* current scaling (``Float8CurrentScalingRecipeState``: no recipe buffers; each ``Float8CurrentScalingQuantizer``
  allocates ``scale`` and ``amax``, one fp32 each, transformer_engine/pytorch/tensor/float8_tensor.py): 8 bytes,
  the same as a history of 1 (``fp8_amax_history = 1``).

Beside them each kept fp8 weight (the workspace of :mod:`.fp8_weights`) holds its ``scale_inv``, one fp32
(float8_tensor.py ``make_empty``: ``fp8_scale_inv=torch.empty(1, dtype=torch.float32)``, shared by its row-wise
and column-wise data). The activations' and gradients' fp8 tensors and their scales live only while they are used
(in the activations as lowered); the global amax buffers (``FP8GlobalStateManager``) hold views of these histories.

A Megatron-Core layer's TE modules (megatron/core/models/gpt/gpt_layer_specs.py, TE spec): ``linear_qkv`` (one
module with grouped-query attention too), ``linear_proj``, ``linear_fc1`` (the gate and up projections in one
weight under SwiGLU, megatron/core/transformer/mlp.py ``gated_linear_unit``) and ``linear_fc2``, one GEMM each;
the routed experts' ``TEGroupedLinear`` fc1 and fc2 have one GEMM per local expert. Counted where the copies are
(``fp8_weight_cache``: the Megatron-Core + TE stacks); torchao's tensorwise dynamic scaling keeps no scale state
between uses.
"""
from __future__ import annotations

import math

from .fp8_weights import cached

FP32 = 4
#: Quantizers a TE module holds per fp8 GEMM (base.py ``set_meta_tensor``): 3 forward + 2 backward.
QUANTIZERS_PER_GEMM = 5


def gemm_state_bytes(cfg) -> int:
    """Bytes of the scaling state of one fp8 GEMM weight of ``cfg``: five quantizers' scale and amax history, and
    its kept copy's scale_inv."""
    return QUANTIZERS_PER_GEMM * FP32 * (1 + cfg.fp8_amax_history) + FP32


def layer_gemms(cfg) -> int:
    """TE modules (one fp8 GEMM each) of one dense layer of ``cfg``, from the layer's own linear weights
    (:func:`.layer.param_shapes`): q, k and v as one ``linear_qkv``, the gate with the up projection in
    ``linear_fc1``; 0 for a model's own layer."""
    if getattr(cfg, "lower_layer", None) is not None:
        return 0
    if cfg.arch == "llama":
        from .llama_layer import param_shapes
    else:
        from .layer import param_shapes
    names = {k for k, p in param_shapes(cfg).items() if "w" in p and math.prod(p["w"].shape)}
    return len(names - {"k", "v", "gate"})


def state_bytes(cfg, gemms: int) -> int:
    """Bytes of the scaling state of ``gemms`` fp8 GEMM weights where TE keeps them (:func:`.fp8_weights.cached`)
    under a per-tensor recipe, else 0 (MXFP8's and block scaling's recipe states allocate nothing, fp8.py; their
    per-block scales are not counted)."""
    return gemms * gemm_state_bytes(cfg) if cached(cfg) and cfg.precision == "fp8-tensorwise" else 0
