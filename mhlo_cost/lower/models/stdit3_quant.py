"""STDiT3 (the JAX model, :mod:`.stdit3`) under a precision recipe (:mod:`mhlo_cost.machines.precision`), as
``sweep --precision`` lowers it.

**Which linears are quantised**: the seven of every block, spatial and temporal: the self-attention's ``qkv``
and ``proj``, the cross-attention's ``q``, ``kv`` and ``proj``, the MLP's ``fc1`` and ``fc2``. Their weights are
stored at the recipe's width with their scales (:func:`mhlo_cost.lower.models.quant.linear_shapes`) and run as
the recipe's kernels do (:func:`mhlo_cost.lower.models.quant.dense`: the activation's amax and cast, the
low-precision ``dot_general`` with its float32 or int32 accumulator, the scales after; or the weight dequantised
first for a weight-only recipe). They carry all but a few percent of the model's GEMM FLOPs.

**Left in the model's dtype** (bf16), as the quantisation recipes people run leave the first and last layers and
the small ones: the patch embedding (a Conv3d, the first layer), the timestep and fps embedders and ``t_block``
(the adaLN modulation: one linear shared by every block, on the batch's B rows; STDiT3's blocks have no
modulation linear of their own, their ``scale_shift_table`` is a parameter added to ``t_block``'s output), the
caption embedder (``y_embedder``, an input embedder), and the final layer (the last one). The attention's own
products (scores, probabilities x values) stay bf16 too: the recipes name the linears.

Parallel strategies: the sequence-parallel ones (``ulysses``, ``ring``) keep every weight whole on every device,
so their linears take the recipe unchanged (the quantised tree replicated, the blocks' kernels swapped).
``megatron`` splits the weights as it does in bf16, and their scales with them where a scale goes with an output
column or the whole tensor (:data:`MEGATRON_SCALES`: tensorwise, rowwise; the weight-only int8 too): a
column-parallel linear (qkv, cross-attention q and kv, fc1) holds its columns' weights, per-column scales and
bias; a row-parallel one (the projections, fc2) its rows of the weight, the whole per-column scale, and runs its
partial product under the recipe (the activation's scale from the device's slice of the features, as each rank
quantises its own input) before the all_reduce, the bias after it. The block-scaled and int4 recipes under
``megatron``, and ``2d`` (which gathers the weights' shards), are refused by :func:`check` with the reason.
"""
from __future__ import annotations

from dataclasses import replace

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from ...machines.precision import Recipe
from . import quant, stdit3
from .config import STDiT3Config
from .stdit3_kernels import DEFAULT_KERNELS, Kernels

#: The quantised linears of a block: (group, name, in features, out features) from the hidden size c and the MLP's
#: hidden size f.
BLOCK_LINEARS = (("attn", "qkv", "c", "3c"), ("attn", "proj", "c", "c"), ("cross_attn", "q", "c", "c"),
                 ("cross_attn", "kv", "c", "2c"), ("cross_attn", "proj", "c", "c"), ("mlp", "fc1", "c", "f"),
                 ("mlp", "fc2", "f", "c"))
#: Strategies whose linears run whole on every device (the recipe applies as it does unsharded).
WHOLE_WEIGHTS = ("none", "ulysses", "ring")
#: The weight scalings whose scales megatron splits with the weights' columns (or keeps whole).
MEGATRON_SCALES = ("tensor", "row")
#: A block's fused linears (group, name, parts): viewed (in, parts, out / parts) so that a column split keeps heads.
FUSED = (("attn", "qkv", 3), ("cross_attn", "kv", 2))
#: A block's row-parallel linears under megatron (the rest are column-parallel).
ROWS = (("attn", "proj"), ("cross_attn", "proj"), ("mlp", "fc2"))


def _size(text: str, c: int, f: int) -> int:
    return f if text == "f" else c * (int(text[:-1]) if len(text) > 1 else 1)


def linears(cfg: STDiT3Config) -> list[tuple[str, str, int, int]]:
    """(group, name, in, out) of the quantised linears of one block."""
    c, f = cfg.hidden, cfg.mlp_hidden
    return [(g, n, _size(i, c, f), _size(o, c, f)) for g, n, i, o in BLOCK_LINEARS]


def check(cfg: STDiT3Config, recipe: Recipe, strategy: str = "none") -> None:
    """FrontendError where ``recipe`` cannot be lowered on STDiT3 under ``strategy``: a recipe for the KV cache
    (a forward has none), a tensor-parallel strategy, a block size that does not divide a linear."""
    from ..frontends import FrontendError

    if recipe.kv is not None:
        raise FrontendError(f"--precision {recipe.name}: STDiT3's forward keeps no KV cache; the recipes for its "
                            "linears set the weights and activations")
    megatron = strategy == "megatron" and recipe.weight_scaling.scheme in MEGATRON_SCALES and recipe.weight != "int4"
    if strategy not in WHOLE_WEIGHTS and not megatron:
        raise FrontendError(f"--precision {recipe.name} with {strategy}: this strategy would split the linears' "
                            f"{recipe.weight_scaling.scheme} scales with their weights, which this lowering does not "
                            f"do (the recipes run under {', '.join(WHOLE_WEIGHTS)}; megatron takes the tensorwise and "
                            "rowwise ones)")
    for _, _, i, o in linears(cfg):
        quant.linear_shapes(i, o, recipe, cfg.dtype)  # (FrontendError: a block or int4 packing that does not fit)


def param_shapes(cfg: STDiT3Config, recipe: Recipe) -> dict:
    """STDiT3's parameter tree with every block's linears stored as ``recipe`` says (the rest as
    :func:`mhlo_cost.lower.models.stdit3.param_shapes`)."""
    params = stdit3.param_shapes(cfg)
    if not recipe.quantised:
        return params
    for key in ("spatial_blocks", "temporal_blocks"):
        for block in params[key]:
            for group, name, i, o in linears(cfg):
                block[group][name] = quant.linear_shapes(i, o, recipe, cfg.dtype)
    return params


def kernels(recipe: Recipe, base: Kernels = DEFAULT_KERNELS) -> Kernels:
    """``base`` with the blocks' linears (the ones that open a pair and the ones that close it) run under
    ``recipe``."""
    def linear(p, x):
        return quant.dense(p, x, recipe)

    return replace(base, linear=linear, out_linear=linear)


def _megatron_layout(params: dict) -> dict:
    """The fused linears' weight, per-column scale and bias viewed with their parts apart: w (in, k, out / k),
    w_scale and b (k, out / k) (a scalar scale as it is), so that splitting the last axis keeps heads whole."""
    def fused(lin: dict, k: int) -> dict:
        out = dict(lin, w=lin["w"].reshape(lin["w"].shape[0], k, -1), b=lin["b"].reshape(k, -1))
        if lin["w_scale"].ndim:
            out["w_scale"] = lin["w_scale"].reshape(k, -1)
        return out

    def block(p):
        p = dict(p)
        for group, name, k in FUSED:
            p[group] = dict(p[group], **{name: fused(p[group][name], k)})
        return p

    return dict(params, spatial_blocks=[block(p) for p in params["spatial_blocks"]],
                temporal_blocks=[block(p) for p in params["temporal_blocks"]])


def _megatron_specs(cfg: STDiT3Config, recipe: Recipe, axis: str) -> dict:
    """PartitionSpecs of :func:`_megatron_layout` of the quantised tree: columns split over ``axis`` for the
    column-parallel linears (their per-column scales and biases with them), rows for the row-parallel ones (their
    per-column scales and biases whole); everything else replicated."""
    specs = jax.tree_util.tree_map(lambda _: P(), param_shapes(cfg, recipe))
    scaled = recipe.weight_scaling.scheme == "row"
    fused = {(g, n) for g, n, _ in FUSED}

    def block(spec):
        spec = dict(spec)
        for group, name, _, _ in linears(cfg):
            if (group, name) in ROWS:
                lin = {"w": P(axis, None)}
            elif (group, name) in fused:
                lin = {"w": P(None, None, axis), "b": P(None, axis)} | ({"w_scale": P(None, axis)} if scaled else {})
            else:
                lin = {"w": P(None, axis), "b": P(axis)} | ({"w_scale": P(axis)} if scaled else {})
            spec[group] = dict(spec[group], **{name: dict(spec[group][name], **lin)})
        return spec

    return dict(specs, spatial_blocks=[block(s) for s in specs["spatial_blocks"]],
                temporal_blocks=[block(s) for s in specs["temporal_blocks"]])


def _megatron_kernels(recipe: Recipe, axis: str) -> Kernels:
    """Column-parallel linears on the device's columns (the fused ones' parts flattened back), row-parallel ones
    as a partial product under the recipe, the all_reduce, then the bias."""
    def column(p, x):
        if p["w"].ndim == 3:
            p = dict(p, w=p["w"].reshape(p["w"].shape[0], -1), b=p["b"].reshape(-1),
                     w_scale=p["w_scale"].reshape(-1) if p["w_scale"].ndim else p["w_scale"])
        return quant.dense(p, x, recipe)

    def row(p, x):
        y = lax.psum(quant.dense({k: v for k, v in p.items() if k != "b"}, x, recipe), axis)
        return y + p["b"].astype(y.dtype)

    return Kernels(linear=column, out_linear=row)


def make_forward(cfg: STDiT3Config, recipe: Recipe, plan=None):
    """``stdit3(params, x, timestep, y, fps)`` under ``recipe`` (``plan``: a sequence-parallel plan, or None), the
    parameters as :func:`param_shapes` gives them."""
    if plan is None or plan.strategy == "none":
        return stdit3.make_forward(cfg, kernels(recipe))
    from .parallel import abstract_mesh, check_plan, kernels_for

    check_plan(cfg, plan)
    if plan.strategy == "megatron":
        axis = plan.axis_names[0]
        body = stdit3.make_forward(cfg, _megatron_kernels(recipe, axis))
        specs, layout = _megatron_specs(cfg, recipe, axis), _megatron_layout
    else:
        body = stdit3.make_forward(cfg, kernels(recipe, kernels_for(plan)))
        specs = jax.tree_util.tree_map(lambda _: P(), param_shapes(cfg, recipe))  # every weight whole: replicated
        layout = None
    sharded = jax.shard_map(body, mesh=abstract_mesh(plan), in_specs=(specs, P(), P(), P(), P()), out_specs=P(),
                            check_vma=False)

    def stdit3_fwd(params, x, timestep, y, fps):
        return sharded(layout(params) if layout else params, x, timestep, y, fps)

    stdit3_fwd.__name__ = stdit3_fwd.__qualname__ = "stdit3"
    return stdit3_fwd


def lower(cfg: STDiT3Config, recipe: Recipe, plan=None):
    """``jax.jit(...).lower`` of STDiT3's forward under ``recipe`` (and a sequence-parallel ``plan``) from shapes."""
    check(cfg, recipe, "none" if plan is None else plan.strategy)
    fwd = make_forward(cfg, recipe, plan)
    return jax.jit(fwd).lower(param_shapes(cfg, recipe), *stdit3.input_shapes(cfg))
