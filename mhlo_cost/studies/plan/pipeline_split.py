"""Which interleaved uneven pipelines a framework runs: the rule names its framework (``ScaleConfig.pipeline_split``).

* ``megatron`` (Megatron-Core, NeMo, Megatron-Bridge): each rank's layers are split into ``v`` virtual stages of
  equal size, so ``TransformerConfig`` refuses a first or last stage (``--decoder-first/last-pipeline-num-layers``)
  whose layers the interleave degree does not divide ("number of layers at first stage: 15 must be divisible by
  virtual pipeline parallel degree 8"), and the same of the middle stages' share; with the embedding and the loss
  counted as layers (``--account-for-embedding/loss-in-pipeline-split``) the layers and those one or two must fill
  ``p x v`` virtual stages evenly (128 = 126 + 2 on 8 x 8: the first and last virtual stages one layer each);
* ``torchtitan``: ``generate_split_points`` cuts the layers into ``p x v`` virtual stages of ``L // (p v)``
  layers, the middle ones taking one more while any are left over (126 on 16: 7, 8 x 14, 7), and rank ``r`` runs
  stages ``r, r + p, ...``: a rank's layers (15 or 16 on 8 ranks) need not divide by ``v``; every virtual stage
  holds a layer at least.
"""
from __future__ import annotations

#: The frameworks whose rule :func:`interleave_invalid` knows.
PIPELINE_SPLITS = ("megatron", "torchtitan")


def interleave_invalid(cfg) -> str | None:
    """Why ``cfg``'s interleaved uneven stages cannot run under its framework's rule (one sentence), or None."""
    v, stages = cfg.interleave, cfg.stage_layers()
    if cfg.pipeline_split not in PIPELINE_SPLITS:
        return f"pipeline_split must be one of {', '.join(PIPELINE_SPLITS)}, got {cfg.pipeline_split!r}"
    if v == 1:
        return None
    if cfg.pipeline_split == "torchtitan":
        if min(stages) < v:
            return f"interleave {v}: a stage of {min(stages)} layers cannot hold {v} model chunks"
        return None
    counted = cfg.account_embedding or cfg.account_loss
    if counted and not (cfg.first_stage_layers or cfg.last_stage_layers):  # the embedding / loss as layers
        extra = int(cfg.account_embedding) + int(cfg.account_loss)
        if (cfg.layers + extra) % (cfg.p * v):
            return (f"Megatron-Core: layers {cfg.layers} + {extra} (embedding/loss counted) do not fill "
                    f"{cfg.p} x {v} virtual stages evenly")
        return None
    if len(set(stages)) < 2:
        return None
    for where, n in (("first", stages[0]), ("last", stages[-1]), ("middle", stages[len(stages) // 2])):
        if n % v:
            return (f"Megatron-Core: the {where} stage's {n} layers must be divisible by the interleave degree {v} "
                    "(torchtitan's split: pipeline_split torchtitan)")
    return None
