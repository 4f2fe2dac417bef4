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

``selective`` (Korthikanti et al. 2022, section 4.2: only the attention core, QK^T, softmax, softmax dropout and
attention over V, is recomputed): Megatron-Core checkpoints the core attention module only
(megatron/core/transformer/attention.py: ``self.checkpoint_core_attention = self.config.recompute_granularity ==
'selective'``, then ``_checkpointed_attention_forward`` runs ``self.core_attention`` under
``tensor_parallel.checkpoint``), so its backward runs that module's forward again, whole, and nothing else: with
unfused attention Megatron's ``DotProductAttention`` (its ``baddbmm`` of the scores, the fused scale-mask-softmax,
the attention dropout with the checkpoint's restored RNG state, the ``bmm`` over V); with one fused kernel TE's
``DotProductAttention`` (the kernel keeps no scores to remake, it is re-run whole). So R = the layer's ``core``
forward seconds (scope ``core``, :mod:`.layer`: exactly those rows), whichever the attention; the norms' and the
GELU's rows JAX remats from the saved ``ln*_in`` / ``gelu_in`` are nothing, as under ``none`` (the backward kernels
above do that arithmetic), and the program's own remade scores are replaced by the module's forward (which adds the
product with V the program does not remake). A part without attention (a MoE layer's routed experts, whose program
is not checkpointed under ``selective``) recomputes nothing. NeMo-Framework-Launcher 24.07's
``activations_checkpoint_granularity: selective`` (nemotron/nemotron_340b.yaml) is this policy. Hardware FLOPs: the
core's forward GEMMs, the scores' product the program remakes and the product with V, of the same FLOPs
(b x heads/t x s/cp x s x d x 2 each): twice the program's recompute GEMMs.

The other policies keep the program's recompute (``op``: torchtitan's ``torch.utils.checkpoint``, which does re-run
each unsaved op; ``full``: the whole forward, priced as F by :mod:`.compose`, as Megatron's reentrant
``tensor_parallel.checkpoint`` re-runs the layer's function whole before its backward).

``full`` under torch.compile (``execution`` inductor; torchtitan 9dec370 wraps each block in
``ptd_checkpoint_wrapper`` and then compiles it, ``apply_ac`` before ``apply_compile`` in
torchtitan/parallelisms/parallelize_llama.py) is the program's recompute phase instead (:func:`compiled_full`):
dynamo traces the checkpoint as the ``tag_activation_checkpoint`` higher-order op, AOTAutograd's
``min_cut_rematerialization_partition`` (torch/_functorch/partitioners.py) tags its nodes to be recomputed and
builds the backward graph from the nodes the backward's outputs need (``_extract_graph_with_inputs_outputs``), so
only what the backward reads is recomputed: not the last linear (w2 / fc2, whose output only the residual add and
the block's output read) nor its reduce_scatter / all_reduce (:func:`recomputed_collectives`); the collectives of
the region are recomputed with it (``force_save_collectives`` saves only those outside a user-annotated AC region).
That is what JAX's remat of the layer under the ``full`` policy keeps in the program's recompute phase (the QKV,
output-projection, w1 and w3 GEMMs, the attention, both gathers and the output projection's scatter). Its
attention (scope ``core``) is the forward's SDPA call again at the forward's shapes, so it takes the forward's
``core`` seconds (the program's remade attention, with context parallelism, holds a broadcast the forward's
kernel does not: about 5% more at 262k positions). A model's own layer (STDiT3:
``cfg.lower_layer``) keeps its program's recompute: there the remat'd rows are the flash attention's remade scores.
"""
from __future__ import annotations


def no_recompute(cfg) -> bool:
    """Whether ``cfg``'s dense layer runs no recompute at all (policy ``none``, the framework's own layer)."""
    return cfg.recompute == "none" and getattr(cfg, "lower_layer", None) is None


def recompute_seconds(cfg, time_s: dict, core_s: dict | None = None) -> float:
    """Seconds of one micro-batch's recompute of a layer priced at ``time_s`` (phase -> seconds): the whole
    forward under ``full``, nothing under ``none`` (:func:`no_recompute`), the core attention's forward again under
    ``selective`` (``core_s``: phase -> seconds of the scope ``core``; none given: a part without attention, nothing),
    else the program's recompute phase."""
    if cfg.recompute == "full" and compiled_full(cfg):  # the program's recompute, its attention the forward's call
        core = core_s or {}
        return time_s["recompute"] - core.get("recompute", 0.0) + core.get("forward", 0.0)
    if cfg.recompute == "full":
        return time_s["forward"]
    if reruns_core(cfg):
        return core_s["forward"] if core_s is not None else 0.0
    return 0.0 if no_recompute(cfg) else time_s["recompute"]


def reruns_core(cfg) -> bool:
    """Whether ``cfg``'s recompute re-runs the core attention module's forward and nothing else (Megatron-Core's
    selective recompute of a framework's own dense layer) rather than the program's recompute phase."""
    own = getattr(cfg, "lower_layer", None) is not None
    return cfg.recompute == "selective" and not own


def reruns_attention(cfg) -> bool:
    """Whether ``cfg``'s recompute runs the attention's forward again: ``full`` (the whole layer under
    ``tensor_parallel.checkpoint``) or Megatron-Core's ``selective`` (the core attention module under it,
    :func:`reruns_core`). Its context-parallel exchange runs again with it: TE's ``AttnFuncWithCPAndKVP2P`` /
    ``AttnFuncWithCPAndKVAllGather`` and PyTorch's ``_templated_ring_attention`` are the forward itself, re-run
    whole by the checkpoint's backward."""
    return cfg.recompute == "full" or reruns_core(cfg)


def recompute_flops(cfg, gemm_flops: dict) -> int:
    """GEMM FLOPs of one micro-batch's recompute (as :func:`recompute_seconds`): under ``selective`` the core's
    two products, the scores' (the program's recompute GEMMs) and the one with V (the same FLOPs)."""
    if cfg.recompute == "full":
        return gemm_flops["recompute"] if compiled_full(cfg) else gemm_flops["forward"]
    if reruns_core(cfg):
        return 2 * gemm_flops["recompute"]
    return 0 if no_recompute(cfg) else gemm_flops["recompute"]


def compiled_full(cfg) -> bool:
    """Whether ``cfg``'s full recompute is torch.compile's (``execution`` inductor, a dense model's layer of the
    program's): the backward graph recomputes what it reads, the program's recompute phase, not the whole forward.
    Not a MoE model's (``experts``): its token exchange (:mod:`.moe_sharding`) is priced as the whole forward
    again, and so is its layer, to match. A dense layer's TP collectives (:func:`recomputed_collectives`), TE's and
    PyTorch's overlapped pairs (:mod:`.tp_overlap`, :mod:`.async_tp`) and launches (:mod:`.launch_blocking`) follow
    it: what the backward reads, not the last linear nor its collective."""
    dense = not getattr(cfg, "experts", 0) and getattr(cfg, "lower_layer", None) is None
    return cfg.recompute == "full" and cfg.execution == "inductor" and dense


def recomputed_collectives(cfg, forward: tuple) -> tuple:
    """(kind, count) of the tensor-parallel collectives one layer's full recompute runs again, from the
    ``forward``'s: all of them, but under :func:`compiled_full` not the last linear's reduce_scatter (or all_reduce):
    the block's output, which no backward node reads."""
    if not compiled_full(cfg):
        return tuple(forward)
    last = "reduce_scatter" if cfg.sp else "all_reduce"
    return tuple((kind, n - 1 if kind == last else n) for kind, n in forward if n - (kind == last) > 0)
