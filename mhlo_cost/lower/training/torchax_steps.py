"""Training steps of PyTorch modules through torchax, from shapes (the module on the meta device).

``loss.backward()`` does not lower: torchax runs each torch op as a JAX function below autograd, so a
loss computed on torchax tensors inside ``jax.jit`` has no ``grad_fn`` ("element 0 of tensors does not
require grad and does not have a grad_fn"). The step therefore differentiates the module the way
torchax's own ``torchax.train.make_train_step`` does: ``jax.value_and_grad`` of a function that runs the
module's ``functional_call`` on the trainable parameters, then the optax update. The IR carries JAX's
names (``jvp(...)``, ``transpose(jvp(...))``) around the module paths (``spatial_blocks.3/attn/qkv``), so
the phases are found as for JAX models. Buffers are inputs of the step, not differentiated.
"""
from __future__ import annotations

import contextlib

import jax

from ..frontends import FrontendError


def module_forward(module, *, kwargs: dict | None = None, pick=None):
    """(forward(params, buffers, inputs, kw_inputs) -> output arrays, parameter shapes, buffer shapes).

    ``inputs`` is a tuple of positional inputs, ``kw_inputs`` a dict of keyword ones; ``kwargs`` are plain
    (static) keyword values of the module's forward; ``pick(result) -> tensor`` chooses what is returned
    (default: the whole result)."""
    import torch

    from ..frontends._torch_shim import import_torchax
    from ..frontends.attributes import attribute_specs, bound, split
    from ..frontends.torchax_frontend import (exclude_from_source_locations, fold_unit_alpha, mute_aten_scopes,
                                              state_specs, module_scopes)

    tx = import_torchax()
    exclude_from_source_locations()
    env = tx.default_env()
    state = state_specs(module)
    trainable = {n for n, p in module.named_parameters(remove_duplicate=False) if p.requires_grad}
    params = {k: v for k, v in state.items() if k in trainable}
    buffers = {k: v for k, v in state.items() if k not in trainable}
    buffers.update(attribute_specs(module))  # plain tensor attributes on meta, as buffers
    static = dict(kwargs or {})

    def forward(params, buffers, inputs, kw_inputs):
        state_t, inputs_t, kw_t = env.j2t_iso(({**params, **buffers}, inputs, kw_inputs))
        state_t, attrs = split(state_t, module)
        with env, torch.device("jax"), module_scopes(module), mute_aten_scopes(True), \
                fold_unit_alpha(env, True), torch.no_grad(), bound(module, attrs):
            out = torch.func.functional_call(module, state_t, tuple(inputs_t), {**static, **kw_t}, strict=False)
            if pick is not None:
                out = pick(out)
        return env.t2j_iso(out)

    return forward, params, buffers


def _module_forward(module):
    """(forward(params, buffers, *inputs) -> output arrays, parameter shapes, buffer shapes)."""
    fwd, params, buffers = module_forward(module)

    def forward(params, buffers, *inputs):
        return fwd(params, buffers, inputs, {})

    return forward, params, buffers


def lower_model(model: str, cfg, *, remat: str = "none", optimizer="adamw"):
    """(jax Lowered, parameter shapes) of a bundled model's step through torchax (stdit3)."""
    if model != "stdit3":
        raise FrontendError(f"the torchax frontend has no training step for {model!r} (known: stdit3)")
    if remat != "none":
        raise FrontendError("--remat block is written for the jax frontend; torchax steps recompute nothing")
    from ..models import stdit3, stdit3_torch
    from .steps import lower_step, mse

    module = stdit3_torch.build(cfg, "meta")
    forward, params, buffers = _module_forward(module)
    c = cfg.in_channels
    f32 = jax.numpy.float32

    def loss(params, buffers, x0, noise, timestep, y, fps):
        with jax.named_scope("diffusion"):
            w = (timestep.astype(f32) / 1000.0).reshape(-1, *([1] * (x0.ndim - 1)))
            x_t = ((1.0 - w) * x0.astype(f32) + w * noise.astype(f32)).astype(x0.dtype)
        out = forward(params, buffers, x_t, timestep, y, fps)
        with jax.named_scope("loss"):
            return mse(out[:, :c], x0.astype(f32) - noise.astype(f32))

    x, t, y, fps = stdit3.input_shapes(cfg)
    return lower_step(loss, params, (buffers, x, x, t, y, fps), optimizer), params


def lower_user_module(spec, input_shapes, dtype: str, *, loss="mse", optimizer="adamw"):
    """(jax Lowered, parameter shapes) of a user's ``nn.Module`` given a loss."""
    from ..frontends.torchax_frontend import resolve_module, as_spec
    from .steps import lower_step
    from .user import loss_and_target

    try:
        module = resolve_module(spec, dtype)
    except TypeError as e:
        raise FrontendError(str(e)) from None
    with contextlib.suppress(AttributeError):
        module.train()
    forward, params, buffers = _module_forward(module)
    inputs = tuple(as_spec(s, dtype) for s in input_shapes)
    out = jax.eval_shape(forward, params, buffers, *inputs)
    if not isinstance(out, jax.ShapeDtypeStruct):
        raise FrontendError(f"{spec}: the module must return one tensor to take a loss of")
    fn, target = loss_and_target(loss, out)

    def step_loss(params, buffers, *batch):
        *xs, tgt = batch
        return fn(forward(params, buffers, *xs), tgt)

    return lower_step(step_loss, params, (buffers,) + inputs + (target,), optimizer), params
