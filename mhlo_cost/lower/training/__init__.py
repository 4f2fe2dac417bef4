"""Training steps lowered to StableHLO: forward, loss, backward and optimizer update in one program.

:func:`lower_train_step` lowers a bundled model's step (GPT with next-token cross-entropy, STDiT3 with
OpenSora 1.2's rectified-flow loss), :func:`lower_module_train_step` a user's model given a loss; both
return the :class:`~mhlo_cost.lower.frontends.Lowered` of the frontends, whose ``info`` says how it was built
(``train``, ``remat``, ``optimizer``, ``params``: parameter elements, ``tokens``: tokens per step).
The phases of the step's ops (forward, backward, recompute, optimizer) are found in its IR by
:mod:`mhlo_cost.analysis.collectors.phases`.

``mhlo-cost lower --model gpt --train --remat block -o train.mlir`` writes one from the shell.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..frontends import FrontendError, Lowered

FRONTENDS = ("jax", "torchax")
#: Optimizers by name (optax; the hyper-parameters do not change the lowered IR's shape).
OPTIMIZERS = ("adamw", "adam", "sgd")
#: How the bundled models recompute activations in the backward: nothing, or every block.
REMAT = ("none", "block")
#: Losses for a user's model given by name (or 'package.module:function(output, target) -> scalar').
LOSSES = ("mse", "xent")


def _check(remat: str, tx) -> None:
    if remat not in REMAT:
        raise FrontendError(f"remat must be one of {', '.join(REMAT)}, got {remat!r}")
    if isinstance(tx, str) and tx not in OPTIMIZERS:
        raise FrontendError(f"unknown optimizer {tx!r} (known: {', '.join(OPTIMIZERS)})")


def lower_train_step(model: str, cfg=None, *, remat: str = "none", optimizer="adamw", frontend: str = "jax",
                     locations: bool = True) -> Lowered:
    """The training step of a bundled model (``gpt``, ``stdit3``) for ``cfg`` (None: the default).

    ``remat``: ``none`` keeps every activation the backward needs; ``block`` runs each transformer block
    under ``jax.checkpoint`` so that the backward recomputes it. ``optimizer``: ``adamw`` (default),
    ``adam``, ``sgd`` or an optax transformation. The parameters and the optimizer state are donated.
    """
    from ..frontends import default_config
    from .steps import lower_step, model_step, param_count, tokens_of

    _check(remat, optimizer)
    cfg = cfg if cfg is not None else default_config(model)
    info = {"frontend": frontend, "model": model, "train": True, "remat": remat,
            "optimizer": optimizer if isinstance(optimizer, str) else type(optimizer).__name__}
    if frontend == "torchax":
        from .torchax_steps import lower_model

        low, params = lower_model(model, cfg, remat=remat, optimizer=optimizer)
    elif frontend == "jax":
        try:
            loss, params, batch = model_step(model, cfg, remat=remat)
        except ValueError as e:
            raise FrontendError(str(e)) from None
        low = lower_step(loss, params, batch, optimizer)
    else:
        raise FrontendError(f"training steps are lowered with {' or '.join(FRONTENDS)}, not {frontend!r}")
    info.update(params=param_count(params), tokens=tokens_of(model, cfg))
    return Lowered(text=low.as_text(debug_info=locations), info=info)


def lower_module_train_step(spec, input_shapes, dtype: str = "float32", *, loss: str = "mse",
                            optimizer="adamw", frontend: str = "jax", locations: bool = True) -> Lowered:
    """The training step of a user's model given a loss.

    ``spec`` (``'package.module:factory'`` or the factory itself): for ``jax`` the factory returns
    ``(apply, params)`` with ``apply(params, *inputs) -> output`` and ``params`` a tree of arrays or
    ``jax.ShapeDtypeStruct``; for ``torchax`` it returns a ``torch.nn.Module`` (built on the meta device).
    ``loss``: ``mse`` (against a target of the output's shape), ``xent`` (cross-entropy over the last
    axis against integer targets of the output's leading shape) or ``'package.module:function'``, called
    as ``function(output, target) -> scalar`` with a target of the output's shape and dtype.
    """
    from .steps import lower_step, param_count

    _check("none", optimizer)
    if frontend == "torchax":
        from .torchax_steps import lower_user_module

        low, params = lower_user_module(spec, input_shapes, dtype, loss=loss, optimizer=optimizer)
    elif frontend == "jax":
        from .user import module_step

        loss_fn, params, batch = module_step(spec, input_shapes, dtype, loss)
        low = lower_step(loss_fn, params, batch, optimizer)
    else:
        raise FrontendError(f"training steps are lowered with {' or '.join(FRONTENDS)}, not {frontend!r}")
    info = {"frontend": frontend, "model": spec if isinstance(spec, str) else getattr(spec, "__name__", "module"),
            "train": True, "remat": "none", "loss": loss if isinstance(loss, str) else "custom",
            "optimizer": optimizer if isinstance(optimizer, str) else type(optimizer).__name__,
            "params": param_count(params)}
    return Lowered(text=low.as_text(debug_info=locations), info=info)


@dataclass(frozen=True)
class TrainOptions:
    """``mhlo-cost lower --train``: what a training step adds around the model's forward."""

    remat: str = "none"
    optimizer: str = "adamw"
    loss: str = "mse"  # for every model but the bundled ones (they have their own)


def lower_request_step(req) -> Lowered:
    """The training step of what a :class:`~mhlo_cost.lower.frontends.api.LowerRequest` names (``req.train`` set):
    a bundled model's own step, or any other's with ``req.train.loss`` (:mod:`.library`, no wrapper)."""
    opts = req.train
    frontend = req.frontend or "jax"
    if req.model is not None:
        from ..frontends import default_config

        cfg = req.config if req.config is not None else default_config(req.model)
        if hasattr(cfg, "plan"):  # a ShardedConfig: the bundled steps are one device's
            raise FrontendError("--train lowers one device's step: drop --parallel")
        return lower_train_step(req.model, cfg, remat=opts.remat, optimizer=opts.optimizer, frontend=frontend,
                                locations=req.locations)
    if opts.remat != "none":
        raise FrontendError("--remat applies to the bundled models (--model); checkpoint your own model's blocks")
    from .library import lower_object_step

    return lower_object_step(req)


__all__ = ["TrainOptions", "lower_request_step", "lower_train_step", "lower_module_train_step", "LOSSES", "OPTIMIZERS", "REMAT", "FRONTENDS"]
