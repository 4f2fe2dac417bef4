"""Gradient clipping by the global L2 norm (``clip_grad``: the max norm, None: not clipped), as each stack runs it
once a step before the optimizer: passes over the gradients a rank holds (bytes: exact ints; seconds on the chip's
memory model) and the synchronous scalar all-reduce(s) of the squared norm (the system's network). Every stack
of the validation clips at 1.0 by default; which code runs is read from the configuration (:func:`clip_kind`).

* **Megatron** (``megatron``: Megatron-LM's and Megatron-Core's ``clip_grad_norm_fp32``; NVIDIA/Megatron-LM
  ``megatron/optimizer/clip_grads.py`` as read at 03ba8eb1 (2022), the 2021 code the same passes). apex's
  ``multi_tensor_l2norm`` over the fp32 main gradients (fp16: the optimizer's fp32 copies; bf16: ``main_grad``),
  shared and tensor-parallel-duplicate parameters skipped (``param_is_not_shared``: the tied LM head's copy on the
  last stage; the duplicates only on tensor ranks other than 0, so the slowest rank reads them), then
  ``grad_norm ** 2``, a SUM all-reduce of that fp32 scalar and ``.item()``. The group: without the distributed
  optimizer the model-parallel group (tensor x pipeline ranks, ``mpu.get_model_parallel_group()``); with it
  (ZeRO 1 and Megatron-Core's FSDP) the whole world: ``DistributedOptimizer.get_model_parallel_group`` returns
  None ("With the distributed optimizer, the model parallel group is the entire world"), the norm over each rank's
  shard of the main gradients. The scale, ``multi_tensor_scale`` of every gradient (4 + 4 bytes), runs only where
  ``clip_coeff = max_norm / (norm + 1e-6) < 1``: a data-dependent branch. ESTIMATE: taken as not run: the rows are
  steady-state throughputs, and the clip at 1.0 guards against the steps whose norm exceeds it (early training,
  loss spikes), not measured for any row here; a clipped step adds 8 bytes an element in ``multi_tensor_scale``
  launches. Launches: ``multi_tensor_apply`` covers 320 blocks of 65,536 elements a launch (apex
  ``csrc/multi_tensor_apply.cuh``: ``depth_to_max_blocks``, chunk ``2048 * 32``) and at most 110 tensors a launch
  at depth 1; the l2norm adds its cleanup kernel and the ``** 2`` one.
* **Apex's DistributedFusedAdam** (``apex``: ZeRO 1 with ``dist_optimizer`` apex, NeMo 24.07's ``optim.name:
  distributed_fused_adam``, every NeMo row's yaml: NVIDIA/NeMo-Framework-Launcher ``launcher_scripts/conf/training``
  at tag 24.07, 8325688d). NeMo r2.0.0rc1 (579983fb) ``megatron_base_model.py`` ``configure_gradient_clipping``:
  ``with_distributed_adam`` calls ``clip_grad_norm_distributed_optimizer`` (``modules/common/megatron/
  clip_grads.py``): the parameters not shared and not tensor-parallel duplicates, then ``optimizer.grad_norm`` (NeMo's
  ``MegatronDistributedFusedAdam``, ``nemo/core/optim/distributed_adam.py``: apex's ``_local_grad_norm``, one
  ``multi_tensor_l2norm`` over the fragments of the rank's gradient shard in its bucket's ``grad_sync_dtype``, ``**
  2``; a SUM ``all_reduce`` with no group: the world; ``sqrt``) and ``optimizer.clip_grad_norm`` (apex
  ``apex/contrib/optimizers/distributed_fused_adam.py`` at 810ffae3, NeMo's Dockerfile's APEX_TAG: ``clip_coef =
  max_norm / (total_norm + 1e-6)``, clamped to 1, ``self._grad_scale *= clip_coef_clamped``): the clip folded into
  Adam's gradient scale, no pass over the gradients, every step. ``grad_sync_dtype`` defaults to the optimizer's
  ``dtype`` (fp32): ``grad_bytes`` an element (``grad_reduce_fp32`` False: a 2-byte ``grad_sync_dtype``).
* **DeepSpeed's BF16 optimizer** (``deepspeed``, a plan with ``grad_accum_pass``; microsoft/DeepSpeed
  ``deepspeed/runtime/bf16_optimizer.py`` at 06e39a561d7924975744e79e72c78008b9db8794, as BLOOM ran it).
  ``step`` takes ``get_global_norm_of_tensors(self.get_grads_for_norm())``: the fp32 gradients of the whole model
  (``fp32_groups_gradients``, all-reduced whole, not the rank's partition), pipe-replicated (tied) and
  tensor-duplicate parameters skipped, each ``t.data.float().norm(2).item()``: one kernel a tensor reading its 4
  bytes an element (and a host sync each, whose host time :mod:`.launch_blocking` already counts), then one
  FloatTensor SUM all-reduced over ``mpu.get_model_parallel_group()`` (tensor x pipeline ranks).
  ``clip_tensors_by_global_norm`` multiplies each gradient only where the norm exceeds the max (``clip_coef < 1``):
  the same ESTIMATE as Megatron's, not run. The norm is taken every step whatever ``clip_grad`` is (``step``:
  ``all_groups_norm = get_global_norm_of_tensors(...)``, ``assert all_groups_norm > 0.``, then ``if self.clip_grad >
  0.: clip_tensors_by_global_norm(...)``): ``clip_grad`` None removes only the scale, which is not priced, so the
  norm, its host syncs and its all-reduce are priced for this kind always. BLOOM's ``clip_grad``: the ds_config's
  ``"gradient_clipping": 1.0``, which DeepSpeed's engine passes to ``BF16_Optimizer(clip_grad=...)``.
* **PyTorch FSDP1** (``fsdp1``: ZeRO 3 with ``fsdp_version`` 1, Composer's ``gradient_clipping`` with
  ``clipping_type: norm``: mosaicml/llm-foundry v0.3.0 ``scripts/train/yamls/pretrain/mpt-{7b,13b,30b,70b}.yaml``
  lines 69-71, ``clipping_threshold: 1.0``, ``mixed_precision: PURE``; Composer v0.16.4's
  ``apply_gradient_clipping`` calls the root module's ``clip_grad_norm_``, and ``composer/trainer/dist_strategy.py``
  148 ``fsdp_config.setdefault('use_orig_params', True)``: one gradient a original parameter, MPT's 12 a layer;
  pytorch/pytorch ``torch/distributed/fsdp/fully_sharded_data_parallel.py`` ``clip_grad_norm_`` at 005df1d).
  ``_get_grad_norm``: one ``torch.linalg.vector_norm(grad.detach(), norm_type, dtype=torch.float32)`` a sharded
  gradient, their ``torch.stack`` and ``vector_norm``; ``total_norm = local_sharded_norm ** norm_type`` SUM
  all-reduced over ``self.process_group`` (the sharding group), ``** (1 / norm_type)``; then ``clip_coef =
  max_norm / (total_norm + 1e-6)``, ``torch.clamp(clip_coef, max=1.0)`` and ``grad.mul_(clip_coef_clamped)`` for
  every gradient, always ("it avoids a host-device sync"): one kernel a tensor. The sharded gradient is at the
  parameter's dtype when the clip reads it (``torch/distributed/fsdp/_runtime_utils.py``
  ``_cast_grad_to_param_dtype``: ``sharded_grad.data = sharded_grad.data.to(dtype=param.dtype)``; FSDP2 likewise),
  and Composer's PURE and torchtitan keep fp32 parameters: 4 bytes an element read by the norm, 4 + 4 by the
  ``mul_``, whatever dtype the reduce-scatter ran in.
* **torchtitan** (``fsdp2``: ZeRO 3 with ``fsdp_version`` 2; pytorch/torchtitan ``torchtitan/utils.py``
  ``clip_grad_norm_`` at 9dec370, called by ``train.py`` with ``foreach=True``; at 0413364 ``train.py`` calls
  ``torch.nn.utils.clip_grad_norm_(..., foreach=True)``, the same kernels without pipeline stages).
  ``torch.nn.utils.get_total_norm`` over the DTensor gradients: one ``torch._foreach_norm`` of the local shards
  (``multi_tensor_apply`` launches as above, and its cleanup), ``torch.stack`` and ``vector_norm`` of the
  per-tensor norms; the norm is a DTensor partial over each mesh dimension the gradients are sharded on, reduced by
  one all-reduce a dimension (the FSDP dimension, ``dp_shard x cp`` ranks, where larger than 1; the tensor
  dimension where ``t > 1``) and, with pipeline stages, ``dist.all_reduce`` over the pipeline mesh; then
  ``torch.nn.utils.clip_grads_with_norm_``: ``torch.clamp`` and ``torch._foreach_mul_`` of every gradient, always.

What is left out: the few scalar kernels between (``stack``, ``pow``, ``div``, ``clamp``: a handful of elements
each, their launches counted); the host sync ``.item()`` makes (the device idles until the host launches the
step's next kernel), priced only where :mod:`.launch_blocking` prices host time. Per-tensor counts:
:func:`clip_tensors`.
"""
from __future__ import annotations

import math

from ...network import estimate
from .megatron_passes import extra_tensors, layer_tensors

#: multi_tensor_apply's elements a launch: 320 blocks of a 65,536-element chunk (apex and PyTorch alike)
LAUNCH_ELEMS = 2048 * 32 * 320
#: multi_tensor_apply's tensors a launch at depth 1 (one tensor list: the norm, an in-place scale)
LAUNCH_TENSORS = 110
#: The squared norm's bytes in the all-reduce: one fp32 scalar
NORM_BYTES = 4
#: Per gradient element: (bytes of the norm's read, bytes of the scale's read and write) by kind, ``g`` the
#: gradient's own bytes (``ScaleConfig.grad_bytes``); Megatron's and DeepSpeed's gradients are their fp32 main
#: gradients (their data-dependent scale not priced: the module's ESTIMATE); FSDP's the fp32 parameters' dtype.
PASSES = {"megatron": (4, 0), "apex": ("g", 0), "deepspeed": (4, 0), "fsdp1": (4, (4, 4)), "fsdp2": (4, (4, 4))}
#: Apex's scalar kernels after its l2norm: cleanup, ** 2, sqrt, the cached norm x _grad_scale twice, + 1e-6, /,
#: clamp, _grad_scale *=
APEX_SCALARS = 9
DIST_OPTIMIZERS = ("megatron", "apex")
#: torchtitan's Llama TransformerBlock's parameters (pytorch/torchtitan 9dec370 ``torchtitan/models/llama/model.py``):
#: attention.wq, wk, wv, wo, feed_forward.w1, w2, w3, attention_norm, ffn_norm
TORCHTITAN_LAYER_TENSORS = 9
KINDS = tuple(PASSES)


def clip_kind(cfg) -> str:
    """Whose clip ``cfg`` runs: ``deepspeed`` (``grad_accum_pass``: DeepSpeed's BF16 optimizer), ``fsdp1`` /
    ``fsdp2`` (PyTorch's FSDP, ZeRO 3 by ``fsdp_version``; not with ``nccl_ub``, Megatron-Core's FSDP), ``apex``
    (``dist_optimizer`` apex), else ``megatron``."""
    if cfg.grad_accum_pass:
        return "deepspeed"
    if cfg.zero_stage == 3 and not cfg.nccl_ub:
        return f"fsdp{cfg.fsdp_version}"
    return "apex" if cfg.dist_optimizer == "apex" else "megatron"


def _bytes(spec, g: int) -> int:
    return sum(_bytes(x, g) for x in spec) if isinstance(spec, tuple) else (g if spec == "g" else spec)


def skips_head(cfg, last: bool) -> bool:
    """Whether the norm skips the stage's weights outside the layers: Megatron's, Apex's and DeepSpeed's skip the
    tied LM head's copy (a shared parameter) on the last of several stages."""
    return clip_kind(cfg) in ("megatron", "apex", "deepspeed") and cfg.tied_embedding and cfg.p > 1 and last


def norm_elems(cfg, elems: int, extra: int, last: bool) -> int:
    """Gradient elements the norm reads on a stage holding ``elems`` (``extra`` of them outside the layers): less
    the tied head's copy where it :func:`skips_head`; the sharded stacks (ZeRO, FSDP) read their shard (DeepSpeed's
    BF16 optimizer the whole model's gradients)."""
    elems -= extra if skips_head(cfg, last) else 0
    return elems if clip_kind(cfg) == "deepspeed" else -(-elems // cfg.shard_degree)


def clip_tensors(cfg, layers: int, extra: int, last: bool = False) -> int:
    """Gradient tensors of a stage of ``layers`` layers and ``extra`` elements outside them, as the norm sees them:
    :func:`.megatron_passes.layer_tensors` a layer (Megatron's fused QKV and gate/up; Composer's original MPT
    parameters), torchtitan's Llama block its :data:`TORCHTITAN_LAYER_TENSORS`; the head's copy dropped where the
    norm :func:`skips_head`."""
    per = TORCHTITAN_LAYER_TENSORS if clip_kind(cfg) == "fsdp2" and cfg.mlp_kind == "swiglu" else layer_tensors(cfg)
    return per * layers + (0 if skips_head(cfg, last) else extra_tensors(cfg, extra))


def scale_elems(cfg, elems: int) -> int:
    """Gradient elements the scale writes: the rank's shard (all it holds without sharding)."""
    return -(-elems // cfg.shard_degree)


def launches(elems: int, tensors: int) -> int:
    """Launches of one depth-1 ``multi_tensor_apply`` over ``elems`` elements in ``tensors`` tensors (a lower
    bound: a tensor's last chunk is counted as full where it is not)."""
    return max(-(-elems // LAUNCH_ELEMS), -(-tensors // LAUNCH_TENSORS), 1) if elems else 0


def priced(cfg) -> bool:
    """Whether ``cfg`` runs the norm: where it clips, and with DeepSpeed's BF16 optimizer always."""
    return cfg.clip_grad is not None or clip_kind(cfg) == "deepspeed"


def clip_bytes(cfg, elems: int, extra: int = 0, last: bool = False) -> dict:
    """``{"norm": bytes, "scale": bytes}`` of the clip's passes on a stage holding ``elems`` gradient elements
    (``extra`` outside the layers); 0s where it is not :func:`priced`."""
    if not priced(cfg):
        return {"norm": 0, "scale": 0}
    norm, scale = PASSES[clip_kind(cfg)]
    return {"norm": _bytes(norm, cfg.grad_bytes) * norm_elems(cfg, elems, extra, last),
            "scale": _bytes(scale, cfg.grad_bytes) * scale_elems(cfg, elems)}


def clip_kernels(cfg, elems: int, tensors: int, extra: int = 0, last: bool = False) -> dict:
    """``{"norm": launches, "scale": launches}`` over ``tensors`` parameter tensors: per tensor (DeepSpeed's
    ``norm``, FSDP1's ``vector_norm`` and ``mul_``) or ``multi_tensor_apply`` (:func:`launches`), with the scalar
    kernels after the norm (Megatron: cleanup, ``** 2``; Apex: :data:`APEX_SCALARS`; DeepSpeed: none, the sum is
    on the host; FSDP1: stack, norm, ``** 2``, then ``** (1 / norm_type)``, ``+``, ``/``, ``clamp``; torchtitan:
    cleanup, stack, norm, then ``+``, ``/``, ``clamp``)."""
    if not priced(cfg):
        return {"norm": 0, "scale": 0}
    kind, n = clip_kind(cfg), norm_elems(cfg, elems, extra, last)
    if kind in ("megatron", "apex"):
        scalars = APEX_SCALARS if kind == "apex" else 2
        return {"norm": launches(n, -(-tensors // cfg.shard_degree)) + scalars, "scale": 0}
    if kind == "deepspeed":
        return {"norm": tensors, "scale": 0}
    if kind == "fsdp1":
        return {"norm": tensors + 3, "scale": tensors + 4}
    return {"norm": launches(n, tensors) + 3, "scale": launches(scale_elems(cfg, elems), tensors) + 3}


def clip_groups(cfg) -> tuple:
    """The all-reduces of the squared norm, in order, each a tuple of one replica group's device ids (the devices
    laid out tensor-fastest, then context, data, pipeline: :func:`.compose._p2p`'s hop); groups of one device
    dropped (nothing to reduce)."""
    if not priced(cfg):
        return ()
    kind, t, hop = clip_kind(cfg), cfg.t, cfg.t * cfg.cp * cfg.d
    pp = tuple(s * hop for s in range(cfg.p))
    if kind in ("megatron", "apex", "deepspeed"):
        if kind == "apex" or (kind == "megatron" and cfg.zero_stage):
            out = (tuple(range(cfg.gpus)),)  # the distributed optimizer's "entire world"; apex's group-less one
        else:
            out = (tuple(i + s for s in pp for i in range(t)),)  # tensor x pipeline ranks
    else:
        shard = tuple(t * k for k in range(cfg.shard_degree))  # the FSDP dimension (dp_shard x cp)
        out = (shard, tuple(range(t))) + ((pp,) if kind == "fsdp2" else ())
        out = out[:1] if kind == "fsdp1" else out
    return tuple(g for g in out if len(g) > 1)


def clip_seconds(cfg, hw, elems: int, layers: int, extra: int = 0, last: bool = False) -> float:
    """The clip on a stage of ``layers`` layers holding ``elems`` weight elements (``extra`` outside the layers;
    ``last``: the last stage): its passes on ``hw``'s memory model and its all-reduces on ``hw``'s network, one
    after the other (each waits for the one before); 0 where it is not :func:`priced` or without a profile."""
    if not priced(cfg) or hw is None or elems == 0:
        return 0.0
    tensors = clip_tensors(cfg, layers, extra, last)
    b, k = clip_bytes(cfg, elems, extra, last), clip_kernels(cfg, elems, tensors, extra, last)
    out = hw.memory_time(b["norm"], kernels=k["norm"]) + (hw.memory_time(b["scale"], kernels=k["scale"])
                                                          if b["scale"] else 0.0)
    topo = getattr(hw, "topology", None)
    if topo is not None:
        out += sum(estimate(topo, "all_reduce", NORM_BYTES, (g,)).time_s for g in clip_groups(cfg))
    return out


def clip_invalid(cfg) -> str | None:
    """Why ``clip_grad`` or ``dist_optimizer`` cannot be priced (a max norm must be positive; Apex's optimizer
    shards); None where they can."""
    c = cfg.clip_grad
    if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0):
        return f"clip_grad must be a positive max norm or None (not clipped), got {c!r}"
    if cfg.dist_optimizer not in DIST_OPTIMIZERS:
        return f"dist_optimizer must be one of {', '.join(DIST_OPTIMIZERS)}, got {cfg.dist_optimizer!r}"
    if cfg.dist_optimizer == "apex" and cfg.zero_stage not in (1, 2):
        return "dist_optimizer apex (Apex's DistributedFusedAdam) shards the optimizer: it needs zero 1 or 2"
    return None
