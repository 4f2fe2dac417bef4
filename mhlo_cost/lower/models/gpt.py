"""A small decoder-only transformer (GPT-2 style) in plain JAX: the README's example model.

Token + learned position embedding, ``layers`` pre-LayerNorm blocks (causal self-attention, GELU MLP),
final LayerNorm and an (untied) LM head. Ops carry the named scopes ``embed``, ``layers.{i}`` with
``ln1``, ``attn``, ``ln2``, ``mlp`` inside, then ``ln_f`` and ``lm_head``.

With ``scan=True`` the layers' weights are stacked on a leading axis and the blocks run as one
``jax.lax.scan`` (a single while body executed ``layers`` times, scoped ``layers``) instead of an
unrolled Python loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .layers import gelu_tanh
from .stdit3_kernels import dense, dot_product_attention

scope = jax.named_scope
_F32 = jnp.float32


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 1024
    hidden: int = 256
    heads: int = 4
    layers: int = 4
    seq: int = 128
    batch: int = 2
    mlp_ratio: int = 4
    dtype: str = "bfloat16"
    scan: bool = False  # run the layers as one lax.scan over stacked weights

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def mlp_hidden(self) -> int:
        return self.hidden * self.mlp_ratio


def layer_norm(p, x, eps: float = 1e-5):
    """LayerNorm with affine parameters, computed in float32."""
    xf = x.astype(_F32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    xc = xf - mean
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    y = (xc * lax.rsqrt(var + eps)).astype(x.dtype)
    return y * p["scale"].astype(x.dtype) + p["bias"].astype(x.dtype)


def causal_mask(length: int):
    i = lax.iota(jnp.int32, length)
    return i[:, None] >= i[None, :]


def causal_self_attention(p, x, cfg: GPTConfig, attention_core: Callable = dot_product_attention):
    b, n, _ = x.shape
    d = cfg.head_dim
    qkv = dense(p["qkv"], x)
    heads = qkv.shape[-1] // (3 * d)
    qkv = qkv.reshape(b, n, 3, heads, d)
    o = attention_core(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal_mask(n))
    return dense(p["proj"], o.reshape(b, n, heads * d))


def mlp(p, x):
    return dense(p["fc2"], gelu_tanh(dense(p["fc1"], x)))


def gpt_layer(p, x, cfg: GPTConfig):
    with scope("ln1"):
        h = layer_norm(p["ln1"], x)
    with scope("attn"):
        x = x + causal_self_attention(p["attn"], h, cfg)
    with scope("ln2"):
        h = layer_norm(p["ln2"], x)
    with scope("mlp"):
        x = x + mlp(p["mlp"], h)
    return x


# --------------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------------


def _lin(i: int, o: int, lead: tuple = ()):
    return {"w": (lead + (i, o), "w"), "b": (lead + (o,), "zero")}


def _ln(c: int, lead: tuple = ()):
    return {"scale": (lead + (c,), "one"), "bias": (lead + (c,), "zero")}


def _layer_spec(cfg: GPTConfig, lead: tuple = ()):
    c = cfg.hidden
    return {
        "ln1": _ln(c, lead),
        "attn": {"qkv": _lin(c, 3 * c, lead), "proj": _lin(c, c, lead)},
        "ln2": _ln(c, lead),
        "mlp": {"fc1": _lin(c, cfg.mlp_hidden, lead), "fc2": _lin(cfg.mlp_hidden, c, lead)},
    }


def param_spec(cfg: GPTConfig, *, scan: bool | None = None) -> dict:
    scan = cfg.scan if scan is None else scan
    c = cfg.hidden
    layers = _layer_spec(cfg, (cfg.layers,)) if scan else [_layer_spec(cfg) for _ in range(cfg.layers)]
    return {
        "embed": {"tokens": ((cfg.vocab, c), "embed"), "positions": ((cfg.seq, c), "embed")},
        "layers": layers,
        "ln_f": _ln(c),
        "lm_head": _lin(c, cfg.vocab),
    }


def _is_leaf(v) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str)


def param_shapes(cfg: GPTConfig, *, scan: bool | None = None) -> dict:
    dt = jnp.dtype(cfg.dtype)
    return jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v[0], dt), param_spec(cfg, scan=scan),
                                  is_leaf=_is_leaf)


def init_params(cfg: GPTConfig, key, *, scan: bool | None = None) -> dict:
    """Random weights (numpy generator seeded by the JAX key), as jax arrays of ``cfg.dtype``."""
    dt = jnp.dtype(cfg.dtype)
    seed = np.asarray(jax.random.key_data(key)).ravel().tolist() if hasattr(key, "dtype") else key
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten(param_spec(cfg, scan=scan), is_leaf=_is_leaf)
    out = []
    for shape, kind in leaves:
        if kind == "w":
            v = rng.standard_normal(shape, dtype=np.float32) / math.sqrt(shape[-2])
        elif kind == "embed":
            v = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        elif kind == "one":
            v = np.ones(shape, np.float32)
        else:
            v = np.zeros(shape, np.float32)
        out.append(jnp.asarray(v, dtype=dt))
    return jax.tree_util.tree_unflatten(treedef, out)


def input_shapes(cfg: GPTConfig) -> tuple:
    return (jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32),)


# --------------------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------------------


def make_forward(cfg: GPTConfig, *, scan: bool | None = None, remat: bool = False) -> Callable:
    """``gpt(params, tokens (B, seq) int32) -> logits (B, seq, vocab)``; ``scan`` defaults to cfg.scan.

    With ``remat`` each layer runs under ``jax.checkpoint``: a gradient recomputes its forward instead of
    keeping its activations (only the layer's input is saved).
    """
    scan = cfg.scan if scan is None else scan

    def layer(p, h):
        return gpt_layer(p, h, cfg)

    if remat:
        layer = jax.checkpoint(layer)

    def gpt(params, tokens):
        n = tokens.shape[1]
        with scope("embed"):
            # A gather (not a one-hot matmul), so the embedding is no GEMM.
            x = params["embed"]["tokens"].at[tokens].get(mode="clip")
            x = x + params["embed"]["positions"][None, :n]
        if scan:
            def body(h, p):
                with scope("layers"):
                    return layer(p, h), None

            x, _ = lax.scan(body, x, params["layers"])
        else:
            for i in range(cfg.layers):
                with scope(f"layers.{i}"):
                    x = layer(params["layers"][i], x)
        with scope("ln_f"):
            x = layer_norm(params["ln_f"], x)
        with scope("lm_head"):
            return dense(params["lm_head"], x)

    return gpt


def lower(cfg: GPTConfig, *, scan: bool | None = None):
    return jax.jit(make_forward(cfg, scan=scan)).lower(param_shapes(cfg, scan=scan), *input_shapes(cfg))
