"""The swappable kernels of an STDiT3 block: linear, attention core, self- and cross-attention, MLP.

:class:`Kernels` gathers them; the block (``mhlo_cost.lower.models.stdit3``) calls them only through it, and
they read head counts and sequence lengths from the shapes they are given, not from the configuration,
so that a parallel strategy (``mhlo_cost.lower.models.parallel``) can swap in sharded versions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from .config import STDiT3Config
from .layers import F32, apply_rope, rms_norm, rope_tables, softmax

Params = dict

NEG = -1e30  # masked score (finite so that a fully masked row would give a uniform, not NaN, softmax)


def _affine(x, w, b):
    y = lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))
    return y + b.astype(y.dtype)


#: Inlined (no nested function in the IR): its ops take the location of the call, one source position for all.
_affine_call = jax.jit(_affine, inline=True)


def dense(p: Params, x):
    """x (..., in) @ w (in, out) + b: one dot_general and its bias add, made as one call.

    OpenSora's linears are ``nn.Linear`` with a bias, and eager PyTorch runs one as one aten call: ``at::linear``
    sends a contiguous input with a 1-D bias to ``_flatten_nd_linear``, one ``addmm`` whose GEMM adds the bias
    (``aten/src/ATen/native/Linear.cpp``), not a matmul and then an add. Here the product and its bias are one
    inlined jitted function, whose ops all carry the location of the one call, so the eager model
    (``mhlo_cost.roofline.eager_calls``) takes them as one call, as it takes the torch module's ``addmm``; the ops,
    and so every count, are those of the product and the add written out."""
    return _affine_call(x, p["w"], p["b"])


def gelu(x):
    """The tanh GELU as one call, as OpenSora's STDiT3 makes it: its ``Mlp`` (timm) and caption ``y_proj`` take
    ``act_layer=approx_gelu``, ``lambda: nn.GELU(approximate="tanh")`` (``opensora/models/stdit/stdit3.py``,
    ``opensora/models/layers/blocks.py`` ``CaptionEmbedder``, hpcaitech/Open-Sora v1.2.0), one aten call that
    eager PyTorch runs as one kernel. ``jax.nn.gelu(approximate=True)`` computes the same
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` with the same element-wise ops as
    :func:`~mhlo_cost.lower.models.layers.gelu_tanh` (``x^3`` as two multiplies), and every op it lowers to carries
    its one call site, so the eager model prices it as one kernel, not as the eleven ``jnp`` calls of the
    written-out form."""
    return jax.nn.gelu(x, approximate=True)


def dot_product_attention(q, k, v, mask=None):
    """Plain attention. q (B, Lq, H, D), k/v (B, Lk, H, D), mask broadcastable to (Lq, Lk) -> (B, Lq, H, D).

    q@k^T and probs@v are dot_generals batched over (B, H); the softmax runs in float32.
    """
    q = q * (q.shape[-1] ** -0.5)
    s = lax.dot_general(q, k, (((3,), (3,)), ((0, 2), (0, 2))))  # (B, H, Lq, Lk)
    s = s.astype(F32)
    if mask is not None:
        s = lax.select(jnp.broadcast_to(mask, s.shape), s, jnp.full(s.shape, NEG, s.dtype))
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
    return kn.out_linear(p["fc2"], gelu(kn.linear(p["fc1"], x)))


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
