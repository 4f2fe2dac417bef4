"""Training steps in JAX: a loss, its gradients (``jax.value_and_grad``) and an optax update, in one jit.

``train_step(loss, optimizer)`` is the step every builder shares::

    params, opt_state, loss = train_step(params, opt_state, *batch)

It is lowered with the parameters and the optimizer state donated (``donate_argnums=(0, 1)``), as a
training loop runs it: the update writes into their buffers. Everything is lowered from shapes
(``jax.ShapeDtypeStruct``), the optimizer state too (``jax.eval_shape(optimizer.init, ...)``).

The losses of the bundled models, each under ``jax.named_scope`` so that its ops form their own group:

* GPT: next-token cross-entropy, mean over the batch's tokens (``loss``);
* STDiT3: OpenSora 1.2's rectified-flow objective. The latent ``x0`` is mixed with Gaussian ``noise`` at
  the sampled timestep ``t`` in [0, 1000): ``x_t = (1 - t/1000) x0 + (t/1000) noise`` (``diffusion``); the
  model's first ``in_channels`` output channels predict the velocity ``x0 - noise`` and the loss is
  their mean squared error (``loss``). The noise and timesteps are inputs of the step (a data loader's
  sampling), so the step holds only the model's work.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

scope = jax.named_scope
_F32 = jnp.float32

from . import OPTIMIZERS, REMAT


def _optax():
    try:
        import optax
    except ModuleNotFoundError:
        from ..frontends import FrontendError

        raise FrontendError("training steps need optax, which is not installed; install it with: "
                            "pip install 'mhlo-cost[train]'") from None
    return optax


def optimizer(name_or_tx="adamw"):
    """An optax ``GradientTransformation`` by name (``adamw``: lr 1e-4, weight decay 1e-4), or itself."""
    optax = _optax()

    if not isinstance(name_or_tx, str):
        return name_or_tx
    if name_or_tx == "adamw":
        return optax.adamw(1e-4, weight_decay=1e-4)
    if name_or_tx == "adam":
        return optax.adam(1e-4)
    if name_or_tx == "sgd":
        return optax.sgd(1e-3)
    raise ValueError(f"unknown optimizer {name_or_tx!r} (known: {', '.join(OPTIMIZERS)})")


def train_step(loss: Callable, tx) -> Callable:
    """``train_step(params, opt_state, *batch) -> (params, opt_state, loss)`` for ``loss(params, *batch)``."""
    optax = _optax()

    def step(params, opt_state, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    step.__name__ = step.__qualname__ = "train_step"
    return step


def lower_step(loss: Callable, params, batch, tx="adamw"):
    """``jax.stages.Lowered`` of the training step of ``loss`` from the shapes ``params`` and ``batch``."""
    tx = optimizer(tx)
    opt_state = jax.eval_shape(tx.init, params)
    return jax.jit(train_step(loss, tx), donate_argnums=(0, 1)).lower(params, opt_state, *batch)


# -- losses ----------------------------------------------------------------------------------------------


def cross_entropy(logits, targets):
    """Mean next-token cross-entropy: logits (..., V) against integer targets (...), in float32."""
    z = logits.astype(_F32)
    m = lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    lse = jnp.log(jnp.sum(jnp.exp(z - m), axis=-1)) + m[..., 0]
    picked = jnp.take_along_axis(z, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return jnp.mean(lse - picked)


def mse(output, target):
    d = output.astype(_F32) - target.astype(_F32)
    return jnp.mean(d * d)


def gpt_loss(cfg, *, remat: bool = False) -> Callable:
    from ..models import gpt

    forward = gpt.make_forward(cfg, remat=remat)

    def loss(params, tokens, targets):
        logits = forward(params, tokens)
        with scope("loss"):
            return cross_entropy(logits, targets)

    return loss


def stdit3_loss(cfg, *, remat: bool = False, kernels=None) -> Callable:
    from ..models import stdit3

    forward = stdit3.make_forward(cfg, kernels, remat=remat)
    c = cfg.in_channels

    def loss(params, x0, noise, timestep, y, fps):
        with scope("diffusion"):
            w = (timestep.astype(_F32) / 1000.0).reshape(-1, *([1] * (x0.ndim - 1)))
            x_t = ((1.0 - w) * x0.astype(_F32) + w * noise.astype(_F32)).astype(x0.dtype)
        out = forward(params, x_t, timestep, y, fps)
        with scope("loss"):
            return mse(out[:, :c], x0.astype(_F32) - noise.astype(_F32))

    return loss


# -- the bundled models ----------------------------------------------------------------------------------


def model_step(model: str, cfg, *, remat: str = "none"):
    """(loss, parameter shapes, batch shapes) of a bundled model's training step."""
    if remat not in REMAT:
        raise ValueError(f"remat must be one of {', '.join(REMAT)}, got {remat!r}")
    on = remat == "block"
    if model == "gpt":
        from ..models import gpt

        tokens = jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32)
        return gpt_loss(cfg, remat=on), gpt.param_shapes(cfg), (tokens, tokens)
    if model == "stdit3":
        from ..models import stdit3

        x, t, y, fps = stdit3.input_shapes(cfg)
        return stdit3_loss(cfg, remat=on), stdit3.param_shapes(cfg), (x, x, t, y, fps)
    raise ValueError(f"no training step for model {model!r} (known: gpt, stdit3)")


def tokens_of(model: str, cfg) -> int:
    """The tokens one step trains on: B x seq for GPT, B x T x S video tokens for STDiT3."""
    if model == "gpt":
        return cfg.batch * cfg.seq
    return cfg.batch * cfg.tokens_t * cfg.tokens_s


def param_count(params) -> int:
    """Elements of a parameter tree (arrays or ShapeDtypeStructs), as an exact integer."""
    n = 0
    for leaf in jax.tree_util.tree_leaves(params):
        k = 1
        for d in leaf.shape:
            k *= int(d)
        n += k
    return n
