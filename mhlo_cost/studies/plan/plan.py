"""A training plan: the iteration breakdown and memory of one configuration.

:func:`plan` lowers (once per distinct layer shape), composes and returns a :class:`Plan`;
:func:`breakdown_frame` is its per-iteration table (compute by phase, exposed tensor-parallel
communication, bubble, point-to-point, exposed data-parallel reduction, optimizer). The sweep over a model's
configurations on many devices is :mod:`.search`'s.
"""
from __future__ import annotations

import os

import pandas as pd

from .compose import compose
from .config import ScaleConfig
from .costs import LayerCost, layer_cost
from .memory import CATEGORIES, memory
from .partial_recompute import kept as without
from .partial_recompute import partial
from .result import Plan


def plan(cfg: ScaleConfig, hw, cache_dir: str | os.PathLike | None = None, note=None) -> Plan:
    """The plan of ``cfg`` on ``hw``, its layers' costs kept under the cache root ``cache_dir`` (``note``: see
    :func:`~.costs.layer_cost`)."""
    why = cfg.invalid()
    if why:
        raise ValueError(f"invalid training configuration: {why}")
    if cfg.experts:
        from .moe_plan import moe_plan

        return moe_plan(cfg, hw, cache_dir, note)
    cost = layer_cost(cfg, hw, cache_dir, note=note)
    if getattr(cfg, "lower_layer", None) is not None:  # STDiT3 (.stdit3): no LM head, ColossalAI's ZeRO memory
        return _own_plan(cfg, hw, cost, cache_dir, note)
    head = layer_cost(cfg, hw, cache_dir, part="head", note=note)
    kept = layer_cost(without(cfg), hw, cache_dir, note=note) if partial(cfg) else None  # (.partial_recompute)
    it = compose(cfg, cost, hw, head, kept)
    cap = getattr(hw, "hbm_capacity", None)
    stages = range(cfg.p) if cfg.uneven else (0,)  # even: the first stage holds the most
    held = max((memory(cfg, cost, cap, stage=s, kept=kept) | ({"stage": s} if cfg.uneven else {}) for s in stages),
               key=lambda r: r["total"])
    return Plan(cfg, it, held, cost, head, kept=kept)


def _own_plan(cfg: ScaleConfig, hw, cost: LayerCost, cache_dir, note) -> Plan:
    """The plan of a model that lowers its own layer (:mod:`.stdit3`): no head, its memory under the schedule
    (with recompute, the activations of a block being recomputed come from the layer lowered without)."""
    from . import stdit3

    working = (layer_cost(cfg.with_split(recompute="none"), hw, cache_dir, note=note)
               if cfg.recompute == "full" else None)
    held = stdit3.memory(cfg, cost, working, getattr(hw, "hbm_capacity", None))
    return Plan(cfg, compose(cfg, cost, hw, None), held, cost, None)


def breakdown_frame(p: Plan) -> pd.DataFrame:
    """One row per component of the iteration (seconds, share of the total), the memory beneath."""
    it = p.iteration
    parts = [("compute/forward", it.compute["forward"]), ("compute/backward", it.compute["backward"]),
             ("compute/recompute", it.compute["recompute"]), ("tp_comm (exposed)", it.tp_comm),
             *([("cp_comm (exposed)", it.cp_comm)] if p.cfg.cp > 1 else []),
             *([("ep_comm (all_to_all)", it.ep_comm)] if p.cfg.experts else []),
             ("pipeline bubble", it.bubble), ("p2p", it.p2p), ("dp_comm (exposed)", it.dp_exposed),
             ("optimizer", it.optimizer),
             *([("host (launch blocking)", it.launch_host)] if p.cfg.launch_blocking else [])]
    total = it.total
    df = pd.DataFrame({"component": [k for k, _ in parts] + ["TOTAL"],
                       "seconds": [round(v, 6) for _, v in parts] + [round(total, 6)],
                       "share": [round(v / total, 4) if total else 0.0 for _, v in parts] + [1.0]})
    return df


def facts(p: Plan) -> list[str]:
    """The lines under the breakdown: FLOPs, MFU, memory, the schedule's exact counts."""
    c, m, cfg = p.iteration.counts, p.memory, p.cfg
    gib = 2 ** 30
    first = (f"configuration: {cfg.label()} on {cfg.gpus} GPUs; {c['micro_batches']} micro-batches of "
             f"{cfg.micro_batch}; bubble fraction (p-1)/(v m) = {c['bubble_fraction']}")
    if p.moe is not None:
        from .moe_plan import moe_facts

        return [first, *_precision_facts(cfg)] + moe_facts(p)
    lines = [
        first,
        *_precision_facts(cfg),
        f"model FLOPs {c['model_flops']:,} (forward + backward from the IR; closed form "
        f"{c['formula_flops']:,}, 6ND with N = 12 L h^2: {c['rule_6nd']:,}); hardware FLOPs "
        f"{c['hardware_flops']:,} (recompute included)",
        f"MFU {c['mfu']:.1%}, HFU {c['hfu']:.1%} of the bf16 peak",
        f"memory per GPU ({'first stage' if not m.get('stage') else 'stage %d, the most' % m['stage']}): "
        + ", ".join(f"{k.replace('_', ' ')} {m[k] / gib:.2f} GiB" for k in (*CATEGORIES, "total"))
        + (f"; {'fits' if m['fits'] else 'does NOT fit'} in {m['capacity'] / gib:.1f} GiB" if "fits" in m else ""),
    ]
    lines += _loss_facts(m) + _sharding_facts(p)
    if getattr(cfg, "lower_layer", None) is not None:  # STDiT3's own lines
        from . import stdit3

        lines = stdit3.facts(p, lines)
    return lines


def _loss_facts(m: dict) -> list[str]:
    """Under ``loss_upcast``: what torchtitan's loss and FSDP2's root add at the loss's backward (.torch_peak)."""
    if "loss_logits" not in m:
        return []
    parts = ("loss_logits", "head_activations", "head_weights", "head_state")
    return ["memory at the loss's backward (torchtitan's fp32 loss, FSDP2's root; in the categories above): "
            + ", ".join(f"{k.replace('_', ' ')} {m[k] / 2 ** 30:.2f} GiB" for k in parts)]


def _precision_facts(cfg) -> list[str]:
    """Under an fp8 training recipe: which GEMMs run in fp8 and the widths memory keeps (none under bf16)."""
    if cfg.precision == "bf16":
        return []
    grads = "e4m3" if cfg.precision == "fp8-rowwise" else "e5m2"
    return [f"precision {cfg.precision}: every linear's forward, dgrad and wgrad GEMMs in fp8 (e4m3 weights and "
            f"activations, {grads} gradients, float32 accumulator); the attention's, the LM head's and a MoE router's "
            "in bf16; memory at bf16 training's widths: weights bf16, gradients float32, master weights and AdamW's "
            "two moments float32 " + ("(the fp8 weight copies made on a step's first micro-batch and kept for the "
                                      "others, Transformer Engine's: a row-wise and a column-wise fp8 copy of each "
                                      "linear's weight, 2 bytes an element, counted in weights)"
                                      if getattr(cfg, "fp8_weight_cache", False) else
                                      "(the fp8 copies are made at each use and never kept)")]


def _sharding_facts(p: Plan) -> list[str]:
    """The lines of uneven stages, the sharding and context parallelism, where used."""
    cfg, c, it = p.cfg, p.iteration.counts, p.iteration
    lines = []
    if cfg.uneven:
        lines.append(f"pipeline stages' layers: {'/'.join(map(str, cfg.stage_layers()))} (the slowest, stage "
                     f"{it.layer['slow_stage']}, sets every slot)")
    if cfg.zero_stage or cfg.cp > 1:
        lines.append(f"ZeRO stage {cfg.zero_stage}, sharded over {cfg.shard_degree} ranks (cp x dp_shard), "
                     f"{cfg.replicate_degree} replica(s); data-parallel comm {it.dp_total:.4g} s, exposed "
                     f"{it.dp_exposed:.4g} s")
    for r in c.get("collectives", []):
        n = f"{r['count']} x " if r.get("count", 1) != 1 else ""
        lines.append(f"  {r['what']}: {n}{r['kind']} of {r['bytes']:,} bytes over {r['group_size']} ranks, per "
                     f"{r['per'].replace('_', ' ')}")
    return lines
