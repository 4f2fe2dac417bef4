"""STDiT3 under parallel strategies, lowered with ``jax.shard_map`` so that every collective is explicit.

The whole forward runs inside one ``shard_map`` over a mesh of devices; what a strategy changes is the
:class:`~mhlo_cost.lower.models.stdit3.Kernels` the blocks call, plus how parameters and inputs are split
(``in_specs``). The collectives are written by hand (``psum``, ``all_gather``, ``psum_scatter``,
``all_to_all``, ``ppermute``) inside the blocks' named scopes, so the StableHLO carries
``stablehlo.all_reduce`` / ``all_gather`` / ``reduce_scatter`` / ``all_to_all`` / ``collective_permute``
located at ``spatial_blocks.3/attn/...``, and the analyzer attributes them to the block. Lowering uses a
``jax.sharding.AbstractMesh``: no devices are needed, whatever the device count. Every strategy computes
the same function as the unsharded model (``tests/test_parallel.py`` runs them on host devices).

Notation: B batch (2, the classifier-free-guidance pair), T frames, S tokens per frame, N = T*S tokens per
sample, C hidden, H heads, F = 4C the MLP hidden size, n devices, A = B*N*C*bytes one activation.

megatron (mesh ``("tp",)``, n)
    Tensor parallel over heads and the MLP hidden size; activations replicated. Column-parallel: qkv,
    cross-attention q and kv, fc1 (weights split by output columns, heads kept whole: the fused qkv / kv
    weights are viewed as (C, 3, C) / (C, 2, C) and split on the last axis). Row-parallel: attention
    out-projection, cross-attention out-projection, fc2, each followed by one ``all_reduce`` (psum) of its
    (B, N, C) output, the bias added after it. 3 all_reduce per block; per device per block
    3 * 2(n-1)/n * A. Embedders and final layer run replicated: no collective.

2d (mesh ``("x", "y")``, N_x * N_y, default 2 x n/2)
    Activations split over X by batch (the guidance pair: one sample per X shard) and over Y by tokens
    (a contiguous 1/N_y of each sample's T*S tokens, "sequence parallel" between the pairs). Weights
    split over both axes: Megatron-style over Y (column-parallel first linear, row-parallel second) and
    additionally over X on their hidden (C) axis, i.e. qkv / q / kv / fc1 are (C/N_x, F/N_y) shards and
    proj / fc2 (F/N_y, C/N_x). Each linear pair then runs as:

    1. ``all_gather`` over X of each weight's shards (C/N_x -> C): the weights of the pair, (F/N_y, C);
    2. ``all_gather`` over Y of the activation tokens: (B/N_x, N/N_y, C) -> (B/N_x, N, C);
    3. the two matmuls (and the attention core between them, over H/N_y local heads: with all tokens of
       the sample present, the spatial and the temporal layouts are both local);
    4. ``reduce_scatter`` over Y of the partial sums back to (B/N_x, N/N_y, C), the bias added after.

    Three pairs per block (self-attention qkv/proj, cross-attention q,kv/proj, MLP fc1/fc2; the caption
    keys / values use the caption tokens of the local sample, replicated over Y: no activation gather).
    Per device per block: 3 all_gather + 3 reduce_scatter of (N_y-1)/N_y * A/N_x, and weight all_gathers
    of (N_x-1)/N_x * W/N_y, W the bytes of the block's seven weight matrices (16 C^2 elements).
    Embedders run replicated over Y on the local sample; the patch embedding is computed whole and each
    device keeps its token slice (no collective); the final layer's output (B/N_x, N/N_y, p) is
    all_gathered over Y before unpatchify.

ulysses (mesh ``("sp",)``, n)
    DeepSpeed-Ulysses sequence parallelism in OpenSora's layout: the video tokens are split along S (each
    frame's S tokens, padded with zero tokens to a multiple of n where S % n != 0: S_p = ceil(S/n)*n), so a
    device holds (B, T, S_p/n, C). Spatial self-attention: q, k and v are computed locally and each goes
    through one ``all_to_all`` (sequence-sharded -> head-sharded: (B, T, S_p/n, H, D) -> (B, T, S_p, H/n,
    D)); attention over the full frame with the padded keys masked; one ``all_to_all`` of the output back
    (head-sharded -> sequence-sharded): 4 all_to_all per spatial attention, each of (n-1)/n * A_p/n
    (A_p = B*T*S_p*C*bytes, S of the convention = the operand each device holds). Temporal
    self-attention runs over T for each spatial position, all of which are local under this layout: no
    collective. Cross-attention: queries sequence-sharded, caption keys / values computed replicated: no
    collective. MLP: token-local. Final layer: ``all_gather`` of the (B, T, S_p/n, p) output; the
    embedders: none (each device keeps its slice of the patch embedding).

ring (mesh ``("sp",)``, n)
    Ring-Attention in the same S-sharded layout: the spatial attention's keys and values go round the
    ring with ``collective_permute`` (device i -> i+1), n-1 steps each for K and V, and each device combines
    the n blocks with an online softmax (running max, log-sum-exp rescaling), exactly the full softmax.
    2(n-1) collective_permute per spatial attention of A_p/n each. Temporal attention, cross-attention,
    MLP: local as for ulysses; final layer: the same all_gather.

Requirements (checked by :func:`make_plan` with a clear message): megatron H % n == 0 and F % n == 0;
2d B % N_x == 0, C % N_x == 0, H % N_y == 0, F % N_y == 0, (T*S) % N_y == 0; ulysses H % n == 0.
"""
from __future__ import annotations

from .sharded_config import ShardedConfig  # noqa: F401 (jax-free, re-exported: a configuration with its plan)

import jax
from jax.sharding import PartitionSpec as P

from . import stdit3
from .config import STDiT3Config
from .parallel_plan import STRATEGIES, Plan, check_plan, make_plan, parse_mesh
from .sequence_parallel import ring_attention, sequence_kernels
from .stdit3_kernels import DEFAULT_KERNELS, Kernels
from .stdit3_params import is_spec_leaf, param_spec
from .tensor_parallel import kernels_2d, megatron_kernels

__all__ = [
    # re-exported: the plans and the strategies' kernels live in their own modules
    "STRATEGIES", "Plan", "check_plan", "make_plan", "parse_mesh",
    "kernels_2d", "megatron_kernels", "ring_attention", "sequence_kernels",
    # defined here
    "parallel_layout", "param_pspecs", "kernels_for", "abstract_mesh", "device_mesh", "make_parallel_forward",
    "lower", "ShardedConfig",
]


# --------------------------------------------------------------------------------------------------------
# Parameter layout and partition specs
# --------------------------------------------------------------------------------------------------------


def _split_fused(lin: dict, k: int) -> dict:
    w, b = lin["w"], lin["b"]
    return {"w": w.reshape(w.shape[0], k, w.shape[1] // k), "b": b.reshape(k, b.shape[0] // k)}


def parallel_layout(params: dict) -> dict:
    """The parameter tree with the fused qkv (C, 3C) and kv (C, 2C) weights viewed as (C, 3, C), (C, 2, C).

    Splitting the last axis of that view splits by heads (q, k and v of the same heads stay together).
    Works on arrays and on ShapeDtypeStruct-traced values alike (it runs inside ``jit``).
    """
    def block(p):
        p = dict(p)
        p["attn"] = dict(p["attn"], qkv=_split_fused(p["attn"]["qkv"], 3))
        p["cross_attn"] = dict(p["cross_attn"], kv=_split_fused(p["cross_attn"]["kv"], 2))
        return p

    out = dict(params)
    out["spatial_blocks"] = [block(p) for p in params["spatial_blocks"]]
    out["temporal_blocks"] = [block(p) for p in params["temporal_blocks"]]
    return out


def param_pspecs(cfg: STDiT3Config, plan: Plan) -> dict:
    """PartitionSpecs for :func:`parallel_layout` of the parameter tree."""
    # parallel_layout changes leaf shapes only, not the tree: start from the spec tree, all replicated
    specs = jax.tree_util.tree_map(lambda _: P(), param_spec(cfg), is_leaf=is_spec_leaf)
    if plan.strategy == "megatron":
        c_in, c_out = None, "tp"
    elif plan.strategy == "2d":
        c_in, c_out = "x", "y"
    else:
        return specs

    def col(fused: bool):
        if fused:
            return {"w": P(c_in, None, c_out), "b": P(None, c_out)}
        return {"w": P(c_in, c_out), "b": P(c_out)}

    row = {"w": P(c_out, c_in), "b": P()}

    def block(spec):
        spec = dict(spec)
        spec["attn"] = dict(spec["attn"], qkv=col(True), proj=row)
        spec["cross_attn"] = dict(spec["cross_attn"], q=col(False), kv=col(True), proj=row)
        spec["mlp"] = {"fc1": col(False), "fc2": row}
        return spec

    specs["spatial_blocks"] = [block(s) for s in specs["spatial_blocks"]]
    specs["temporal_blocks"] = [block(s) for s in specs["temporal_blocks"]]
    return specs


def kernels_for(plan: Plan) -> Kernels:
    if plan.strategy == "none":
        return DEFAULT_KERNELS
    if plan.strategy == "megatron":
        return megatron_kernels(plan)
    if plan.strategy == "2d":
        return kernels_2d(plan)
    return sequence_kernels(plan)


# --------------------------------------------------------------------------------------------------------
# Forward and lowering
# --------------------------------------------------------------------------------------------------------


def abstract_mesh(plan: Plan):
    return jax.sharding.AbstractMesh(plan.mesh_shape, plan.axis_names)


def device_mesh(plan: Plan, devices=None):
    """A concrete mesh of the first ``plan.devices`` devices (host devices: set
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax starts)."""
    import numpy as np

    devs = list(devices if devices is not None else jax.devices())
    if len(devs) < plan.devices:
        raise ValueError(f"{plan.describe()} needs {plan.devices} devices, jax has {len(devs)}")
    return jax.sharding.Mesh(np.array(devs[: plan.devices]).reshape(plan.mesh_shape), plan.axis_names)


def make_parallel_forward(cfg: STDiT3Config, plan: Plan, mesh=None):
    """``stdit3(params, x, timestep, y, fps)`` (the unsharded parameter tree and inputs) under ``plan``.

    ``mesh``: a concrete ``jax.sharding.Mesh`` to run on, or None for the abstract mesh (lowering only).
    """
    if plan.strategy == "none":
        return stdit3.make_forward(cfg)
    check_plan(cfg, plan)
    mesh = mesh if mesh is not None else abstract_mesh(plan)
    body = stdit3.make_forward(cfg, kernels_for(plan))
    batch = P(plan.axis_names[0]) if plan.strategy == "2d" else P()
    in_specs = (param_pspecs(cfg, plan), batch, batch, batch, batch)
    sharded = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=batch, check_vma=False)

    def stdit3_fwd(params, x, timestep, y, fps):
        return sharded(parallel_layout(params), x, timestep, y, fps)

    stdit3_fwd.__name__ = stdit3_fwd.__qualname__ = "stdit3"
    return stdit3_fwd


def lower(cfg: STDiT3Config, plan: Plan, *, caption_4d: bool = True):
    """``jax.jit(...).lower`` of the model under ``plan`` from shapes alone, on an abstract mesh."""
    fwd = make_parallel_forward(cfg, plan)
    return jax.jit(fwd).lower(stdit3.param_shapes(cfg), *stdit3.input_shapes(cfg, caption_4d=caption_4d))
