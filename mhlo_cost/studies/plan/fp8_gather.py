"""The collectives torchao's float8 training (torchtitan's ``[float8]``) runs in fp8: which of them move 1 byte an
element instead of bf16's 2, and the scales they need. Read at the versions torchtitan's performance tables ran
(torchtitan 9dec370, torchao eab345c, torch 1963fc8, 2024-12; the torchtitan paper's time, arXiv 2410.06511).

**Tensor parallelism** (derived from the recipe and the execution, no option): torchtitan's ``apply_tp``
(torchtitan/parallelisms/parallelize_llama.py at 9dec370) takes, whenever float8 is on, torchao's
``Float8ColwiseParallel`` / ``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput``
(torchao/float8/float8_tensor_parallel.py at eab345c) for every block's linears and their inputs; torchtitan's own
docs/float8.md at 9dec370: "float8 all-gather ... for TP (by default for ``Float8Linear``)". With sequence
parallelism, per layer and micro-batch:

* forward, the two all-gathers of the norms' outputs (``Shard(1) -> Replicate``): ``PrepareFloat8ModuleInput``
  casts the sequence-sharded input to fp8 (``hp_tensor_to_float8_dynamic``) *before* ``redistribute``, "so that if
  there are multiple float8 users of the input activation, we perform fp8 allgather only once": fp8;
* forward, the two reduce-scatters of wo's and w2's partial outputs (``Partial -> Shard(1)``): the matmul's bf16
  output, redistributed before ``NoopFwToFloat8BwDynamic``: bf16;
* backward, the two all-gathers of wo's and w2's output gradients (the backward of that ``Partial -> Shard(1)``):
  ``NoopFwToFloat8BwDynamic`` casts the incoming gradient to fp8 on its way back, before the redistribute's
  backward gathers it (torchao/float8/float8_ops.py implements ``all_gather_into_tensor`` on ``Float8Tensor``'s
  data): fp8;
* backward, the two reduce-scatters of the norms' output gradients (the backward of the input all-gather): the sum
  of the column-parallel linears' data gradients, bf16 (``_scaled_mm`` writes the gradient in high precision): bf16.

So every all-gather of the layer is fp8 and every reduce-scatter bf16 (:func:`tp_bytes`); a full recompute's
re-run forward gathers fp8 too. Async TP (:mod:`.async_tp`) fuses the same collectives with the same dtypes. Each fp8
cast of a sharded tensor also all-reduces its amax (one fp32 scalar) over the tensor group: latency only, not priced.
Transformer Engine's stacks (execution ``compiled``) are left as they were.

**FSDP2** (``fsdp_float8_all_gather``: torchao's ``enable_fsdp_float8_all_gather``, a user's choice in torchtitan,
``--float8.enable_fsdp_float8_all_gather``): ``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather``
(torchao/float8/fsdp_utils.py at eab345c) casts the local shard to fp8 and returns ``(float8_tensor._data,)`` to
gather with its scale as metadata (not communicated): each layer's parameter all-gather moves its fp8 linears'
weights at 1 byte an element, its norms at their dtype (:func:`.fp8_weights.gathered_bytes`). The scale needs the
weight's global amax:

* without ``fsdp_float8_precompute_scale``: ``fsdp_pre_all_gather`` calls ``hp_tensor_to_float8_dynamic(...,
  reduce_amax=True, device_mesh=mesh)``: one all-reduce of the shard's amax (a fp32 scalar, the sharded fp32
  parameter's) over the sharding group per fp8 linear, before each of its all-gathers (forward, and the
  backward's re-gather) (:func:`amax_per_gather`);
* with it (``--float8.precompute_float8_dynamic_scale_for_fsdp``, torchtitan's ``Float8Handler`` calls torchao's
  ``precompute_float8_dynamic_scale_for_fsdp`` on each model part after ``optimizer.step()``): ``_foreach_norm(ord=
  inf)`` of every fp8 weight, ``torch.stack``, then one all-reduce ("It performs a single all-reduce to compute the
  scales for all float8 weights") of their fp32 amaxes, once a step after the optimizer (:func:`amax_step_bytes`);
  the gathers then cast with the precomputed scale. Its norm pass over the fp32 shards (one read) is not priced.
"""
from __future__ import annotations

#: Bytes of an amax: torchao reduces the fp32 sharded parameter's max(abs) (``tensor_to_amax``; ``_foreach_norm``)
AMAX_BYTES = 4


def tp_gathers_fp8(cfg) -> bool:
    """Whether ``cfg``'s tensor-parallel all-gathers move fp8: torchao's float8 TP plans (PyTorch's execution,
    ``eager`` / ``inductor``, with the tensorwise recipe, the only one torchtitan 9dec370 runs) with sequence
    parallelism."""
    return cfg.precision == "fp8-tensorwise" and cfg.execution != "compiled" and cfg.sp and cfg.t > 1


def tp_bytes(cfg, kind: str, s: int) -> int:
    """S of one tensor-parallel collective of ``kind`` over the layer's activation of ``s`` bytes (bf16,
    :func:`.compose.activation_bytes`): an all-gather under torchao's float8 TP moves 1 byte an element."""
    return s // 2 if kind == "all_gather" and tp_gathers_fp8(cfg) else s


def fp8_linears(cfg) -> int:
    """The fp8 linears of one layer (the weights torchao's ``Float8Linear`` holds), from the layer's own parameter
    shapes; 0 for a model's own layer."""
    if getattr(cfg, "lower_layer", None) is not None:
        return 0
    if cfg.arch == "llama":
        from .llama_layer import param_shapes
    else:
        from .layer import param_shapes
    return sum(1 for p in param_shapes(cfg).values() if "w" in p)


def _fsdp_fp8(cfg) -> bool:
    return bool(getattr(cfg, "fsdp_float8_all_gather", False)) and cfg.precision != "bf16"


def amax_per_gather(cfg) -> int:
    """How many amax all-reduces (``AMAX_BYTES`` each, over the sharding group) run before each layer's parameter
    all-gather: one per fp8 linear under the fp8 all-gather without precomputed scales, else 0."""
    if not _fsdp_fp8(cfg) or getattr(cfg, "fsdp_float8_precompute_scale", False):
        return 0
    return fp8_linears(cfg)


def amax_step_bytes(cfg, layers: int) -> int:
    """S of the one all-reduce of every fp8 weight's amax of ``layers`` layers after the optimizer step, with
    precomputed scales; 0 otherwise."""
    if not _fsdp_fp8(cfg) or not getattr(cfg, "fsdp_float8_precompute_scale", False):
        return 0
    return AMAX_BYTES * fp8_linears(cfg) * layers
