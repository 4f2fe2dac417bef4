"""The layers of the PyTorch STDiT3 (:mod:`mhlo_cost.lower.models.stdit3_torch`): element-wise helpers, norms,
the MLP, plain attention, rotary and 2-D positional embeddings, self- and cross-attention modules.

Written for counting, as the model is: every matrix product is a plain ``nn.Linear`` or ``torch.matmul``
(never ``F.scaled_dot_product_attention``) and outer products are broadcasts (no einsum).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

F32 = torch.float32


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
    freqs = torch.exp(torch.arange(half, dtype=F32, device=values.device) * (-math.log(max_period) / half))
    args = values.to(F32)[:, None] * freqs[None, :]
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
        xf = x.to(F32)
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
        xf = x.to(F32)
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
    s = torch.matmul(q, k.transpose(-2, -1)).to(F32)
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
    inv_freq = torch.exp(torch.arange(dim // 2, dtype=F32, device=device) * (-math.log(theta) * 2.0 / dim))
    pos = torch.arange(length, dtype=F32, device=device)
    ang = pos[:, None] * inv_freq[None, :]  # broadcast, not einsum
    ang = torch.repeat_interleave(ang, 2, dim=-1)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    """Rotate x (..., L, D) by tables (L, D): x*cos + rot(x)*sin with rot(x0, x1) = (-x1, x0)."""
    xf = x.to(F32)
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


def pos_embed_2d(h: int, w: int, dim: int, scale: float, base_size, device):
    """OpenSora's PositionEmbedding2D as in-graph ops: (h*w, dim) float32, the column coordinate first."""
    quarter = dim // 4
    inv_freq = torch.exp(torch.arange(quarter, dtype=F32, device=device) * (-math.log(10000.0) * 2.0 / (dim // 2)))
    gh = torch.arange(h, dtype=F32, device=device) / scale
    gw = torch.arange(w, dtype=F32, device=device) / scale
    if base_size is not None:
        gh = gh * (base_size / h)
        gw = gw * (base_size / w)

    def sincos(g):
        a = g[:, None] * inv_freq[None, :]
        return torch.cat([torch.sin(a), torch.cos(a)], dim=-1)

    eh = sincos(gh)[:, None, :].expand(h, w, dim // 2)
    ew = sincos(gw)[None, :, :].expand(h, w, dim // 2)
    return torch.cat([ew, eh], dim=-1).reshape(h * w, dim)
