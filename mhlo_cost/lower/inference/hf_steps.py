"""Prefill and decode of a transformers causal LM with a static KV cache (``transformers.StaticCache``), lowered
through torchax from shapes alone: the model on the ``meta`` device, its parameters, the cache and the tokens
``jax.ShapeDtypeStruct`` arguments of the program.

The cache is what compiled serving stacks pass: one ``(key, value)`` pair of static tensors per layer, an
argument of the program, updated in place (``index_copy_`` in transformers; donated to ``jax.jit`` here, so
the lowered entry aliases each cache argument to its updated result). Its layout is read by running the model
once on ``meta`` (:func:`probe_layout`): transformers allocates each layer's buffers lazily from the keys and
values it is handed, which gives the heads and head dims it really holds (grouped-query heads, a sliding
window's ``min(window, context)`` positions, DeepSeek's latent).
"""
from __future__ import annotations

import contextlib
import importlib

import jax
import numpy as np

from ..frontends import torchax_frontend as tf
from ..frontends.torchax_once import replayed_layers
from . import hf_experts_quant, hf_quant
from .cache import CacheLayout, LayerCache


def _window(config) -> int | None:
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    return getattr(text, "sliding_window", None)


def probe_layout(model, batch: int, context: int) -> CacheLayout:
    """The StaticCache the model fills at ``batch`` x ``context``, from one decode step on ``meta``."""
    import torch
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=context)
    with torch.no_grad():
        model(torch.zeros(batch, 1, dtype=torch.long, device="meta"), cache=cache,
              cache_position=torch.tensor([context - 1], device="meta"), use_cache=True)
    layers = []
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False):
            raise RuntimeError(f"{type(model).__name__}: a cache layer ({type(layer).__name__}) was never written")
        window = _window(model.config) if getattr(layer, "is_sliding", False) else None
        layers.append(LayerCache(tuple(layer.keys.shape), tuple(layer.values.shape), layer.keys.element_size(),
                                 window))
    dtype = str(cache.layers[0].keys.dtype).removeprefix("torch.")
    return CacheLayout(tuple(layers), batch, context, dtype)


def weight_bytes(model) -> int:
    """Bytes of the parameters (a tied one once), as the program takes them."""
    specs = tf.state_specs(model)
    names = {n for n, _ in model.named_parameters()}
    return sum(int(np.prod(s.shape, dtype=object)) * s.dtype.itemsize for k, s in specs.items() if k in names)


def _install(cache, tensors, cumulative, filled: int) -> None:
    """Give each (fresh) StaticCache layer the traced tensors, as if it had been initialised with them (an fp8
    cache's entries carry their two scales after the key and value: :mod:`.hf_quant`)."""
    for layer, (k, v, *_) in zip(cache.layers, tensors):
        layer.keys, layer.values = k, v
        layer.device = k.device
        layer.batch_size, layer.num_heads = k.shape[:2]
        layer.k_head_dim, layer.v_head_dim = k.shape[-1], v.shape[-1]
        layer.cumulative_length = cumulative
        if hasattr(layer, "cumulative_length_int"):  # a sliding-window layer branches on a Python int
            layer.cumulative_length_int = filled
        layer.is_initialized = True


@contextlib.contextmanager
def copy_from_views(env):
    """torchax's ``aten.copy_`` reads its source's array directly, which a view (a slice not yet taken) does
    not have; transformers' sliding-window cache copies a slice into its buffer when a prompt overflows the
    window. While active, such a source is taken first (the same values, one slice in the IR)."""
    import dataclasses

    import torch

    view_cls = importlib.import_module("torchax.view").View
    op = torch.ops.aten.copy_
    saved = env._ops.get(op)
    if saved is None:
        yield
        return

    def copy(x, y, *args, **kwargs):
        return saved.func(x, y.torch() if isinstance(y, view_cls) else y, *args, **kwargs)

    env._ops[op] = dataclasses.replace(saved, func=copy)
    try:
        yield
    finally:
        env._ops[op] = saved


def step_function(model, mode: str, context: int, tokens: int, locations: bool = True, replay: bool = False,
                  said: dict | None = None):
    """``fn(state, buffers, cache, ids, pos) -> (logits of the last position, cache)`` through torchax. A cache
    entry of four tensors (key, value, key scale, value scale) is an fp8 cache (:func:`.hf_quant.fp8_cache`); its
    scales are passed through. ``replay``: the decoder layers traced once per kind where the serve grid asks
    (:func:`~mhlo_cost.lower.frontends.torchax_once.replayed_layers`; ``said["layers_traced_once"]`` gets what each
    kind of layer did)."""
    import torch
    from transformers import StaticCache

    tx = tf.import_torchax()
    tf.exclude_from_source_locations()
    env = tx.default_env()

    def step(state, buffers, cache, ids, pos):
        state_t, cache_t, ids_t, pos_t = env.j2t_iso(({**state, **buffers}, cache, ids, pos))
        scopes = tf.module_scopes(model) if locations else contextlib.nullcontext()
        with env, torch.device("jax"), scopes, tf.mute_aten_scopes(True), tf.fold_unit_alpha(env, True), \
                copy_from_views(env), torch.no_grad(), \
                (replayed_layers(env, model, said) if replay else contextlib.nullcontext()):
            static = StaticCache(config=model.config, max_cache_len=context)
            # prefill: the cache is empty and the prompt fills 0..P-1; decode: P = 1 token at ``pos``, the
            # cache holding context - 1 positions before it (a full window for a sliding layer).
            _install(static, cache_t, pos_t, 0 if mode == "prefill" else context - 1)
            position = pos_t.reshape(1) + torch.arange(tokens)
            scales = [tuple(entry[2:]) for entry in cache_t]
            with hf_quant.fp8_cache(model, static, scales) if scales[0] else contextlib.nullcontext():
                out = torch.func.functional_call(model, state_t, (ids_t,),
                                                 dict(cache=static, cache_position=position, use_cache=True,
                                                      logits_to_keep=1), strict=False)
            new = [(layer.keys, layer.values, *sc) for layer, sc in zip(static.layers, scales)]
            logits = out.logits[:, -1]
        return env.t2j_iso((logits, new))

    step.__name__ = mode
    step.__qualname__ = mode
    return step


def lower_step(model, mode: str, batch: int, context: int, tokens: int = 1, locations: bool = True,
               routing=None, info: dict | None = None, recipe=None):
    """``(jax.stages.Lowered, CacheLayout, weight bytes)``: the prefill of ``tokens`` prompt positions into a
    cache of ``context`` positions, or one decode step of ``batch`` sequences against it (the cache donated).
    A mixture-of-experts model's expert layers run the static dispatch of :mod:`..frontends.moe` under
    ``routing`` (a :class:`~..frontends.moe.Routing`; None: dropless), as its forward does; ``info["moe"]``
    gets the routing and the loads (``info``: a dict to fill, or None). Under a precision ``recipe``
    (:mod:`.hf_quant`) the linears and the routed experts (:mod:`.hf_experts_quant`) are stored and run at its
    widths, the cache in its KV dtype with its scales."""
    import jax.numpy as jnp

    from ..frontends import moe

    if recipe is not None:  # before the probe runs the library's own expert layers
        hf_experts_quant.refuse_unreached(model, recipe)
    layout = probe_layout(model, batch, context)
    if recipe is not None:
        hf_quant.quantise_linears(model, recipe)
        hf_experts_quant.quantise_experts(model, recipe)
        layout = hf_quant.fp8_layout(layout, recipe)
    specs = tf.state_specs(model)
    buffers = {n for n, _ in model.named_buffers()}
    state = {k: v for k, v in specs.items() if k not in buffers}
    bufs = {k: v for k, v in specs.items() if k in buffers}
    dt = jnp.dtype(layout.dtype)
    scale = () if layout.layers[0].scale_bytes == 0 else (jax.ShapeDtypeStruct((), jnp.float32),) * 2
    cache = [(jax.ShapeDtypeStruct(k, dt), jax.ShapeDtypeStruct(v, dt), *scale) for k, v in layout.shapes()]
    n = tokens if mode == "prefill" else 1
    ids = jax.ShapeDtypeStruct((batch, n), jnp.int32)
    pos = jax.ShapeDtypeStruct((), jnp.int32)
    replay = recipe is None or not recipe.quantised and recipe.kv is None  # (bf16: the serve grid's replay)
    info = {} if info is None else info
    fn = moe.wrap(step_function(model, mode, context, n, locations, replay, info), model, routing, info)
    low = jax.jit(fn, donate_argnums=(2,)).lower(state, bufs, cache, ids, pos)
    return low, layout, weight_bytes(model)
