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
The tensor-parallel ones (``megatron``, ``2d``) split the weights by columns and rows, and their scales would have
to be split with them (per output channel, per block of K): :func:`check` refuses them with that reason.
"""
from __future__ import annotations

from dataclasses import replace

import jax
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
    if strategy not in WHOLE_WEIGHTS:
        raise FrontendError(f"--precision {recipe.name} with {strategy}: a tensor-parallel strategy splits the "
                            "linears' weights, and this lowering does not split their scales with them (the recipes "
                            f"run under {', '.join(WHOLE_WEIGHTS)})")
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


def make_forward(cfg: STDiT3Config, recipe: Recipe, plan=None):
    """``stdit3(params, x, timestep, y, fps)`` under ``recipe`` (``plan``: a sequence-parallel plan, or None), the
    parameters as :func:`param_shapes` gives them."""
    if plan is None or plan.strategy == "none":
        return stdit3.make_forward(cfg, kernels(recipe))
    from .parallel import abstract_mesh, check_plan, kernels_for

    check_plan(cfg, plan)
    body = stdit3.make_forward(cfg, kernels(recipe, kernels_for(plan)))
    specs = jax.tree_util.tree_map(lambda _: P(), param_shapes(cfg, recipe))  # every weight whole: replicated
    sharded = jax.shard_map(body, mesh=abstract_mesh(plan), in_specs=(specs, P(), P(), P(), P()), out_specs=P(),
                            check_vma=False)

    def stdit3_fwd(params, x, timestep, y, fps):
        return sharded(params, x, timestep, y, fps)

    stdit3_fwd.__name__ = stdit3_fwd.__qualname__ = "stdit3"
    return stdit3_fwd


def lower(cfg: STDiT3Config, recipe: Recipe, plan=None):
    """``jax.jit(...).lower`` of STDiT3's forward under ``recipe`` (and a sequence-parallel ``plan``) from shapes."""
    check(cfg, recipe, "none" if plan is None else plan.strategy)
    fwd = make_forward(cfg, recipe, plan)
    return jax.jit(fwd).lower(param_shapes(cfg, recipe), *stdit3.input_shapes(cfg))
