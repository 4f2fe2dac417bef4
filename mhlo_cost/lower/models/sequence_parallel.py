"""Sequence-parallel kernels of STDiT3 in the S-sharded layout: ulysses and ring (mesh ``("sp",)``).

The video tokens of each frame are split along S over the devices (padded to a multiple of n); spatial
attention either exchanges heads for tokens with ``all_to_all`` (ulysses) or passes keys and values
round the ring with ``collective_permute`` under an online softmax (ring). What each strategy splits and
which collectives it runs is described in :mod:`mhlo_cost.lower.models.parallel`.
"""
from __future__ import annotations

from functools import partial

import jax.numpy as jnp
from jax import lax

from .layers import F32, rms_norm
from .parallel_plan import Plan
from .stdit3_kernels import NEG, Kernels, video_attention


def _scatter_s(h, *, T, S, axis, n):
    """(B, T*S, C) -> this device's (B, T*S_p/n, C): frame tokens padded to S_p = ceil(S/n)*n, split on S."""
    b, _, c = h.shape
    s_loc = -(-S // n)
    pad = s_loc * n - S
    h = h.reshape(b, T, S, c)
    if pad:
        h = lax.pad(h, jnp.zeros((), h.dtype), [(0, 0, 0), (0, 0, 0), (0, pad, 0), (0, 0, 0)])
    h = lax.dynamic_slice_in_dim(h, lax.axis_index(axis) * s_loc, s_loc, axis=2)
    return h.reshape(b, T * s_loc, c)


def _gather_s(h, *, T, S, axis):
    """Inverse of :func:`_scatter_s`: all_gather along S, drop the padding."""
    b, n_loc, c = h.shape
    h = lax.all_gather(h.reshape(b, T, n_loc // T, c), axis, axis=2, tiled=True)
    return h[:, :, :S].reshape(b, T * S, c)


def _local_temporal(p, h, cfg, *, T, positions, kernels):
    """Temporal attention over T for each local spatial position: no collective in the S-sharded layout."""
    return video_attention(p, h, cfg, temporal=True, T=T, S=h.shape[1] // T, positions=positions,
                                  kernels=kernels)


def _qkv_local(p, h, cfg, kernels, T):
    """q, k, v (B, T, S_loc, H, D) of the local tokens, q/k RMS-normalised as in the model."""
    b, n_loc, _ = h.shape
    qkv = kernels.linear(p["qkv"], h).reshape(b, T, n_loc // T, 3, -1, cfg.head_dim)
    q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    if "q_norm" in p:
        q = rms_norm(q, p["q_norm"]["w"])
        k = rms_norm(k, p["k_norm"]["w"])
    return q, k, v


def _video_attention_ulysses(p, h, cfg, *, temporal, T, S, positions=None, kernels=None, axis):
    if temporal:
        return _local_temporal(p, h, cfg, T=T, positions=positions, kernels=kernels)
    b, n_loc, c = h.shape
    q, k, v = _qkv_local(p, h, cfg, kernels, T)
    # sequence-sharded -> head-sharded: split the heads (axis 3), concatenate the frame tokens (axis 2)
    q, k, v = (lax.all_to_all(z, axis, 3, 2, tiled=True) for z in (q, k, v))
    _, _, s_pad, hl, d = q.shape
    mask = None if s_pad == S else (lax.iota(jnp.int32, s_pad) < S)[None, :]
    o = kernels.attention_core(q.reshape(b * T, s_pad, hl, d), k.reshape(b * T, s_pad, hl, d),
                               v.reshape(b * T, s_pad, hl, d), mask)
    # head-sharded -> sequence-sharded
    o = lax.all_to_all(o.reshape(b, T, s_pad, hl, d), axis, 2, 3, tiled=True)
    return kernels.out_linear(p["proj"], o.reshape(b, n_loc, c))


def ring_attention(q, k, v, *, axis: str, n: int, kv_len: int | None = None):
    """Exact attention of local q (Bx, Lq, H, D) over the keys of all n devices, k / v (Bx, Lk, H, D) each.

    K and V travel the ring (device i sends to i+1) in n-1 ``collective_permute`` steps each; the blocks
    are combined with an online softmax. Keys at global index >= ``kv_len`` (padding) are masked.
    """
    bx, lq, h, d = q.shape
    lk = k.shape[1]
    q = q * (d ** -0.5)
    me = lax.axis_index(axis)
    perm = [(j, (j + 1) % n) for j in range(n)]
    m = jnp.full((bx, h, lq, 1), NEG, F32)
    l_sum = jnp.zeros((bx, h, lq, 1), F32)
    acc = jnp.zeros((bx, h, lq, d), F32)
    for step in range(n):
        s = lax.dot_general(q, k, (((3,), (3,)), ((0, 2), (0, 2)))).astype(F32)  # (Bx, H, Lq, Lk)
        if kv_len is not None and kv_len < n * lk:
            src = lax.rem(me - step + n, n)  # the device whose keys this step holds
            valid = src * lk + lax.iota(jnp.int32, lk) < kv_len
            s = lax.select(jnp.broadcast_to(valid, s.shape), s, jnp.full(s.shape, NEG, F32))
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        corr = jnp.exp(m - m_new)
        e = jnp.exp(s - m_new)
        l_sum = l_sum * corr + jnp.sum(e, axis=-1, keepdims=True)
        pv = lax.dot_general(e.astype(v.dtype), v, (((3,), (1,)), ((0, 1), (0, 2))))  # (Bx, H, Lq, D)
        acc = acc * corr + pv.astype(F32)
        m = m_new
        if step < n - 1:
            k = lax.ppermute(k, axis, perm)
            v = lax.ppermute(v, axis, perm)
    o = (acc / l_sum).astype(v.dtype)
    return jnp.transpose(o, (0, 2, 1, 3))


def _video_attention_ring(p, h, cfg, *, temporal, T, S, positions=None, kernels=None, axis, n):
    if temporal:
        return _local_temporal(p, h, cfg, T=T, positions=positions, kernels=kernels)
    b, n_loc, c = h.shape
    q, k, v = _qkv_local(p, h, cfg, kernels, T)
    s_loc, hl, d = q.shape[2:]
    o = ring_attention(*(z.reshape(b * T, s_loc, hl, d) for z in (q, k, v)), axis=axis, n=n, kv_len=S)
    return kernels.out_linear(p["proj"], o.reshape(b, n_loc, c))


def sequence_kernels(plan: Plan) -> Kernels:
    (axis,), (n,) = plan.axis_names, plan.mesh_shape
    if plan.strategy == "ulysses":
        attn = partial(_video_attention_ulysses, axis=axis)
    else:
        attn = partial(_video_attention_ring, axis=axis, n=n)
    return Kernels(video_attention=attn, scatter_tokens=partial(_scatter_s, axis=axis, n=n),
                          gather_tokens=partial(_gather_s, axis=axis))
