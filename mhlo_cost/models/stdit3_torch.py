"""OpenSora 1.2's STDiT3 (XL/2 by default) as a ``torch.nn.Module``, for lowering through torchax / torch-xla.

The architecture and options are those of the JAX model (:mod:`mhlo_cost.models.stdit3`), and the module
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

_F32 = torch.float32


def torch_dtype(name: str) -> torch.dtype:
    """'bfloat16' -> torch.bfloat16 (any ``torch.<name>`` dtype)."""
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r}")
    return dt


# ---------------------------------------------------------------------------------------------------------
# Element-wise helpers (written to match the JAX model op for op where it is cheap to do so)
# ---------------------------------------------------------------------------------------------------------


def t2i_modulate(x, shift, scale):
    return x * (1 + scale) + shift


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def sinusoidal_embedding(values, dim: int, max_period: float = 10000.0):
    """(B,) -> (B, dim) float32 [cos, sin] DiT timestep embedding; the outer product is a broadcast."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=_F32, device=values.device) * (-math.log(max_period) / half))
    args = values.to(_F32)[:, None] * freqs[None, :]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class LayerNormNoAffine(nn.Module):
    """LayerNorm without affine parameters, eps 1e-6, computed in float32 (OpenSora's ``norm1``/``norm2``)."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        xf = x.to(_F32)
        mean = xf.mean(dim=-1, keepdim=True)
        xc = xf - mean
        var = (xc * xc).mean(dim=-1, keepdim=True)
        return (xc * torch.rsqrt(var + self.eps)).to(x.dtype)


class RMSNorm(nn.Module):
    """LLaMA RMSNorm over the last axis (normalise in float32, scale in the input dtype)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.to(_F32)
        ms = (xf * xf).mean(dim=-1, keepdim=True)
        return self.weight.to(x.dtype) * (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)


class Mlp(nn.Module):
    """timm's Mlp: fc1 -> activation -> fc2."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None,
                 act: str = "gelu_tanh"):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, out_features or in_features)
        self.act = act

    def forward(self, x):
        h = self.fc1(x)
        h = gelu_tanh(h) if self.act == "gelu_tanh" else F.silu(h)
        return self.fc2(h)


def attention_core(q, k, v, mask=None):
    """Plain attention on (B, H, Lq, D) / (B, H, Lk, D): q@k^T, float32 softmax, @v -> (B, H, Lq, D)."""
    q = q * (q.shape[-1] ** -0.5)
    s = torch.matmul(q, k.transpose(-2, -1)).to(_F32)
    if mask is not None:
        s = s.masked_fill(~mask, -1e30)
    p = torch.softmax(s, dim=-1).to(v.dtype)
    return torch.matmul(p, v)


def block_diagonal_mask(batch: int, q_len: int, kv_len: int, device):
    """(batch*q_len, batch*kv_len) bool: a query of sample i sees the keys of sample i only.

    Built by broadcasting a (batch, batch) identity (no integer division, so no nested function)."""
    ids = torch.arange(batch, device=device)
    same = ids[:, None] == ids[None, :]
    return same[:, None, :, None].expand(batch, q_len, batch, kv_len).reshape(batch * q_len, batch * kv_len)


def rope_tables(length: int, dim: int, device, theta: float = 10000.0):
    """cos / sin (L, dim) float32 of interleaved rotary embedding (rotary_embedding_torch's layout)."""
    inv_freq = torch.exp(torch.arange(dim // 2, dtype=_F32, device=device) * (-math.log(theta) * 2.0 / dim))
    pos = torch.arange(length, dtype=_F32, device=device)
    ang = pos[:, None] * inv_freq[None, :]  # broadcast, not einsum
    ang = torch.repeat_interleave(ang, 2, dim=-1)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    """Rotate x (..., L, D) by tables (L, D): x*cos + rot(x)*sin with rot(x0, x1) = (-x1, x0)."""
    xf = x.to(_F32)
    pairs = xf.reshape(*xf.shape[:-1], xf.shape[-1] // 2, 2)
    rot = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).reshape(xf.shape)
    return (xf * cos + rot * sin).to(x.dtype)


# ---------------------------------------------------------------------------------------------------------
# Attention modules
# ---------------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """OpenSora's self-attention: qkv (bias), RMSNorm on q and k, optional RoPE, plain softmax attention."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, rope: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.q_norm = RMSNorm(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)
        self.rope = rope

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, N, D)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            cos, sin = rope_tables(n, self.head_dim, x.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attention_core(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


class MultiHeadCrossAttention(nn.Module):
    """OpenSora's cross-attention in its dense form: (1, B*N) queries against (1, B*L) keys and values,
    with a block-diagonal mask so that each sample attends to its own caption tokens only."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.q_linear = nn.Linear(dim, dim)
        self.kv_linear = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cond):
        b, n, c = x.shape
        lc = cond.shape[1]
        h, d = self.num_heads, self.head_dim
        q = self.q_linear(x).reshape(1, b * n, h, d).transpose(1, 2)
        kv = self.kv_linear(cond).reshape(1, b * lc, 2, h, d)
        k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
        mask = block_diagonal_mask(b, n, lc, x.device)
        o = attention_core(q, k, v, mask)  # (1, H, B*N, D)
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


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


def pos_embed_2d(h: int, w: int, dim: int, scale: float, base_size, device):
    """OpenSora's PositionEmbedding2D as in-graph ops: (h*w, dim) float32, the column coordinate first."""
    quarter = dim // 4
    inv_freq = torch.exp(torch.arange(quarter, dtype=_F32, device=device) * (-math.log(10000.0) * 2.0 / (dim // 2)))
    gh = torch.arange(h, dtype=_F32, device=device) / scale
    gw = torch.arange(w, dtype=_F32, device=device) / scale
    if base_size is not None:
        gh = gh * (base_size / h)
        gw = gw * (base_size / w)

    def sincos(g):
        a = g[:, None] * inv_freq[None, :]
        return torch.cat([torch.sin(a), torch.cos(a)], dim=-1)

    eh = sincos(gh)[:, None, :].expand(h, w, dim // 2)
    ew = sincos(gw)[None, :, :].expand(h, w, dim // 2)
    return torch.cat([ew, eh], dim=-1).reshape(h * w, dim)


class STDiT3(nn.Module):
    """STDiT3 for an :class:`STDiT3Config`: ``forward(x, timestep, y, fps) -> (B, Cout, T, H, W)`` float32."""

    def __init__(self, cfg: STDiT3Config):
        super().__init__()
        self.cfg = cfg
        c = cfg.hidden
        qk_norm = getattr(cfg, "qk_norm", True)
        self.compute_dtype = torch_dtype(cfg.dtype)
        self.x_embedder = PatchEmbed3D(cfg.patch, cfg.in_channels, c)
        self.t_embedder = TimestepEmbedder(c, cfg.freq_dim)
        self.fps_embedder = TimestepEmbedder(c, cfg.freq_dim)
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(c, 6 * c))
        self.y_embedder = CaptionEmbedder(cfg.caption_channels, c, cfg.caption_tokens)
        self.spatial_blocks = nn.ModuleList(
            STDiT3Block(c, cfg.heads, cfg.mlp_ratio, qk_norm, temporal=False) for _ in range(cfg.depth))
        self.temporal_blocks = nn.ModuleList(
            STDiT3Block(c, cfg.heads, cfg.mlp_ratio, qk_norm, temporal=True) for _ in range(cfg.depth))
        pt, ph, pw = cfg.patch
        self.final_layer = T2IFinalLayer(c, pt * ph * pw, cfg.out_channels)

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
        t = t + self.fps_embedder(fps, dt)
        t_mod = self.t_block(t)
        cap = self.y_embedder(y.reshape(b, y.shape[-2], y.shape[-1]))

        for spatial, temporal in zip(self.spatial_blocks, self.temporal_blocks):
            h = spatial(h, cap, t_mod, nt, s)
            h = temporal(h, cap, t_mod, nt, s)

        h = self.final_layer(h, t)
        co = cfg.out_channels
        h = h.reshape(b, nt, nh, nw, pt, ph, pw, co).permute(0, 7, 1, 4, 2, 5, 3, 6)
        h = h.reshape(b, co, nt * pt, nh * ph, nw * pw)[:, :, :tx, :hx, :wx]
        return h.to(_F32)


def build(cfg: STDiT3Config, device: str | torch.device = "meta", seed: int | None = 0) -> STDiT3:
    """The module for ``cfg`` with its parameters in ``cfg.dtype`` on ``device`` ('meta': nothing allocated).

    On a real device the weights are random (``seed``); the biases get small random values too so that a
    numerical check exercises them.
    """
    dt = torch_dtype(cfg.dtype)
    if str(device) == "meta":
        with torch.device("meta"):
            return STDiT3(cfg).to(dt)
    gen_state = torch.random.get_rng_state()
    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.device(device):
            m = STDiT3(cfg)
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
