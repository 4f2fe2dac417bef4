"""The collectives and the sharded memory of a mixture-of-experts training plan: the expert-parallel all_to_all
and the data-parallel sharding (ZeRO 0-3, FSDP) of the dense and the expert weights.

Groups (t = 1 shown; :func:`ep_groups`): a stage's ``cp x d`` ranks (context rank fastest, then data rank) hold
the same dense weights; an expert-parallel group is ``ep`` consecutive of them, and the ranks holding the same
experts, one per expert-parallel group (``j, j + ep, ...``: ``cp x d / ep`` ranks), are the expert-data-parallel
group, over which the experts' gradients reduce and their state shards (Megatron-Core's expert-data-parallel
group; torchtitan's ``dp_shard_mod_ep`` mesh for FSDP). ``W``: a layer's dense weights on one device (a dense
layer's, or a MoE layer's attention, shared experts and router), ``We``: a MoE layer's local experts' (``E / ep``
of them); gradients reduce in ``grad_bytes`` (fp32), parameters gather in bf16 (2 bytes):

* ZeRO 0: ``all_reduce`` of the stage's gradients once per iteration, the dense over ``cp x d``, the experts over
  their expert-data-parallel group; ZeRO 1: ``reduce_scatter`` of them and ``all_gather`` of the bf16 weights
  after the step;
* ZeRO 2: each micro-batch's backward ``reduce_scatter`` of each layer's gradients (``4 W`` over ``cp x d``, and
  ``4 We`` over the expert-data-parallel group), the ``all_gather`` of the stage's weights after the step;
* ZeRO 3 (FSDP): each micro-batch's forward ``all_gather`` of each layer's ``2 W`` and ``2 We`` (over the same two
  groups), its backward again (unless reshard-after-forward is off) and the ``reduce_scatter`` of ``4 W``,
  ``4 We``.

HSDP (``dp_shard``): the dense weights shard over ``cp x dp_shard`` ranks (per tensor rank) and the experts over
the part of their expert-data-parallel group inside one sharding group (``t x cp x dp_shard / (etp x ep)`` ranks,
:func:`expert_shard`), each shard replicated ``d / dp_shard`` times: every reduce_scatter of gradients is followed
by an ``all_reduce`` of the shard (``1 / shard`` of the bytes) over its replicas, as torchtitan's HSDP runs it.

As for a dense layer (:mod:`.sharding`), a layer's per-layer collectives are prefetched one layer ahead on their
own stream: it exposes what they outlast its compute (forward; backward with recompute).

Memory (:func:`sharded_state`): ZeRO 3 keeps the shards of the weights (the dense ``/ (cp x d)``, the experts
``/ (cp x d / ep)``; none under FSDP2, whose shard is the fp32 master: :mod:`.torch_peak`) plus the unsharded
bf16 buffers of the two largest layers of the stage (the running one and the prefetched one), or of every layer
with reshard-after-forward off; ZeRO 2 and 3 keep the fp32 gradients'
shards plus one (the largest) layer's unsharded gradient (the one being reduce-scattered).
"""
from __future__ import annotations

import jax.numpy as jnp

from .config import ScaleConfig
from .moe import a2a_copies
from .sharding import Collective, grad_groups, replicate_groups, shard_groups
from .torch_peak import fsdp2


def _expert_rank(cfg: ScaleConfig, a: int, e: int, g: int) -> int:
    """The stage-0 rank of expert tensor rank ``a``, expert-parallel rank ``e`` and expert-data-parallel rank ``g``:
    Megatron-Core's expert order (expert tensor rank fastest, then expert-parallel, then expert-data-parallel) over
    the stage's ``t x cp x d`` ranks."""
    return a + cfg.etp * (e + cfg.ep * g)


def ep_groups(cfg: ScaleConfig) -> tuple:
    """Every expert-parallel group of stage 0: ``ep`` ranks ``etp`` apart (consecutive with expert TP 1)."""
    return tuple(tuple(_expert_rank(cfg, a, e, g) for e in range(cfg.ep))
                 for g in range(expert_dp(cfg)) for a in range(cfg.etp))


def etp_groups(cfg: ScaleConfig) -> tuple:
    """Every expert tensor-parallel group of stage 0: ``etp`` consecutive ranks."""
    return tuple(tuple(_expert_rank(cfg, a, e, g) for a in range(cfg.etp))
                 for g in range(expert_dp(cfg)) for e in range(cfg.ep))


def expert_dp_groups(cfg: ScaleConfig) -> tuple:
    """Every expert-data-parallel group of stage 0: the ranks holding the same experts (one per EP group)."""
    return tuple(tuple(_expert_rank(cfg, a, e, g) for g in range(expert_dp(cfg)))
                 for e in range(cfg.ep) for a in range(cfg.etp))


def expert_dp(cfg: ScaleConfig) -> int:
    """Ranks of an expert-data-parallel group: ``t x cp x d / (etp x ep)``."""
    return cfg.t * cfg.cp * cfg.d // (cfg.etp * cfg.ep)


def expert_shard(cfg: ScaleConfig) -> int:
    """Ranks of an expert sharding group: the expert-data-parallel group, or with HSDP its part within one sharding
    group (``t x cp x dp_shard / (etp x ep)``), replicated ``d / dp_shard`` times."""
    return expert_dp(cfg) // cfg.replicate_degree


def expert_shard_degree(cfg: ScaleConfig) -> int:
    """Ranks the experts' state is sharded over: the expert sharding group (ZeRO 1-3), else 1."""
    return expert_shard(cfg) if cfg.zero_stage else 1


def a2a_collectives(cfg: ScaleConfig) -> list[Collective]:
    """One MoE layer's token dispatch and combine of one micro-batch, forward and backward: the all_to_all over
    the expert-parallel group, and with expert tensor parallelism the all_gather of the dispatched rows over the
    expert tensor-parallel group (after the dispatch) and their reduce_scatter (before the combine), of ``etp``
    times the all_to_all's buffer (Megatron-Core's all-to-all dispatcher)."""
    s = a2a_copies(cfg) * cfg.hidden * jnp.dtype(cfg.dtype).itemsize
    g, tg, big = ep_groups(cfg), etp_groups(cfg), cfg.etp * s
    a2a, tp = cfg.ep > 1, cfg.etp > 1
    fwd = [Collective("tokens (dispatch)", "all_to_all", s, g, "layer_forward")] * a2a + [
        Collective("tokens (expert TP gather)", "all_gather", big, tg, "layer_forward"),
        Collective("expert outputs (expert TP reduce)", "reduce_scatter", big, tg, "layer_forward")] * tp + [
        Collective("tokens (combine)", "all_to_all", s, g, "layer_forward")] * a2a
    bwd = [Collective("token grads (combine)", "all_to_all", s, g, "layer_backward")] * a2a + [
        Collective("output grads (expert TP gather)", "all_gather", big, tg, "layer_backward"),
        Collective("token grads (expert TP reduce)", "reduce_scatter", big, tg, "layer_backward")] * tp + [
        Collective("token grads (dispatch)", "all_to_all", s, g, "layer_backward")] * a2a
    rec = [Collective(f"{c.what}, recomputed", c.kind, c.nbytes, c.groups, "layer_backward") for c in fwd]
    return fwd + bwd + (rec if cfg.recompute == "full" else [])


def _groups(cfg: ScaleConfig, part: str) -> tuple:
    """(every rank holding the same weights, the first sharding group, the replicas of its shards: HSDP, else
    one rank) of the ``dense`` weights (per tensor rank) or of the ``expert`` weights."""
    if part == "dense":
        return grad_groups(cfg), shard_groups(cfg), replicate_groups(cfg)
    es = expert_shard(cfg)
    cells = [(a, e) for e in range(cfg.ep) for a in range(cfg.etp)]
    return (expert_dp_groups(cfg), tuple(tuple(_expert_rank(cfg, a, e, g) for g in range(es)) for a, e in cells),
            tuple(tuple(_expert_rank(cfg, a, e, r * es) for r in range(cfg.replicate_degree)) for a, e in cells))


def _sharded(cfg: ScaleConfig, what: str, elems: int, groups: tuple, per: str) -> list[Collective]:
    """The reduce_scatter of ``elems`` gradients over the sharding group and, with HSDP, the all_reduce of the
    shard over its replicas."""
    _, shard, replicas = groups
    out = [Collective(f"{what} gradients", "reduce_scatter", cfg.grad_bytes * elems, shard, per)] * (len(shard[0]) > 1)
    if len(replicas[0]) > 1:
        out.append(Collective(f"{what} gradient shard", "all_reduce", cfg.grad_bytes * elems // len(shard[0]),
                              replicas, per))
    return out


def _reduce(cfg: ScaleConfig, what: str, elems: int, groups: tuple) -> list[Collective]:
    """The once-per-iteration collectives of ``elems`` weights over ``groups`` (:func:`_groups`; ZeRO 3: none)."""
    full, shard, _ = groups
    if elems == 0 or len(full[0]) < 2:
        return []
    g, z = cfg.grad_bytes, cfg.zero_stage
    if not z:
        return [Collective(f"{what} gradients", "all_reduce", g * elems, full, "iteration")]
    grads = _sharded(cfg, what, elems, groups, "iteration") if z == 1 else []
    gather = [Collective(f"{what} parameters", "all_gather", 2 * elems, shard, "iteration")] * (
        z < 3 and len(shard[0]) > 1)
    return grads + gather


def _weights(costs, sp: dict, kind: str) -> tuple[int, int]:
    """(dense, expert) weight elements of one layer of ``kind`` (``dense`` or ``moe``) on one device."""
    if kind == "dense":
        return (costs.dense.weight_elems if costs.dense else 0), 0
    return costs.base.weight_elems + sp["router_elems"], sp["expert_elems"]


def dp_collectives(cfg: ScaleConfig, costs, dense: int, moe: int) -> list[Collective]:
    """A stage's once-per-iteration gradient collectives (``dense`` and ``moe`` layers): the dense weights' over
    ``cp x d``, the experts' over the expert-data-parallel group."""
    sp = costs.split(cfg)
    dense_elems = dense * _weights(costs, sp, "dense")[0] + moe * _weights(costs, sp, "moe")[0]
    return (_reduce(cfg, "dense", dense_elems, _groups(cfg, "dense"))
            + _reduce(cfg, "expert", moe * sp["expert_elems"], _groups(cfg, "expert")))


def layer_dp_collectives(cfg: ScaleConfig, costs, kind: str) -> list[Collective]:
    """ZeRO 2 / 3's collectives of one layer of ``kind`` (``dense`` or ``moe``) and one micro-batch."""
    if cfg.zero_stage < 2:
        return []
    w, we = _weights(costs, costs.split(cfg), kind)
    out = []
    for what, elems, part in (("dense layer" if kind == "dense" else "MoE layer's dense", w, "dense"),
                              ("MoE layer's expert", we, "expert")):
        groups = _groups(cfg, part)
        shard = groups[1]
        if elems == 0 or len(groups[0][0]) < 2:
            continue
        if cfg.zero_stage == 3 and len(shard[0]) > 1:
            out.append(Collective(f"{what} parameters", "all_gather", 2 * elems, shard, "layer_forward"))
            if cfg.reshard_after_forward:
                out.append(Collective(f"{what} parameters", "all_gather", 2 * elems, shard, "layer_backward"))
        out += _sharded(cfg, what, elems, groups, "layer_backward")
    return out


def sharded_state(cfg: ScaleConfig, costs, dense: int, moe: int) -> dict:
    """Bytes per GPU of a stage's weights and fp32 gradients (``dense`` and ``moe`` layers) under the ZeRO stage,
    and the experts' part of each."""
    sp = costs.split(cfg)
    (wd, _), (wb, we) = _weights(costs, sp, "dense"), _weights(costs, sp, "moe")
    item = jnp.dtype(cfg.dtype).itemsize
    dense_elems, expert_elems = dense * wd + moe * wb, moe * we
    z, shard, eshard = cfg.zero_stage, cfg.shard_degree, expert_shard_degree(cfg)
    layers = sorted([wd] * dense + [wb + we] * moe)  # one layer's weight elements, largest last
    out = {"weights": item * (dense_elems + expert_elems), "expert_weights": item * expert_elems,
           "gradients": 4 * (dense_elems + expert_elems), "expert_gradients": 4 * expert_elems}
    if z == 3:
        buffers = item * (sum(layers[-2:]) if cfg.reshard_after_forward else sum(layers))
        kept = 0 if fsdp2(cfg) else 1  # FSDP2 keeps no bf16 shard: the fp32 one is the optimizer's (.torch_peak)
        out["expert_weights"] = kept * item * expert_elems // eshard
        out["weights"] = kept * item * dense_elems // shard + out["expert_weights"] + buffers
    if z >= 2:
        out["expert_gradients"] = 4 * expert_elems // eshard
        out["gradients"] = 4 * dense_elems // shard + out["expert_gradients"] + 4 * (layers[-1] if layers else 0)
    return out
