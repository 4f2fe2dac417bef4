"""The per-device STDiT3 block pair of :mod:`.stdit3`, lowered from shapes: one spatial and one temporal block
(:func:`mhlo_cost.lower.models.stdit3.stdit3_block`) on one Ulysses rank's tokens, forward + backward + AdamW on
fp32 master weights. The all_to_alls are local stand-ins under the scope ``cp_comm`` (left out of the compute by
:mod:`.costs`; :meth:`.stdit3.STDiT3ScaleConfig.a2a_collectives` prices them); with ``attention="fused"`` the
attention core runs under ``jax.checkpoint`` (flash attention keeps no scores: they are remade in the backward).
"""
from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp

from .layer import master_shapes, master_update

scope = jax.named_scope


def _to_heads(z, n: int):
    """All_to_all stand-in, sequence- to head-sharded: (b, T, S/n, H, D) -> (b, T, S, H/n, D)."""
    if n == 1:
        return z
    with scope("cp_comm"):
        b, t, s, h, d = z.shape
        return jnp.broadcast_to(z[:, :, None], (b, t, n, s, h, d)).reshape(b, t, n * s, h, d)[..., : h // n, :]


def _to_tokens(o, n: int):
    """All_to_all stand-in, head- to sequence-sharded: (b, T, S, H/n, D) -> (b, T, S/n, H, D)."""
    if n == 1:
        return o
    with scope("cp_comm"):
        b, t, s, h, d = o.shape
        part = o[:, :, : s // n]
        return jnp.broadcast_to(part[:, :, :, None], (b, t, s // n, n, h, d)).reshape(b, t, s // n, n * h, d)


def _kernels(cfg, spatial: bool):
    """The :class:`~mhlo_cost.lower.models.stdit3_kernels.Kernels` of one block on one Ulysses rank."""
    from ...lower.models.layers import rms_norm
    from ...lower.models.stdit3_kernels import DEFAULT_KERNELS, dot_product_attention

    n = cfg.cp if spatial else 1
    core = jax.checkpoint(dot_product_attention) if cfg.attention == "fused" else dot_product_attention

    def video_attention(p, h, scfg, *, temporal, T, S, positions=None, kernels=None):
        if temporal or n == 1:
            from ...lower.models.stdit3_kernels import video_attention as local

            return local(p, h, scfg, temporal=temporal, T=T, S=S, positions=positions, kernels=kernels)
        b, nl, c = h.shape
        qkv = kernels.linear(p["qkv"], h).reshape(b, T, S, 3, -1, scfg.head_dim)
        q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
        if "q_norm" in p:
            q, k = rms_norm(q, p["q_norm"]["w"]), rms_norm(k, p["k_norm"]["w"])
        q, k, v = (_to_heads(z, n) for z in (q, k, v))
        _, _, s_all, hl, d = q.shape
        o = kernels.attention_core(*(z.reshape(b * T, s_all, hl, d) for z in (q, k, v)))
        o = _to_tokens(o.reshape(b, T, s_all, hl, d), n)
        return kernels.out_linear(p["proj"], o.reshape(b, nl, c))

    def cross_attention(p, x, cond, scfg, *, kernels=None):
        b, nl, c = x.shape
        d = scfg.head_dim
        q = kernels.linear(p["q"], x).reshape(b, 1, nl, -1, d)
        kv = kernels.linear(p["kv"], cond).reshape(b, cond.shape[1], 2, -1, d)
        k, v = kv[:, :, 0], kv[:, :, 1]
        if n > 1:
            with scope("cp_comm"):  # the heads of this rank (the backward all-gathers their gradients)
                k, v = k[:, :, : k.shape[2] // n], v[:, :, : v.shape[2] // n]
        q = _to_heads(q, n)[:, 0]
        o = kernels.attention_core(q, k, v)  # each sample's queries against its own caption
        o = _to_tokens(o[:, None], n)
        return kernels.out_linear(p["proj"], o.reshape(b, nl, c))

    return replace(DEFAULT_KERNELS, attention_core=core, video_attention=video_attention,
                   cross_attention=cross_attention)


def pair_fn(cfg):
    """``pair(params, x, cap, t_mod) -> x``: a spatial then a temporal block on one rank's tokens x (b, T S/n,
    C), the caption cap (b, L, C) and the timestep modulation t_mod (b, 6C); with ``recompute="full"`` each block
    under ``jax.checkpoint`` (OpenSora's ``auto_grad_checkpoint`` per block)."""
    from ...lower.models.stdit3 import stdit3_block

    scfg, t, s = cfg.block_config, cfg.frames, cfg.local_frame_tokens

    def block(name: str, temporal: bool):
        kn = _kernels(cfg, spatial=not temporal)

        def run(p, x, cap, t_mod):
            with scope(name):
                return stdit3_block(p, x, cap, t_mod, scfg, temporal=temporal, T=t, S=s, kernels=kn)

        return jax.checkpoint(run) if cfg.recompute == "full" else run

    spatial, temporal = block("spatial_block", False), block("temporal_block", True)

    def pair(p, x, cap, t_mod):
        return temporal(p["temporal"], spatial(p["spatial"], x, cap, t_mod), cap, t_mod)

    return pair


def pair_param_shapes(cfg) -> dict:
    from ...lower.models.stdit3_params import param_shapes

    tree = param_shapes(cfg.block_config)
    return {"spatial": tree["spatial_blocks"][0], "temporal": tree["temporal_blocks"][0]}


def step_fn(cfg):
    """``step(params, master, opt_state, x, dy, cap, t_mod)``: the pair's forward and backward (gradients of the
    weights, the tokens, the caption and the modulation) and AdamW on its fp32 master weights."""
    from ...lower.training.steps import optimizer

    tx = optimizer("adamw")
    pair = pair_fn(cfg)

    def step(params, master, opt_state, x, dy, cap, t_mod):
        with scope("layer"):
            y, vjp = jax.vjp(pair, params, x, cap, t_mod)
            gp, dx, dcap, dmod = vjp(dy)
        params, master, opt_state = master_update(tx, gp, params, master, opt_state)
        return params, master, opt_state, y, dx, dcap, dmod

    step.__name__ = step.__qualname__ = "layer_step"
    return step, tx


def lower_pair(cfg, locations: bool = True) -> str:
    """StableHLO text of the per-device block pair's step (shapes only: nothing is allocated)."""
    step, tx = step_fn(cfg)
    params = pair_param_shapes(cfg)
    master, opt_state = master_shapes(tx, params)
    dt, b = jnp.dtype(cfg.dtype), cfg.micro_batch
    x = jax.ShapeDtypeStruct((b, cfg.local_seq, cfg.hidden), dt)
    cap = jax.ShapeDtypeStruct((b, cfg.caption_tokens, cfg.hidden), dt)
    t_mod = jax.ShapeDtypeStruct((b, 6 * cfg.hidden), dt)
    low = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, master, opt_state, x, x, cap, t_mod)
    return low.as_text(debug_info=locations)


__all__ = ["pair_fn", "pair_param_shapes", "step_fn", "lower_pair"]
