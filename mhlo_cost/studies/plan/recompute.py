"""What a layer's recompute costs per micro-batch: the framework's policy, not JAX's remat.

The dense layer's program (:mod:`.layer`, :mod:`.llama_layer`) runs under ``jax.checkpoint`` with a policy that
saves by name exactly the tensors Megatron keeps for the backward (Korthikanti et al. 2022, section 4). Under the
policy ``none`` (every named tensor saved) JAX still rematerialises what is NOT named in the backward, and the walk
puts those rows in the phase ``recompute``: the LayerNorm's / RMSNorm's statistics and normalised input (from the
saved ``ln*_in``), the GELU's ``tanh`` (from the saved ``gelu_in``), the causal mask's ``iota`` / ``compare``.
No framework runs them as a recompute pass:

* Transformer Engine (Megatron-Core, NeMo, Megatron-Bridge): ``LayerNormMLP``'s forward saves the input with the
  LayerNorm's ``mu`` and ``rsigma``, ``fc1_out`` and ``gelu_out`` (transformer_engine/pytorch/module/layernorm_mlp.py,
  ``ctx.save_for_backward(inputmat, ln_weight, mu, rsigma, ln_out, fc1_out, gelu_out, ...)``; ``LayerNormLinear``
  the same for its norm); the backward's one ``tex.layernorm_bwd(dgrad, inputmat, mu, rsigma, ln_weight, ...)``
  kernel remakes the normalised input in registers, and the fused ``fp8_cast_transpose_bgrad_dgelu_fused(fc2_dgrad,
  fc1_out, ...)`` computes the GELU's derivative inline from ``fc1_out``;
* PyTorch autograd without activation checkpointing (torchtitan, LLM Foundry with ``activation_checkpointing``
  off): ``native_layer_norm`` saves ``mean`` / ``rstd`` and ``native_layer_norm_backward`` reads them with the
  input; ``gelu_backward`` reads the GELU's input (aten/src/ATen/native/native_functions.yaml, derivatives.yaml).

So with no recompute the step is the forward and the backward alone (the gradients only): the rows JAX remats are
arithmetic those backward kernels do on tensors they read anyway, and are priced at nothing.

``selective`` with one fused (flash) attention kernel (``attention="fused"``): Megatron-Core's selective recompute
checkpoints the core attention only (megatron/core/transformer/attention.py: ``self.checkpoint_core_attention =
self.config.recompute_granularity == 'selective'``, then ``_checkpointed_attention_forward`` runs the core attention
under ``tensor_parallel.checkpoint``), so its backward runs the fused attention kernel's forward again (TE's
``DotProductAttention``: the kernel keeps no scores to remake, it is re-run whole): R = the layer's ``core`` forward
seconds (the norms' and GELU's remat'd rows: nothing, as under ``none``). NeMo-Framework-Launcher 24.07's
``activations_checkpoint_granularity: selective`` (nemotron/nemotron_340b.yaml) is this policy. (Its hardware FLOPs
stay the program's recompute GEMMs: the scores' product, not the values'.)

The other policies keep the program's recompute (``selective`` with unfused attention: the softmax and dropout, as
Korthikanti's Table 5 is priced, its remat'd norm and GELU rows included as they always were; ``op``: torchtitan's
``torch.utils.checkpoint``, which does re-run each unsaved op; ``full``: the whole forward, priced as F by
:mod:`.compose`). A model's own layer (STDiT3: ``cfg.lower_layer``) keeps its program's
recompute: there the remat'd rows are the flash attention's remade scores.
"""
from __future__ import annotations


def no_recompute(cfg) -> bool:
    """Whether ``cfg``'s dense layer runs no recompute at all (policy ``none``, the framework's own layer)."""
    return cfg.recompute == "none" and getattr(cfg, "lower_layer", None) is None


def recompute_seconds(cfg, time_s: dict, core_s: dict | None = None) -> float:
    """Seconds of one micro-batch's recompute of a layer priced at ``time_s`` (phase -> seconds): the whole
    forward under ``full``, nothing under ``none`` (:func:`no_recompute`), the fused attention's forward again under
    ``selective`` where ``core_s`` (phase -> seconds of the scope ``core``) is given and the attention is one fused
    kernel, else the program's recompute phase."""
    if cfg.recompute == "full":
        return time_s["forward"]
    if core_s is not None and reruns_flash(cfg):
        return core_s["forward"]
    return 0.0 if no_recompute(cfg) else time_s["recompute"]


def reruns_flash(cfg) -> bool:
    """Whether ``cfg``'s selective recompute re-runs one fused attention kernel's forward (Megatron-Core's
    checkpointed core attention over TE's fused attention) rather than remaking the program's scores."""
    own = getattr(cfg, "lower_layer", None) is not None
    return cfg.recompute == "selective" and getattr(cfg, "attention", "") == "fused" and not own


def recompute_flops(cfg, gemm_flops: dict) -> int:
    """GEMM FLOPs of one micro-batch's recompute (as :func:`recompute_seconds`)."""
    if cfg.recompute == "full":
        return gemm_flops["forward"]
    return 0 if no_recompute(cfg) else gemm_flops["recompute"]
