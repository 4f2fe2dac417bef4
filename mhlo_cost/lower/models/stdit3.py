"""OpenSora 1.2's STDiT3 (XL/2 by default) written in plain JAX, for lowering to StableHLO.

No framework: parameters are nested dicts of arrays, layers are small functions. ``init_params`` makes
real (random) weights for the small test configuration; ``param_shapes`` gives the same tree as
``jax.ShapeDtypeStruct`` leaves so that the full model lowers from shapes alone, without allocating.

Every op is lowered under ``jax.named_scope`` names so its location reads like
``jit(stdit3)/spatial_blocks.3/attn/dot_general``: ``x_embedder``, ``t_embedder``, ``fps_embedder``,
``t_block``, ``y_embedder``, ``spatial_blocks.{i}``, ``temporal_blocks.{i}``, ``final_layer`` at the top
level and ``norm1``, ``modulate``, ``attn``, ``cross_attn``, ``norm2``, ``mlp`` inside a block.

The pieces a parallel strategy would replace (the linear layer that opens a pair and the one that
closes it, the attention core, self-attention with its spatial / temporal token layout, cross-attention,
the MLP, and the hooks that split the video tokens after the patch embedding and gather them before
unpatchify) are gathered in :class:`Kernels`; the block calls them only through it, and they read head
counts and sequence lengths from the shapes they are given, not from the configuration, so that sharded
versions (fewer heads, a slice of the sequence) can be swapped in without touching the block
(``mhlo_cost.lower.models.parallel`` does so under ``shard_map``). The fused ``qkv`` / ``kv`` weights may be
given either as (C, 3C) / (C, 2C) or split as (C, 3, C') / (C, 2, C') (the layout the tensor-parallel
strategies shard by heads); the bias follows, (3C,) or (3, C').

Cross-attention follows OpenSora's ``MultiHeadCrossAttention``: the queries of the whole batch form one
sequence of B*N tokens and attend, densely, to all B*L caption tokens under a block-diagonal mask (each
sample sees only its own caption). This dense form is the one the published FLOP figure counts.
"""
from __future__ import annotations

import math
from typing import Callable
import jax
import jax.numpy as jnp
from jax import lax

from .config import STDiT3Config
from .layers import (F32, apply_rope, gelu_tanh, layer_norm, modulate, pos_embed_2d, rms_norm, rope_tables, silu,
                     sinusoidal_embedding, softmax)
from .stdit3_kernels import (DEFAULT_KERNELS, Kernels, Params, block_diagonal_mask, cross_attention, dense,
                             dot_product_attention, gelu, mlp, self_attention, video_attention)
from .stdit3_params import dtype_of, init_params, input_shapes, is_spec_leaf, param_shapes, param_spec
from .stdit3_once import traced_once

__all__ = [
    # re-exported: the building blocks, kernels and parameters live in their own modules
    "apply_rope", "gelu_tanh", "layer_norm", "modulate", "pos_embed_2d", "rms_norm", "rope_tables", "silu",
    "sinusoidal_embedding", "softmax",
    "DEFAULT_KERNELS", "Kernels", "Params", "block_diagonal_mask", "cross_attention", "dense",
    "dot_product_attention", "gelu", "mlp", "self_attention", "video_attention",
    "dtype_of", "init_params", "input_shapes", "is_spec_leaf", "param_shapes", "param_spec",
    # defined here
    "stdit3_block", "patch_embed", "timestep_embedder", "caption_embedder", "final_layer", "unpatchify",
    "make_forward", "lower",
]

scope = jax.named_scope

# --------------------------------------------------------------------------------------------------------
# Block, embedders, final layer
# --------------------------------------------------------------------------------------------------------


def stdit3_block(p: Params, x, y, t_mod, cfg: STDiT3Config, *, temporal: bool, T: int, S: int,
                 kernels: Kernels | None = None, positions=None):
    """One STDiT3 block. x (B, T*S, C) video tokens, y (B, L, C) caption tokens, t_mod (B, 6C).

    Spatial blocks attend over the S tokens of each frame (batch B*T); temporal blocks over the T frames
    of each spatial position (batch B*S) with RoPE (positions default to 0..T-1).
    """
    kn = kernels or DEFAULT_KERNELS
    b, n, c = x.shape
    with scope("modulate"):
        mod = p["scale_shift_table"][None].astype(t_mod.dtype) + t_mod.reshape(b, 6, c)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (mod[:, i:i + 1] for i in range(6))
    with scope("norm1"):
        h = layer_norm(x)
    with scope("modulate"):
        h = modulate(h, shift_msa, scale_msa)
    with scope("attn"):
        h = kn.video_attention(p["attn"], h, cfg, temporal=temporal, T=T, S=S, positions=positions, kernels=kn)
    with scope("modulate"):
        x = x + gate_msa * h
    with scope("cross_attn"):
        x = x + kn.cross_attention(p["cross_attn"], x, y, cfg, kernels=kn)
    with scope("norm2"):
        h = layer_norm(x)
    with scope("modulate"):
        h = modulate(h, shift_mlp, scale_mlp)
    with scope("mlp"):
        h = kn.mlp(p["mlp"], h, cfg, kernels=kn)
    with scope("modulate"):
        x = x + gate_mlp * h
    return x


def patch_embed(p: Params, x, patch):
    """Conv3d with kernel = stride = patch after padding T/H/W up to multiples: (B,Cin,T,H,W) -> (B,N,C)."""
    pads = [(0, 0, 0), (0, 0, 0)] + [(0, (-size) % k, 0) for size, k in zip(x.shape[2:], patch)]
    if any(hi for _, hi, _ in pads):
        x = lax.pad(x, jnp.zeros((), x.dtype), pads)
    y = lax.conv_general_dilated(x, p["w"].astype(x.dtype), window_strides=patch, padding="VALID",
                                 dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))
    b, c = y.shape[:2]
    y = y.reshape(b, c, -1).transpose(0, 2, 1)
    return y + p["b"].astype(y.dtype)


def timestep_embedder(p: Params, t, freq_dim: int, dtype):
    emb = sinusoidal_embedding(t, freq_dim).astype(dtype)
    return dense(p["fc2"], silu(dense(p["fc1"], emb)))


def caption_embedder(p: Params, y):
    return dense(p["fc2"], gelu(dense(p["fc1"], y)))


def final_layer(p: Params, x, t):
    b, _, c = x.shape
    mod = p["scale_shift_table"][None].astype(t.dtype) + t[:, None, :]
    shift, scale = mod[:, 0:1], mod[:, 1:2]
    return dense(p["linear"], modulate(layer_norm(x), shift, scale))


def unpatchify(x, cfg: STDiT3Config, nt: int, nh: int, nw: int, size: tuple[int, int, int]):
    """(B, N, pt*ph*pw*Cout) -> (B, Cout, T, H, W) cropped to the unpadded latent size."""
    b = x.shape[0]
    pt, ph, pw = cfg.patch
    co = cfg.out_channels
    x = x.reshape(b, nt, nh, nw, pt, ph, pw, co)
    x = x.transpose(0, 7, 1, 4, 2, 5, 3, 6).reshape(b, co, nt * pt, nh * ph, nw * pw)
    return x[:, :, : size[0], : size[1], : size[2]]


# --------------------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------------------


def make_forward(cfg: STDiT3Config, kernels: Kernels | None = None, *, remat: bool = False) -> Callable:
    """The forward ``stdit3(params, x, timestep, y, fps) -> (B, out_channels, T, H, W)`` float32.

    With ``remat`` each block runs under ``jax.checkpoint`` (a gradient recomputes it from its inputs).
    """
    kn = kernels or DEFAULT_KERNELS
    dt = dtype_of(cfg)

    def block(temporal: bool, T: int, S: int) -> Callable:
        def run(p, h, cap, t_mod):
            return stdit3_block(p, h, cap, t_mod, cfg, temporal=temporal, T=T, S=S, kernels=kn)

        return jax.checkpoint(run) if remat else traced_once(run)

    def stdit3(params, x, timestep, y, fps):
        b = x.shape[0]
        tx, hx, wx = x.shape[2:]
        pt, ph, pw = cfg.patch
        nt, nh, nw = -(-tx // pt), -(-hx // ph), -(-wx // pw)
        s = nh * nw
        c = cfg.hidden
        x = x.astype(dt)
        y = y.astype(dt)

        with scope("x_embedder"):
            h = patch_embed(params["x_embedder"]["proj"], x, cfg.patch)  # (B, N, C)
            scale = math.sqrt(hx * cfg.vae_downsample * wx * cfg.vae_downsample) / cfg.input_sq_size
            pos = pos_embed_2d(nh, nw, c, scale, round(s ** 0.5)).astype(dt)
            h = (h.reshape(b, nt, s, c) + pos[None, None]).reshape(b, nt * s, c)
            h = kn.scatter_tokens(h, T=nt, S=s)
        with scope("t_embedder"):
            t = timestep_embedder(params["t_embedder"], timestep, cfg.freq_dim, dt)
        with scope("fps_embedder"):
            t = t + timestep_embedder(params["fps_embedder"], fps, cfg.freq_dim, dt)
        with scope("t_block"):
            t_mod = dense(params["t_block"]["linear"], silu(t))
        with scope("y_embedder"):
            cap = caption_embedder(params["y_embedder"], y.reshape(b, y.shape[-2], y.shape[-1]))

        spatial, temporal = block(False, nt, s), block(True, nt, s)
        for i in range(cfg.depth):
            with scope(f"spatial_blocks.{i}"):
                h = spatial(params["spatial_blocks"][i], h, cap, t_mod)
            with scope(f"temporal_blocks.{i}"):
                h = temporal(params["temporal_blocks"][i], h, cap, t_mod)

        with scope("final_layer"):
            h = final_layer(params["final_layer"], h, t)
            h = kn.gather_tokens(h, T=nt, S=s)
            out = unpatchify(h, cfg, nt, nh, nw, (tx, hx, wx)).astype(F32)
        return out

    return stdit3


def lower(cfg: STDiT3Config, kernels: Kernels | None = None, *, caption_4d: bool = True):
    """``jax.jit(stdit3).lower`` from shapes alone (parameters and inputs are ShapeDtypeStructs)."""
    fwd = make_forward(cfg, kernels)
    return jax.jit(fwd).lower(param_shapes(cfg), *input_shapes(cfg, caption_4d=caption_4d))
