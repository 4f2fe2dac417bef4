"""Prefill and decode of a transformers causal LM as plain ``model.generate`` runs them: transformers'
``DynamicCache``, lowered through torchax from shapes alone (the model on ``meta``; parameters, the past keys and
values and the tokens ``jax.ShapeDtypeStruct`` arguments).

What the dynamic cache does (``transformers/cache_utils.py``, ``DynamicLayer.update``): each layer keeps its keys
and values as tensors of the positions seen so far and, every step, replaces them by
``torch.cat([past, new], dim=-2)``: a new tensor of the grown length, the past read and written again (a sliding
layer, ``DynamicSlidingWindowLayer``, concatenates the same way and keeps the last ``window - 1`` positions).
Attention runs over the concatenated keys and values as the configuration's ``attn_implementation`` says (SDPA by
default). So a decode step at ``context`` positions takes the past of ``context - 1`` positions per layer (a
sliding layer: its static cache's positions less one) and returns the grown cache; a prefill starts from an
empty cache (the layer's first ``cat`` joins an empty tensor to the prompt's keys). Nothing is donated: the
concatenation makes a new buffer, as in eager PyTorch.
"""
from __future__ import annotations

import contextlib

import jax

from ..frontends import torchax_frontend as tf
from .hf_steps import probe_layout, weight_bytes


def _install(cache, past) -> None:
    """Give each DynamicCache layer the traced past keys and values, as if earlier steps had grown it."""
    for layer, (k, v) in zip(cache.layers, past):
        layer.keys, layer.values = k, v
        layer.device = k.device
        layer.is_initialized = True
        if hasattr(layer, "cumulative_length"):  # a sliding layer counts the positions it has seen
            layer.cumulative_length = int(k.shape[-2])


def step_function(model, mode: str, tokens: int, locations: bool = True):
    """``fn(state, buffers, past, ids, pos) -> (logits of the last position, grown cache)`` through torchax;
    ``past`` is empty for a prefill."""
    import torch
    from transformers import DynamicCache

    tx = tf.import_torchax()
    tf.exclude_from_source_locations()
    env = tx.default_env()

    def step(state, buffers, past, ids, pos):
        state_t, past_t, ids_t, pos_t = env.j2t_iso(({**state, **buffers}, past, ids, pos))
        scopes = tf.module_scopes(model) if locations else contextlib.nullcontext()
        with env, torch.device("jax"), scopes, tf.mute_aten_scopes(True), tf.fold_unit_alpha(env, True), \
                torch.no_grad():
            cache = DynamicCache(config=model.config)
            if past_t:
                _install(cache, past_t)
            position = pos_t.reshape(1) + torch.arange(tokens)
            out = torch.func.functional_call(model, state_t, (ids_t,),
                                             dict(cache=cache, cache_position=position, use_cache=True,
                                                  logits_to_keep=1), strict=False)
            grown = [(layer.keys, layer.values) for layer in cache.layers]
            logits = out.logits[:, -1]
        return env.t2j_iso((logits, grown))

    step.__name__ = mode
    step.__qualname__ = mode
    return step


def past_shapes(layout) -> list:
    """The (key, value) shapes a decode step at the layout's context is handed: one position fewer than the
    static cache holds (a full layer: ``context - 1``; a sliding one: ``min(window, context) - 1``)."""
    def less(shape):
        return (*shape[:-2], shape[-2] - 1, shape[-1])

    return [(less(k), less(v)) for k, v in layout.shapes()]


def lower_step(model, mode: str, batch: int, context: int, tokens: int = 1, locations: bool = True,
               routing=None, info: dict | None = None):
    """``(jax.stages.Lowered, CacheLayout, weight bytes)`` of the prefill of ``tokens`` positions into an empty
    DynamicCache, or one decode step of ``batch`` sequences whose caches hold ``context - 1`` positions and grow
    to ``context``. The layout is the static one of ``context`` positions (:func:`.hf_steps.probe_layout`): what
    the grown cache holds (a sliding layer keeps one position fewer after the step). Expert layers as in
    :func:`.hf_steps.lower_step`."""
    import jax.numpy as jnp

    from ..frontends import moe

    layout = probe_layout(model, batch, context)
    specs = tf.state_specs(model)
    buffers = {n for n, _ in model.named_buffers()}
    state = {k: v for k, v in specs.items() if k not in buffers}
    bufs = {k: v for k, v in specs.items() if k in buffers}
    dt = jnp.dtype(layout.dtype)
    past = [] if mode == "prefill" else [(jax.ShapeDtypeStruct(k, dt), jax.ShapeDtypeStruct(v, dt))
                                         for k, v in past_shapes(layout)]
    n = tokens if mode == "prefill" else 1
    ids = jax.ShapeDtypeStruct((batch, n), jnp.int32)
    pos = jax.ShapeDtypeStruct((), jnp.int32)
    fn = moe.wrap(step_function(model, mode, n, locations), model, routing, {} if info is None else info)
    low = jax.jit(fn).lower(state, bufs, past, ids, pos)
    return low, layout, weight_bytes(model)
