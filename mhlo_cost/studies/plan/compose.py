"""One training iteration composed by arithmetic from the per-device layer's costs.

For a configuration with ``L`` layers on ``p`` stages (``v`` virtual stages each), ``m`` micro-batches per
pipeline and the layer's times F (forward), B (backward), R (recompute) per micro-batch:

* stage time per micro-batch: ``F_s = (L/p)(F + TP_f)``, ``B_s = (L/p)(B + R + TP_b)``, where TP_f / TP_b
  are the layer's tensor-parallel collectives (no sequence parallelism: 2 all_reduce forward, 2 backward;
  with it: 2 all_gather + 2 reduce_scatter forward, 2 + 2 backward and 2 all_gather more that re-gather
  the sharded norm outputs the weight gradients need; full recompute repeats the forward's collectives),
  each of the full activation ``b x s x h`` (bf16) over the ``t`` devices of a tensor group, priced on the
  system's network. Megatron (2022) does not overlap them: all are exposed;
* Megatron's full recompute re-runs the layer's whole forward, so its R is priced as F (JAX's remat
  leaves out what the backward does not read; its IR count is kept beside, ``recompute_ir``);
* 1F1B: ``(m + p - 1)(F_s + B_s)``; interleaved with ``v`` chunks: ``(m + (p - 1)/v)(F_s + B_s)``; the
  bubble is the ``(p - 1)/v`` part (fraction ``(p - 1)/(v m)`` of the ideal time);
* point-to-point: each micro-batch crosses ``v`` chunk boundaries forward and ``v`` backward per device,
  the activation ``b x s x h`` bf16 (``/t`` with sequence parallelism), device to the next stage's;
* data parallel: the stage's fp32 gradients all_reduce (or, ``zero``, reduce_scatter the fp32 gradients
  and all_gather the bf16 weights) over the ``d`` replicas, exposed unless ``dp_overlap``, where the last
  micro-batch's backward hides up to its length;
* optimizer: the layer's optimizer phase x layers per stage (``/d`` sharded with ``zero``).

Counts (FLOPs, bytes, micro-batches, transfers) are exact ints; times are floats in seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ...network import estimate
from .config import ScaleConfig
from .costs import LayerCost


@dataclass(frozen=True)
class Iteration:
    """Per-device breakdown of one iteration (seconds), and the exact counts behind it."""

    cfg: ScaleConfig
    compute: dict  # phase -> seconds per iteration on the busiest device (forward, backward, recompute)
    tp_comm: float
    bubble: float
    p2p: float
    dp_exposed: float
    dp_total: float
    optimizer: float
    total: float
    counts: dict = field(default_factory=dict)

    def row(self) -> dict:
        c = self.counts
        precision = {} if self.cfg.precision == "bf16" else {"precision": self.cfg.precision}  # (bf16: unchanged)
        return precision | {"config": self.cfg.label(), "t": self.cfg.t, "sp": self.cfg.sp, "p": self.cfg.p,
                "v": self.cfg.interleave, "d": self.cfg.d, "micro_batch": self.cfg.micro_batch,
                "micro_batches": self.cfg.micro_batches, "recompute": self.cfg.recompute,
                "dp_comm": self.cfg.dp_comm, "iteration_s": self.total,
                "forward_s": self.compute["forward"], "backward_s": self.compute["backward"],
                "recompute_s": self.compute["recompute"], "tp_comm_s": self.tp_comm, "bubble_s": self.bubble,
                "p2p_s": self.p2p, "dp_exposed_s": self.dp_exposed, "optimizer_s": self.optimizer,
                "model_flops": c["model_flops"], "hardware_flops": c["hardware_flops"],
                "mfu": c["mfu"], "hfu": c["hfu"]}


def tp_collectives(cfg: ScaleConfig) -> dict:
    """(kind, count) of the tensor-parallel collectives of one layer, forward and backward, per micro-batch."""
    if cfg.t == 1:
        return {"forward": (), "backward": ()}
    if cfg.sp:
        fwd = (("all_gather", 2), ("reduce_scatter", 2))
        bwd = [("all_gather", 2 + 2), ("reduce_scatter", 2)]
    else:
        fwd = (("all_reduce", 2),)
        bwd = [("all_reduce", 2)]
    if cfg.recompute == "full":
        bwd.extend(fwd)
    return {"forward": fwd, "backward": tuple(bwd)}


def _time(topology, kind: str, nbytes: int, groups) -> float:
    if topology is None or nbytes == 0:
        return 0.0
    return estimate(topology, kind, nbytes, groups).time_s


def tp_group(cfg: ScaleConfig) -> tuple:
    return (tuple(range(cfg.t)),)


def dp_group(cfg: ScaleConfig) -> tuple:
    """Megatron's rank order: tensor fastest, then data, then pipeline; a data group is t apart."""
    return tuple(tuple(r * cfg.t + k for r in range(cfg.d)) for k in range(cfg.t))


def activation_bytes(cfg: ScaleConfig) -> int:
    """S of one layer's activation b x s x h, bf16 (the full buffer a TP collective moves)."""
    return cfg.micro_batch * cfg.seq * cfg.hidden * 2


def compose(cfg: ScaleConfig, cost: LayerCost, hw, head: LayerCost | None = None) -> Iteration:
    """The :class:`Iteration` of ``cfg`` from its layer's ``cost`` (and the last stage's ``head``: LM head
    and loss, which make that stage the slowest) on ``hw`` (a system profile)."""
    topo = getattr(hw, "topology", None)
    lps, m, p, v = cfg.layers_per_stage, cfg.micro_batches, cfg.p, cfg.interleave
    t = cost.time_s
    rec = t["forward"] if cfg.recompute == "full" else t["recompute"]
    s_act = activation_bytes(cfg)
    tp = {ph: sum(n * _time(topo, kind, s_act, tp_group(cfg)) for kind, n in kinds)
          for ph, kinds in tp_collectives(cfg).items()}
    hf = head.time_s["forward"] if head is not None else 0.0
    hb = head.time_s["backward"] if head is not None else 0.0
    f_s = lps * (t["forward"] + tp["forward"]) + hf  # the last stage: the slowest
    b_s = lps * (t["backward"] + rec + tp["backward"]) + hb
    # point-to-point: v boundaries forward and v backward per micro-batch (none with one stage); Megatron's
    # scatter/gather optimisation sends 1/t of the activation per tensor rank (all-gathered on NVLink after)
    p2p_bytes = s_act // cfg.t
    hop = cfg.t * cfg.d  # the next stage's device with the same tensor and data rank
    p2p_one = _time(topo, "collective_permute", p2p_bytes, ((0, hop),)) if p > 1 else 0.0
    p2p_per_mb = 2 * v * p2p_one if p > 1 else 0.0
    slots = Fraction(m) + Fraction(p - 1, v)  # micro-batch slots on the critical path
    per_mb = f_s + b_s + p2p_per_mb
    bubble = float(Fraction(p - 1, v)) * (f_s + b_s)
    # data parallel
    grad_bytes = cost.weight_elems * lps * 4
    if cfg.d > 1 and cfg.dp_comm == "zero":
        dp = (_time(topo, "reduce_scatter", grad_bytes, dp_group(cfg))
              + _time(topo, "all_gather", cost.weight_elems * lps * 2, dp_group(cfg)))
    elif cfg.d > 1:
        dp = _time(topo, "all_reduce", grad_bytes, dp_group(cfg))
    else:
        dp = 0.0
    hidden = min(dp, b_s / v) if cfg.dp_overlap else 0.0
    opt = lps * t["optimizer"] / (cfg.d if cfg.dp_comm == "zero" else 1)
    total = float(slots) * per_mb + (dp - hidden) + opt
    compute = {"forward": m * (lps * t["forward"] + hf), "backward": m * (lps * t["backward"] + hb),
               "recompute": m * lps * rec}
    counts = flop_counts(cfg, cost, hw, total, head)
    counts.update(micro_batches=m, p2p_transfers=2 * v * m if p > 1 else 0, p2p_bytes=p2p_bytes,
                  tp_bytes=s_act, dp_bytes=grad_bytes if cfg.d > 1 else 0, slots=str(slots),
                  bubble_fraction=str(Fraction(p - 1, v * m)))
    return Iteration(cfg, compute, m * lps * (tp["forward"] + tp["backward"]), bubble,
                     float(slots) * p2p_per_mb, dp - hidden, dp, opt, total, counts)


def model_flops_6nd(cfg: ScaleConfig) -> int:
    """Megatron's model FLOPs per iteration (Narayanan et al. 2021, without recompute):
    ``72 B s L h^2 (1 + s/(6h) + V/(12 h L))`` (MLP 4h), as an exact int: forward + backward matrix FLOPs of
    every layer and the logits. (6ND with N = 12 L h^2 is its leading term.) Generalised to fewer key/value
    heads (the k and v projections h x kv d) and the SwiGLU MLP (three h x ffn GEMMs)."""
    b, s, h, n, vcb = cfg.global_batch, cfg.seq, cfg.hidden, cfg.layers, cfg.vocab
    f, kvd = cfg.mlp, cfg.kv * (h // cfg.heads)
    mlp_mats = 3 if cfg.mlp_kind == "swiglu" else 2  # SwiGLU: gate, up, down
    per_layer = 6 * b * s * (2 * h * h + 2 * h * kvd + mlp_mats * h * f) + 12 * b * s * s * h
    return n * per_layer + 6 * b * s * h * vcb


def flop_counts(cfg: ScaleConfig, cost: LayerCost, hw, total: float, head: LayerCost | None = None) -> dict:
    """Model FLOPs (forward + backward of every layer, from the IR, x devices' share) and hardware FLOPs
    (recompute included) per iteration, the 6ND-style closed form beside them, MFU and HFU."""
    g = cost.gemm_flops
    per_mb_model = g["forward"] + g["backward"]
    rec = g["forward"] if cfg.recompute == "full" else g["recompute"]
    mbs = cfg.micro_batches * cfg.d  # micro-batches of the whole iteration per tensor/pipeline slot
    head_flops = head.gemm_flops["forward"] + head.gemm_flops["backward"] if head is not None else 0
    model = (per_mb_model * cfg.layers + head_flops) * cfg.t * mbs
    hardware = model + rec * cfg.layers * cfg.t * mbs
    peak = hw.matrix_peak("bf16")
    denom = total * peak * cfg.gpus
    return {"model_flops": model, "hardware_flops": hardware, "formula_flops": model_flops_6nd(cfg),
            "rule_6nd": 6 * cfg.global_batch * cfg.seq * 12 * cfg.layers * cfg.hidden ** 2,
            "mfu": model / denom if denom else 0.0, "hfu": hardware / denom if denom else 0.0}
