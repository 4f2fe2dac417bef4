"""Bytes per GPU of a training configuration, by category, on the device that holds the most (the first
pipeline stage), as exact ints from the per-device layer's IR.

* weights: the layer's bf16 weight arguments x layers per stage; FSDP (ZeRO 3): their shard (``/ (cp x
  dp_shard)``; none under FSDP2, whose shard is the fp32 master: :func:`.torch_peak.sharded_weight_bytes`) plus the
  unsharded buffers of two layers (the one running and the one prefetched; one on a stage of one layer; at
  torchtitan's loss's backward the last block's alone), or, with reshard-after-forward off, of every layer of the
  stage (the forward leaves them gathered for the backward);
* fp8 weight copies (``fp8_weight_cache`` under an fp8 recipe, :func:`.fp8_weights.copy_bytes`): Transformer
  Engine's row-wise and column-wise fp8 copy of each linear's weight, kept from the step's first micro-batch, 2
  bytes per linear weight element x layers per stage, counted in weights and given apart
  (``fp8_weight_copies``), per tensor-parallel shard and whole over the data-parallel group at every ZeRO stage
  (TE's workspaces are the module's); with them TE's scales and amax histories (:mod:`.fp8_state`,
  ``fp8_scale_state``), counted in weights too; torchao's fp8 all-gather under FSDP (``fsdp_float8_all_gather``)
  holds the gathered layers' fp8 linear weights at 1 byte (:func:`.fp8_weights.gathered_bytes`);
* gradients: Megatron's fp32 gradient buffer (``main_grad``), 4 bytes per weight element; ZeRO 2 / 3: its
  shard plus one layer's unsharded fp32 gradient (the one being reduce-scattered); under ``torch_ddp`` PyTorch
  DDP's flat 2-byte buckets over the stage's weights besides (:func:`.megatron_passes.torch_ddp_bucket_bytes`,
  given apart as ``ddp_buckets``);
* optimizer state: the fp32 master weights and AdamW's two moments (the step's donated fp32 arguments),
  divided by the sharding degree (``cp x d``, or ``cp x dp_shard`` with HSDP) under ZeRO 1-3;
* activations: what one micro-batch of one layer keeps (the tensors the backward reads from the forward,
  from the IR's data flow; with full recompute, the layer's input; with a partial recompute, the mean of the two
  over the stage's layers), and torchao eab345c's saved fp8 weights (tensorwise ``Float8Linear``: 1 byte a linear
  weight element and a 4-byte scale per linear, kept from each forward to its backward where no recompute makes
  them again, :func:`.fp8_weights.saved_weight_bytes`; given apart as ``fp8_saved_weights``), times the
  layer-micro-batches the first
  stage holds at once: 1F1B keeps ``min(p, m)`` micro-batches of its ``L/p`` layers; the interleaved
  schedule ``(1 + (p - 1)/(p v))`` times as many (Korthikanti et al. 2022, section 4.2.3).

Other stages hold fewer micro-batches (:func:`held_layer_microbatches` of the stage).
The word embedding and the LM head (:func:`embedding_state`): on the stages that hold them, as Megatron places them
(the embedding on the first stage, the output layer on the last, a copy of the tied weight on each; one stage:
both, or one tied), their bf16 weights, fp32 gradients and optimizer state are counted in the categories (and
given apart as ``embedding_state``), sharded as the layers' are. Korthikanti's Figure 1 compares the layers' part.
The logits are left out, but under ``loss_upcast``, where the step's peak is the larger of the moment above and
torchtitan's loss's backward (the fp32 logits, FSDP2's root and the final norm's saved tensors, no gradients:
:func:`.torch_peak.loss_moment`). Context parallelism's split of the activations (s/cp positions, (s/cp) x s
scores) is in the layer's IR.
"""
from __future__ import annotations

from fractions import Fraction

from .config import ScaleConfig
from .costs import LayerCost
from .fp8_state import layer_gemms, state_bytes
from .fp8_weights import gathered_bytes, kept_bytes, saved_weight_bytes
from .megatron_passes import torch_ddp_bucket_bytes
from .partial_recompute import full_share, mean_activation_bytes
from .sharding import embedding_elems
from .torch_peak import loss_moment, op_saved_extra, sharded_weight_bytes

CATEGORIES = ("weights", "gradients", "optimizer_state", "activations")


def held_layer_microbatches(cfg: ScaleConfig, stage: int = 0) -> Fraction:
    """Layer-micro-batches of activations pipeline stage ``stage`` holds at its peak (exact): Megatron's
    warm-up forwards plus the one in flight, at most every micro-batch (chunk) of the iteration. 1F1B:
    ``min(p - stage, m)`` micro-batches of ``L/p`` layers; interleaved: ``min(2(p - stage - 1) + (v - 1)p + 1,
    m v)`` chunks of ``L/(p v)`` layers (uneven stages: the stage's layers / v, its chunks on average), which for
    the first stage is Korthikanti's ``L/p x p (1 + (p-1)/(p v))``."""
    p, v, m = cfg.p, cfg.interleave, cfg.micro_batches
    if v == 1:
        return Fraction(cfg.stage_layers()[stage] * min(p - stage, m))
    return Fraction(cfg.stage_layers()[stage], v) * min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v)


def embedding_state(cfg: ScaleConfig, stage: int) -> dict:
    """Bytes per GPU of the word embedding and LM head on pipeline stage ``stage`` (:func:`.sharding.embedding_elems`:
    ``V/t x h`` each on the stages holding them, Megatron's ``pre_process`` / ``post_process`` stages with
    ``share_embeddings_and_output_weights`` keeping a copy on the last), by category: the bf16 weights (ZeRO 3:
    their shard, none under FSDP2), the fp32 gradient (``main_grad``, 4 bytes; ZeRO 2 / 3 its shard) and the fp32
    master and AdamW's two moments (12 bytes; ZeRO 1-3 their shard), sharded over the layers' degree. Under
    ``loss_upcast`` none: :func:`.torch_peak.loss_moment` counts the root's parameters."""
    elems = 0 if getattr(cfg, "loss_upcast", False) else embedding_elems(cfg, stage)
    z, shard = cfg.zero_stage, cfg.shard_degree
    weights = 2 * elems
    return {"weights": sharded_weight_bytes(cfg, weights) if z == 3 else weights,
            "gradients": 4 * elems // shard if z >= 2 else 4 * elems,
            "optimizer_state": 12 * elems // shard}


def memory(cfg: ScaleConfig, cost: LayerCost, capacity: float | None = None, stage: int = 0,
           kept: LayerCost | None = None) -> dict:
    """Bytes per GPU of pipeline stage ``stage`` (default the first, which holds the most) by category, their
    ``total``, and ``fits`` where ``capacity`` (bytes) is given. ``kept``: under a partial recompute, the layer
    without recompute, whose activations the layers not checkpointed keep (:mod:`.partial_recompute`)."""
    n = cfg.stage_layers()[stage]
    z, shard = cfg.zero_stage, cfg.shard_degree
    per_layer = (cost.activation_bytes if kept is None else
                 mean_activation_bytes(full_share(cfg), cost.activation_bytes, kept.activation_bytes))
    held = held_layer_microbatches(cfg, stage) * (per_layer + op_saved_extra(cfg))  # (op policy: .torch_peak)
    saved_fp8 = held_layer_microbatches(cfg, stage) * (1 - full_share(cfg)) * saved_weight_bytes(cfg)  # (torchao)
    saved_fp8 = saved_fp8.numerator // saved_fp8.denominator
    weights = at_loss = cost.weight_bytes * n
    if z == 3:  # (torchao's fp8 all-gather: the gathered fp8 linears at 1 byte, .fp8_weights; FSDP2: .torch_peak)
        one, kept = gathered_bytes(cfg, cost.weight_bytes), sharded_weight_bytes(cfg, weights)
        weights = kept + one * (min(2, n) if cfg.reshard_after_forward else n)
        at_loss = kept + one * (1 if cfg.reshard_after_forward else n)  # (the loss's backward: the last block)
    grads = cost.weight_elems * 4 * n
    copies = kept_bytes(cfg, n)  # TE's kept fp8 weights (0 without the cache)
    scales = state_bytes(cfg, layer_gemms(cfg) * n)  # TE's scales and amax histories (.fp8_state)
    emb = embedding_state(cfg, stage)  # the word embedding / LM head on the stages holding them
    buckets = torch_ddp_bucket_bytes(cfg, cost.weight_elems * n + embedding_elems(cfg, stage))  # (PyTorch DDP)
    out = {
        "weights": weights + copies + scales + emb["weights"],
        "gradients": (grads // shard + cost.weight_elems * 4 if z >= 2 else grads) + emb["gradients"] + buckets,
        "optimizer_state": (cost.master_bytes + cost.moment_bytes) * n // shard + emb["optimizer_state"],
        "activations": held.numerator // held.denominator + saved_fp8,
    }
    out["total"] = sum(out[k] for k in CATEGORIES)
    out = loss_moment(cfg, out, at_loss + copies + scales)  # torchtitan's loss's backward, where larger (.torch_peak)
    if sum(emb.values()):
        out["embedding_state"] = sum(emb.values())
    if buckets:
        out["ddp_buckets"] = buckets
    if copies:
        out.update(fp8_weight_copies=copies, fp8_scale_state=scales)
    if saved_fp8:
        out["fp8_saved_weights"] = saved_fp8
    if capacity:
        out["capacity"] = int(capacity)
        out["fits"] = out["total"] <= capacity
    return out
