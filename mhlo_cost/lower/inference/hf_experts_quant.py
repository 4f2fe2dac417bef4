"""Precision recipes (:mod:`mhlo_cost.machines.precision`) reaching the routed experts of a transformers mixture of
experts lowered through torchax.

transformers keeps a mixture's experts as stacked 3-D parameters (the layers made by ``use_experts_implementation``:
Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, OLMoE, gpt-oss, ...; and Llama 4's ``Llama4TextExperts``), not as
``nn.Linear``, so :func:`.hf_quant.quantise_linears` does not reach them. :func:`quantise_experts` stores each
projection (``gate_up_proj`` or ``up_proj``, ``down_proj``) of every expert at the recipe's widths, as the serving
kernels hold them (vLLM's fused MoE, SGLang's DeepSeek-V3 path: per-expert weights with their scales):

- ``<proj>``: (E, in, out) in the weight dtype (int4 packed two per ``uint8`` byte along ``in``);
- ``<proj>_scale`` (and ``<proj>_zero``, ``<proj>_scale2``): each expert's scales (zeros), shaped as one linear's
  (:func:`~mhlo_cost.lower.models.quant.linear_shapes`) with the experts in front: ``fp8-blockwise-128`` one
  float32 per 128 x 128 block (DeepSeek-V3's ``weight_scale_inv``), ``fp8-rowwise`` / ``w8a8-int8`` / ``w8a16``
  one per output channel, ``fp8-tensorwise`` one per expert, ``w4a16-awq`` a float16 scale and a packed int4 zero
  per group of 128 inputs;
- a projection's bias (gpt-oss) stays in the model's dtype.

The experts run the static dispatch of :mod:`..frontends.moe` (the routed token copies only, never every expert on
every token); each projection there is one call of :func:`experts_dense`: :func:`~mhlo_cost.lower.models.quant.dense`
mapped over the experts (``jax.vmap``), so each expert's routed rows go through the recipe's kernel: the
activation quantised (its amax per expert's rows for tensorwise, per row for rowwise, per row and group of 128 for
blockwise), one low-precision ``dot_general`` batched over the experts with its float32 (int32) accumulator, the
scales after; or, weight-only, the expert weights unpacked and dequantised, then a batched matmul in the model's
dtype. The router stays in the model's dtype (it is no linear here, or one :func:`.hf_quant.quantise_linears`
skips), the shared experts are linears and follow the recipe as the others do.

An expert layer the recipe cannot reach (DBRX's flattened 2-D experts, JetMoE's, any 3-D expert weights outside the
layers above) is refused in one line naming its class (:func:`refuse_unreached`): never left in bf16 under an fp8
name.
"""
from __future__ import annotations

import functools

import jax
from jax import lax

from ...machines.precision import Recipe
from ..frontends import FrontendError, moe, moe_llama4
from . import hf_quant

PROJECTIONS = ("gate_up_proj", "up_proj", "down_proj")
REACHED = ("transformers' use_experts_implementation layers (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, OLMoE, "
           "gpt-oss, ...) and Llama 4's")


def _unreached(model) -> list[tuple[str, str]]:
    """(path, class) of expert layers the recipe cannot reach: ones :mod:`..frontends.moe` does not route, and the
    owners of 3-D parameters led by the expert count outside the routed layers."""
    escaped = moe.unrouted(model)
    routed = tuple(p + "." for p, _ in moe.experts_layers(model))
    counts = hf_quant.expert_counts(model.config)
    mods = dict(model.named_modules())
    for name, p in model.named_parameters():
        owner = name.rpartition(".")[0]
        if p.ndim == 3 and p.shape[0] in counts and not (name + ".").startswith(routed) \
                and not any(owner == q or owner.startswith(q + ".") for q, _ in escaped):
            escaped.append((owner, type(mods[owner]).__name__))
    return escaped


def refuse_unreached(model, recipe: Recipe) -> None:
    """FrontendError (one line) where ``recipe`` quantises the weights and the model has an expert layer it cannot
    reach (:func:`_unreached`)."""
    if not recipe.quantised:
        return
    escaped = _unreached(model)
    if escaped:
        path, cls = escaped[0]
        more = f" and {len(escaped) - 1} more" if len(escaped) > 1 else ""
        raise FrontendError(f"--precision {recipe.name}: {type(model).__name__}'s expert layer {cls} ({path}{more}) "
                            f"holds its experts in a layout the recipe cannot reach; mhlo-cost quantises the "
                            f"experts of {REACHED}, and would otherwise leave these in the model's dtype")


def _transposed(mod) -> bool:
    """Whether ``mod``'s expert weights are (E, in, out) (gpt-oss, Llama 4) rather than (E, out, in)."""
    return moe_llama4.is_experts(mod) or bool(getattr(mod, "is_transposed", False))


def _stored(mod, name: str, recipe: Recipe) -> dict:
    """The parameters stored for projection ``name`` of ``mod``: {key of quant.dense: (attribute, shape, dtype)}."""
    w = mod._parameters[name]
    e, a, b = w.shape
    i, o = (a, b) if _transposed(mod) else (b, a)
    dtype = str(w.dtype).removeprefix("torch.")
    try:
        shapes = hf_quant.stored_shapes(i, o, recipe, dtype, bias=False)
    except FrontendError as err:
        raise FrontendError(str(err).replace("a linear's", f"{type(mod).__name__}.{name}'s", 1)
                            .replace("a linear of", f"{type(mod).__name__}.{name} of", 1)) from None
    return {key: (name if key == "w" else f"{name}_{key.removeprefix('w_')}", (e, *s.shape), s.dtype)
            for key, s in shapes.items()}


def quantise_experts(model, recipe: Recipe) -> int:
    """Store every routed expert layer's projections at ``recipe``'s widths and run them through
    :func:`experts_dense`; returns how many expert layers. :func:`refuse_unreached` first."""
    import torch

    if not recipe.quantised:
        return 0
    refuse_unreached(model, recipe)
    layers = moe.experts_layers(model)
    for _, mod in layers:
        names = {}
        for name in PROJECTIONS:
            if name not in mod._parameters:
                continue
            stored = _stored(mod, name, recipe)
            del mod._parameters[name]
            for attr, shape, dtype in stored.values():
                t = torch.empty(shape, dtype=hf_quant._torch_dtype(dtype), device="meta")
                mod.register_parameter(attr, torch.nn.Parameter(t, requires_grad=False))
            names[name] = {key: attr for key, (attr, _, _) in stored.items()}
        mod.quantised_project = functools.partial(_project, mod, recipe, names)
    return len(layers)


def _project(mod, recipe: Recipe, names: dict, x, name: str, start: int = 0):
    """x [E', C, in] (torchax) through projection ``name`` of experts ``start .. start + E'``: the hook
    :mod:`..frontends.moe` calls for each projection of a quantised expert layer."""
    p = {key: getattr(mod, attr) for key, attr in names[name].items()}
    bias = getattr(mod, name + "_bias", None) if getattr(mod, "has_bias", False) else None
    if bias is not None:
        p["b"] = bias
    return hf_quant._call_jax(functools.partial(experts_dense, recipe=recipe, start=start), p, x)


def experts_dense(p, x, recipe: Recipe, start: int = 0):
    """x [E', C, in] @ each expert's stored weight under ``recipe`` -> [E', C, out]: the parameters of experts
    ``start .. start + E'`` (each of ``p``'s arrays led by the experts) through
    :func:`~mhlo_cost.lower.models.quant.dense` mapped over the experts."""
    n = x.shape[0]
    p = {k: v if (start, n) == (0, v.shape[0]) else lax.slice_in_dim(v, start, start + n, axis=0)
         for k, v in p.items()}
    return jax.vmap(functools.partial(hf_quant.dense, recipe=recipe))(p, x)
