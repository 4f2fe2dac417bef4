"""The bundled GPT's forward (:mod:`.gpt`) under a precision recipe (:mod:`mhlo_cost.machines.precision`), as
``sweep --precision`` lowers it: the four linears of every layer (``qkv``, ``proj``, ``fc1``, ``fc2``) stored and
run as the recipe says (:mod:`.quant`), the embeddings, norms and the LM head in the model's dtype: the linears
``lower --decode / --prefill --precision`` quantises (:mod:`mhlo_cost.lower.inference.gpt_steps`), in the
forward the sweep lowers for a gpt point.
"""
from __future__ import annotations

import jax
from jax import lax

from ...machines.precision import Recipe
from . import gpt, quant
from .layers import gelu_tanh
from .stdit3_kernels import dense, dot_product_attention

scope = jax.named_scope


def linears(cfg: gpt.GPTConfig) -> list[tuple[str, str, int, int]]:
    """(group, name, in, out) of the quantised linears of one layer."""
    c, f = cfg.hidden, cfg.mlp_hidden
    return [("attn", "qkv", c, 3 * c), ("attn", "proj", c, c), ("mlp", "fc1", c, f), ("mlp", "fc2", f, c)]


def check(cfg: gpt.GPTConfig, recipe: Recipe, strategy: str = "none") -> None:
    """FrontendError where ``recipe`` cannot be lowered on the forward: a KV-cache recipe (the forward keeps no
    cache), a block size that does not divide a linear (``strategy``: none; gpt has no parallel strategy)."""
    from ..frontends import FrontendError

    if recipe.kv is not None:
        raise FrontendError(f"--precision {recipe.name}: the forward keeps no KV cache (the fp8 cache is lowered by "
                            "serve and lower --decode / --prefill); the recipes for its linears set the weights")
    for _, _, i, o in linears(cfg):
        quant.linear_shapes(i, o, recipe, cfg.dtype)


def param_shapes(cfg: gpt.GPTConfig, recipe: Recipe) -> dict:
    """The forward's parameters: the bundled GPT's, each layer's four linears stored as ``recipe`` says (stacked
    along a leading layer axis with ``cfg.scan``)."""
    params = gpt.param_shapes(cfg)
    if not recipe.quantised:
        return params
    stored = {(g, n): quant.linear_shapes(i, o, recipe, cfg.dtype) for g, n, i, o in linears(cfg)}
    if cfg.scan:
        def stacked(s):
            return jax.ShapeDtypeStruct((cfg.layers, *s.shape), s.dtype)

        for (g, n), shapes in stored.items():
            params["layers"][g][n] = jax.tree_util.tree_map(stacked, shapes)
        return params
    for layer in params["layers"]:
        for (g, n), shapes in stored.items():
            layer[g][n] = dict(shapes)
    return params


def _layer(p, x, cfg: gpt.GPTConfig, linear):
    """:func:`mhlo_cost.lower.models.gpt.gpt_layer` with its four linears run by ``linear`` (written again here:
    gpt.py's lines are the stored golden programs' locations, which an edit there would move)."""
    b, n, _ = x.shape
    with scope("ln1"):
        h = gpt.layer_norm(p["ln1"], x)
    with scope("attn"):
        qkv = linear(p["attn"]["qkv"], h)
        heads = qkv.shape[-1] // (3 * cfg.head_dim)
        qkv = qkv.reshape(b, n, 3, heads, cfg.head_dim)
        o = dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], gpt.causal_mask(n))
        x = x + linear(p["attn"]["proj"], o.reshape(b, n, heads * cfg.head_dim))
    with scope("ln2"):
        h = gpt.layer_norm(p["ln2"], x)
    with scope("mlp"):
        x = x + linear(p["mlp"]["fc2"], gelu_tanh(linear(p["mlp"]["fc1"], h)))
    return x


def make_forward(cfg: gpt.GPTConfig, recipe: Recipe):
    """``gpt(params, tokens)`` as :func:`mhlo_cost.lower.models.gpt.make_forward` makes it, the layers' linears
    under ``recipe`` (the parameters as :func:`param_shapes` gives them)."""
    def linear(p, x):
        return quant.dense(p, x, recipe)

    def gpt_fwd(params, tokens):
        n = tokens.shape[1]
        with scope("embed"):
            x = params["embed"]["tokens"].at[tokens].get(mode="clip")
            x = x + params["embed"]["positions"][None, :n]
        if cfg.scan:
            def body(h, p):
                with scope("layers"):
                    return _layer(p, h, cfg, linear), None

            x, _ = lax.scan(body, x, params["layers"])
        else:
            for i in range(cfg.layers):
                with scope(f"layers.{i}"):
                    x = _layer(params["layers"][i], x, cfg, linear)
        with scope("ln_f"):
            x = gpt.layer_norm(params["ln_f"], x)
        with scope("lm_head"):
            return dense(params["lm_head"], x)

    gpt_fwd.__name__ = gpt_fwd.__qualname__ = "gpt"
    return gpt_fwd


def lower(cfg: gpt.GPTConfig, recipe: Recipe, plan=None):
    """``jax.jit(gpt).lower`` of the forward under ``recipe``, from shapes (``plan``: None; gpt has no parallel
    strategy)."""
    if plan is not None and plan.strategy != "none":
        from ..frontends import FrontendError

        raise FrontendError("parallel strategies are written for stdit3 only, not gpt")
    check(cfg, recipe)

    return jax.jit(make_forward(cfg, recipe)).lower(param_shapes(cfg, recipe), *gpt.input_shapes(cfg))
