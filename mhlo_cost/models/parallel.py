"""STDiT3 under parallel strategies, lowered with ``jax.shard_map`` so that every collective is explicit.

The whole forward runs inside one ``shard_map`` over a mesh of devices; what a strategy changes is the
:class:`~mhlo_cost.models.stdit3.Kernels` the blocks call, plus how parameters and inputs are split
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

import math
from dataclasses import dataclass, replace
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from . import stdit3
from .config import STDiT3Config

STRATEGIES = ("none", "megatron", "2d", "ulysses", "ring")

_F32 = jnp.float32
_NEG = -1e30


# --------------------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A strategy on a mesh: ``axis_names`` and ``mesh_shape`` have one entry per mesh axis."""

    strategy: str
    mesh_shape: tuple[int, ...] = ()
    axis_names: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        return math.prod(self.mesh_shape) if self.mesh_shape else 1

    def describe(self) -> str:
        if self.strategy == "none":
            return "unsharded"
        mesh = "x".join(str(s) for s in self.mesh_shape)
        return f"{self.strategy} over {self.devices} devices (mesh {mesh}: {', '.join(self.axis_names)})"


def parse_mesh(text: str) -> tuple[int, int]:
    """``"2x8"`` -> (2, 8)."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"mesh must be NXxNY with positive integers (e.g. 2x8), got {text!r}")
    return int(parts[0]), int(parts[1])


def make_plan(strategy: str, devices: int = 1, mesh: tuple[int, int] | str | None = None,
              cfg: STDiT3Config | None = None) -> Plan:
    """The plan of ``strategy`` on ``devices`` devices (2d: ``mesh`` (N_x, N_y), default (2, devices/2)).

    With ``cfg`` the divisibility a strategy needs is checked; ValueError says what does not divide.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown parallel strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be a positive integer, got {devices!r}")
    if isinstance(mesh, str):
        mesh = parse_mesh(mesh)
    if mesh is not None and strategy != "2d":
        raise ValueError("--mesh applies to the 2d strategy only")
    if strategy == "none":
        if devices != 1:
            raise ValueError("the unsharded model runs on one device; choose a parallel strategy for more")
        plan = Plan("none")
    elif strategy == "2d":
        if mesh is None:
            if devices % 2:
                raise ValueError(f"2d needs an even device count for the default 2 x n/2 mesh, got {devices}")
            mesh = (2, devices // 2)
        if mesh[0] * mesh[1] != devices:
            raise ValueError(f"mesh {mesh[0]}x{mesh[1]} has {mesh[0] * mesh[1]} devices, not {devices}")
        plan = Plan("2d", tuple(mesh), ("x", "y"))
    else:
        plan = Plan(strategy, (devices,), ("tp",) if strategy == "megatron" else ("sp",))
    if cfg is not None:
        check_plan(cfg, plan)
    return plan


def check_plan(cfg: STDiT3Config, plan: Plan) -> None:
    def need(ok: bool, what: str):
        if not ok:
            raise ValueError(f"{plan.strategy} over mesh {'x'.join(map(str, plan.mesh_shape))}: {what}")

    if plan.strategy == "megatron":
        n = plan.mesh_shape[0]
        need(cfg.heads % n == 0, f"heads ({cfg.heads}) must be a multiple of {n}")
        need(cfg.mlp_hidden % n == 0, f"the MLP hidden size ({cfg.mlp_hidden}) must be a multiple of {n}")
    elif plan.strategy == "2d":
        nx, ny = plan.mesh_shape
        need(cfg.batch % nx == 0, f"batch ({cfg.batch}) must be a multiple of N_x = {nx}")
        need(cfg.hidden % nx == 0, f"hidden ({cfg.hidden}) must be a multiple of N_x = {nx}")
        need(cfg.heads % ny == 0, f"heads ({cfg.heads}) must be a multiple of N_y = {ny}")
        need(cfg.mlp_hidden % ny == 0, f"the MLP hidden size ({cfg.mlp_hidden}) must be a multiple of N_y = {ny}")
        n_tok = cfg.tokens_t * cfg.tokens_s
        need(n_tok % ny == 0, f"the tokens per sample T*S ({n_tok}) must be a multiple of N_y = {ny}")
    elif plan.strategy == "ulysses":
        n = plan.mesh_shape[0]
        need(cfg.heads % n == 0, f"heads ({cfg.heads}) must be a multiple of {n}")


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
    specs = jax.tree_util.tree_map(lambda _: P(), stdit3.param_spec(cfg), is_leaf=stdit3._is_spec_leaf)
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


# --------------------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------------------


def _matmul(x, w):
    return lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))


# megatron ------------------------------------------------------------------------------------------------


def _row_parallel_allreduce(p, x, *, axis):
    """Row-parallel linear: local partial product, all_reduce over ``axis``, then the bias once."""
    y = lax.psum(_matmul(x, p["w"]), axis)
    return y + p["b"].astype(y.dtype)


def megatron_kernels(plan: Plan) -> stdit3.Kernels:
    return stdit3.Kernels(out_linear=partial(_row_parallel_allreduce, axis=plan.axis_names[0]))


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
    fn = partial(stdit3.video_attention, p, cfg=cfg, temporal=temporal, T=T, S=S, positions=positions,
                 kernels=kernels)
    return _pair_2d(fn, p["proj"]["b"], h, ay=ay)


def _cross_attention_2d(p, x, cond, cfg, *, kernels=None, ay):
    fn = lambda full: stdit3.cross_attention(p, full, cond, cfg, kernels=kernels)  # noqa: E731
    return _pair_2d(fn, p["proj"]["b"], x, ay=ay)


def _mlp_2d(p, x, cfg=None, *, kernels=None, ay):
    fn = lambda full: stdit3.mlp(p, full, cfg, kernels=kernels)  # noqa: E731
    return _pair_2d(fn, p["fc2"]["b"], x, ay=ay)


def _scatter_flat(h, *, T, S, axis, n):
    """Keep this device's contiguous 1/n of each sample's T*S tokens (no collective)."""
    n_loc = h.shape[1] // n
    return lax.dynamic_slice_in_dim(h, lax.axis_index(axis) * n_loc, n_loc, axis=1)


def _gather_flat(h, *, T, S, axis):
    return lax.all_gather(h, axis, axis=1, tiled=True)


def kernels_2d(plan: Plan) -> stdit3.Kernels:
    ax, ay = plan.axis_names
    return stdit3.Kernels(
        linear=partial(_col_linear_2d, ax=ax),
        out_linear=partial(_row_partial_2d, ax=ax),
        video_attention=partial(_video_attention_2d, ay=ay),
        cross_attention=partial(_cross_attention_2d, ay=ay),
        mlp=partial(_mlp_2d, ay=ay),
        scatter_tokens=partial(_scatter_flat, axis=ay, n=plan.mesh_shape[1]),
        gather_tokens=partial(_gather_flat, axis=ay),
    )


# sequence parallel: S-sharded layout ---------------------------------------------------------------------


def _scatter_s(h, *, T, S, axis, n):
    """(B, T*S, C) -> this device's (B, T*S_p/n, C): frame tokens padded to S_p = ceil(S/n)*n, split on S."""
    b, _, c = h.shape
    s_loc = -(-S // n)
    pad = s_loc * n - S
    h = h.reshape(b, T, S, c)
    if pad:
        h = lax.pad(h, jnp.zeros((), h.dtype), [(0, 0, 0), (0, 0, 0), (0, pad, 0), (0, 0, 0)])
    h = lax.dynamic_slice_in_dim(h, lax.axis_index(axis) * s_loc, s_loc, axis=2)
    return h.reshape(b, T * s_loc, c)


def _gather_s(h, *, T, S, axis):
    """Inverse of :func:`_scatter_s`: all_gather along S, drop the padding."""
    b, n_loc, c = h.shape
    h = lax.all_gather(h.reshape(b, T, n_loc // T, c), axis, axis=2, tiled=True)
    return h[:, :, :S].reshape(b, T * S, c)


def _local_temporal(p, h, cfg, *, T, positions, kernels):
    """Temporal attention over T for each local spatial position: no collective in the S-sharded layout."""
    return stdit3.video_attention(p, h, cfg, temporal=True, T=T, S=h.shape[1] // T, positions=positions,
                                  kernels=kernels)


def _qkv_local(p, h, cfg, kernels, T):
    """q, k, v (B, T, S_loc, H, D) of the local tokens, q/k RMS-normalised as in the model."""
    b, n_loc, _ = h.shape
    qkv = kernels.linear(p["qkv"], h).reshape(b, T, n_loc // T, 3, -1, cfg.head_dim)
    q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    if "q_norm" in p:
        q = stdit3.rms_norm(q, p["q_norm"]["w"])
        k = stdit3.rms_norm(k, p["k_norm"]["w"])
    return q, k, v


def _video_attention_ulysses(p, h, cfg, *, temporal, T, S, positions=None, kernels=None, axis):
    if temporal:
        return _local_temporal(p, h, cfg, T=T, positions=positions, kernels=kernels)
    b, n_loc, c = h.shape
    q, k, v = _qkv_local(p, h, cfg, kernels, T)
    # sequence-sharded -> head-sharded: split the heads (axis 3), concatenate the frame tokens (axis 2)
    q, k, v = (lax.all_to_all(z, axis, 3, 2, tiled=True) for z in (q, k, v))
    _, _, s_pad, hl, d = q.shape
    mask = None if s_pad == S else (lax.iota(jnp.int32, s_pad) < S)[None, :]
    o = kernels.attention_core(q.reshape(b * T, s_pad, hl, d), k.reshape(b * T, s_pad, hl, d),
                               v.reshape(b * T, s_pad, hl, d), mask)
    # head-sharded -> sequence-sharded
    o = lax.all_to_all(o.reshape(b, T, s_pad, hl, d), axis, 2, 3, tiled=True)
    return kernels.out_linear(p["proj"], o.reshape(b, n_loc, c))


def ring_attention(q, k, v, *, axis: str, n: int, kv_len: int | None = None):
    """Exact attention of local q (Bx, Lq, H, D) over the keys of all n devices, k / v (Bx, Lk, H, D) each.

    K and V travel the ring (device i sends to i+1) in n-1 ``collective_permute`` steps each; the blocks
    are combined with an online softmax. Keys at global index >= ``kv_len`` (padding) are masked.
    """
    bx, lq, h, d = q.shape
    lk = k.shape[1]
    q = q * (d ** -0.5)
    me = lax.axis_index(axis)
    perm = [(j, (j + 1) % n) for j in range(n)]
    m = jnp.full((bx, h, lq, 1), _NEG, _F32)
    l_sum = jnp.zeros((bx, h, lq, 1), _F32)
    acc = jnp.zeros((bx, h, lq, d), _F32)
    for step in range(n):
        s = lax.dot_general(q, k, (((3,), (3,)), ((0, 2), (0, 2)))).astype(_F32)  # (Bx, H, Lq, Lk)
        if kv_len is not None and kv_len < n * lk:
            src = lax.rem(me - step + n, n)  # the device whose keys this step holds
            valid = src * lk + lax.iota(jnp.int32, lk) < kv_len
            s = lax.select(jnp.broadcast_to(valid, s.shape), s, jnp.full(s.shape, _NEG, _F32))
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        corr = jnp.exp(m - m_new)
        e = jnp.exp(s - m_new)
        l_sum = l_sum * corr + jnp.sum(e, axis=-1, keepdims=True)
        pv = lax.dot_general(e.astype(v.dtype), v, (((3,), (1,)), ((0, 1), (0, 2))))  # (Bx, H, Lq, D)
        acc = acc * corr + pv.astype(_F32)
        m = m_new
        if step < n - 1:
            k = lax.ppermute(k, axis, perm)
            v = lax.ppermute(v, axis, perm)
    o = (acc / l_sum).astype(v.dtype)
    return jnp.transpose(o, (0, 2, 1, 3))


def _video_attention_ring(p, h, cfg, *, temporal, T, S, positions=None, kernels=None, axis, n):
    if temporal:
        return _local_temporal(p, h, cfg, T=T, positions=positions, kernels=kernels)
    b, n_loc, c = h.shape
    q, k, v = _qkv_local(p, h, cfg, kernels, T)
    s_loc, hl, d = q.shape[2:]
    o = ring_attention(*(z.reshape(b * T, s_loc, hl, d) for z in (q, k, v)), axis=axis, n=n, kv_len=S)
    return kernels.out_linear(p["proj"], o.reshape(b, n_loc, c))


def sequence_kernels(plan: Plan) -> stdit3.Kernels:
    (axis,), (n,) = plan.axis_names, plan.mesh_shape
    if plan.strategy == "ulysses":
        attn = partial(_video_attention_ulysses, axis=axis)
    else:
        attn = partial(_video_attention_ring, axis=axis, n=n)
    return stdit3.Kernels(video_attention=attn, scatter_tokens=partial(_scatter_s, axis=axis, n=n),
                          gather_tokens=partial(_gather_s, axis=axis))


def kernels_for(plan: Plan) -> stdit3.Kernels:
    if plan.strategy == "none":
        return stdit3.DEFAULT_KERNELS
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


@dataclass(frozen=True)
class ShardedConfig:
    """A configuration with a parallel plan: what the frontends pass around for ``--parallel``.

    Attribute reads fall through to ``cfg`` so that code written for a plain configuration still works.
    """

    cfg: STDiT3Config
    plan: Plan

    def __getattr__(self, name):
        if name in ("cfg", "plan"):
            raise AttributeError(name)
        return getattr(self.cfg, name)

    def replace(self, **kw) -> "ShardedConfig":
        return ShardedConfig(replace(self.cfg, **kw), self.plan)
