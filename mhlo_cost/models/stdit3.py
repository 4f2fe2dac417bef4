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
(``mhlo_cost.models.parallel`` does so under ``shard_map``). The fused ``qkv`` / ``kv`` weights may be
given either as (C, 3C) / (C, 2C) or split as (C, 3, C') / (C, 2, C') (the layout the tensor-parallel
strategies shard by heads); the bias follows, (3C,) or (3, C').

Cross-attention follows OpenSora's ``MultiHeadCrossAttention``: the queries of the whole batch form one
sequence of B*N tokens and attend, densely, to all B*L caption tokens under a block-diagonal mask (each
sample sees only its own caption). This dense form is the one the published FLOP figure counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .config import STDiT3Config

Params = dict
scope = jax.named_scope

_F32 = jnp.float32
_NEG = -1e30  # masked score (finite so that a fully masked row would give a uniform, not NaN, softmax)


def dtype_of(cfg: STDiT3Config):
    return jnp.dtype(cfg.dtype)


# --------------------------------------------------------------------------------------------------------
# Element-wise building blocks (written out so that no nested jit / custom call appears in the IR)
# --------------------------------------------------------------------------------------------------------


def layer_norm(x, eps: float = 1e-6):
    """LayerNorm over the last axis without affine parameters, computed in float32."""
    xf = x.astype(_F32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    xc = xf - mean
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    return (xc * lax.rsqrt(var + eps)).astype(x.dtype)


def rms_norm(x, weight, eps: float = 1e-6):
    """RMSNorm over the last axis (LLaMA style: normalise in float32, scale in the input dtype)."""
    xf = x.astype(_F32)
    ms = jnp.mean(xf * xf, axis=-1, keepdims=True)
    return weight.astype(x.dtype) * (xf * lax.rsqrt(ms + eps)).astype(x.dtype)


def silu(x):
    return x * lax.logistic(x)


def gelu_tanh(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + jnp.tanh(c * (x + 0.044715 * x * x * x)))


def softmax(x, axis: int = -1):
    m = lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=axis, keepdims=True)


def modulate(x, shift, scale):
    """PixArt / OpenSora ``t2i_modulate``."""
    return x * (1 + scale) + shift


def sinusoidal_embedding(values, dim: int, max_period: float = 10000.0):
    """(B,) -> (B, dim) float32: [cos(v*f), sin(v*f)] with f = max_period^(-i/half), as in DiT / GLIDE."""
    half = dim // 2
    freqs = jnp.exp(lax.iota(_F32, half) * (-math.log(max_period) / half))
    args = values.astype(_F32)[:, None] * freqs[None, :]  # outer product by broadcasting: no GEMM
    emb = jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)
    if dim % 2:
        emb = jnp.concatenate([emb, jnp.zeros_like(emb[:, :1])], axis=-1)
    return emb


def pos_embed_2d(h: int, w: int, dim: int, scale: float, base_size: int | None):
    """OpenSora's ``PositionEmbedding2D`` as in-graph ops: (h*w, dim) float32, rows in (h, w) order.

    Each row is [sin(gw*f), cos(gw*f), sin(gh*f), cos(gh*f)] with f = 10000^(-2i/(dim/2)), gh/gw the
    (scaled) row and column coordinates: OpenSora puts the column coordinate first.
    """
    quarter = dim // 4
    inv_freq = jnp.exp(lax.iota(_F32, quarter) * (-math.log(10000.0) * 2.0 / (dim // 2)))
    gh = lax.iota(_F32, h) / scale
    gw = lax.iota(_F32, w) / scale
    if base_size is not None:
        gh = gh * (base_size / h)
        gw = gw * (base_size / w)

    def sincos(g):
        a = g[:, None] * inv_freq[None, :]
        return jnp.concatenate([jnp.sin(a), jnp.cos(a)], axis=-1)

    eh = jnp.broadcast_to(sincos(gh)[:, None, :], (h, w, dim // 2))
    ew = jnp.broadcast_to(sincos(gw)[None, :, :], (h, w, dim // 2))
    return jnp.concatenate([ew, eh], axis=-1).reshape(h * w, dim)


def rope_tables(positions, dim: int, theta: float = 10000.0):
    """cos / sin tables (L, dim) float32 for interleaved rotary embedding (pairs (0,1), (2,3), ...)."""
    inv_freq = jnp.exp(lax.iota(_F32, dim // 2) * (-math.log(theta) * 2.0 / dim))
    ang = positions.astype(_F32)[:, None] * inv_freq[None, :]  # (L, dim/2)
    ang = jnp.repeat(ang, 2, axis=-1)  # (L, dim): f0 f0 f1 f1 ...
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x, cos, sin):
    """Rotate (..., L, H, D) by tables (L, D): out = x*cos + rot(x)*sin with rot(x0, x1) = (-x1, x0)."""
    xf = x.astype(_F32)
    pairs = xf.reshape(*xf.shape[:-1], xf.shape[-1] // 2, 2)
    rot = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(xf.shape)
    out = xf * cos[:, None, :] + rot * sin[:, None, :]
    return out.astype(x.dtype)


# --------------------------------------------------------------------------------------------------------
# Swappable kernels: linear, attention core, self-attention, cross-attention, MLP
# --------------------------------------------------------------------------------------------------------


def dense(p: Params, x):
    """x (..., in) @ w (in, out) + b: one dot_general."""
    y = lax.dot_general(x, p["w"], (((x.ndim - 1,), (0,)), ((), ())))
    return y + p["b"].astype(y.dtype)


def dot_product_attention(q, k, v, mask=None):
    """Plain attention. q (B, Lq, H, D), k/v (B, Lk, H, D), mask broadcastable to (Lq, Lk) -> (B, Lq, H, D).

    q@k^T and probs@v are dot_generals batched over (B, H); the softmax runs in float32.
    """
    q = q * (q.shape[-1] ** -0.5)
    s = lax.dot_general(q, k, (((3,), (3,)), ((0, 2), (0, 2))))  # (B, H, Lq, Lk)
    s = s.astype(_F32)
    if mask is not None:
        s = lax.select(jnp.broadcast_to(mask, s.shape), s, jnp.full(s.shape, _NEG, s.dtype))
    p = softmax(s, axis=-1).astype(v.dtype)
    o = lax.dot_general(p, v, (((3,), (1,)), ((0, 1), (0, 2))))  # (B, H, Lq, D)
    return jnp.transpose(o, (0, 2, 1, 3))


def block_diagonal_mask(batch: int, q_len: int, kv_len: int):
    """(batch*q_len, batch*kv_len) bool: query of sample i sees the keys of sample i only."""
    qi = lax.div(lax.iota(jnp.int32, batch * q_len), jnp.int32(q_len))  # non-negative: lax.div floors
    ki = lax.div(lax.iota(jnp.int32, batch * kv_len), jnp.int32(kv_len))
    return qi[:, None] == ki[None, :]


def self_attention(p: Params, x, cfg: STDiT3Config, *, positions=None, kernels: "Kernels | None" = None):
    """Multi-head self-attention over axis 1 of x (Bx, L, C); RoPE on q and k when positions (L,) given.

    The number of heads is read from the qkv weight (3 * heads * head_dim columns), so a tensor-parallel
    version can pass a column slice of it.
    """
    kn = kernels or DEFAULT_KERNELS
    bx, length, _ = x.shape
    d = cfg.head_dim
    qkv = kn.linear(p["qkv"], x)
    qkv = qkv.reshape(bx, length, 3, -1, d)
    heads = qkv.shape[3]
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if "q_norm" in p:
        q = rms_norm(q, p["q_norm"]["w"])
        k = rms_norm(k, p["k_norm"]["w"])
    if positions is not None:
        cos, sin = rope_tables(positions, d)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
    o = kn.attention_core(q, k, v)
    return kn.out_linear(p["proj"], o.reshape(bx, length, heads * d))


def cross_attention(p: Params, x, cond, cfg: STDiT3Config, *, kernels: "Kernels | None" = None):
    """OpenSora's MultiHeadCrossAttention, dense: (1, B*N) queries x (1, B*L) keys, block-diagonal mask."""
    kn = kernels or DEFAULT_KERNELS
    b, n, _ = x.shape
    lc = cond.shape[1]
    d = cfg.head_dim
    q = kn.linear(p["q"], x)
    heads = q.shape[-1] // d
    q = q.reshape(1, b * n, heads, d)
    kv = kn.linear(p["kv"], cond).reshape(1, b * lc, 2, heads, d)
    k, v = kv[:, :, 0], kv[:, :, 1]
    o = kn.attention_core(q, k, v, block_diagonal_mask(b, n, lc))
    return kn.out_linear(p["proj"], o.reshape(b, n, heads * d))


def mlp(p: Params, x, cfg: STDiT3Config | None = None, *, kernels: "Kernels | None" = None):
    kn = kernels or DEFAULT_KERNELS
    return kn.out_linear(p["fc2"], gelu_tanh(kn.linear(p["fc1"], x)))


def video_attention(p: Params, h, cfg: STDiT3Config, *, temporal: bool, T: int, S: int, positions=None,
                    kernels: "Kernels | None" = None):
    """Self-attention of a block over its video tokens h (B, T*S, C), in the block's layout.

    Spatial blocks attend over the S tokens of each frame (batch B*T); temporal blocks over the T frames
    of each spatial position (batch B*S) with RoPE (positions default to 0..T-1).
    """
    kn = kernels or DEFAULT_KERNELS
    b, n, c = h.shape
    if temporal:
        h = h.reshape(b, T, S, c).transpose(0, 2, 1, 3).reshape(b * S, T, c)
        if positions is None:
            positions = lax.iota(jnp.int32, T)
        h = kn.self_attention(p, h, cfg, positions=positions, kernels=kn)
        return h.reshape(b, S, T, c).transpose(0, 2, 1, 3).reshape(b, n, c)
    h = h.reshape(b * T, S, c)
    h = kn.self_attention(p, h, cfg, kernels=kn)
    return h.reshape(b, n, c)


def _tokens_identity(h, *, T: int, S: int):
    return h


@dataclass(frozen=True)
class Kernels:
    """The functions a block calls for its heavy parts; a parallel strategy replaces some of them.

    ``linear`` opens a pair of linear layers (qkv, cross-attention q and kv, fc1), ``out_linear`` closes
    it (the attention / cross-attention out-projection, fc2). ``scatter_tokens(h, T=, S=)`` runs after
    the patch embedding on the (B, T*S, C) tokens and ``gather_tokens(h, T=, S=)`` on the final layer's
    output before unpatchify: a sequence-parallel strategy takes its slice there and gathers it back.
    """

    linear: Callable = dense
    out_linear: Callable = dense
    attention_core: Callable = dot_product_attention
    self_attention: Callable = self_attention
    video_attention: Callable = video_attention
    cross_attention: Callable = cross_attention
    mlp: Callable = mlp
    scatter_tokens: Callable = _tokens_identity
    gather_tokens: Callable = _tokens_identity


DEFAULT_KERNELS = Kernels()


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
    return dense(p["fc2"], gelu_tanh(dense(p["fc1"], y)))


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
# Parameters
# --------------------------------------------------------------------------------------------------------

# Leaf kinds: "w" fan-in scaled normal, "b" small normal, "one" ones plus noise, "table" normal/sqrt(C).


def _linear_spec(fan_in: int, fan_out: int):
    return {"w": ((fan_in, fan_out), "w"), "b": ((fan_out,), "b")}


def _block_spec(cfg: STDiT3Config):
    c, d = cfg.hidden, cfg.head_dim
    attn = {"qkv": _linear_spec(c, 3 * c), "proj": _linear_spec(c, c)}
    if cfg.qk_norm:
        attn["q_norm"] = {"w": ((d,), "one")}
        attn["k_norm"] = {"w": ((d,), "one")}
    return {
        "scale_shift_table": ((6, c), "table"),
        "attn": attn,
        "cross_attn": {"q": _linear_spec(c, c), "kv": _linear_spec(c, 2 * c), "proj": _linear_spec(c, c)},
        "mlp": {"fc1": _linear_spec(c, cfg.mlp_hidden), "fc2": _linear_spec(cfg.mlp_hidden, c)},
    }


def param_spec(cfg: STDiT3Config) -> dict:
    """The parameter tree with (shape, init kind) leaves."""
    c = cfg.hidden
    pt, ph, pw = cfg.patch
    patch_out = pt * ph * pw * cfg.out_channels
    return {
        "x_embedder": {"proj": {"w": ((c, cfg.in_channels, pt, ph, pw), "w"), "b": ((c,), "b")}},
        "t_embedder": {"fc1": _linear_spec(cfg.freq_dim, c), "fc2": _linear_spec(c, c)},
        "fps_embedder": {"fc1": _linear_spec(cfg.freq_dim, c), "fc2": _linear_spec(c, c)},
        "t_block": {"linear": _linear_spec(c, 6 * c)},
        "y_embedder": {"fc1": _linear_spec(cfg.caption_channels, c), "fc2": _linear_spec(c, c)},
        "spatial_blocks": [_block_spec(cfg) for _ in range(cfg.depth)],
        "temporal_blocks": [_block_spec(cfg) for _ in range(cfg.depth)],
        "final_layer": {"scale_shift_table": ((2, c), "table"), "linear": _linear_spec(c, patch_out)},
    }


def _is_spec_leaf(v) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str)


def param_shapes(cfg: STDiT3Config) -> dict:
    """The parameter tree as jax.ShapeDtypeStruct leaves (nothing allocated)."""
    dt = dtype_of(cfg)
    return jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v[0], dt), param_spec(cfg),
                                  is_leaf=_is_spec_leaf)


def init_params(cfg: STDiT3Config, key) -> dict:
    """Random weights with the shapes of :func:`param_spec` (meant for small configurations).

    Drawn with numpy from a generator seeded by the JAX key (op-by-op ``jax.random`` is slow to compile
    on CPU for many small leaves), then placed as jax arrays of ``cfg.dtype``.
    """
    dt = dtype_of(cfg)
    seed = np.asarray(jax.random.key_data(key)).ravel().tolist() if hasattr(key, "dtype") else key
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten(param_spec(cfg), is_leaf=_is_spec_leaf)
    out = []
    for shape, kind in leaves:
        z = rng.standard_normal(shape, dtype=np.float32)
        if kind == "w":
            fan_in = int(np.prod(shape[:-1])) if len(shape) == 2 else int(np.prod(shape[1:]))
            v = z / math.sqrt(fan_in)
        elif kind == "b":
            v = 0.02 * z
        elif kind == "one":
            v = 1.0 + 0.1 * z
        else:  # table
            v = z / math.sqrt(cfg.hidden)
        out.append(jnp.asarray(v, dtype=dt))
    return jax.tree_util.tree_unflatten(treedef, out)


def input_shapes(cfg: STDiT3Config, *, caption_4d: bool = True) -> tuple:
    """ShapeDtypeStructs of (x, timestep, y, fps) for the forward."""
    dt = dtype_of(cfg)
    b = cfg.batch
    x = jax.ShapeDtypeStruct((b, cfg.in_channels, cfg.latent_t, cfg.latent_h, cfg.latent_w), dt)
    ysh = (b, 1, cfg.caption_tokens, cfg.caption_channels) if caption_4d else (b, cfg.caption_tokens,
                                                                              cfg.caption_channels)
    return (x, jax.ShapeDtypeStruct((b,), _F32), jax.ShapeDtypeStruct(ysh, dt), jax.ShapeDtypeStruct((b,), _F32))


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

        return jax.checkpoint(run) if remat else run

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
            out = unpatchify(h, cfg, nt, nh, nw, (tx, hx, wx)).astype(_F32)
        return out

    return stdit3


def lower(cfg: STDiT3Config, kernels: Kernels | None = None, *, caption_4d: bool = True):
    """``jax.jit(stdit3).lower`` from shapes alone (parameters and inputs are ShapeDtypeStructs)."""
    fwd = make_forward(cfg, kernels)
    return jax.jit(fwd).lower(param_shapes(cfg), *input_shapes(cfg, caption_4d=caption_4d))
