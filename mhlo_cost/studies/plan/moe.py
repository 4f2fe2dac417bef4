"""Mixture-of-experts layers in a training plan: what one device runs of a MoE layer under expert parallelism.

A MoE model (:class:`~.config.ScaleConfig` with ``experts`` > 0) has ``dense_layers`` first layers with the
dense MLP (``ffn`` wide; DeepSeek-V3's ``first_k_dense_replace``) and MoE layers after them. A MoE layer is
priced as two per-device programs, each lowered from shapes and walked like the dense layer:

* the **base**: the dense layer's program (:mod:`.layer`: attention, norms) whose MLP is the shared experts,
  one SwiGLU of ``shared_experts x expert_ffn`` (:func:`base_config`; what DeepSeek's shared expert is);
* the **routed part** (:func:`lower_experts`): the router's GEMM (``hidden x E``), its sigmoid scores and top-k
  (DeepSeek-V3's gating, normalised over the k), and the device's ``E / ep`` local experts as one batched SwiGLU
  (gate, up: ``hidden x expert_ffn``; down) over the rows each expert receives, forward, backward and the
  optimizer step on the router's and the local experts' weights.

Rows per local expert (:func:`expert_rows`), ``T`` the device's tokens of one micro-batch (``b x s / cp``): at
balance each device computes ``T x k`` token copies over its ``E / ep`` experts (every expert receives
``ep x T x k / E`` of them from the ``ep`` ranks); the busiest device ``expert_imbalance`` times as many
(default 1.0: balanced routing). With a ``capacity_factor`` c every expert runs ``c`` times its balanced share,
padded to it (GShard; Megatron's ``--moe-pad-expert-input-to-capacity``), whatever the imbalance.

Tensor parallelism (``t`` > 1, with sequence parallelism as Megatron-Core requires): the attention, the shared
experts and the dense MLP are tensor-parallel (the base's program at ``t``), and a device routes its ``b x s /
(cp t)`` tokens. The experts have their own tensor degree ``etp`` (``--expert-tensor-parallel-size``, default ``t``
as Megatron-Core's): each local expert is ``expert_ffn / etp`` wide, and the ``etp`` ranks of an expert
tensor-parallel group all-gather their dispatched rows after the all_to_all (so ``etp`` times the rows) and
reduce-scatter the experts' outputs before the combine (:mod:`.moe_sharding`).

The expert-parallel all_to_all (:mod:`mhlo_cost.network.expert_parallel`): dispatch and combine of each MoE
layer and micro-batch, forward, and their gradients backward (full recompute: the forward's again), each of
``S = copies x hidden x 2`` bytes (bf16; ``copies = ceil(f T k)`` dropless, the busiest rank's with imbalance ``f``
(:func:`a2a_copies`), ``E x ceil(c T k / E)`` with a capacity),
``(ep - 1) / ep x S`` sent by each device, over the ``ep`` ranks (consecutive data ranks: Megatron's order, so
eight or fewer share a node's NVLink and more span the scale-out network). Not overlapped with compute
(Megatron's default dispatcher), or with ``ep_overlap`` hidden under the compute of another micro-batch's layer as
DeepSeek's DualPipe pairs a forward chunk with a backward chunk: a layer exposes only what its all_to_all
(forward + backward) outlasts its compute (forward + backward + recompute).

What is not modelled: the tokens' permutation and un-permutation (memory copies), the router's auxiliary loss,
the router's gradient all_reduce over the tensor ranks (sequence parallel), MLA attention (priced as multi-head
attention of the same hidden size and heads: its low-rank projections are not the GPT projections).

Under an fp8 training recipe (``precision``) the experts' GEMMs run in fp8 (:func:`grouped_fp8`), the router in
bf16; the weights stay bf16 with fp32 master copies, as the dense layers' linears (:mod:`.layer`).
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import ceil

import jax
import jax.numpy as jnp
from jax import lax

from .config import ScaleConfig
from .layer import adamw, master_shapes, master_update

scope = jax.named_scope
F32 = jnp.float32

#: The MoE fields cleared in the dense programs' configurations.
NO_EXPERTS = dict(experts=0, top_k=0, expert_ffn=0, shared_experts=0, dense_layers=0, ep=1, capacity_factor=0.0,
                  expert_imbalance=1.0, ep_overlap=False, expert_tp=0)


def dense_config(cfg: ScaleConfig) -> ScaleConfig:
    """The dense layers' configuration: the layer with its ``ffn``-wide MLP."""
    return replace(cfg, **NO_EXPERTS)


def base_config(cfg: ScaleConfig) -> ScaleConfig:
    """A MoE layer's base: the layer whose MLP is the shared experts (``shared_experts x expert_ffn`` wide)."""
    return replace(cfg, ffn=cfg.shared_experts * cfg.expert_ffn, **NO_EXPERTS)


def local_experts(cfg: ScaleConfig) -> int:
    return cfg.experts // cfg.ep


def local_seq(cfg: ScaleConfig) -> int:
    """Positions of one device's MoE layer input: s / cp, and / t with sequence parallelism (Megatron runs a MoE
    layer with tensor parallelism in the sequence-parallel region)."""
    return cfg.local_seq // cfg.t if cfg.sp else cfg.local_seq


def tokens(cfg: ScaleConfig) -> int:
    """T: the tokens one device routes per micro-batch (b x s / cp, / t with sequence parallelism)."""
    return cfg.micro_batch * local_seq(cfg)


def expert_rows(cfg: ScaleConfig) -> int:
    """Rows each local expert computes per micro-batch on the busiest device: ``ceil(f etp T k / (E / ep))``
    dropless, ``ep x etp x ceil(c T k / E)`` with a capacity factor c (padded); the ``etp`` ranks of an expert
    tensor-parallel group gather their rows (Megatron's all_gather after the dispatch)."""
    tk = tokens(cfg) * cfg.top_k
    if cfg.capacity_factor:
        return cfg.ep * cfg.etp * ceil(Fraction(str(cfg.capacity_factor)) * tk / cfg.experts)
    return ceil(Fraction(str(cfg.expert_imbalance)) * cfg.etp * tk / local_experts(cfg))


def a2a_copies(cfg: ScaleConfig) -> int:
    """Token copies the all_to_all is priced at, on the busiest rank: ``ceil(f T k)`` dropless (``f`` the
    imbalance), ``E x ceil(c T k / E)`` with a capacity factor (the padded slots sent as they are, whatever the
    imbalance). ``expert_imbalance`` is per rank: the busiest expert-parallel rank receives ``f`` times the
    balanced ``T x k`` copies, spread over its ``E / ep`` local experts (:func:`expert_rows`; with one expert per
    rank the hottest expert's rank, with more the rank whose experts together draw ``f`` times the mean, each of
    them assumed to draw an even share of it). Each source rank is taken to send it ``f T k / ep`` (the same
    share of its copies), so its dispatch receives ``(ep - 1) / ep x f T k`` copies from the others and its
    combine sends as many back; the backward's two all_to_all carry their gradients the same ways. An all_to_all
    ends when its slowest rank does (every rank waits in the collective), so each is priced at an all_to_all of
    ``f T k`` copies per rank, whose ``(ep - 1) / ep`` share is the busiest rank's receive (dispatch) or send
    (combine), as ``serve --ep``'s ``--moe-imbalance`` prices it (:mod:`mhlo_cost.studies.serve.expert`).
    The expert tensor-parallel gather and reduce of the busiest rank's group carry ``etp`` times as much."""
    tk = tokens(cfg) * cfg.top_k
    if cfg.capacity_factor:
        return cfg.experts * ceil(Fraction(str(cfg.capacity_factor)) * tk / cfg.experts)
    return ceil(Fraction(str(cfg.expert_imbalance)) * tk)


def expert_shapes(cfg: ScaleConfig) -> dict:
    """The routed part's weights on one device: the router (replicated) and the local experts."""
    h, f, el, dt = cfg.hidden, cfg.expert_ffn // cfg.etp, local_experts(cfg), jnp.dtype(cfg.dtype)
    return {"router": jax.ShapeDtypeStruct((h, cfg.experts), dt),
            "gate": jax.ShapeDtypeStruct((el, h, f), dt), "up": jax.ShapeDtypeStruct((el, h, f), dt),
            "down": jax.ShapeDtypeStruct((el, f, h), dt)}


def router_elems(cfg: ScaleConfig) -> int:
    """Elements of the router's weight (replicated over the expert-parallel ranks, unlike the experts)."""
    return cfg.hidden * cfg.experts


def grouped_fp8(recipe):
    """``mm(x (E, n, k), w (E, k, o)) -> (E, n, o)``: each expert's GEMM, forward, dgrad and wgrad, in fp8 with a
    float32 accumulator, as Transformer Engine's grouped GEMM runs the experts under an fp8 recipe: each expert's
    operands scaled on their own (:func:`mhlo_cost.lower.models.quant.fp8_matmul`, mapped over the experts)."""
    from ...lower.models.quant import fp8_matmul

    return jax.vmap(fp8_matmul(recipe, scales_first=True))


def _grouped(cfg: ScaleConfig):
    """The experts' batched GEMM: bf16, or in fp8 under an fp8 training recipe (:func:`grouped_fp8`)."""
    if cfg.precision != "bf16":
        from ...machines.precision import training_recipe

        return grouped_fp8(training_recipe(cfg.precision))
    return lambda x, w: lax.dot_general(x, w, (((2,), (1,)), ((0,), (0,))))


def experts_fn(cfg: ScaleConfig):
    """``part(params, x, xe) -> (gates, y)``: the router on the device's tokens x (b, s/cp, h) and the local
    experts on the dispatched rows xe (E/ep, rows, h); the router in bf16 whatever the recipe (Megatron keeps it
    out of fp8), the experts' GEMMs as :func:`_grouped`."""
    mm = _grouped(cfg)

    def part(p, x, xe):
        with scope("router"):
            logits = lax.dot_general(x, p["router"], (((2,), (0,)), ((), ()))).astype(F32)
            gates, _ = lax.top_k(jax.nn.sigmoid(logits), cfg.top_k)
            gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
        with scope("experts"):
            g, u = mm(xe, p["gate"]), mm(xe, p["up"])
            y = mm(jax.nn.silu(g) * u, p["down"])
        return gates, y

    return jax.checkpoint(part) if cfg.recompute == "full" else part


def experts_step_fn(cfg: ScaleConfig):
    """``step(params, master, opt_state, x, xe, dgates, dy) -> (params, master, opt_state, gates, y, dx, dxe)``:
    forward, backward and Megatron's mixed-precision AdamW, as :func:`.layer.step_fn` for the layer."""
    tx = adamw("experts'")
    part = experts_fn(cfg)

    def step(params, master, opt_state, x, xe, dgates, dy):
        with scope("layer"):
            (gates, y), vjp = jax.vjp(part, params, x, xe)
            gp, dx, dxe = vjp((dgates, dy))
        params, master, opt_state = master_update(tx, gp, params, master, opt_state)
        return params, master, opt_state, gates, y, dx, dxe

    step.__name__ = step.__qualname__ = "experts_step"
    return step, tx


def lower_experts(cfg: ScaleConfig, locations: bool = True) -> str:
    """StableHLO text of one device's routed part of a MoE layer, one micro-batch (shapes only)."""
    step, tx = experts_step_fn(cfg)
    params = expert_shapes(cfg)
    master, opt_state = master_shapes(tx, params)
    dt = jnp.dtype(cfg.dtype)
    x = jax.ShapeDtypeStruct((cfg.micro_batch, local_seq(cfg), cfg.hidden), dt)
    xe = jax.ShapeDtypeStruct((local_experts(cfg), expert_rows(cfg), cfg.hidden), dt)
    dgates = jax.ShapeDtypeStruct((cfg.micro_batch, local_seq(cfg), cfg.top_k), F32)
    low = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, master, opt_state, x, xe, dgates, xe)
    return low.as_text(debug_info=locations)


def experts_key(cfg: ScaleConfig) -> list:
    """What the routed part's program depends on beyond the layer's key (its cache request)."""
    key = ["experts", cfg.experts, cfg.top_k, cfg.expert_ffn, cfg.ep, local_experts(cfg), expert_rows(cfg),
           cfg.local_seq]
    return key if cfg.etp == 1 else key + [("etp", cfg.etp)]  # (keys without expert TP unchanged)


def stage_kinds(cfg: ScaleConfig) -> list[tuple[int, int]]:
    """(dense layers, MoE layers) of each pipeline stage: the first ``dense_layers`` of the model are dense. With
    ``interleave`` v, stage s holds the model chunks s, s + p, ... (``layers / (p v)`` layers each), all together."""
    if cfg.interleave > 1:
        n, p = cfg.layers_per_chunk, cfg.p
        dense = [sum(max(0, min(cfg.dense_layers, (c + 1) * n) - c * n) for c in range(s, p * cfg.interleave, p))
                 for s in range(p)]
        return [(d, cfg.interleave * n - d) for d in dense]
    out, start = [], 0
    for n in cfg.stage_layers():
        dense = max(0, min(cfg.dense_layers, start + n) - start)
        out.append((dense, n - dense))
        start += n
    return out
