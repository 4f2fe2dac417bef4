"""Prefill and decode of the bundled GPT (:mod:`mhlo_cost.lower.models.gpt`) with a static KV cache, in JAX.

The cache is one ``(key, value)`` pair per layer, each ``(batch, heads, context, head_dim)`` (the layout of
transformers' ``StaticCache``), an argument of both programs and donated (``donate_argnums``), so that XLA
updates it in place: the lowered entry carries ``tf.aliasing_output`` on every cache argument.

- prefill: ``(params, cache, tokens (B, P)) -> (logits of the last position (B, vocab), cache)``: causal
  attention over the prompt, its keys and values written to positions ``0..P-1``.
- decode: ``(params, cache, tokens (B, 1), pos) -> (logits (B, vocab), cache)``: the new token's key and
  value written at ``pos``, attention over the whole static cache with positions after ``pos`` masked.
"""
from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
from jax import lax

from ..models import gpt
from ..models.layers import softmax
from ..models.stdit3_kernels import dense, dot_product_attention
from .cache import CacheLayout, LayerCache

scope = jax.named_scope


def gpt_config(cfg: gpt.GPTConfig, context: int) -> gpt.GPTConfig:
    """The configuration whose position table covers ``context`` positions (no scan: one scope per layer)."""
    return replace(cfg, seq=max(cfg.seq, context), scan=False)


def cache_layout(cfg: gpt.GPTConfig, batch: int, context: int) -> CacheLayout:
    item = jnp.dtype(cfg.dtype).itemsize
    shape = (batch, cfg.heads, context, cfg.head_dim)
    return CacheLayout(tuple(LayerCache(shape, shape, item) for _ in range(cfg.layers)), batch, context,
                       jnp.dtype(cfg.dtype).name)


def _heads(x, cfg):
    b, n, _ = x.shape
    return x.reshape(b, n, cfg.heads, cfg.head_dim)


def _layer(p, x, kv, cfg, start, attend):
    """One block; ``attend(q, k_cache, v_cache, k_new, v_new)`` is the step's attention."""
    with scope("ln1"):
        h = gpt.layer_norm(p["ln1"], x)
    with scope("attn"):
        qkv = dense(p["attn"]["qkv"], h)
        q, k, v = (_heads(t, cfg) for t in jnp.split(qkv, 3, axis=-1))
        with scope("cache_update"):  # (B, H, L, D) <- (B, H, n, D) at position ``start``
            kc = lax.dynamic_update_slice(kv[0], jnp.transpose(k, (0, 2, 1, 3)), (0, 0, start, 0))
            vc = lax.dynamic_update_slice(kv[1], jnp.transpose(v, (0, 2, 1, 3)), (0, 0, start, 0))
        o = attend(q, kc, vc, k, v)
        b, n = x.shape[:2]
        x = x + dense(p["attn"]["proj"], o.reshape(b, n, cfg.hidden))
    with scope("ln2"):
        h = gpt.layer_norm(p["ln2"], x)
    with scope("mlp"):
        x = x + gpt.mlp(p["mlp"], h)
    return x, (kc, vc)


def _run(params, cache, tokens, start, cfg, attend):
    with scope("embed"):
        x = params["embed"]["tokens"].at[tokens].get(mode="clip")
        n = tokens.shape[1]
        x = x + lax.dynamic_slice_in_dim(params["embed"]["positions"], start, n, axis=0)[None]
    new = []
    for i in range(cfg.layers):
        with scope(f"layers.{i}"):
            x, kv = _layer(params["layers"][i], x, cache[i], cfg, start, attend)
        new.append(kv)
    with scope("ln_f"):
        x = gpt.layer_norm(params["ln_f"], x[:, -1])
    with scope("lm_head"):
        return dense(params["lm_head"], x), new


def make_prefill(cfg: gpt.GPTConfig):
    def prefill(params, cache, tokens):
        def attend(q, kc, vc, k, v):  # the prompt attends to itself (causal); the cache is only written
            return dot_product_attention(q, k, v, gpt.causal_mask(q.shape[1]))

        return _run(params, cache, tokens, 0, cfg, attend)

    return prefill


def cached_attention(q, kc, vc, pos):
    """q (B, 1, H, D) against the cache in its own layout (B, H, L, D), positions after ``pos`` masked:
    two dot_generals batched over (B, H), the softmax in float32, no copy of the cache."""
    q = q * (q.shape[-1] ** -0.5)
    s = lax.dot_general(q, kc, (((3,), (3,)), ((0, 2), (0, 1)))).astype(jnp.float32)  # (B, H, 1, L)
    mask = jnp.broadcast_to((lax.iota(jnp.int32, kc.shape[2]) <= pos)[None, None, None, :], s.shape)
    s = lax.select(mask, s, jnp.full(s.shape, -1e30, s.dtype))
    p = softmax(s, axis=-1).astype(vc.dtype)
    o = lax.dot_general(p, vc, (((3,), (2,)), ((0, 1), (0, 1))))  # (B, H, 1, D)
    return jnp.transpose(o, (0, 2, 1, 3))


def make_decode(cfg: gpt.GPTConfig):
    def decode(params, cache, tokens, pos):
        def attend(q, kc, vc, k, v):  # the new token attends to every cached position up to ``pos``
            return cached_attention(q, kc, vc, pos)

        return _run(params, cache, tokens, pos, cfg, attend)

    return decode


def lower_step(cfg: gpt.GPTConfig, mode: str, batch: int, context: int, tokens: int = 1):
    """``(jax.stages.Lowered, CacheLayout, weight bytes)`` of the prefill (``tokens`` prompt positions) or
    the decode step of ``batch`` sequences against a cache of ``context`` positions."""
    cfg = gpt_config(cfg, context)
    layout = cache_layout(cfg, batch, context)
    dt = jnp.dtype(cfg.dtype)
    cache = [(jax.ShapeDtypeStruct(k, dt), jax.ShapeDtypeStruct(v, dt)) for k, v in layout.shapes()]
    params = gpt.param_shapes(cfg, scan=False)
    weights = sum(int(x.size) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
    if mode == "prefill":
        ids = jax.ShapeDtypeStruct((batch, tokens), jnp.int32)
        low = jax.jit(make_prefill(cfg), donate_argnums=(1,)).lower(params, cache, ids)
    else:
        ids = jax.ShapeDtypeStruct((batch, 1), jnp.int32)
        pos = jax.ShapeDtypeStruct((), jnp.int32)
        low = jax.jit(make_decode(cfg), donate_argnums=(1,)).lower(params, cache, ids, pos)
    return low, layout, weights
