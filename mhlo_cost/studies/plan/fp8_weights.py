"""fp8 weight copies made once an optimizer step (``fp8_weight_cache``): Transformer Engine's ``is_first_microbatch``.

Under an fp8 recipe each linear's GEMMs read an fp8 copy of its bf16 weight (its amax, its scale, the cast: the
layer's rows under the scope ``fp8_weight``, :data:`mhlo_cost.lower.models.quant.WEIGHT_SCOPE`, whose seconds
:func:`mhlo_cost.studies.plan.costs.analyse_layer` keeps by phase in ``LayerCost.weight_cast_s``). The weights change
only at the optimizer step, and the stacks differ in whether they make that copy again each micro-batch:

* **Megatron-Core / NeMo / Megatron-Bridge with Transformer Engine** (``fp8_weight_cache=True``): the schedule's
  ``forward_step`` calls ``model.set_is_first_microbatch()`` on micro-batch 0 of each step
  (megatron/core/pipeline_parallel/schedules.py), which sets every TE wrapper's ``is_first_microbatch``; each
  wrapper passes it to TE and clears it after its forward (megatron/core/extensions/transformer_engine.py,
  ``TELinear.forward``: ``_is_first_microbatch = None if self.disable_parameter_transpose_cache else
  self.is_first_microbatch``, then ``self.is_first_microbatch = False``). TE's Linear / LayerNormLinear /
  LayerNormMLP / GroupedLinear forward then quantizes the weight into a named workspace only when the flag is True
  (transformer_engine/pytorch/module/linear.py: ``update_workspace = is_first_microbatch is None or
  is_first_microbatch``; ``get_weight_workspace(cache_name="weight", update_workspace=...)``), with the row-wise
  (forward) and column-wise (dgrad's transposed) copies both made then (``weight_quantizer.set_usage(rowwise=True,
  columnwise=...)``). So the later micro-batches' forwards, their backwards and any activation recompute (which
  runs after the flag was cleared) make no weight cast at all: the casts are paid once a step.
* **torchtitan's float8 (torchao)** (``fp8_weight_cache=False``, the default): every call casts, no copy is kept
  between micro-batches (torchao's ``precompute_float8_dynamic_scale_for_fsdp`` computes only the scales, for FSDP's
  fp8 all-gather), so the forward's casts stay in every micro-batch as lowered. What the backward runs depends on the
  torchao version and the scaling (torchao/float8/float8_linear.py):

  - at eab345c (the torchtitan 2024-12 tables' version), tensorwise (``fp8-tensorwise``, no axiswise cast config):
    ``Float8Linear.forward`` casts the input and the weight once (``cast_input_to_float8``,
    ``cast_weight_to_float8_t``; ``force_recompute_fp8_weight_in_bwd`` is False by default, and torchtitan 9dec370's
    ``Float8Handler`` leaves it so) and calls ``manual_float8_matmul_with_args_in_float8``, whose forward
    ``ctx.save_for_backward(input_fp8, weight_fp8_t)``: the backward reads the saved fp8 weight and casts no weight
    (:func:`saves_cast`, :func:`saved_cast_backward`). Its dgrad takes ``weight_fp8_t.t()``, row-major, as
    ``_scaled_mm``'s second operand, which torchao's ``preprocess_addmm`` (torchao/float8/float8_ops.py) makes
    column-major with ``b_data.t().contiguous().t()``: an fp8 transpose of each weight, 1 byte read and 1 written an
    element, one kernel a linear (:func:`weight_transposes`; ESTIMATE under torch.compile: the partitioner may as well
    save the transposed copy, which Inductor could then write from the forward's cast kernel, 1 byte an element more
    written there instead of this kernel: the two cuts weigh the same, so priced as eager runs it). Under
    torch.compile the joint graph goes to AOTAutograd's min-cut partitioner (torch/_functorch/partitioners.py
    ``min_cut_rematerialization_partition``, read at torch 00c07b9, the stored version nearest the rows' 1963fc8,
    which was not read): the weight's amax (``max``, a scalar out of the whole weight) is banned from recompute
    (the reduction rule: output 4x smaller than its input), the parameter itself is a primal (never recomputed, 2
    bytes an element if saved), and the cast's output, 1 byte an element and materialized (the forward
    ``_scaled_mm`` reads it, no fusion), is the cheaper cut: compiled, the fp8 weight is saved as in eager, not
    recast. Under activation checkpointing it is not saved: full
    recompute re-runs the layer's forward, its casts with it (compiled, every weight's, w2's too, which the program's
    recompute phase lacks: :func:`.torchao_casts.compiled_full_weights`); torchtitan 9dec370's op
    policy saves ``mm`` (every other), the attention, ``abs`` and ``max`` (``_save_list``) and marks the cast's
    ``_to_copy`` PREFER_RECOMPUTE, so the cast is made again from the saved amax in the backward's recompute (the
    program's recompute phase has no weight cast: :func:`.torchao_casts.op_weight_recast` prices it). The saved fp8
    weight held from the forward to the backward where neither remakes it: :func:`saved_weight_bytes`;
  - rowwise (``fp8-rowwise``, the axiswise path ``manual_float8_matmul_with_args_in_hp``) and later torchao
    (``matmul_with_hp_or_float8_args``) save the bf16 input and weight and cast the weight in the forward and again
    in the backward: the program's backward casts (``_fp8_backward`` in :mod:`mhlo_cost.lower.models.quant`) stay.

Where the once-a-step cast sits in the iteration: it runs in micro-batch 0's forward on every pipeline stage, and
micro-batch 0's forward crosses every stage on the schedule's critical path (the pipeline's fill), so the iteration
takes the casts of every layer of the pipeline once (:func:`split_step`); the slowest stage's own share is its
forward compute, the other stages' lengthen the fill (priced with the bubble, :mod:`.compose`).

**MoE experts** (:mod:`.moe`): Megatron-Core runs the local experts' GEMMs as Transformer Engine's grouped GEMM,
``TEGroupedLinear`` (megatron/core/extensions/transformer_engine.py), whose ``forward`` passes
``is_first_microbatch`` to TE and clears it exactly as ``TELinear.forward`` does; TE's ``_GroupedLinear.forward``
(transformer_engine/pytorch/module/grouped_linear.py) casts each expert's weight with ``update_workspace =
is_first_microbatch is None or is_first_microbatch`` into the workspace ``cache_name=f"weight{i}"``, saves those fp8
weights for its backward (no cast there), and sets the weight quantizer's column-wise usage with its row-wise one.
So the experts' casts (scope ``fp8_weight`` in the routed part's program, each expert's forward and backward cast)
are paid once a step as the dense linears' are (:func:`per_micro_batch`, :func:`layer_step_seconds` on the routed
part's :class:`~.costs.LayerCost`).

**Memory** (:func:`copy_bytes`): the kept copies live through the step. Per fp8 weight TE keeps its row-wise fp8
data and, for the backward's dgrad, a column-wise one: on Hopper the fp8 GEMM takes only the TN layout, so the
column-wise data is the transposed fp8 copy (transformer_engine/pytorch/tensor/float8_tensor.py at 006257e:
``Float8Quantizer.make_empty`` and ``Float8CurrentScalingQuantizer.make_empty`` allocate ``data``, uint8 of the
weight's shape, for the row-wise usage and ``data_transpose``, uint8 of the transposed shape, for the column-wise
one; TE 1.x's ``Float8Tensor`` kept it as ``_transpose``, filled by ``transpose_2d(fill_cache=True)``);
MXFP8 keeps a row-wise and a column-wise scaled copy too. So 2 bytes per fp8 weight element (one each), beside the
bf16 weight; the per-tensor scales, scale_inv and amax histories TE keeps are :mod:`.fp8_state`'s (MXFP8's
per-block scales, 1/32 byte per element and copy, are not counted). Only the weights of the linears the recipe runs in
fp8: the norms, biases, router, embedding and LM head stay bf16.

**Under data-parallel sharding** each stack keeps a different fp8 weight per GPU:

* TE (``fp8_weight_cache``): the workspaces are attributes of the module (transformer_engine/pytorch/module/base.py
  ``get_weight_workspace``: ``self._fp8_workspaces[cache_name]``), made from the weight the module runs with: its
  tensor-parallel shard, whole over the data-parallel group. Megatron-Core's distributed optimizer (ZeRO 1) shards
  the fp32 main weights and moments only; under ZeRO 3 (Megatron FSDP without ``--fp8-param-gather``) the bf16
  weight is gathered for the forward and freed, but the workspace made from it on micro-batch 0 stays the module's
  for the step. So 2 bytes per linear weight element x the stage's layers, per TP shard, whatever the ZeRO stage
  (:func:`kept_bytes`).
* torchao's ``Float8Linear`` (torchtitan) keeps none: under FSDP2 with ``enable_fsdp_float8_all_gather``
  (``fsdp_float8_all_gather``; torchao/float8/fsdp_utils.py ``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather``
  casts the local shard to fp8 and ``fsdp_post_all_gather`` wraps the gathered uint8 data as a ``Float8Tensor``), the
  persistent weight is the shard alone and the unsharded copy FSDP holds while a layer runs is fp8, 1 byte a linear
  weight element instead of 2 (:func:`gathered_bytes`); without it the gathered weight is bf16, cast at each use.
  (:mod:`.sharding` prices those all-gathers at the same bytes, with their amax all-reduces: :mod:`.fp8_gather`.)
"""
from __future__ import annotations

import math


def cached(cfg) -> bool:
    """Whether ``cfg``'s fp8 weight copies are made once a step (TE's ``is_first_microbatch``)."""
    return bool(getattr(cfg, "fp8_weight_cache", False)) and cfg.precision != "bf16"


def delayed(cfg) -> bool:
    """Whether ``cfg``'s fp8 casts run as Transformer Engine's delayed scaling: TE's stack (its weight copies kept,
    :func:`cached`), a per-tensor recipe and an amax history longer than one (1: current scaling). Under it
    :mod:`.te_amax` takes out the program's amax-and-cast kernels and :mod:`.mlp_activation` prices TE's cast of
    fc2's input, the amax recorded in it."""
    return cached(cfg) and cfg.precision == "fp8-tensorwise" and cfg.fp8_amax_history > 1


def current(cfg) -> bool:
    """Whether ``cfg``'s fp8 casts run as Transformer Engine 2.x's current scaling (``Float8CurrentScaling``,
    Megatron-Bridge's FP8-CS): TE's stack (:func:`cached`), a per-tensor recipe and an amax history of one. Under it
    :mod:`.te_amax` replaces the program's amax-and-cast kernels by TE's quantize (an amax kernel, the scale's, the
    cast: ``Float8CurrentScalingQuantizer::quantize_impl``) and :mod:`.mlp_activation` prices fc2's input's."""
    return cached(cfg) and cfg.precision == "fp8-tensorwise" and cfg.fp8_amax_history == 1


def cast_before_gather(cfg) -> bool:
    """Whether FSDP casts ``cfg``'s fp8 weights before its all-gather (torchao's ``fsdp_pre_all_gather``, on the
    copy-in stream: :mod:`.fsdp_copies`), so that ``Float8Linear`` casts no weight in its forward or backward."""
    return bool(getattr(cfg, "fsdp_float8_all_gather", False)) and cfg.precision != "bf16"


def reads_saved_weight(cfg) -> bool:
    """Whether ``cfg``'s dense linears are torchao eab345c's tensorwise ``Float8Linear``, whose backward reads the
    fp8 weight its forward saved (``manual_float8_matmul_with_args_in_float8``'s ``weight_fp8_t``) and transposes
    it for the dgrad: ``fp8-tensorwise`` without TE's cache (:func:`cached`), on the planner's own layer, whether the
    forward cast it or FSDP's fp8 all-gather did (:func:`cast_before_gather`)."""
    return cfg.precision == "fp8-tensorwise" and not cached(cfg) and getattr(cfg, "lower_layer", None) is None


def saves_cast(cfg) -> bool:
    """Whether ``cfg``'s linears save a weight their forward cast (:func:`reads_saved_weight`) as a copy of its own
    held until the backward: not under torchao's fp8 all-gather (:func:`cast_before_gather`: the saved weight is the
    gathered fp8 tensor FSDP holds)."""
    return reads_saved_weight(cfg) and not cast_before_gather(cfg)


def linear_count(cfg) -> int:
    """The dense layer's linears on one device (those with a weight ``w``): 0 for a model's own layer."""
    if getattr(cfg, "lower_layer", None) is not None:
        return 0
    return sum(1 for p in _param_shapes(cfg).values() if "w" in p)


def weight_transposes(cfg) -> tuple[int, int]:
    """(bytes, kernels) of one layer-micro-batch's fp8 weight transposes in the backward where it reads a saved fp8
    weight (:func:`reads_saved_weight`, the fp8 all-gather's too): torchao's ``preprocess_addmm`` makes dgrad's
    row-major ``weight_fp8_t.t()`` column-major, 1 byte read and 1 written per linear weight element, one kernel a
    linear; (0, 0) otherwise."""
    if not reads_saved_weight(cfg):
        return 0, 0
    return 2 * linear_weight_elems(cfg), linear_count(cfg)


def saved_cast_backward(cfg, cost, hw) -> float:
    """Seconds to take out of each micro-batch's backward of one layer where it reads a saved fp8 weight
    (:func:`reads_saved_weight`; 0.0 otherwise, and without a profile ``hw``, as the MoE plan's layers are composed):
    the program's backward weight casts (amax and cast, scope ``fp8_weight``; under the fp8 all-gather
    :func:`per_micro_batch` takes them out already), less the fp8 transposes run instead (:func:`weight_transposes`,
    ``hw``'s memory model)."""
    if hw is None or not reads_saved_weight(cfg):
        return 0.0
    nbytes, kernels = weight_transposes(cfg)
    recast = 0.0 if cast_before_gather(cfg) else cost.weight_cast_s["backward"]
    return recast - hw.memory_time(nbytes, kernels)


def saved_weight_bytes(cfg) -> int:
    """Bytes one layer-micro-batch holds from its forward to its backward in saved fp8 weights (:func:`saves_cast`):
    1 a linear weight element and each linear's fp32 scale (a 0-d tensor, 4 bytes); 0 where no copy is saved or
    where a recompute makes it again (torchtitan's op policy; full recompute is the caller's share,
    :func:`.partial_recompute.full_share`)."""
    if not saves_cast(cfg) or cfg.recompute == "op":
        return 0
    return linear_weight_elems(cfg) + 4 * linear_count(cfg)


def per_micro_batch(cfg, cost) -> tuple[float, float, float]:
    """Seconds of weight casts to take OUT of each micro-batch's (forward, backward, recompute) of one layer:
    every phase's casts where they are cached or made before FSDP's all-gather (:func:`cast_before_gather`; full
    recompute re-runs the forward's, the others their own recompute phase's), none otherwise."""
    if not cached(cfg) and not cast_before_gather(cfg):
        return 0.0, 0.0, 0.0
    from .recompute import recompute_seconds, reruns_core

    w = cost.weight_cast_s
    # (a re-run core attention holds no weight casts: the recompute it is charged for has none to take out)
    return w["forward"], w["backward"], 0.0 if reruns_core(cfg) else recompute_seconds(cfg, w)


def layer_step_seconds(cfg, cost) -> float:
    """One layer's weight casts made once a step where cached (0.0 otherwise): the forward's and the backward's
    (TE makes the row-wise and the column-wise copy on the first micro-batch); a recompute's are a repeat of the
    forward's, never needed."""
    if not cached(cfg):
        return 0.0
    return cost.weight_cast_s["forward"] + cost.weight_cast_s["backward"]


def split_step(cfg, cost, stages: list, slow_layers: int) -> tuple[float, float]:
    """The once-a-step casts of one iteration as (the slowest stage's own: its ``slow_layers`` layers' casts, a
    forward compute of micro-batch 0; the other stages': the fill made longer), seconds; (0.0, 0.0) where the
    copies are made each micro-batch."""
    one = layer_step_seconds(cfg, cost)
    every = one * sum(s["layers"] for s in stages)
    own = one * slow_layers
    return own, every - own


def linear_weight_elems(cfg) -> int:
    """Elements of one device's dense-layer linear weights (the operands an fp8 recipe casts), from the layer's own
    parameter shapes (:func:`.layer.param_shapes`, :func:`.llama_layer.param_shapes`): 0 for a model's own layer."""
    if getattr(cfg, "lower_layer", None) is not None:
        return 0
    return sum(math.prod(p["w"].shape) for p in _param_shapes(cfg).values() if "w" in p)


def _param_shapes(cfg) -> dict:
    if cfg.arch == "llama":
        from .llama_layer import param_shapes
    else:
        from .layer import param_shapes
    return param_shapes(cfg)


def copy_bytes(cfg, linear_elems: int) -> int:
    """Bytes of the fp8 weight copies kept for ``linear_elems`` fp8 weight elements where cached (row-wise and
    column-wise: 2 a element), else 0."""
    return 2 * linear_elems if cached(cfg) else 0


def kept_bytes(cfg, layers: int) -> int:
    """Bytes of the fp8 weight copies ``layers`` dense layers keep where cached (:func:`copy_bytes`), else 0."""
    return copy_bytes(cfg, linear_weight_elems(cfg) * layers) if cached(cfg) else 0


def gathered_bytes(cfg, weight_bytes: int) -> int:
    """Bytes of one layer's unsharded weights while FSDP holds them gathered (``weight_bytes`` in the layer's dtype):
    with torchao's fp8 all-gather (``fsdp_float8_all_gather``) the fp8 linears' weights at 1 byte an element."""
    if not cfg.fsdp_float8_all_gather or cfg.precision == "bf16":
        return weight_bytes
    import jax.numpy as jnp

    return weight_bytes - (jnp.dtype(cfg.dtype).itemsize - 1) * linear_weight_elems(cfg)
