"""The model object a :class:`~mhlo_cost.lower.frontends.api.LowerRequest` names, and its traceable.

:func:`build_object` builds it without allocating a weight (``meta`` tensors for torch, ``nnx.eval_shape`` for
flax.nnx: :func:`build_factory`); :func:`traceable` makes a JAX function of it and its abstract arguments
(torchax for a torch module, the function itself for JAX) and the ``info`` dict that goes with them
(:func:`lowered_dtype`: the dtype a torch module lowers in, and why).
"""
from __future__ import annotations

import sys

from . import FrontendError, resolve_spec


def is_torch_module(obj) -> bool:
    """Whether ``obj`` is a ``torch.nn.Module``, torch never imported for the question (none is one unless it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def build_object(req):
    """The model object the request names (torch modules on ``meta``)."""
    if req.library is not None:
        from . import hub

        return hub.build(req.library, req.name, req.config, req.overrides)
    if req.overrides:
        raise FrontendError("--set applies to --hf, --diffusers and --timm models")
    obj = req.module
    if isinstance(obj, str):
        return build_factory(resolve_spec(obj))
    return obj


def _frameworks_of(factory) -> set:
    """Which of torch and flax the factory's own module uses (names a module or a class of theirs)."""
    found = set()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(factory, type) and issubclass(factory, torch.nn.Module):
        found.add("torch")
    module = sys.modules.get(getattr(factory, "__module__", "") or "")
    for v in vars(module).values() if module is not None else ():
        name = v.__name__ if isinstance(v, type(sys)) else getattr(v, "__module__", None)
        root = name.split(".", 1)[0] if isinstance(name, str) else ""
        if root in ("torch", "flax"):
            found.add(root)
        elif root in ("transformers", "diffusers", "timm", "torchvision"):  # torch models
            found.add("torch")
    return found


def build_factory(factory):
    """Call a user's factory so that no weight is allocated: under ``nnx.eval_shape`` where its module
    uses flax (a flax.nnx Module comes back with abstract state), under ``torch.device('meta')`` where it
    uses torch; a factory of a plain JAX function is just called. A module instance is returned as is."""
    if is_torch_module(factory):
        return factory
    uses = _frameworks_of(factory)
    if "flax" in uses:
        from flax import nnx

        from .jax_frontend import is_nnx_module

        try:
            obj = nnx.eval_shape(factory)
        except Exception:  # noqa: BLE001 - not a module (a function): called plainly below
            obj = None
        if is_nnx_module(obj):
            return obj
    if "torch" in uses:
        import torch

        with torch.device("meta"):
            return factory()
    return factory()


def traceable(req, obj):
    """``(fn, args, info)`` of the object: its JAX function and abstract arguments."""
    from .inputs import TensorSpec, parse_input, parse_input_value

    inputs = [parse_input(s) if isinstance(s, str) else s for s in req.inputs]
    values = {k: parse_input_value(f"{k}={v}") if isinstance(v, str) else v for k, v in req.input_values.items()}
    if any(isinstance(s, TensorSpec) and s.name for s in inputs):
        raise FrontendError("keyword inputs go in input_kwargs, not among the positional inputs")
    kw_inputs = {k: parse_input(v) if isinstance(v, str) else v for k, v in req.input_kwargs.items()}
    info = {"model": req.source()}
    if is_torch_module(obj):
        frontend = req.frontend or "torchax"
        if frontend != "torchax":
            raise FrontendError(f"a torch module in hand lowers with torchax, not {frontend} (torch-xla "
                                "lowers a 'package.module:factory' in its own environment)")
        from . import torchax_frontend as tf

        module = obj if req.dtype is None else obj.to(tf._torch_dtype(req.dtype))
        fn, args = tf.traceable(module.eval(), inputs, input_kwargs=kw_inputs, kwargs=req.kwargs,
                                locations=req.locations, values=values, amp=req.amp)
        from .moe import Routing, wrap

        fn = wrap(fn, module, None if req.routing is None else Routing.parse(req.routing), info)
        info.update(frontend="torchax", model_class=type(obj).__name__)
        dtype = lowered_dtype(req, module)
        if dtype:
            info["dtype"] = dtype + (f", under CUDA autocast to {req.amp}" if req.amp else "")
        if req.amp:
            info["amp"] = req.amp
        return fn, args, info
    if req.amp:
        raise FrontendError(f"--amp {req.amp} runs a torch module under torch.autocast; "
                            f"{info['model']} is not a torch.nn.Module")
    if (req.frontend or "jax") != "jax":
        raise FrontendError(f"{info['model']} is not a torch.nn.Module: it lowers with the jax frontend")
    if values:
        raise FrontendError("--input-value applies to torch modules (a JAX function reads a plain --kwarg)")
    from . import jax_frontend as jf

    fn, args = jf.traceable(obj, inputs, input_kwargs=kw_inputs, kwargs=req.kwargs, locations=req.locations,
                            dtype=req.dtype or "float32")
    info.update(frontend="jax")
    return fn, args, info


def lowered_dtype(req, module) -> str:
    """The dtype a torch module is lowered in (that of most of its floating parameters) and why:
    ``bfloat16 (the configuration's dtype)``; "" for a module without floating parameters."""
    counts: dict[str, int] = {}
    for p in module.parameters():
        if p.is_floating_point():
            name = str(p.dtype).removeprefix("torch.")
            counts[name] = counts.get(name, 0) + p.numel()
    if not counts:
        return ""
    name = max(sorted(counts), key=counts.get)
    if req.dtype is not None:
        why = "--dtype"
    elif req.library == "hf" and _config_dtype(module) is not None:
        why = "the configuration's dtype"
    else:
        why = "as the model is built; --dtype casts it"
    return f"{name} ({why})"


def _config_dtype(module):
    from .hub import config_dtype

    return config_dtype(getattr(module, "config", None))
