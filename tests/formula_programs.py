"""JAX programs with 1-3 shape symbols for tests/test_formula.py: each exported with symbolic dimensions
(``jax.export``) and lowered statically at a point, the static lowering being the independent reference."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import export

F32 = jnp.float32
D, HEADS = 32, 4  # model width, heads (head size 8)


def _norm(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def gpt_block(x, wqkv, wo, w1, w2):
    """A GPT block on x (b, s, D): causal multi-head self-attention and a GELU MLP, pre-norm, residuals."""
    b, s, _ = x.shape
    with jax.named_scope("attn"):
        q, k, v = jnp.split(_norm(x) @ wqkv, 3, axis=-1)
        q, k, v = (t.reshape(b, s, HEADS, D // HEADS) for t in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (D // HEADS) ** 0.5
        mask = jnp.tril(jnp.ones((s, s), bool))
        probs = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, D) @ wo
    with jax.named_scope("mlp"):
        return x + jax.nn.gelu(_norm(x) @ w1) @ w2


def gpt_args(b, s):
    return (jax.ShapeDtypeStruct((b, s, D), F32), jax.ShapeDtypeStruct((D, 3 * D), F32),
            jax.ShapeDtypeStruct((D, D), F32), jax.ShapeDtypeStruct((D, 4 * D), F32),
            jax.ShapeDtypeStruct((4 * D, D), F32))


def kv_attention(q, k_new, v_new, k_cache, v_cache):
    """Decode attention: t new tokens (b, t, H, d) against a cache of c tokens (b, c, H, d) plus themselves."""
    k = jnp.concatenate([k_cache, k_new], axis=1)
    v = jnp.concatenate([v_cache, v_new], axis=1)
    scores = jnp.einsum("bthd,bchd->bhtc", q, k) * (D // HEADS) ** -0.5
    return jnp.einsum("bhtc,bchd->bthd", jax.nn.softmax(scores, axis=-1), v)


def kv_args(b, t, c):
    new = jax.ShapeDtypeStruct((b, t, HEADS, D // HEADS), F32)
    cache = jax.ShapeDtypeStruct((b, c, HEADS, D // HEADS), F32)
    return new, new, new, cache, cache


def conv_net(x, k1, k2, w):
    """Two 3x3 convolutions (SAME, ReLU) on x (b, h, w, 3), a sum over the image and a dense head."""
    dn = ("NHWC", "HWIO", "NHWC")
    y = jax.nn.relu(jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
    y = jax.nn.relu(jax.lax.conv_general_dilated(y, k2, (1, 1), "SAME", dimension_numbers=dn))
    return y.sum(axis=(1, 2)) @ w


def conv_args(b, h, w):
    return (jax.ShapeDtypeStruct((b, h, w, 3), F32), jax.ShapeDtypeStruct((3, 3, 3, 8), F32),
            jax.ShapeDtypeStruct((3, 3, 8, 8), F32), jax.ShapeDtypeStruct((8, 10), F32))


#: name -> (function, args(*point), symbols)
PROGRAMS = {"gpt": (gpt_block, gpt_args, "b, s"), "kv": (kv_attention, kv_args, "b, t, c"),
            "conv": (conv_net, conv_args, "b, h, w")}


def symbolic_text(name: str) -> str:
    fn, args, spec = PROGRAMS[name]
    dims = export.symbolic_shape(spec)
    return export.export(jax.jit(fn))(*args(*dims)).mlir_module()


def static_text(name: str, point: dict) -> str:
    fn, args, spec = PROGRAMS[name]
    values = [point[s.strip()] for s in spec.split(",")]
    return jax.jit(fn).lower(*args(*values)).as_text(debug_info=True)


def stdit3_symbolic_text(cfg) -> str:
    """STDiT3 (the bundled JAX model, ``cfg`` at depth 1) exported with symbolic batch ``b`` and latent frames
    ``t``: the model's code is shape-polymorphic in both as it stands."""
    from mhlo_cost.lower.models import stdit3

    b, t = export.symbolic_shape("b, t")
    x, ts, y, fps = stdit3.input_shapes(cfg)
    args = (jax.ShapeDtypeStruct((b, x.shape[1], t) + x.shape[3:], x.dtype), jax.ShapeDtypeStruct((b,), ts.dtype),
            jax.ShapeDtypeStruct((b,) + y.shape[1:], y.dtype), jax.ShapeDtypeStruct((b,), fps.dtype))
    return export.export(jax.jit(stdit3.make_forward(cfg)))(stdit3.param_shapes(cfg), *args).mlir_module()
