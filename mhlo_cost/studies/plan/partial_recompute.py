"""Full recompute of some of a stage's layers, the others keeping every activation: Megatron's block method and
torchtitan's selective layer checkpointing.

* Megatron-LM / Megatron-Core, ``--recompute-granularity full --recompute-method block --recompute-num-layers K``
  (``megatron/core/transformer/transformer_block.py`` ``_checkpointed_forward``: under the block method the first
  K layers of each model chunk run under ``tensor_parallel.checkpoint``, the chunk's other layers run plainly);
  ``train-plan --recompute full --recompute-num-layers K``;
* torchtitan, ``[activation_checkpoint] mode = "selective"``, ``selective_ac_option = "N"`` (an integer: ``torchtitan
  parallelisms/parallelize_llama.py`` ``_apply_ac_to_transformer_block`` counts the blocks it wraps and checkpoints
  the N-th, 2N-th, ... whole with ``checkpoint_wrapper``, the others unchanged); ``train-plan --recompute full
  --recompute-every N``.

A checkpointed layer costs what ``--recompute full`` charges a layer (its forward again in the backward, with the
forward's collectives; its input kept), the others what ``--recompute none`` charges. Every model chunk holds the
same share of each (checked: :func:`partial_invalid`), so per micro-batch the mean layer of a stage is the share's
weighted mean of the two layers' seconds, and the activations kept the same mean (exact, in bytes). The compute
sums over a stage's layers are exact that way; the per-layer data-parallel collectives' exposure is taken at the
mean layer (exact where both kinds of layer hide them wholly or neither does). The recompute's FLOPs are those of
the checkpointed layers, exactly (:func:`recomputed_layers`).
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from fractions import Fraction


def partial(cfg) -> bool:
    """Whether ``cfg`` recomputes some of its layers whole and not the others."""
    return bool(getattr(cfg, "recompute_num_layers", 0) or getattr(cfg, "recompute_every", 0))


def partial_invalid(cfg) -> str | None:
    """Why ``cfg``'s partial recompute cannot be priced, in one sentence; None where it can (or is not asked)."""
    k, n = getattr(cfg, "recompute_num_layers", 0), getattr(cfg, "recompute_every", 0)
    for name, v in (("recompute_num_layers", k), ("recompute_every", n)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"{name} must be a positive integer (0: not used), got {v!r}"
    if not (k or n):
        return None
    if k and n:
        return "give one of --recompute-num-layers (Megatron's block method) and --recompute-every (torchtitan's)"
    if cfg.recompute != "full":
        return "--recompute-num-layers and --recompute-every choose the layers of --recompute full"
    if cfg.experts or getattr(cfg, "lower_layer", None) is not None or cfg.launch_blocking:
        return "a partial recompute is priced for a dense transformer's layers only (not MoE, STDiT3, launch blocking)"
    if cfg.uneven:
        return "a partial recompute is not priced with uneven pipeline stages yet"
    chunk = cfg.layers_per_chunk
    if n and cfg.p * cfg.interleave > 1 and chunk % n:
        return (f"--recompute-every {n} must divide each model chunk's {chunk} layers (torchtitan's count runs "
                "across the chunks a rank holds)")
    return None


def full_share(cfg) -> Fraction:
    """The share of every model chunk's layers ``cfg`` recomputes whole: Megatron's first K of each chunk, or
    torchtitan's every N-th block (1 under ``--recompute full`` alone, 0 under the other policies)."""
    if cfg.recompute != "full":
        return Fraction(0)
    if not partial(cfg):
        return Fraction(1)
    chunk = cfg.layers_per_chunk
    if cfg.recompute_num_layers:
        return Fraction(min(cfg.recompute_num_layers, chunk), chunk)
    return Fraction(chunk // cfg.recompute_every, chunk)


def recomputed_layers(cfg) -> int:
    """Layers of the whole model whose forward runs again in the backward (every layer under ``full``; ``cfg.layers``
    too under the policies that recompute part of every layer)."""
    if not partial(cfg):
        return cfg.layers
    share = full_share(cfg) * cfg.layers
    assert share.denominator == 1, "partial_invalid keeps every chunk's share whole"
    return int(share)


def whole(cfg):
    """``cfg``'s checkpointed layers: every layer recomputed whole."""
    return replace(cfg, recompute_num_layers=0, recompute_every=0)


def kept(cfg):
    """``cfg``'s other layers: nothing recomputed."""
    return replace(cfg, recompute="none", recompute_num_layers=0, recompute_every=0)


def mean_layer(share: Fraction, full: dict, none: dict) -> dict:
    """The mean layer of a stage whose ``share`` of layers is ``full`` (one layer's figures by name, as
    :func:`.compose._layer` makes them) and the rest ``none``: every number and every dataclass of numbers mixed."""
    s = float(share)
    return {k: _mix(s, v, none[k]) for k, v in full.items()}


def _mix(s: float, a, b):
    if is_dataclass(a):
        return replace(a, **{f.name: _mix(s, getattr(a, f.name), getattr(b, f.name)) for f in fields(a)})
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return s * a + (1 - s) * b
    return a


def mean_activation_bytes(share: Fraction, full_bytes: int, none_bytes: int) -> Fraction:
    """Bytes one mean layer keeps per micro-batch (exact)."""
    return share * full_bytes + (1 - share) * none_bytes
