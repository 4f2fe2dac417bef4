"""Training steps of the models ``mhlo-cost lower`` takes, without a wrapper: transformers, diffusers and timm
classes built from a configuration (``--hf``, ``--diffusers``, ``--timm``), ``--module`` factories and models in
hand, with the same typed and keyword inputs as the forward (``--input attention_mask=2x16:int64``) and plain
keyword values (``--kwarg use_cache=false``).

A torch module is differentiated through torchax (see :mod:`.torchax_steps`), in training mode, whatever
``--frontend`` says; a JAX factory's ``(apply, params)`` with JAX (:mod:`.user`). The loss reads one tensor of
the forward's result: the tensor itself; of a ``ModelOutput`` (or any mapping or dataclass) the first of
:data:`OUTPUT_FIELDS` it holds (``logits``, ``last_hidden_state``, ``sample``...), else its first tensor; of a
tuple its first tensor. ``info["loss_reads"]`` says which. The loss is ``mse`` against a target of that
tensor's shape, ``xent`` against integer targets, or a function named ``package.module:function``, called as
``function(output, target) -> scalar`` on JAX arrays.
"""
from __future__ import annotations

import contextlib

import jax

from ..frontends import FrontendError, Lowered

#: Fields of a model's output the loss reads, in order of preference (the first present and not None).
OUTPUT_FIELDS = ("logits", "prediction_logits", "last_hidden_state", "sample", "pred_boxes", "reconstruction")


def pick_output(out):
    """``(name, tensor)``: the tensor of a forward's result the loss reads (see the module docstring)."""
    import dataclasses
    from collections.abc import Mapping

    import torch

    if isinstance(out, torch.Tensor):
        return "output", out
    if isinstance(out, Mapping):  # ModelOutput, diffusers' BaseOutput (None fields are absent), dict
        for name in OUTPUT_FIELDS:
            if isinstance(out.get(name), torch.Tensor):
                return name, out[name]
        items = list(out.items())
    elif dataclasses.is_dataclass(out) and not isinstance(out, type):
        items = [(f.name, getattr(out, f.name)) for f in dataclasses.fields(out)]
    elif isinstance(out, (tuple, list)):
        items = [(f"[{i}]", v) for i, v in enumerate(out)]
    else:
        items = []
    for name, value in items:
        try:
            inner, tensor = pick_output(value)
        except FrontendError:
            continue
        return (name if inner == "output" else f"{name}.{inner}"), tensor
    raise FrontendError(f"the model's forward returned no tensor to take a loss of ({type(out).__name__})")


def lower_object_step(req) -> Lowered:
    """The training step of what ``req`` (a LowerRequest with ``train`` set) names other than a bundled
    model: its object built as the forward builds it (meta device, no weights), then differentiated."""
    from ..frontends.build import build_object, is_torch_module

    if req.frontend == "torch-xla":
        raise FrontendError("--train lowers torch modules through torchax, not torch-xla: drop --frontend")
    if req.input_values:
        raise FrontendError("--input-value does not go with --train yet (a training step takes inputs by shape)")
    if req.library is not None:
        from ..frontends import hub

        hub.import_library(req.library)
    obj = build_object(req)
    if is_torch_module(obj):
        if req.frontend not in (None, "torchax"):
            raise FrontendError(f"a torch module's training step lowers with torchax, not {req.frontend}")
        return _torch_step(req, obj)
    if isinstance(obj, tuple) and len(obj) == 2 and callable(obj[0]):
        if req.frontend not in (None, "jax"):
            raise FrontendError(f"{req.source()} returns (apply, params): it lowers with jax, not {req.frontend}")
        return _jax_step(req, obj)
    raise FrontendError(f"{req.source()}: --train takes a torch.nn.Module (or a factory of one) or a JAX "
                        f"factory returning (apply, params), got {type(obj).__name__}")


def _inputs(req, default_dtype):
    from ..frontends.inputs import parse_input
    from ..frontends.torchax_frontend import as_spec

    def spec(s):
        return as_spec(parse_input(s) if isinstance(s, str) else s, default_dtype)

    return tuple(spec(s) for s in req.inputs), {k: spec(v) for k, v in req.input_kwargs.items()}


def _info(req, frontend: str, params, loss, reads: str) -> dict:
    from .steps import param_count

    opts = req.train
    return {"frontend": frontend, "model": req.source(), "train": True, "remat": "none",
            "loss": loss if isinstance(loss, str) else "custom", "loss_reads": reads,
            "optimizer": opts.optimizer if isinstance(opts.optimizer, str) else type(opts.optimizer).__name__,
            "params": param_count(params)}


def _torch_step(req, module) -> Lowered:
    from ..frontends.torchax_frontend import module_dtype
    from .steps import lower_step
    from .torchax_steps import module_forward
    from .user import loss_and_target

    import torch

    if req.dtype is not None:
        module = module.to(getattr(torch, jax.numpy.dtype(req.dtype).name))
    with contextlib.suppress(AttributeError):
        module.train()
    picked: dict = {}

    def choose(out):
        name, tensor = pick_output(out)
        picked["name"] = name
        return tensor

    forward, params, buffers = module_forward(module, kwargs=req.kwargs, pick=choose)
    from ..frontends.moe import Routing, wrap

    said: dict = {}  # a mixture of experts: its expert layers dispatched statically, as the forward's are
    forward = wrap(forward, module, None if req.routing is None else Routing.parse(req.routing), said)
    if not params:
        raise FrontendError(f"{req.source()} has no trainable parameter: nothing to take a gradient of")
    inputs, kw = _inputs(req, module_dtype(module) or torch.float32)
    clash = sorted(set(kw) & set(req.kwargs))
    if clash:
        raise FrontendError(f"{', '.join(clash)} given both as an input and as a plain keyword value")
    out = jax.eval_shape(forward, params, buffers, inputs, kw)
    fn, target = loss_and_target(req.train.loss, out)

    def step_loss(params, buffers, inputs, kw, target):
        return fn(forward(params, buffers, inputs, kw), target)

    low = lower_step(step_loss, params, (buffers, inputs, kw, target), req.train.optimizer)
    info = _info(req, "torchax", params, req.train.loss, picked.get("name", "output"))
    info["model_class"] = type(module).__name__
    info.update(said)
    return Lowered(text=low.as_text(debug_info=req.locations), info=info)


def _jax_step(req, made) -> Lowered:
    from .steps import lower_step
    from .user import module_step

    if req.input_kwargs or req.kwargs:
        raise FrontendError("--train with a JAX factory's (apply, params) takes positional --input only")
    inputs, _ = _inputs(req, req.dtype or "float32")
    loss_fn, params, batch = module_step(req.source(), inputs, req.dtype or "float32", req.train.loss, made=made)
    low = lower_step(loss_fn, params, batch, req.train.optimizer)
    return Lowered(text=low.as_text(debug_info=req.locations),
                   info=_info(req, "jax", params, req.train.loss, "output"))
