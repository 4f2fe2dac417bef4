"""Element-wise building blocks of the JAX models (STDiT3, GPT), written out op by op.

Nothing here calls a nested ``jit`` or a custom call, so every op appears in the lowered IR as itself:
normalisations in float32, activations, the numerically safe softmax, OpenSora's modulation, and the
sinusoidal / 2-D positional / rotary embeddings computed in-graph.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

F32 = jnp.float32


def layer_norm(x, eps: float = 1e-6):
    """LayerNorm over the last axis without affine parameters, computed in float32."""
    xf = x.astype(F32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    xc = xf - mean
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    return (xc * lax.rsqrt(var + eps)).astype(x.dtype)


def rms_norm(x, weight, eps: float = 1e-6):
    """RMSNorm over the last axis (LLaMA style: normalise in float32, scale in the input dtype)."""
    xf = x.astype(F32)
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
    freqs = jnp.exp(lax.iota(F32, half) * (-math.log(max_period) / half))
    args = values.astype(F32)[:, None] * freqs[None, :]  # outer product by broadcasting: no GEMM
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
    inv_freq = jnp.exp(lax.iota(F32, quarter) * (-math.log(10000.0) * 2.0 / (dim // 2)))
    gh = lax.iota(F32, h) / scale
    gw = lax.iota(F32, w) / scale
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
    inv_freq = jnp.exp(lax.iota(F32, dim // 2) * (-math.log(theta) * 2.0 / dim))
    ang = positions.astype(F32)[:, None] * inv_freq[None, :]  # (L, dim/2)
    ang = jnp.repeat(ang, 2, axis=-1)  # (L, dim): f0 f0 f1 f1 ...
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x, cos, sin):
    """Rotate (..., L, H, D) by tables (L, D): out = x*cos + rot(x)*sin with rot(x0, x1) = (-x1, x0)."""
    xf = x.astype(F32)
    pairs = xf.reshape(*xf.shape[:-1], xf.shape[-1] // 2, 2)
    rot = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(xf.shape)
    out = xf * cos[:, None, :] + rot * sin[:, None, :]
    return out.astype(x.dtype)

