"""``CUDA_LAUNCH_BLOCKING=1`` (``launch_blocking``): every kernel launch returns only when the kernel has finished,
so the host cannot run ahead of the device and each framework call costs its host time *and* its kernel's device
time, in series.

BLOOM-176B trained with it: bigscience-workshop/bigscience ``train/tr11-176B-ml/tr11-176B-ml.slurm`` (at
003b25057ea7dd7b476dd2feb28668725b1cbdaa) exports ``CUDA_LAUNCH_BLOCKING=1`` ("do not remove or the training will
hang"). CUDA's programming guide: with the variable set to 1, kernel launches are synchronous. Without it the host
queues kernels ahead and its per-call time is hidden behind the device's (the compiled execution model: kernel times
alone); with it, what this module adds to each stage is the host time of every framework call, at the eager model's
per-call host time (:func:`mhlo_cost.roofline.eager_host.dispatch_overhead`: ``DISPATCH_S`` or the profile's
``dispatch_overhead_us``; not fitted to any measured row):

* per micro-batch and layer, the framework calls of the layer's forward, backward and recompute as the eager model
  groups the program's rows into calls (:func:`mhlo_cost.roofline.eager_calls.groups`: one call per call site, view
  calls included; full recompute re-runs the forward's calls, as :mod:`.compose` prices it); the last stage's head
  (LM head and loss) likewise, from its own program;
* each tensor-parallel collective (:func:`.compose.tp_collectives`) and each pipeline transfer (a send on one side, a
  receive on the other: ``2 v`` per micro-batch each way; with ``scatter_gather`` DeepSpeed's ``PartitionedTensor``
  ``.full()`` all-gather after each receive) is one call;
* DeepSpeed's BF16 optimizer (``grad_accum_pass``; deepspeed/runtime/bf16_optimizer.py, microsoft/DeepSpeed 2022,
  06e39a561d7924975744e79e72c78008b9db8794): ``update_hp_grads`` after each micro-batch's backward loops over every
  parameter tensor (``lp.grad.data.to(fp32)``, ``.view``, ``hp_grad.data.add_``: 3 calls a tensor);
* once an iteration, the step: ``get_global_norm_of_tensors`` (deepspeed/runtime/utils.py) takes
  ``t.data.float().norm(2).item()`` of every gradient tensor (2 calls a tensor: the norm and the ``.item()``
  sync; ``float()`` of an fp32 tensor is no call), then one FloatTensor, an all_reduce and an ``.item()``; the
  optimizer's multi-tensor Adam over each group's flat fp32 partition (Megatron-DeepSpeed's
  megatron/optimizer/__init__.py returns apex's ``apex.optimizers.FusedAdam`` when ``args.deepspeed`` is set: one
  launch per ``ADAM_CHUNK`` elements); ``update_lp_params`` (one copy a group, the all_gather of each group's bf16
  partitions), ``clear_hp_grads`` (one ``zero_`` a group); the data-parallel reduction (engine.py's
  ``buffered_allreduce_fallback`` over ``get_grads_for_reduction``, the BF16 optimizer's ``PARAM_GROUPS`` flat fp32
  gradient buffers: ``allreduce_no_retain`` buckets whole tensors and never splits one, so each buffer is one
  bucket: flatten, ``div_``, all_reduce, copy back, 4 calls a group). Gradient clipping's per-tensor ``mul_``
  runs only when the norm exceeds the threshold: left out.

Every collective is already priced exposed for a plan without overlap (the BLOOM rows: tensor-parallel all-reduces
in series, Megatron 2022's; the pipeline transfers between micro-batches, which DeepSpeed's pipeline engine makes
with ``dist.send`` / ``dist.recv``, ``async_op`` asserted False, deepspeed/runtime/pipe/p2p.py, flag or not; the
data-parallel reduction after the flush), so the flag exposes nothing more there; a plan whose collectives are
priced overlapped cannot take the flag (refused, :func:`.sharding_check.blocking_invalid`).

An overcount, stated: the calls are counted on JAX's unfused program, one per call site, while Megatron-DeepSpeed
runs FusedLayerNorm, ``bias_gelu``, the fused scale-mask-softmax and ``bias_dropout_add`` as one call each; here a
LayerNorm counts ~8 calls, GELU ~8, each dropout ~4, the causal mask ~5 a layer (BLOOM's layer: 69 forward calls).
JAX's ``optimization_barrier`` (a remat artifact, no framework call) is not counted.

Not priced: the lock-step a blocking send imposes on neighbouring stages (each send returns only once the peer has
posted its receive); DeepSpeed's partitioned pipeline send making several calls a transfer (the meta tensor and the
data: ``PartitionedTensor.to_meta()`` / ``.full()``); the embedding LayerNorm's tensors; the ``narrow`` / ``detach``
views in ``all_gather_dp_groups``; host time beyond the per-call dispatch (Python of the pipeline engine's
instruction loop); and the eager kernels Megatron's layer runs beyond the compiled model's fused ones (the device
side stays the compiled model's).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...roofline.eager_host import dispatch_overhead

#: Elements one multi_tensor_apply launch covers (apex.optimizers.FusedAdam, which Megatron-DeepSpeed's optimizer
#: factory returns under DeepSpeed): apex's 65,536-element chunks (``multi_tensor_applier(..., 2048*32)``), 320
#: blocks a launch (``depth_to_max_blocks`` of apex csrc/multi_tensor_apply.cuh).
ADAM_CHUNK = 2048 * 32 * 320
#: Megatron's optimizer parameter groups (megatron/optimizer/__init__.py ``get_param_groups``: weight decay, none).
PARAM_GROUPS = 2


@dataclass(frozen=True)
class Calls:
    """Framework calls of one micro-batch through one layer (and through the last stage's head), by phase, and the
    parameter tensors of each."""

    forward: int
    backward: int
    recompute: int
    params: int
    head_forward: int = 0
    head_backward: int = 0
    head_params: int = 0


def program_calls(analysis) -> tuple[dict, int]:
    """(phase -> framework calls, parameter tensors) of a walked program: its rows grouped into calls as the eager
    model groups them (each call counted as often as it runs), its arguments named ``params``."""
    from ...roofline.eager_calls import groups

    ph, out = analysis.phases.phase, {}
    for g in groups(analysis.rows, None, set()):
        if all(analysis.rows[i].op.endswith("optimization_barrier") for i in g):
            continue  # JAX's remat barrier: no framework call
        p = ph[g[0]]
        out[p] = out.get(p, 0) + analysis.rows[g[0]].multiplicity
    return out, sum(1 for x in analysis.arguments if x.name.startswith("params"))


_MEMO: dict = {}


def layer_calls(cfg, with_head: bool = True) -> Calls:
    """The :class:`Calls` of ``cfg``'s layer (and head) from their lowered programs (kept per layer key)."""
    from ..study import Study
    from .costs import head_key
    from .layer import lower_head, lower_layer

    key = (cfg.layer_key(), head_key(cfg) if with_head else None)
    if key not in _MEMO:
        layer, n = program_calls(Study(lower_layer(cfg), training="always").analysis)
        head, hn = (program_calls(Study(lower_head(cfg), training="always").analysis) if with_head else ({}, 0))
        fwd = layer.get("forward", 0)
        _MEMO[key] = Calls(fwd, layer.get("backward", 0), fwd if cfg.recompute == "full" else layer.get("recompute", 0),
                           n, head.get("forward", 0), head.get("backward", 0), hn)
    return _MEMO[key]


def micro_batch_calls(cfg, calls: Calls, layers: int, first: bool, last: bool, tp: dict) -> tuple[int, int]:
    """(forward, backward) framework calls of one micro-batch on a stage of ``layers`` layers (``tp``: the tensor-
    parallel collectives' (kind, count) by phase, :func:`.compose.tp_collectives`)."""
    tp_f = sum(n for _, n in tp["forward"])
    tp_b = sum(n for _, n in tp["backward"])  # (full recompute's forward collectives among them)
    f = layers * (calls.forward + tp_f) + (calls.head_forward if last else 0)
    b = layers * (calls.backward + calls.recompute + tp_b) + (calls.head_backward if last else 0)
    if cfg.p > 1:  # receive before (and send after) each chunk: one call each side, and the receiver's all_gather
        v, gather = cfg.interleave, 1 if cfg.scatter_gather and cfg.t > 1 else 0
        f += v * ((0 if first else 1 + gather) + (0 if last else 1))
        b += v * ((0 if last else 1 + gather) + (0 if first else 1))
    if cfg.grad_accum_pass:  # update_hp_grads: .to(fp32), .view, add_ per parameter tensor
        b += 3 * stage_params(calls, layers, first, last)
    return f, b


def stage_params(calls: Calls, layers: int, first: bool, last: bool) -> int:
    """Parameter tensors of a stage: its layers', the first stage's word embedding, the last stage's head's."""
    return layers * calls.params + (1 if first else 0) + (calls.head_params if last else 0)


def step_calls(cfg, calls: Calls, layers: int, first: bool, last: bool, elems: int) -> int:
    """Framework calls of the optimizer step and the data-parallel reduction, once an iteration, on a stage of
    ``layers`` layers holding ``elems`` weight elements (DeepSpeed's BF16 optimizer: the module's docstring)."""
    tensors = stage_params(calls, layers, first, last)
    norm = 2 * tensors + 3
    shard = -(-elems // cfg.shard_degree)
    adam = -(-shard // ADAM_CHUNK) + PARAM_GROUPS
    gather = 2 * PARAM_GROUPS if cfg.d > 1 else PARAM_GROUPS  # copy_ (and the all_gather) a group
    reduce = 4 * PARAM_GROUPS if cfg.d > 1 else 0  # one bucket a group's flat buffer (never split)
    return norm + adam + gather + PARAM_GROUPS + reduce  # (PARAM_GROUPS: clear_hp_grads' zero_)


def add_host(cfg, hw, stages: list, calls: Calls, tp: dict, weight_elems: int, extra) -> float:
    """Each stage's forward / backward per micro-batch and its step made longer by the host time of their calls
    (``launch_blocking``; nothing without it): in place on :func:`.compose._stages`' dicts, each given
    ``launch_host`` (forward, backward, step seconds) and ``launch_calls``. Returns the host seconds per call."""
    per = dispatch_overhead(hw)
    for s, st in enumerate(stages):
        first, last = s == 0, s == cfg.p - 1
        f, b = micro_batch_calls(cfg, calls, st["layers"], first, last, tp)
        step = step_calls(cfg, calls, st["layers"], first, last, weight_elems * st["layers"] + extra(s))
        st["f_s"] += f * per
        st["b_s"] += b * per
        st["optimizer"] += step * per
        st["launch_host"] = (f * per, b * per, step * per)
        st["launch_calls"] = (f, b, step)
    return per
