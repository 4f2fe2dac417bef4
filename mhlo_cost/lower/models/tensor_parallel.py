"""Tensor-parallel kernels of STDiT3: megatron (mesh ``("tp",)``) and 2d (mesh ``("x", "y")``).

Each function returns the :class:`~mhlo_cost.lower.models.stdit3_kernels.Kernels` a block calls under the
strategy; the collectives are written by hand inside the block's scopes. What each strategy splits and
which collectives it runs is described in :mod:`mhlo_cost.lower.models.parallel`.
"""
from __future__ import annotations

from functools import partial

from jax import lax

from .parallel_plan import Plan
from .stdit3_kernels import Kernels, cross_attention, mlp, video_attention


def _matmul(x, w):
    return lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))


# megatron ------------------------------------------------------------------------------------------------


def _row_parallel_allreduce(p, x, *, axis):
    """Row-parallel linear: local partial product, all_reduce over ``axis``, then the bias once."""
    y = lax.psum(_matmul(x, p["w"]), axis)
    return y + p["b"].astype(y.dtype)


def megatron_kernels(plan: Plan) -> Kernels:
    return Kernels(out_linear=partial(_row_parallel_allreduce, axis=plan.axis_names[0]))


# 2d ------------------------------------------------------------------------------------------------------


def _col_linear_2d(p, x, *, ax):
    """Column-parallel linear with its weight's C axis split over X: all_gather the weight, then matmul."""
    w = lax.all_gather(p["w"], ax, axis=0, tiled=True)
    y = _matmul(x, w)
    return y + p["b"].astype(y.dtype)


def _row_partial_2d(p, x, *, ax):
    """Row-parallel linear without bias (partial sums over Y), its weight's C axis gathered over X."""
    w = lax.all_gather(p["w"], ax, axis=p["w"].ndim - 1, tiled=True)
    return _matmul(x, w)


def _pair_2d(fn, bias, h, *, ay):
    """all_gather the tokens over Y, run the pair (partial sums), reduce_scatter over Y, add the bias."""
    full = lax.all_gather(h, ay, axis=1, tiled=True)
    out = fn(full)
    out = lax.psum_scatter(out, ay, scatter_dimension=1, tiled=True)
    return out + bias.astype(out.dtype)


def _video_attention_2d(p, h, cfg, *, temporal, T, S, positions=None, kernels=None, ay):
    fn = partial(video_attention, p, cfg=cfg, temporal=temporal, T=T, S=S, positions=positions,
                 kernels=kernels)
    return _pair_2d(fn, p["proj"]["b"], h, ay=ay)


def _cross_attention_2d(p, x, cond, cfg, *, kernels=None, ay):
    fn = lambda full: cross_attention(p, full, cond, cfg, kernels=kernels)  # noqa: E731
    return _pair_2d(fn, p["proj"]["b"], x, ay=ay)


def _mlp_2d(p, x, cfg=None, *, kernels=None, ay):
    fn = lambda full: mlp(p, full, cfg, kernels=kernels)  # noqa: E731
    return _pair_2d(fn, p["fc2"]["b"], x, ay=ay)


def _scatter_flat(h, *, T, S, axis, n):
    """Keep this device's contiguous 1/n of each sample's T*S tokens (no collective)."""
    n_loc = h.shape[1] // n
    return lax.dynamic_slice_in_dim(h, lax.axis_index(axis) * n_loc, n_loc, axis=1)


def _gather_flat(h, *, T, S, axis):
    return lax.all_gather(h, axis, axis=1, tiled=True)


def kernels_2d(plan: Plan) -> Kernels:
    ax, ay = plan.axis_names
    return Kernels(
        linear=partial(_col_linear_2d, ax=ax),
        out_linear=partial(_row_partial_2d, ax=ax),
        video_attention=partial(_video_attention_2d, ay=ay),
        cross_attention=partial(_cross_attention_2d, ay=ay),
        mlp=partial(_mlp_2d, ay=ay),
        scatter_tokens=partial(_scatter_flat, axis=ay, n=plan.mesh_shape[1]),
        gather_tokens=partial(_gather_flat, axis=ay),
    )
