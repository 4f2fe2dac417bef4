"""OpenSora 1.2's STDiT3 (XL/2 by default) as a ``torch.nn.Module``, for lowering through torchax / torch-xla.

The architecture and options are those of the JAX model (:mod:`mhlo_cost.lower.models.stdit3`), and the module
names are OpenSora's (``x_embedder``, ``t_embedder``, ``fps_embedder``, ``t_block``, ``y_embedder``,
``spatial_blocks.{i}`` / ``temporal_blocks.{i}`` with ``norm1``, ``attn`` (``qkv``, ``q_norm``, ``k_norm``,
``proj``), ``cross_attn`` (``q_linear``, ``kv_linear``, ``proj``), ``norm2``, ``mlp`` (``fc1``, ``fc2``), and
``final_layer``), so that a frontend that writes module paths into locations gives the analyzer the same
block structure as the JAX lowering.

Written for counting: every matrix product is a plain ``nn.Linear`` or ``torch.matmul`` (attention is
``q @ k^T``, softmax, ``@ v``; never ``F.scaled_dot_product_attention``), outer products are broadcasts
(no einsum, which would lower to a contraction-free ``dot_general``), and cross-attention is OpenSora's
dense form: the B*N video tokens of the batch form one query sequence against all B*L caption tokens,
with a block-diagonal mask. The GEMM FLOPs therefore equal the JAX model's for the same configuration.

The module needs no weights to be lowered: build it on the ``meta`` device (:func:`build`) and give the
frontend parameter shapes. ``forward`` takes ``x`` (B, Cin, T, H, W), ``timestep`` (B,), ``y``
(B, 1, L, Ccap) and ``fps`` (B,); the video's pixel size for the positional embedding's scale is read from
the latent size (times ``vae_downsample``), as the JAX model does.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import STDiT3Config
from .stdit3_torch_deployed import DeployedBlock, DeployedFinalLayer
from .stdit3_torch_layers import (F32, Attention, LayerNormNoAffine, Mlp, MultiHeadCrossAttention, RMSNorm, apply_rope,
                                  attention_core, block_diagonal_mask, gelu_tanh, pos_embed_2d, rope_tables,
                                  sinusoidal_embedding, t2i_modulate)

__all__ = [
    # re-exported: the layers live in mhlo_cost.lower.models.stdit3_torch_layers
    "Attention", "LayerNormNoAffine", "Mlp", "MultiHeadCrossAttention", "RMSNorm", "apply_rope",
    "attention_core", "block_diagonal_mask", "gelu_tanh", "pos_embed_2d", "rope_tables",
    "sinusoidal_embedding", "t2i_modulate",
    # defined here
    "torch_dtype", "STDiT3Block", "PatchEmbed3D", "TimestepEmbedder", "CaptionEmbedder", "T2IFinalLayer",
    "STDiT3", "build", "example_inputs", "input_specs",
]


def torch_dtype(name: str) -> torch.dtype:
    """'bfloat16' -> torch.bfloat16 (any ``torch.<name>`` dtype)."""
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r}")
    return dt


# ---------------------------------------------------------------------------------------------------------
# Block, embedders, final layer
# ---------------------------------------------------------------------------------------------------------


class STDiT3Block(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp_ratio: float = 4.0, qk_norm: bool = True,
                 temporal: bool = False):
        super().__init__()
        self.temporal = temporal
        self.norm1 = LayerNormNoAffine(1e-6)
        self.attn = Attention(hidden, heads, qk_norm=qk_norm, rope=temporal)
        self.cross_attn = MultiHeadCrossAttention(hidden, heads)
        self.norm2 = LayerNormNoAffine(1e-6)
        self.mlp = Mlp(hidden, int(hidden * mlp_ratio))
        self.scale_shift_table = nn.Parameter(torch.randn(6, hidden) / hidden ** 0.5)

    def forward(self, x, y, t_mod, T: int, S: int):
        b, n, c = x.shape
        mod = self.scale_shift_table[None].to(t_mod.dtype) + t_mod.reshape(b, 6, c)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.chunk(6, dim=1)
        h = t2i_modulate(self.norm1(x), shift_msa, scale_msa)
        if self.temporal:
            h = h.reshape(b, T, S, c).transpose(1, 2).reshape(b * S, T, c)
            h = self.attn(h)
            h = h.reshape(b, S, T, c).transpose(1, 2).reshape(b, n, c)
        else:
            h = self.attn(h.reshape(b * T, S, c)).reshape(b, n, c)
        x = x + gate_msa * h
        x = x + self.cross_attn(x, y)
        h = t2i_modulate(self.norm2(x), shift_mlp, scale_mlp)
        h = self.mlp(h)
        return x + gate_mlp * h


class PatchEmbed3D(nn.Module):
    """Conv3d with kernel = stride = patch after padding T, H, W up to multiples: (B,Cin,T,H,W) -> (B,N,C)."""

    def __init__(self, patch, in_channels: int, hidden: int):
        super().__init__()
        self.patch = tuple(patch)
        self.proj = nn.Conv3d(in_channels, hidden, kernel_size=self.patch, stride=self.patch)

    def forward(self, x):
        _, _, t, h, w = x.shape
        pt, ph, pw = self.patch
        pad = (0, (-w) % pw, 0, (-h) % ph, 0, (-t) % pt)
        if any(pad):
            x = F.pad(x, pad)
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2)


class TimestepEmbedder(nn.Module):
    """Sinusoidal embedding (freq_dim) -> Linear -> SiLU -> Linear; also OpenSora's SizeEmbedder (fps)."""

    def __init__(self, hidden: int, freq_dim: int = 256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t, dtype):
        return self.mlp(sinusoidal_embedding(t, self.freq_dim).to(dtype))


class CaptionEmbedder(nn.Module):
    """Caption projection Mlp (Ccap -> C -> C, GELU tanh); ``y_embedding`` is the CFG null caption."""

    def __init__(self, in_channels: int, hidden: int, tokens: int):
        super().__init__()
        self.y_proj = Mlp(in_channels, hidden, hidden)
        self.register_buffer("y_embedding", torch.randn(tokens, in_channels) / in_channels ** 0.5)

    def forward(self, y):
        return self.y_proj(y)


class T2IFinalLayer(nn.Module):
    def __init__(self, hidden: int, num_patch: int, out_channels: int):
        super().__init__()
        self.norm_final = LayerNormNoAffine(1e-6)
        self.linear = nn.Linear(hidden, num_patch * out_channels)
        self.scale_shift_table = nn.Parameter(torch.randn(2, hidden) / hidden ** 0.5)

    def forward(self, x, t):
        mod = self.scale_shift_table[None].to(t.dtype) + t[:, None]
        shift, scale = mod.chunk(2, dim=1)
        return self.linear(t2i_modulate(self.norm_final(x), shift, scale))


class STDiT3(nn.Module):
    """STDiT3 for an :class:`STDiT3Config`: ``forward(x, timestep, y, fps) -> (B, Cout, T, H, W)`` float32.

    ``deployed=True``: the blocks and final layer as OpenSora 1.2's text-to-video sampling runs them (an all-ones
    temporal mask, fused LayerNorm, flash / math self-attention, per-sample cross-attention:
    :mod:`mhlo_cost.lower.models.stdit3_torch_deployed`); the default is the counting form (the JAX model's FLOPs)."""

    def __init__(self, cfg: STDiT3Config, deployed: bool = False):
        super().__init__()
        self.cfg = cfg
        self.deployed = deployed
        block = DeployedBlock if deployed else STDiT3Block
        c = cfg.hidden
        qk_norm = getattr(cfg, "qk_norm", True)
        self.compute_dtype = torch_dtype(cfg.dtype)
        self.x_embedder = PatchEmbed3D(cfg.patch, cfg.in_channels, c)
        self.t_embedder = TimestepEmbedder(c, cfg.freq_dim)
        self.fps_embedder = TimestepEmbedder(c, cfg.freq_dim)
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(c, 6 * c))
        self.y_embedder = CaptionEmbedder(cfg.caption_channels, c, cfg.caption_tokens)
        self.spatial_blocks = nn.ModuleList(
            block(c, cfg.heads, cfg.mlp_ratio, qk_norm, temporal=False) for _ in range(cfg.depth))
        self.temporal_blocks = nn.ModuleList(
            block(c, cfg.heads, cfg.mlp_ratio, qk_norm, temporal=True) for _ in range(cfg.depth))
        pt, ph, pw = cfg.patch
        self.final_layer = (DeployedFinalLayer if deployed else T2IFinalLayer)(c, pt * ph * pw, cfg.out_channels)

    def forward(self, x, timestep, y, fps):
        cfg = self.cfg
        dt = self.compute_dtype
        b = x.shape[0]
        tx, hx, wx = x.shape[2:]
        pt, ph, pw = cfg.patch
        nt, nh, nw = -(-tx // pt), -(-hx // ph), -(-wx // pw)
        s = nh * nw
        c = cfg.hidden
        x = x.to(dt)
        y = y.to(dt)

        h = self.x_embedder(x)  # (B, N, C)
        down = getattr(cfg, "vae_downsample", 8)
        scale = math.sqrt(hx * down * wx * down) / getattr(cfg, "input_sq_size", 512)
        pos = pos_embed_2d(nh, nw, c, scale, round(s ** 0.5), h.device).to(dt)
        h = (h.reshape(b, nt, s, c) + pos[None, None]).reshape(b, nt * s, c)

        t = self.t_embedder(timestep, dt)
        fps_emb = self.fps_embedder(fps, dt)
        t = t + fps_emb
        t_mod = self.t_block(t)
        cap = self.y_embedder(y.reshape(b, y.shape[-2], y.shape[-1]))
        mask = {}
        if self.deployed:  # stdit3.py l. 376-380: the all-ones x_mask and the embedding of timestep 0
            t0 = self.t_embedder(torch.zeros_like(timestep), dt) + fps_emb
            mask = dict(x_mask=torch.ones(b, nt, dtype=torch.bool, device=h.device), t0_mod=self.t_block(t0))

        for spatial, temporal in zip(self.spatial_blocks, self.temporal_blocks):
            h = spatial(h, cap, t_mod, nt, s, **mask)
            h = temporal(h, cap, t_mod, nt, s, **mask)

        if self.deployed:
            h = self.final_layer(h, t, mask["x_mask"], t0, nt, s)
        else:
            h = self.final_layer(h, t)
        co = cfg.out_channels
        h = h.reshape(b, nt, nh, nw, pt, ph, pw, co).permute(0, 7, 1, 4, 2, 5, 3, 6)
        h = h.reshape(b, co, nt * pt, nh * ph, nw * pw)[:, :, :tx, :hx, :wx]
        return h.to(F32)


def build(cfg: STDiT3Config, device: str | torch.device = "meta", seed: int | None = 0,
          deployed: bool = False) -> STDiT3:
    """The module for ``cfg`` with its parameters in ``cfg.dtype`` on ``device`` ('meta': nothing allocated);
    ``deployed``: as OpenSora 1.2 runs it (:class:`STDiT3`).

    On a real device the weights are random (``seed``); the biases get small random values too so that a
    numerical check exercises them.
    """
    dt = torch_dtype(cfg.dtype)
    if str(device) == "meta":
        with torch.device("meta"):
            return STDiT3(cfg, deployed).to(dt)
    gen_state = torch.random.get_rng_state()
    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.device(device):
            m = STDiT3(cfg, deployed)
            with torch.no_grad():
                for name, p in m.named_parameters():
                    if name.endswith(".bias"):
                        p.normal_(0.0, 0.02)
        return m.to(dt)
    finally:
        torch.random.set_rng_state(gen_state)


def example_inputs(cfg: STDiT3Config, device: str | torch.device = "cpu", seed: int = 0):
    """Random (x, timestep, y, fps) for ``cfg`` (x and y in cfg.dtype, timestep and fps float32)."""
    g = torch.Generator().manual_seed(seed)
    dt = torch_dtype(cfg.dtype)
    b = cfg.batch
    x = torch.randn(b, cfg.in_channels, cfg.latent_t, cfg.latent_h, cfg.latent_w, generator=g).to(dt)
    y = torch.randn(b, 1, cfg.caption_tokens, cfg.caption_channels, generator=g).to(dt)
    timestep = torch.rand(b, generator=g) * 1000.0
    fps = torch.full((b,), 24.0)
    return tuple(v.to(device) for v in (x, timestep, y, fps))


def input_specs(cfg: STDiT3Config) -> tuple:
    """(shape, torch dtype) of each forward input."""
    dt = torch_dtype(cfg.dtype)
    b = cfg.batch
    return (
        ((b, cfg.in_channels, cfg.latent_t, cfg.latent_h, cfg.latent_w), dt),
        ((b,), torch.float32),
        ((b, 1, cfg.caption_tokens, cfg.caption_channels), dt),
        ((b,), torch.float32),
    )
