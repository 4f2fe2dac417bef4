"""A user's JAX model as a training step: ``factory() -> (apply, params)`` plus a loss by name."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from ..frontends import FrontendError
from . import LOSSES
from .steps import cross_entropy, mse


def loss_and_target(loss, out: jax.ShapeDtypeStruct) -> tuple[Callable, jax.ShapeDtypeStruct]:
    """``(loss(output, target) -> scalar, the target's shape)`` for a loss name, spec or function."""
    if loss == "mse":
        return mse, jax.ShapeDtypeStruct(out.shape, out.dtype)
    if loss == "xent":
        if len(out.shape) < 1:
            raise FrontendError("the xent loss needs an output with a class axis, got a scalar")
        return cross_entropy, jax.ShapeDtypeStruct(out.shape[:-1], jnp.int32)
    if isinstance(loss, str):
        if ":" not in loss:
            raise FrontendError(f"unknown loss {loss!r}: use {', '.join(LOSSES)} or 'package.module:function'")
        from ..frontends import resolve_spec

        loss = resolve_spec(loss)
    if not callable(loss):
        raise FrontendError(f"the loss {loss!r} is not a function")
    return loss, jax.ShapeDtypeStruct(out.shape, out.dtype)


def _shape(x) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(int(d) for d in x.shape), x.dtype)


def module_step(spec, input_shapes, dtype: str, loss, made=None) -> tuple[Callable, object, tuple]:
    """(loss(params, *inputs, target), parameter shapes, batch shapes) of a user's JAX model; ``made``: what
    its factory returned, where it was called already. An input is a shape (of ``dtype``) or a
    ``jax.ShapeDtypeStruct``."""
    from ..frontends import resolve_spec

    if made is None:
        factory = resolve_spec(spec) if isinstance(spec, str) else spec
        made = factory()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise FrontendError(f"{spec}() must return (apply, params) for a training step, "
                            f"got {type(made).__name__}")
    apply, params = made
    try:
        params = jax.tree_util.tree_map(_shape, params)
    except AttributeError:
        raise FrontendError(f"{spec}(): the parameters must be arrays or jax.ShapeDtypeStruct") from None
    inputs = tuple(s if isinstance(s, jax.ShapeDtypeStruct) else jax.ShapeDtypeStruct(tuple(int(d) for d in s), dtype)
                   for s in input_shapes)
    out = jax.eval_shape(apply, params, *inputs)
    if not isinstance(out, jax.ShapeDtypeStruct):
        raise FrontendError(f"{spec}: the model must return one array to take a loss of, got {type(out).__name__}")
    fn, target = loss_and_target(loss, out)

    def step_loss(params, *batch):
        *xs, tgt = batch
        return fn(apply(params, *xs), tgt)

    return step_loss, params, inputs + (target,)
