"""The training plan of a mixture-of-experts model: its iteration, memory per GPU and communication per step.

As :mod:`.compose` does for a dense model, from the per-device programs' costs (:mod:`.moe`): a dense layer
(the first ``dense_layers``), and a MoE layer = its base (attention + shared experts) + its routed part (router
and local experts) + the expert-parallel all_to_all. Each pipeline stage runs its own mix of the two (the dense
layers sit on the first stages, or the first chunks with an interleaved schedule); the slowest stage sets every
slot of the 1F1B (or interleaved: ``m + (p - 1) / v`` slots) schedule. Tensor parallelism, expert tensor
parallelism and fp8 are in the per-device programs (:mod:`.moe`); the collectives in :mod:`.moe_sharding`.

Communication per step (:class:`~.sharding.Collective`, S the full buffer as :mod:`mhlo_cost.network` prices it):

* per MoE layer and micro-batch: the all_to_all dispatch and combine forward, their gradients backward (full
  recompute: the forward's two again), over the ``ep`` ranks of an expert-parallel group;
* the gradients of the dense weights (the dense layers, the MoE layers' attention, shared experts and router)
  over the ``cp x d`` ranks, and of the experts over the expert-data-parallel group (``cp x d / ep`` ranks
  holding the same experts: rank ``j``, ``j + ep``, ...): all_reduce (ZeRO 0), or reduce_scatter of the fp32
  gradients and all_gather of the bf16 weights (ZeRO 1, the distributed optimizer, sharding the dense optimizer
  state ``cp x d`` ways and the experts' ``cp x d / ep`` ways) once per iteration; ZeRO 2 / 3 (FSDP) per layer
  and micro-batch, each layer exposing what outlasts its compute (:mod:`.moe_sharding`).

Memory per GPU: weights (bf16; ZeRO 3: shards and two layers' unsharded buffers), Megatron's fp32 gradient buffer
(ZeRO 2 / 3: its shards and one layer's unsharded gradient), the optimizer state (fp32 master and two
moments, sharded as above), and the activations of ``min(p - stage, m)`` micro-batches of the stage's layers
(the routed part's saved tensors; with full recompute none: the layer's input, kept by the base, remakes them).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import jax.numpy as jnp

from ...network import estimate
from .compose import Iteration, _layer, _time, activation_bytes
from .config import ScaleConfig
from .costs import LayerCost, layer_cost
from .fp8_state import layer_gemms, state_bytes
from .fp8_weights import cached, copy_bytes, layer_step_seconds, linear_weight_elems, per_micro_batch
from .megatron_passes import send_bytes
from .memory import CATEGORIES, embedding_state, held_layer_microbatches
from .moe import base_config, dense_config, expert_rows, local_experts, router_elems, stage_kinds, tokens
from .moe_sharding import (a2a_collectives, dp_collectives, ep_groups, expert_dp, expert_dp_groups,
                           expert_shard_degree, layer_dp_collectives, sharded_state)
from .recompute import recompute_flops, recompute_seconds
from .result import Plan
from .sharding import Exposure, seconds


@dataclass(frozen=True)
class MoECosts:
    """The per-device programs' costs of a MoE model (``dense`` None where it has no dense layer)."""

    dense: LayerCost | None
    base: LayerCost
    experts: LayerCost
    head: LayerCost

    def split(self, cfg: ScaleConfig) -> dict:
        """The routed part's weight elements, bytes and optimizer bytes, router and experts apart."""
        r, e = router_elems(cfg), self.experts
        item = jnp.dtype(cfg.dtype).itemsize
        opt = e.master_bytes + e.moment_bytes
        return {"router_elems": r, "expert_elems": e.weight_elems - r, "router_bytes": r * item,
                "expert_bytes": e.weight_bytes - r * item, "router_opt": 12 * r, "expert_opt": opt - 12 * r}


def moe_costs(cfg: ScaleConfig, hw, cache_dir=None, note=None) -> MoECosts:
    dense = layer_cost(dense_config(cfg), hw, cache_dir, note=note) if cfg.dense_layers else None
    base = layer_cost(base_config(cfg), hw, cache_dir, note=note)
    experts = layer_cost(cfg, hw, cache_dir, part="experts", note=note)
    head = layer_cost(dense_config(cfg), hw, cache_dir, part="head", note=note)
    return MoECosts(dense, base, experts, head)


def _moe_layer(cfg: ScaleConfig, costs: MoECosts, topo) -> dict:
    """One MoE layer, one micro-batch: the base's parts, the routed part's compute and the all_to_all."""
    one = _layer(base_config(cfg), costs.base, topo)
    cf, cb, cr = per_micro_batch(cfg, costs.experts)  # TEGroupedLinear's fp8 weights made once a step (.fp8_weights)
    t = costs.experts.time_s
    ex = {"forward": t["forward"] - cf, "backward": t["backward"] - cb}
    rec = recompute_seconds(cfg, t) - cr
    a2a = {"layer_forward": 0.0, "layer_backward": 0.0}
    for c in a2a_collectives(cfg):
        a2a[c.per] += seconds(topo, c)
    fwd, bwd = a2a["layer_forward"], a2a["layer_backward"]
    if cfg.ep_overlap:  # hidden under the compute of the layer of another micro-batch
        work = one["forward"] + one["backward"] + one["recompute"] + ex["forward"] + ex["backward"] + rec
        left = max(0.0, fwd + bwd - work) / (fwd + bwd) if fwd + bwd else 0.0
        fwd, bwd = fwd * left, bwd * left
    one.update(forward=one["forward"] + ex["forward"], backward=one["backward"] + ex["backward"],
               recompute=one["recompute"] + rec, ep_forward=fwd, ep_backward=bwd,
               ep_total=a2a["layer_forward"] + a2a["layer_backward"])
    one["f"] += ex["forward"] + fwd
    one["b"] += ex["backward"] + rec + bwd
    return _with_dp(cfg, costs, topo, one, "moe")


def _dense_layer(cfg: ScaleConfig, costs: MoECosts, topo) -> dict:
    if costs.dense is None:
        return {}
    one = _layer(dense_config(cfg), costs.dense, topo) | {"ep_forward": 0.0, "ep_backward": 0.0}
    return _with_dp(cfg, costs, topo, one, "dense")


def _with_dp(cfg: ScaleConfig, costs: MoECosts, topo, one: dict, kind: str) -> dict:
    """``one`` with ZeRO 2 / 3's per-layer collectives: all of them (``dp_*_total``) and what outlasts the layer's
    forward / backward (``dp_forward``, ``dp_backward``: prefetched on their own stream), added to its f and b."""
    per = {"layer_forward": 0.0, "layer_backward": 0.0}
    for c in layer_dp_collectives(cfg, costs, kind):
        per[c.per] += seconds(topo, c)
    f, b = per["layer_forward"], per["layer_backward"]
    fx, bx = max(0.0, f - one["f"]), max(0.0, b - one["b"])
    one.update(dp_forward=fx, dp_backward=bx, dp_forward_total=f, dp_backward_total=b)
    one["f"] += fx
    one["b"] += bx
    return one


def _sum(kinds: tuple, key: str) -> float:
    """Seconds of ``key`` over a stage's layers: ``kinds`` ((count, layer dict), ...)."""
    return sum(n * (one[key] if key != "cp" else one["cp"].forward + one["cp"].backward) for n, one in kinds if n)


def _stage(cfg, costs, topo, s: int, dense: int, moe: int, layers: tuple) -> dict:
    """Stage ``s``'s seconds per micro-batch and per iteration by component (its ``dense`` and ``moe`` layers)."""
    m, last = cfg.micro_batches, s == cfg.p - 1
    kinds = ((dense, layers[0]), (moe, layers[1]))
    hf, hb = (costs.head.time_s["forward"], costs.head.time_s["backward"]) if last else (0.0, 0.0)
    dp = Exposure(iteration=sum(seconds(topo, c) for c in dp_collectives(cfg, costs, dense, moe)))
    opt_dense = (dense * (costs.dense.time_s["optimizer"] if costs.dense else 0.0)
                 + moe * costs.base.time_s["optimizer"]) / cfg.shard_degree
    opt = opt_dense + moe * costs.experts.time_s["optimizer"] / expert_shard_degree(cfg)
    seconds_ = {"forward": m * (_sum(kinds, "forward") + hf), "backward": m * (_sum(kinds, "backward") + hb),
                "recompute": m * _sum(kinds, "recompute"),
                "tp_comm": m * (_sum(kinds, "tp_forward") + _sum(kinds, "tp_backward")),
                "cp_comm": m * _sum(kinds, "cp"), "ep_comm": m * (_sum(kinds, "ep_forward") + _sum(kinds, "ep_backward")),
                "optimizer": opt, "dp_layers": m * (_sum(kinds, "dp_forward") + _sum(kinds, "dp_backward"))}
    dp_all = m * (_sum(kinds, "dp_forward_total") + _sum(kinds, "dp_backward_total"))
    return {"layers": dense + moe, "dense": dense, "moe": moe, "dp": dp, "head_forward": hf, "head_backward": hb,
            "f_s": _sum(kinds, "f") + hf, "b_s": _sum(kinds, "b") + hb, "seconds": seconds_, "dp_all": dp_all}


def moe_compose(cfg: ScaleConfig, costs: MoECosts, hw) -> Iteration:
    """The :class:`~.compose.Iteration` of a MoE configuration (1F1B; the slowest stage paces every slot)."""
    topo = getattr(hw, "topology", None)
    m, p = cfg.micro_batches, cfg.p
    layers = (_dense_layer(cfg, costs, topo), _moe_layer(cfg, costs, topo))
    stages = [_stage(cfg, costs, topo, s, d, e, layers) for s, (d, e) in enumerate(stage_kinds(cfg))]
    slow_stage = max(reversed(range(p)), key=lambda s: stages[s]["f_s"] + stages[s]["b_s"])
    slow = stages[slow_stage]
    p2p_bytes = send_bytes(cfg, activation_bytes(cfg))  # (the s/t shard with --sp; scatter_gather is refused here)
    p2p_one = _time(topo, "collective_permute", p2p_bytes, ((0, cfg.t * cfg.cp * cfg.d),)) if p > 1 else 0.0
    v = cfg.interleave  # v chunk boundaries crossed forward and v backward per micro-batch
    per_mb = slow["f_s"] + slow["b_s"] + 2 * v * p2p_one
    slots = Fraction(m) + Fraction(p - 1, v)
    bubble = float(Fraction(p - 1, v)) * (slow["f_s"] + slow["b_s"])
    dp_iter = max(st["dp"].iteration for st in stages)
    hidden = min(dp_iter, slow["b_s"] / v) if cfg.dp_overlap else 0.0
    for st in stages:
        st["dp_layers"] = st["seconds"].pop("dp_layers")
        st["seconds"].update(p2p=float(slots) * 2 * v * p2p_one,
                             dp_exposed=st["dp_layers"] + max(0.0, st["dp"].iteration - hidden))
    sec = slow["seconds"]
    opt = max(st["seconds"]["optimizer"] for st in stages)
    cast_own, cast_fill = _step_casts(cfg, costs, stages, slow_stage)  # the once-a-step fp8 weight copies
    bubble += cast_fill
    total = float(slots) * per_mb + (dp_iter - hidden) + opt + cast_own + cast_fill
    compute = {k: sec[k] for k in ("forward", "backward", "recompute")}
    compute["forward"] += cast_own
    counts = moe_counts(cfg, costs, hw, total, stages)
    counts["ep_total_s"] = m * slow["moe"] * layers[1]["ep_total"]
    counts.update(micro_batches=m, p2p_transfers=2 * v * m if p > 1 else 0, p2p_bytes=p2p_bytes, slots=str(slots),
                  bubble_fraction=str(Fraction(p - 1, v * m)))
    one = {"slow_stage": slow_stage, "dp_iteration_exposed": dp_iter - hidden, "dense": layers[0], "moe": layers[1]}
    return Iteration(cfg, compute, sec["tp_comm"], bubble, float(slots) * 2 * v * p2p_one,
                     slow["dp_layers"] + dp_iter - hidden, slow["dp_all"] + dp_iter, opt, total, counts,
                     cp_comm=sec["cp_comm"], stages=tuple(stages), layer=one, ep_comm=sec["ep_comm"])


def _step_casts(cfg: ScaleConfig, costs: MoECosts, stages: list, slow: int) -> tuple[float, float]:
    """The fp8 weight casts made once a step where cached (:func:`.fp8_weights.split_step`, every layer's: the dense
    layers', the MoE layers' base and routed part): (the slowest stage's own, the other stages' in the fill)."""
    dense = layer_step_seconds(cfg, costs.dense) if costs.dense else 0.0
    moe = layer_step_seconds(cfg, costs.base) + layer_step_seconds(cfg, costs.experts)
    each = [st["dense"] * dense + st["moe"] * moe for st in stages]
    return each[slow], sum(each) - each[slow]


def moe_flops_formula(cfg: ScaleConfig) -> int:
    """Model FLOPs per iteration in closed form (forward + backward = 3 x forward, every token): per layer the
    attention's projections and scores as :func:`~.compose.model_flops_6nd`, the dense layers' MLP, the MoE
    layers' shared experts' MLP and k routed experts' SwiGLUs and the router; the logits."""
    b, s, h, vcb = cfg.global_batch, cfg.seq, cfg.hidden, cfg.vocab
    kvd = cfg.kv * (h // cfg.heads)
    attn = 6 * b * s * (2 * h * h + 2 * h * kvd) + 12 * b * s * s * h
    mats = 3 if cfg.mlp_kind == "swiglu" else 2  # the dense and shared MLPs' GEMMs; the routed experts: SwiGLU
    dense = attn + 6 * b * s * mats * h * cfg.mlp
    moe = attn + 6 * b * s * (h * cfg.expert_ffn * (mats * cfg.shared_experts + 3 * cfg.top_k) + h * cfg.experts)
    return cfg.dense_layers * dense + (cfg.layers - cfg.dense_layers) * moe + 6 * b * s * h * vcb


def moe_counts(cfg: ScaleConfig, costs: MoECosts, hw, total: float, stages: list) -> dict:
    """Model FLOPs (from the programs: every stage's layers, every micro-batch of every replica), the closed
    form beside them, MFU; the all_to_all's bytes per device per step."""
    def fb(c):
        return c.gemm_flops["forward"] + c.gemm_flops["backward"] if c is not None else 0

    def rec(c):
        return recompute_flops(cfg, c.gemm_flops) if c else 0

    dense_n, moe_n = cfg.dense_layers, cfg.layers - cfg.dense_layers
    per_mb = dense_n * fb(costs.dense) + moe_n * (fb(costs.base) + fb(costs.experts)) + fb(costs.head)
    per_rec = dense_n * rec(costs.dense) + moe_n * (rec(costs.base) + rec(costs.experts))
    mbs = cfg.micro_batches * cfg.d * cfg.cp * cfg.t  # every device's share
    model, hardware = per_mb * mbs, (per_mb + per_rec) * mbs
    denom = total * hw.matrix_peak("bf16") * cfg.gpus
    a2a = a2a_collectives(cfg)
    sent = sum((c.size - 1) * c.nbytes // c.size for c in a2a)
    most = max(st["moe"] for st in stages)
    topo = getattr(hw, "topology", None)
    first = next((c for c in a2a if c.kind == "all_to_all"), None)
    tier = estimate(topo, "all_to_all", first.nbytes, first.groups).tier if first and topo is not None else "local"
    return {**parameters(cfg, costs), "model_flops": model, "hardware_flops": hardware,
            "formula_flops": moe_flops_formula(cfg),
            "mfu": model / denom if denom else 0.0, "hfu": hardware / denom if denom else 0.0,
            "ep_bytes_per_layer": sent, "ep_bytes": sent * most * cfg.micro_batches,
            "expert_rows": expert_rows(cfg), "tokens": tokens(cfg), "ep_tier": tier,
            "collectives": [c.row() for c in (*a2a, *dp_collectives(cfg, costs, *stage_kinds(cfg)[0]),
                                              *_layer_rows(cfg, costs))]}


def _layer_rows(cfg: ScaleConfig, costs: MoECosts) -> list:
    """ZeRO 2 / 3's per-layer collectives of each kind of layer the model has."""
    kinds = (("dense",) if cfg.dense_layers else ()) + ("moe",)
    return [c for kind in kinds for c in layer_dp_collectives(cfg, costs, kind)]


def parameters(cfg: ScaleConfig, costs: MoECosts) -> dict:
    """The model's parameters from the programs' weights (a device holds ``1/t`` of a layer but its norms and
    its row-parallel biases, ``6 h``, which every tensor rank holds; the routed part ``E / ep`` experts at
    ``1/etp`` of their width, so ``x ep x etp``), the untied embedding (``vocab x hidden``) added; and those one
    token uses (``top_k`` of the ``E`` routed experts)."""
    sp, d, t, h = costs.split(cfg), costs.dense, cfg.t, cfg.hidden
    experts = sp["expert_elems"] * cfg.ep * cfg.etp  # every expert of a layer

    def whole(elems: int, replicated: int) -> int:
        return t * elems - (t - 1) * replicated

    shared = cfg.dense_layers * (whole(d.weight_elems, 6 * h) if d else 0) + (cfg.layers - cfg.dense_layers) * (
        whole(costs.base.weight_elems, 6 * h) + sp["router_elems"]) + t * costs.head.weight_elems + (
        cfg.vocab * h)
    moe_n = cfg.layers - cfg.dense_layers
    return {"params_total": shared + moe_n * experts, "params_active": shared + moe_n * experts * cfg.top_k
            // cfg.experts}


def moe_memory(cfg: ScaleConfig, costs: MoECosts, capacity=None, stage: int = 0) -> dict:
    """Bytes per GPU of pipeline stage ``stage`` by category (:data:`~.memory.CATEGORIES`), the experts' part of
    each beside them, ``total``, and ``fits`` where ``capacity`` is given."""
    dense, moe = stage_kinds(cfg)[stage]
    sp, d, b = costs.split(cfg), costs.dense, costs.base
    held = held_layer_microbatches(cfg, stage) / (dense + moe)  # per layer of the stage (1F1B: min(p - s, m))
    dense_opt = dense * (d.master_bytes + d.moment_bytes if d else 0) + moe * (
        b.master_bytes + b.moment_bytes + sp["router_opt"])
    # full recompute keeps the layer's input only (the base's): the routed part's inputs are remade from it
    routed = 0 if cfg.recompute == "full" else costs.experts.activation_bytes
    act = dense * (d.activation_bytes if d else 0) + moe * (b.activation_bytes + routed)
    state = sharded_state(cfg, costs, dense, moe)
    eo = moe * sp["expert_opt"] // expert_shard_degree(cfg)
    copies = _copy_bytes(cfg, costs, dense, moe)  # TE's kept fp8 weights (.fp8_weights; 0 without the cache)
    scales = _scale_bytes(cfg, dense, moe)  # and their scales and amax histories (.fp8_state)
    emb = embedding_state(cfg, stage)  # the word embedding / LM head on the first / last stage, sharded as dense
    out = {"weights": state["weights"] + copies + scales + emb["weights"],
           "gradients": state["gradients"] + emb["gradients"],
           "optimizer_state": dense_opt // cfg.shard_degree + eo + emb["optimizer_state"],
           "activations": int(held * act)}
    out["total"] = sum(out[k] for k in CATEGORIES)
    if sum(emb.values()):
        out["embedding_state"] = sum(emb.values())
    out.update(expert_weights=state["expert_weights"], expert_gradients=state["expert_gradients"],
               expert_optimizer_state=eo)
    if copies:
        out.update(fp8_weight_copies=copies, fp8_scale_state=scales)
    if capacity:
        out["capacity"] = int(capacity)
        out["fits"] = out["total"] <= capacity
    return out


def _copy_bytes(cfg: ScaleConfig, costs: MoECosts, dense: int, moe: int) -> int:
    """Bytes of the fp8 weight copies a stage of ``dense`` and ``moe`` layers keeps where cached: the dense layers'
    and the bases' linears and the local experts' weights (the router stays bf16), 2 bytes an element."""
    if not cached(cfg):
        return 0
    elems = dense * linear_weight_elems(dense_config(cfg)) + moe * (
        linear_weight_elems(base_config(cfg)) + costs.split(cfg)["expert_elems"])
    return copy_bytes(cfg, elems)


def _scale_bytes(cfg: ScaleConfig, dense: int, moe: int) -> int:
    """Bytes of TE's fp8 scaling state a stage of ``dense`` and ``moe`` layers keeps where cached (:mod:`.fp8_state`):
    the dense layers' and the bases' TE linears, and each local expert's fc1 and fc2 GEMM (``TEGroupedLinear``,
    num_gemms = the local experts)."""
    gemms = dense * layer_gemms(dense_config(cfg)) + moe * (layer_gemms(base_config(cfg)) + 2 * local_experts(cfg))
    return state_bytes(cfg, gemms)


def moe_plan(cfg: ScaleConfig, hw, cache_dir=None, note=None):
    """The :class:`~.result.Plan` of a MoE configuration (its memory: the stage that holds the most)."""

    costs = moe_costs(cfg, hw, cache_dir, note)
    it = moe_compose(cfg, costs, hw)
    cap = getattr(hw, "hbm_capacity", None)
    held = max((moe_memory(cfg, costs, cap, s) | ({"stage": s} if s else {}) for s in range(cfg.p)),
               key=lambda r: r["total"])
    return Plan(cfg, it, held, costs.base, costs.head, costs)


def moe_facts(p) -> list[str]:
    """The lines under a MoE plan's breakdown: FLOPs and MFU, the experts, the all_to_all, memory by category with
    the experts' part, and every collective of the step."""
    cfg, c, m, it = p.cfg, p.iteration.counts, p.memory, p.iteration
    gib, sp = 2 ** 30, p.moe.split(cfg)
    a2a = [r for r in a2a_collectives(cfg) if r.kind == "all_to_all"]
    tier = c["ep_tier"]
    etp = (f" (and {2 * (3 if cfg.recompute == 'full' else 2)} all_gather / reduce_scatter of {cfg.etp} x S over the "
           f"{cfg.etp} expert tensor-parallel ranks, in the bytes below)" if cfg.etp > 1 else "")
    routing = (f"capacity factor {cfg.capacity_factor} (padded)" if cfg.capacity_factor
               else f"dropless, imbalance {cfg.expert_imbalance}" + (" (balanced)" if cfg.expert_imbalance == 1 else ""))
    lines = [
        f"model FLOPs {c['model_flops']:,} (forward + backward from the IR; closed form {c['formula_flops']:,}); "
        f"hardware FLOPs {c['hardware_flops']:,}; MFU {c['mfu']:.1%}, HFU {c['hfu']:.1%} of the bf16 peak",
        f"parameters {c['params_total']:,} in all, {c['params_active']:,} used per token (from the programs' "
        "weights, the embedding added)",
        f"experts: {cfg.experts} routed (top-{cfg.top_k}, {cfg.expert_ffn} wide) + {cfg.shared_experts} shared, "
        f"{cfg.layers - cfg.dense_layers} MoE layers after {cfg.dense_layers} dense; EP {cfg.ep} ({local_experts(cfg)} "
        f"experts per GPU), expert TP {cfg.etp}, expert-data-parallel {expert_dp(cfg)}; {routing}; "
        f"{c['expert_rows']:,} rows per "
        f"local expert per micro-batch ({c['tokens']:,} tokens x top-{cfg.top_k}"
        f"{f' x {cfg.etp} expert TP ranks' if cfg.etp > 1 else ''} / {local_experts(cfg)} at balance)",
        f"all_to_all per MoE layer and micro-batch: {len(a2a)} of S = {a2a[0].nbytes if a2a else 0:,} bytes over "
        f"{cfg.ep} ranks ({tier}){etp}, {c['ep_bytes_per_layer']:,} bytes sent per GPU; per step "
        f"{c['ep_bytes']:,} bytes "
        f"per GPU of the stage with the most MoE layers; {c['ep_total_s']:.4g} s, "
        + (f"{it.ep_comm:.4g} s of it exposed (overlapped with another micro-batch's compute)" if cfg.ep_overlap
           else "not overlapped"),
        f"memory per GPU ({'first stage' if not m.get('stage') else 'stage %d, the most' % m['stage']}): "
        + ", ".join(f"{k.replace('_', ' ')} {m[k] / gib:.2f} GiB" for k in (*CATEGORIES, "total"))
        + (f"; {'fits' if m['fits'] else 'does NOT fit'} in {m['capacity'] / gib:.1f} GiB" if "fits" in m else ""),
        f"  of which experts: weights {m['expert_weights'] / gib:.2f} GiB, gradients {m['expert_gradients'] / gib:.2f}"
        f" GiB, optimizer state {m['expert_optimizer_state'] / gib:.2f} GiB (sharded {expert_shard_degree(cfg)} "
        f"ways); {sp['expert_elems']:,} expert weights per MoE layer per GPU",
        "attention: multi-head attention of the configuration's hidden size and heads (an MLA model's low-rank "
        "projections are not modelled); the router's top-k, not the tokens' permutation, is in the programs",
    ]
    if cfg.uneven:
        lines.append(f"pipeline stages' layers: {'/'.join(map(str, cfg.stage_layers()))} (dense/MoE: "
                     f"{' '.join(f'{d}/{e}' for d, e in stage_kinds(cfg))}; the slowest, stage "
                     f"{it.layer['slow_stage']}, sets every slot)")
    lines += [f"  {r['what']}: {r['kind']} of {r['bytes']:,} bytes over {r['group_size']} ranks, per "
              f"{r['per'].replace('_', ' ')}" for r in c["collectives"]]
    return lines


__all__ = ["MoECosts", "moe_costs", "moe_compose", "moe_memory", "moe_plan", "a2a_collectives", "dp_collectives",
           "layer_dp_collectives", "ep_groups", "expert_dp", "expert_dp_groups", "moe_flops_formula", "local_experts"]
