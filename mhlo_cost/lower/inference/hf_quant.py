"""Precision recipes (:mod:`mhlo_cost.machines.precision`) in a transformers causal LM lowered through torchax.

- **Linears**: every ``nn.Linear`` of the model except its output embedding (the LM head) and a mixture of experts'
  router (a linear whose outputs are the experts) is replaced by a :class:`QuantLinear` whose parameters are stored
  at the recipe's widths (:func:`~mhlo_cost.lower.models.quant.linear_shapes`: fp8 / int8 weights, int4 packed two
  per byte, their scales and zeros) and whose forward runs :func:`~mhlo_cost.lower.models.quant.dense` on the
  torchax tensors through torchax's JAX interop (``torchax.interop.call_jax``): the activation's amax and cast,
  the low-precision ``dot_general`` with its float32 (int32) accumulator, the scales, or the weight-only
  dequantise, exactly as the bundled GPT's steps run them. The embeddings, norms and LM head stay in the model's
  dtype, as vLLM, TensorRT-LLM and torchao leave them, and so does Qwen2-MoE's ``shared_expert_gate`` (a linear of
  one output: a plain ``torch.nn.Linear`` in vLLM's Qwen2-MoE). A mixture's routed experts, stacked 3-D parameters
  in transformers, are stored and run at the recipe's widths by :mod:`.hf_experts_quant`.
- **KV cache** (``kv-fp8``): each layer's cache is held in e4m3 with a float32 key scale and value scale (static,
  per layer: vLLM's ``k_scale`` / ``v_scale``), passed through the step beside the cache; a new key or value is
  divided by its scale and cast before ``StaticCache`` writes it (:func:`~mhlo_cost.lower.models.quant.kv_quantise`),
  and the attention reads the fp8 cache as FlashAttention-3's fp8 path does (:func:`fp8_kv_attention`: the query
  cast to e4m3 with a per-tensor scale, both dots on e4m3 operands with a float32 accumulator, grouped-query heads
  sharing their key/value head without a copy).

``mxfp8`` (e8m0 scales) and ``nvfp4`` (e2m1 elements) have no torch element type that torchax maps to JAX's, so a
transformers model refuses them (:func:`check`); the bundled GPT lowers them.
"""
from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax import lax

from ...machines.precision import Recipe
from ..frontends import FrontendError
from ..models import quant
from ..models.layers import softmax
from .cache import CacheLayout

#: Recipes a transformers model cannot be lowered in, and why.
UNLOWERABLE = {"mxfp8": "its e8m0 block scales", "nvfp4": "its e2m1 (fp4) elements and e4m3 block scales"}
F8 = "float8_e4m3fn"
#: Linears left in the model's dtype by name, as the serving libraries leave them.
UNQUANTISED = ("shared_expert_gate",)
KV_SCALE_BYTES = 8  # a float32 key scale and a float32 value scale per layer


def check(recipe: Recipe) -> None:
    """FrontendError (one line) for a recipe the torchax path cannot lower."""
    base = recipe.name.split(",")[0]
    if base in UNLOWERABLE:
        lowerable = ", ".join(n for n in ("fp8-tensorwise", "fp8-rowwise", "fp8-blockwise-128", "w4a16-awq",
                                          "w8a8-int8", "w8a16", "kv-fp8"))
        raise FrontendError(f"--precision {recipe.name}: a transformers model (--hf) is lowered through torchax, "
                            f"which maps no torch element type to {UNLOWERABLE[base]}; --hf takes {lowerable} "
                            "(the bundled gpt, --model gpt, lowers every recipe)")


def stored_shapes(i: int, o: int, recipe: Recipe, model_dtype: str, bias: bool = True) -> dict:
    """:func:`~mhlo_cost.lower.models.quant.linear_shapes`, except that an output dimension not a multiple of a 2-D
    weight block (``fp8-blockwise-128``'s 128 x 128) takes ceil(out / block) scale columns, the last block partial,
    as DeepSeek-V3 ships its ``kv_a_proj_with_mqa`` (576 outputs: a 5 x 56 ``weight_scale_inv``) and its block-scaled
    kernels read it. The weight itself stays (in, out)."""
    b2 = recipe.weight_scaling.block2 if recipe.quantised else None
    if not b2 or o % b2 == 0:
        return quant.linear_shapes(i, o, recipe, model_dtype, bias=bias)
    shapes = quant.linear_shapes(i, -(-o // b2) * b2, recipe, model_dtype, bias=bias)
    shapes["w"] = jax.ShapeDtypeStruct((i, o), shapes["w"].dtype)
    if "b" in shapes:
        shapes["b"] = jax.ShapeDtypeStruct((o,), shapes["b"].dtype)
    return shapes


def dense(p, x, recipe: Recipe):
    """:func:`~mhlo_cost.lower.models.quant.dense`; a weight whose last 2-D block is partial (:func:`stored_shapes`)
    has its block scales spread over the columns they cover (cut at out) and runs the K-blocked matmul with a scale
    per K block and column."""
    from dataclasses import replace

    s = recipe.weight_scaling
    o = p["w"].shape[-1]
    if not recipe.quantised or not s.block2 or p["w_scale"].shape[-1] * s.block2 == o:
        return quant.dense(p, x, recipe)
    ws = lax.slice_in_dim(jnp.repeat(p["w_scale"], s.block2, axis=-1), 0, o, axis=-1)
    return quant.dense({**p, "w_scale": ws}, x, replace(recipe, weight_scaling=replace(s, block2=None)))


def _call_jax(fn, *args):
    from ..frontends import torchax_frontend as tf

    tf.import_torchax()
    from torchax.interop import call_jax

    return call_jax(fn, *args)


def _torch_dtype(dtype):
    import torch

    return getattr(torch, jnp.dtype(dtype).name)


def _module():
    import torch

    class QuantLinear(torch.nn.Module):
        """A linear stored and run as ``recipe`` says; its parameters on ``meta`` (shapes only)."""

        def __init__(self, linear, recipe: Recipe, model_dtype: str):
            super().__init__()
            self.recipe, self.in_features, self.out_features = recipe, linear.in_features, linear.out_features
            shapes = stored_shapes(linear.in_features, linear.out_features, recipe, model_dtype,
                                   bias=linear.bias is not None)
            self.names = tuple(shapes)
            for name, s in shapes.items():
                t = torch.empty(s.shape, dtype=_torch_dtype(s.dtype), device="meta")
                self.register_parameter(name, torch.nn.Parameter(t, requires_grad=False))

        def forward(self, x):
            p = {n: getattr(self, n) for n in self.names}
            return _call_jax(functools.partial(dense, recipe=self.recipe), p, x)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, recipe={self.recipe.name}"

    return QuantLinear


def expert_counts(config) -> set:
    """The expert counts the configuration declares (a router's outputs, an expert weight's leading dimension)."""
    text = config.get_text_config(decoder=True)
    names = ("num_local_experts", "num_experts", "n_routed_experts")
    return {v for v in (getattr(text, n, None) for n in names) if isinstance(v, int) and not isinstance(v, bool)}


def quantise_linears(model, recipe: Recipe) -> int:
    """Replace the model's linears (not the LM head, not a router) by :class:`QuantLinear`; returns how many."""
    import torch

    if not recipe.quantised:
        return 0
    cls, head, experts = _module(), model.get_output_embeddings(), expert_counts(model.config)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    swaps = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head
             and m.out_features not in experts and name.rpartition(".")[2] not in UNQUANTISED]
    for name, m in swaps:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, cls(m, recipe, dtype))
    return len(swaps)


def fp8_layout(layout: CacheLayout, recipe: Recipe) -> CacheLayout:
    """The cache of ``layout`` held in the recipe's KV dtype, each layer with its two float32 scales."""
    from dataclasses import replace

    if recipe.kv is None:
        return layout
    kv = jnp.dtype(recipe.kv)
    layers = tuple(replace(layer, itemsize=kv.itemsize, scale_bytes=KV_SCALE_BYTES) for layer in layout.layers)
    return replace(layout, layers=layers, dtype=kv.name)


def fp8_kv_attention(q, kc, vc, mask, scales, scaling):
    """q (B, H, n, D) in the compute dtype against the fp8 cache kc, vc (B, Hkv, L, D), as FlashAttention-3's fp8
    path runs it: the query cast to e4m3 with a per-tensor scale from its amax, the scores' and the output's dots on
    e4m3 operands with a float32 accumulator (each key/value head shared by its H / Hkv query heads: the query heads
    folded into the rows, no copy of the cache), the key and value scales multiplied into the scores and the output,
    the probabilities cast to e4m3 (they lie in [0, 1]). ``mask``: transformers' (B, 1|H, n, L), boolean (True:
    attend) or additive; None: causal where n > 1. Returns (B, n, H, D) in q's dtype."""
    f8 = kc.dtype
    b, h, n, d = q.shape
    hk, length = kc.shape[1], kc.shape[2]
    qs = jnp.maximum(jnp.max(jnp.abs(q.astype(jnp.float32))), quant.TINY) / quant.QMAX[f8.name]
    qq = ((q.astype(jnp.float32) / qs) * scaling).astype(f8).reshape(b, hk, (h // hk) * n, d)
    s = lax.dot_general(qq, kc, (((3,), (3,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
    s = (s * (qs * scales[0])).reshape(b, h, n, length)
    s = _masked(s, mask, n, length)
    p = softmax(s, axis=-1).astype(f8).reshape(b, hk, (h // hk) * n, length)
    o = lax.dot_general(p, vc, (((3,), (2,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
    o = (o * scales[1]).reshape(b, h, n, d)
    return jnp.transpose(o, (0, 2, 1, 3)).astype(q.dtype)


def _masked(s, mask, n: int, length: int):
    if mask is None:
        if n == 1:
            return s
        keep = lax.iota(jnp.int32, n)[:, None] + (length - n) >= lax.iota(jnp.int32, length)[None, :]
        mask = keep[None, None]
    if mask.dtype == jnp.bool_:
        mask = jnp.broadcast_to(mask, s.shape)
        return lax.select(mask, s, jnp.full(s.shape, -1e30, s.dtype))
    return s + mask.astype(s.dtype)


def _put(cache, new, start):
    """``new`` (B, H, n, D) written into ``cache`` at position ``start``, in place (a dynamic_update_slice)."""
    return lax.dynamic_update_slice(cache, new, (0, 0, jnp.reshape(start, ()).astype(jnp.int32), 0))


def _quantised_update(layer, update):
    """``layer.update`` writing the new keys and values divided by the layer's scales and cast to the cache's
    dtype. A full-length layer (transformers' ``StaticLayer``) writes them in place at its position, as a cache
    kernel does (one dynamic_update_slice, not StaticCache's index_copy_, which the liveness sweep would hold
    beside the donated cache); a sliding-window layer keeps transformers' own write."""
    from transformers.cache_utils import StaticLayer

    def write(key_states, value_states, *args, **kwargs):
        dtype = str(layer.keys.dtype).removeprefix("torch.")
        k = _call_jax(functools.partial(quant.kv_quantise, dtype=dtype), key_states, layer.k_scale)
        v = _call_jax(functools.partial(quant.kv_quantise, dtype=dtype), value_states, layer.v_scale)
        if type(layer) is not StaticLayer:
            return update(k, v, *args, **kwargs)
        start = layer.cumulative_length
        layer.keys = _call_jax(_put, layer.keys, k, start)
        layer.values = _call_jax(_put, layer.values, v, start)
        return layer.keys, layer.values

    return write


def _attention(cache):
    """An attention function (transformers' ``AttentionInterface`` signature) over the fp8 cache."""
    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        for extra in ("softcap", "s_aux", "sinks"):
            if kwargs.get(extra) is not None:
                raise FrontendError(f"--precision kv-fp8: the fp8 cache's attention has no {extra} (this "
                                    f"model's attention uses one)")
        layer = cache.layers[module.layer_idx]
        scale = module.head_dim ** -0.5 if scaling is None else scaling
        fn = functools.partial(fp8_kv_attention, scaling=scale)
        return _call_jax(fn, query, key, value, attention_mask, (layer.k_scale, layer.v_scale)), None

    return attend


@contextlib.contextmanager
def fp8_cache(model, cache, scales):
    """While active, ``cache`` (a StaticCache whose layers hold the fp8 tensors) quantises what it writes with the
    per-layer ``scales`` [(k_scale, v_scale), ...], and the model's attention reads it in fp8."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    for layer, (ks, vs) in zip(cache.layers, scales):
        layer.k_scale, layer.v_scale = ks, vs
        layer.update = _quantised_update(layer, layer.update)
    impl = model.config._attn_implementation or "eager"
    local = ALL_ATTENTION_FUNCTIONS._local_mapping
    saved = local.get(impl)
    local[impl] = _attention(cache)
    try:
        yield
    finally:
        if saved is None:
            local.pop(impl, None)
        else:
            local[impl] = saved
