"""Each decoder layer of a transformers model traced once per kind through torchax, for the serve grid
(:func:`layers_traced_once`).

torchax runs a torch forward op by op, each aten op dispatched in Python to JAX functions that ``jax.jit`` stages
into its trace, and every decoder layer of a model runs the same Python again. Within
:func:`layers_traced_once`, :func:`replayed_layers` traces the first layer of each kind to a jaxpr
(``jax.make_jaxpr``: its parameters, tensor arguments and its own KV-cache layer's tensors as the jaxpr's inputs) and
replays that jaxpr for every later layer of the same kind with that layer's tensors
(``jax.core.eval_jaxpr``). The replay binds each equation into the step's trace as the traced layer did, with the
name stack in force put before the equation's own and the equation's traceback propagated (``eval_jaxpr`` in
``jax/_src/core.py``): the layer's ``jax.named_scope`` (its module path, :mod:`.scopes`) is entered by its
forward pre-hook before the replay, so every op keeps its ``model/layers.{i}/self_attn/...`` scope name. What
changes is the op's location: its frames are those inside the traced layer, then the step's lowering call (the
frames between, the model's forward that called the layer, are not in it). The program is op for op the one the
layers give traced one by one (tests/test_serve_traced_once.py compares them); the serve grid, which reads op
names and never frames, lowers so.

What makes two layers of a kind: the same class and parameter shapes, the same attributes throughout the layer's
modules (``layer_idx`` aside: it only picks the layer's own cache entry), the same argument structure and
shapes, the same plain values among the arguments and in its cache entry. A kind runs as it is, traced layer by
layer, where its trace holds any constant (a traced value it was not given, such as another layer's cache entry,
which the jaxpr would close over; or a constant array the layer makes, one per layer traced one by one but one
shared by every replay: Qwen2's sliding-window cache update), or where the layer changes a plain value of its
modules, its cache entry or an argument (a replay would not change it again: the sliding-window entry's count
of positions); the trace's own changes are undone first. What the replay cannot see: a change inside a container
(a list appended to) or of an object reached only through a module's attribute.

Only the serve grid lowers so (:mod:`mhlo_cost.studies.serve.fitted`), and keeps such a step in its cache under a
key of its own (:meth:`mhlo_cost.studies.serve.grid.StepCache.step`); ``lower`` never does (its stored golden
inputs record every location's frames).
"""
from __future__ import annotations

import contextlib
import contextvars

#: Whether :func:`replayed_layers` replays layers (set by :func:`layers_traced_once`).
_ONCE = contextvars.ContextVar("torchax_layers_traced_once", default=False)


@contextlib.contextmanager
def layers_traced_once():
    """Within it, a transformers step lowered through :func:`replayed_layers` traces each kind of decoder layer
    once and replays it (see the module's docstring)."""
    token = _ONCE.set(True)
    try:
        yield
    finally:
        _ONCE.reset(token)


def enabled() -> bool:
    return _ONCE.get()


@contextlib.contextmanager
def replayed_layers(env, model, said: dict | None = None):
    """While active (and within :func:`layers_traced_once`), each decoder layer of ``model`` (a transformers
    model, :func:`decoder_layers`) runs as a replayed jaxpr (see the module's docstring); ``env`` is the torchax
    environment. Outside :func:`layers_traced_once`, or where the model routes experts (their loads are
    recorded per layer as it is traced: :mod:`.moe`), nothing changes. ``said["layers_traced_once"]`` (where
    ``said`` is a dict) gets, per kind of layer in the order met, "replayed" or why it ran as it is."""
    layers = decoder_layers(model) if _ONCE.get() else []
    if len(layers) < 2:
        if _ONCE.get() and said is not None:
            said["layers_traced_once"] = ["none: the model has no list of two or more decoder layers of one class"]
        yield
        return
    from ._torchax_replay import Replayer

    replayer = Replayer(env)
    for layer in layers:
        replayer.install(layer)
    try:
        yield
    finally:
        replayer.remove()
        if said is not None:
            said["layers_traced_once"] = replayer.said()


def decoder_layers(model) -> list:
    """The decoder layers of ``model``: the first ``ModuleList`` of as many modules of one class as its text
    configuration has layers (none where the model has expert layers: :mod:`.moe`)."""
    import torch

    from .moe import experts_layers, unrouted

    config = getattr(model, "config", None)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None)
    if not isinstance(n, int) or experts_layers(model) or unrouted(model):
        return []
    for _path, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n and len({type(m) for m in mod}) == 1:
            return list(mod)
    return []
