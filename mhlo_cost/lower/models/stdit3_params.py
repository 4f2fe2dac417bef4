"""STDiT3's parameter tree (shapes, random initialisation) and the shapes of the forward's inputs.

``param_spec`` is the tree with (shape, init kind) leaves; ``param_shapes`` gives it as
``jax.ShapeDtypeStruct`` leaves so that the full model lowers from shapes alone, without allocating;
``init_params`` makes real (random) weights for small configurations.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .config import STDiT3Config
from .layers import F32


def dtype_of(cfg: STDiT3Config):
    return jnp.dtype(cfg.dtype)


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


def is_spec_leaf(v) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str)


def param_shapes(cfg: STDiT3Config) -> dict:
    """The parameter tree as jax.ShapeDtypeStruct leaves (nothing allocated)."""
    dt = dtype_of(cfg)
    return jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v[0], dt), param_spec(cfg),
                                  is_leaf=is_spec_leaf)


def init_params(cfg: STDiT3Config, key) -> dict:
    """Random weights with the shapes of :func:`param_spec` (meant for small configurations).

    Drawn with numpy from a generator seeded by the JAX key (op-by-op ``jax.random`` is slow to compile
    on CPU for many small leaves), then placed as jax arrays of ``cfg.dtype``.
    """
    dt = dtype_of(cfg)
    seed = np.asarray(jax.random.key_data(key)).ravel().tolist() if hasattr(key, "dtype") else key
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten(param_spec(cfg), is_leaf=is_spec_leaf)
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
    return (x, jax.ShapeDtypeStruct((b,), F32), jax.ShapeDtypeStruct(ysh, dt), jax.ShapeDtypeStruct((b,), F32))
