"""Prefill and decode of the bundled GPT (:mod:`mhlo_cost.lower.models.gpt`) with a static KV cache, in JAX.

The cache is one ``(key, value)`` pair per layer, each ``(batch, heads, context, head_dim)`` (the layout of
transformers' ``StaticCache``), an argument of both programs and donated (``donate_argnums``), so that XLA
updates it in place: the lowered entry carries ``tf.aliasing_output`` on every cache argument.

- prefill: ``(params, cache, tokens (B, P)) -> (logits of the last position (B, vocab), cache)``: causal
  attention over the prompt, its keys and values written to positions ``0..P-1``.
- decode: ``(params, cache, tokens (B, 1), pos) -> (logits (B, vocab), cache)``: the new token's key and
  value written at ``pos``, attention over the whole static cache with positions after ``pos`` masked.

Under a precision recipe (:mod:`mhlo_cost.machines.precision`) the four linears of every layer (qkv, proj,
fc1, fc2) are stored and run as the recipe says (:mod:`mhlo_cost.lower.models.quant`); the embeddings, norms and
the LM head stay in the model's dtype. A quantised cache (``kv-fp8``) holds its keys and values in the KV dtype
and each layer's entry carries two float32 scalars (the static key and value scales), passed through unchanged:
a new key or value is divided by its scale and cast before it is written, the cache read back in the compute
dtype and multiplied by the scale.
"""
from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
from jax import lax

from ...machines.precision import Recipe
from ..models import gpt, quant
from ..models.layers import gelu_tanh, softmax
from ..models.stdit3_kernels import dense, dot_product_attention
from .cache import CacheLayout, LayerCache

scope = jax.named_scope


def gpt_config(cfg: gpt.GPTConfig, context: int) -> gpt.GPTConfig:
    """The configuration whose position table covers ``context`` positions (no scan: one scope per layer)."""
    return replace(cfg, seq=max(cfg.seq, context), scan=False)


def cache_layout(cfg: gpt.GPTConfig, batch: int, context: int, recipe: Recipe | None = None) -> CacheLayout:
    kv = jnp.dtype(recipe.kv if recipe is not None and recipe.kv else cfg.dtype)
    scales = 8 if kv != jnp.dtype(cfg.dtype) else 0  # kv-fp8: a float32 scale for K and one for V per layer
    shape = (batch, cfg.heads, context, cfg.head_dim)
    return CacheLayout(tuple(LayerCache(shape, shape, kv.itemsize, None, scales) for _ in range(cfg.layers)),
                       batch, context, kv.name)


def param_shapes(cfg: gpt.GPTConfig, recipe: Recipe | None = None) -> dict:
    """The step's parameters: the bundled GPT's, the layers' four linears stored as ``recipe`` says."""
    params = gpt.param_shapes(cfg, scan=False)
    if recipe is None or not recipe.quantised:
        return params
    c, f = cfg.hidden, cfg.mlp_hidden
    for layer in params["layers"]:
        for group, name, i, o in (("attn", "qkv", c, 3 * c), ("attn", "proj", c, c), ("mlp", "fc1", c, f),
                                  ("mlp", "fc2", f, c)):
            layer[group][name] = quant.linear_shapes(i, o, recipe, cfg.dtype)
    return params


def _cache_shapes(layout: CacheLayout) -> list:
    dt = jnp.dtype(layout.dtype)
    out = []
    for layer in layout.layers:
        entry = (jax.ShapeDtypeStruct(layer.key, dt), jax.ShapeDtypeStruct(layer.value, dt))
        if layer.scale_bytes:
            entry += (jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))
        out.append(entry)
    return out


def _heads(x, cfg):
    b, n, _ = x.shape
    return x.reshape(b, n, cfg.heads, cfg.head_dim)


def _write(cache, new, start, scale):
    """(B, H, L, D) <- (B, H, n, D) at position ``start``, quantised first where the cache has a scale."""
    new = jnp.transpose(new, (0, 2, 1, 3))
    if scale is not None:
        new = quant.kv_quantise(new, scale, cache.dtype.name)
    return lax.dynamic_update_slice(cache, new, (0, 0, start, 0))


def _layer(p, x, kv, cfg, start, attend, recipe=None):
    """One block; ``attend(q, k_cache, v_cache, k_new, v_new, cache scales or None)`` is the step's attention."""
    scales = kv[2:] if len(kv) == 4 else (None, None)
    with scope("ln1"):
        h = gpt.layer_norm(p["ln1"], x)
    with scope("attn"):
        qkv = quant.dense(p["attn"]["qkv"], h, recipe)
        q, k, v = (_heads(t, cfg) for t in jnp.split(qkv, 3, axis=-1))
        with scope("cache_update"):
            kc, vc = _write(kv[0], k, start, scales[0]), _write(kv[1], v, start, scales[1])
        o = attend(q, kc, vc, k, v, None if scales[0] is None else scales)
        b, n = x.shape[:2]
        x = x + quant.dense(p["attn"]["proj"], o.reshape(b, n, cfg.hidden), recipe)
    with scope("ln2"):
        h = gpt.layer_norm(p["ln2"], x)
    with scope("mlp"):
        x = x + quant.dense(p["mlp"]["fc2"], gelu_tanh(quant.dense(p["mlp"]["fc1"], h, recipe)), recipe)
    return x, (kc, vc) + tuple(kv[2:])


def _run(params, cache, tokens, start, cfg, attend, recipe=None):
    with scope("embed"):
        x = params["embed"]["tokens"].at[tokens].get(mode="clip")
        n = tokens.shape[1]
        x = x + lax.dynamic_slice_in_dim(params["embed"]["positions"], start, n, axis=0)[None]
    new = []
    for i in range(cfg.layers):
        with scope(f"layers.{i}"):
            x, kv = _layer(params["layers"][i], x, cache[i], cfg, start, attend, recipe)
        new.append(kv)
    with scope("ln_f"):
        x = gpt.layer_norm(params["ln_f"], x[:, -1])
    with scope("lm_head"):
        return dense(params["lm_head"], x), new


def make_prefill(cfg: gpt.GPTConfig, recipe: Recipe | None = None):
    def prefill(params, cache, tokens):
        def attend(q, kc, vc, k, v, scales):  # the prompt attends to itself (causal); the cache is only written
            return dot_product_attention(q, k, v, gpt.causal_mask(q.shape[1]))

        return _run(params, cache, tokens, 0, cfg, attend, recipe)

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


def fp8_cached_attention(q, kc, vc, pos, scales):
    """:func:`cached_attention` against an fp8 cache as FlashAttention-3's fp8 path runs it (vLLM's fp8 KV cache
    on Hopper): the query cast to e4m3 with a per-tensor scale from its amax, both dots on e4m3 operands with a
    float32 accumulator, the key and value scales multiplied into the scores and the output, the probabilities
    cast to e4m3 (they lie in [0, 1]: no scale). No copy of the cache is made in another dtype."""
    f8 = kc.dtype
    qs = jnp.maximum(jnp.max(jnp.abs(q.astype(jnp.float32))), 1e-12) / quant.QMAX[f8.name]
    qq = ((q.astype(jnp.float32) / qs) * (q.shape[-1] ** -0.5)).astype(f8)
    s = lax.dot_general(qq, kc, (((3,), (3,)), ((0, 2), (0, 1))), preferred_element_type=jnp.float32)
    s = s * (qs * scales[0])  # (B, H, 1, L)
    mask = jnp.broadcast_to((lax.iota(jnp.int32, kc.shape[2]) <= pos)[None, None, None, :], s.shape)
    s = lax.select(mask, s, jnp.full(s.shape, -1e30, s.dtype))
    p = softmax(s, axis=-1).astype(f8)
    o = lax.dot_general(p, vc, (((3,), (2,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
    return jnp.transpose(o * scales[1], (0, 2, 1, 3)).astype(q.dtype)


def make_decode(cfg: gpt.GPTConfig, recipe: Recipe | None = None):
    def decode(params, cache, tokens, pos):
        def attend(q, kc, vc, k, v, scales):  # the new token attends to every cached position up to ``pos``
            if scales is None:
                return cached_attention(q, kc, vc, pos)
            return fp8_cached_attention(q, kc, vc, pos, scales)

        return _run(params, cache, tokens, pos, cfg, attend, recipe)

    return decode


def stored_bytes(tree) -> int:
    """Bytes of abstract arrays as stored (sub-byte element types packed: int4, fp4 at half a byte)."""
    sub = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4}
    total = 0
    for x in jax.tree_util.tree_leaves(tree):
        dt = jnp.dtype(x.dtype)
        total += (int(x.size) * sub.get(dt.name, dt.itemsize * 8) + 7) // 8
    return total


def lower_step(cfg: gpt.GPTConfig, mode: str, batch: int, context: int, tokens: int = 1,
               recipe: Recipe | None = None):
    """``(jax.stages.Lowered, CacheLayout, weight bytes)`` of the prefill (``tokens`` prompt positions) or
    the decode step of ``batch`` sequences against a cache of ``context`` positions, under ``recipe``."""
    cfg = gpt_config(cfg, context)
    layout = cache_layout(cfg, batch, context, recipe)
    cache = _cache_shapes(layout)
    params = param_shapes(cfg, recipe)
    weights = stored_bytes(params)
    if mode == "prefill":
        ids = jax.ShapeDtypeStruct((batch, tokens), jnp.int32)
        low = jax.jit(make_prefill(cfg, recipe), donate_argnums=(1,)).lower(params, cache, ids)
    else:
        ids = jax.ShapeDtypeStruct((batch, 1), jnp.int32)
        pos = jax.ShapeDtypeStruct((), jnp.int32)
        low = jax.jit(make_decode(cfg, recipe), donate_argnums=(1,)).lower(params, cache, ids, pos)
    return low, layout, weights
