"""STDiT3 as OpenSora 1.2 deploys it for text-to-video sampling (``build(cfg, deployed=True)``).

The bundled torch STDiT3 (:mod:`mhlo_cost.lower.models.stdit3_torch`) is written for counting: its FLOPs equal the
JAX model's. OpenSora 1.2's inference runs different code for the same network; what this module changes, read
from hpcaitech/Open-Sora at tag v1.2.0 (commit 17cce908b22283acc3c946816c81f46dd442a453):

* **the temporal mask** (``x_mask``): ``scripts/inference.py`` passes ``apply_mask_strategy``'s masks (all ones
  for text-to-video, ``opensora/utils/inference_utils.py`` l. 175-204) to ``RFLOW.sample``, which then sets
  ``model_args["x_mask"] = mask_t_upper.repeat(2, 1)`` (``opensora/schedulers/rf/__init__.py`` l. 66-79; all
  true). With an ``x_mask`` every block (``opensora/models/stdit/stdit3.py`` l. 105-151) runs ``norm1`` and
  ``norm2`` twice, the t2i modulation and the two gates twice (once with the embedding of timestep 0, ``t0``:
  l. 376-380), and four ``t_mask_select`` (``torch.where`` over the full activations, l. 79-87); the final layer
  its norm and modulation twice and one select (``opensora/models/layers/blocks.py`` l. 562-584);
* **LayerNorm**: ``norm1``/``norm2`` are apex's ``FusedLayerNorm`` (``enable_layernorm_kernel=True`` in
  ``configs/opensora-v1-2/inference/sample.py``; ``get_layernorm``, blocks.py l. 49-58), the final norm an
  ``nn.LayerNorm``: one kernel each (here ``F.layer_norm``: one aten call);
* **self-attention** (blocks.py l. 168-221): ``flash_attn_func`` where the sequence is longer than the batch
  (``enable_flash_attn and N > B``: the spatial blocks; here ``F.scaled_dot_product_attention``, one call),
  else the math path written out (scale, ``q @ k^T``, float32 softmax, ``@ v``: the temporal blocks, whose
  batch is B x S and sequence T);
* **cross-attention** (blocks.py l. 444-476): xformers' ``memory_efficient_attention`` with a
  ``BlockDiagonalMask`` over each sample's valid caption tokens: no mask tensor, each sample's queries against
  its own keys only (here one SDPA call per batch of samples, all ``caption_tokens`` taken as valid: the
  published run's prompt length is not given).

The GEMM FLOPs of the cross-attention are therefore 1/B of the dense form's; everything else computes what the
counting module does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .stdit3_torch_layers import F32, Attention, Mlp, MultiHeadCrossAttention, apply_rope, rope_tables, t2i_modulate


def layer_norm(x, eps: float = 1e-6):
    """apex's FusedLayerNorm / nn.LayerNorm without affine parameters: one kernel."""
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


def t_mask_select(x_mask, x, masked_x, T: int, S: int):
    """OpenSora's ``t_mask_select``: per frame, ``x`` where the temporal mask is set, else ``masked_x``."""
    b, n, c = x.shape
    out = torch.where(x_mask[:, :, None, None], x.reshape(b, T, S, c), masked_x.reshape(b, T, S, c))
    return out.reshape(b, n, c)


class DeployedAttention(Attention):
    """OpenSora's ``Attention`` with ``enable_flash_attn=True``: flash (one SDPA call) where N > B, else math
    (the counting module's weights, its forward as deployed)."""

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, N, D)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            cos, sin = rope_tables(n, self.head_dim, x.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if n > b:
            o = F.scaled_dot_product_attention(q, k, v)
        else:  # blocks.py l. 213-221
            attn = (q * self.head_dim ** -0.5) @ k.transpose(-2, -1)
            attn = attn.to(F32).softmax(dim=-1).to(q.dtype)
            o = attn @ v
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


class DeployedCrossAttention(MultiHeadCrossAttention):
    """OpenSora's ``MultiHeadCrossAttention`` as xformers runs it: each sample's queries against its own caption
    (the counting module's weights, its forward as deployed)."""

    def forward(self, x, cond):
        b, n, c = x.shape
        lc = cond.shape[1]
        h, d = self.num_heads, self.head_dim
        q = self.q_linear(x).reshape(b, n, h, d).transpose(1, 2)
        kv = self.kv_linear(cond).reshape(b, lc, 2, h, d)
        k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v)  # (B, H, N, D)
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


class DeployedBlock(nn.Module):
    """``STDiT3Block.forward`` with an ``x_mask`` (stdit3.py l. 89-156)."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: float = 4.0, qk_norm: bool = True,
                 temporal: bool = False):
        super().__init__()
        self.temporal = temporal
        self.attn = DeployedAttention(hidden, heads, qk_norm=qk_norm, rope=temporal)
        self.cross_attn = DeployedCrossAttention(hidden, heads)
        self.mlp = Mlp(hidden, int(hidden * mlp_ratio))
        self.scale_shift_table = nn.Parameter(torch.randn(6, hidden) / hidden ** 0.5)

    def forward(self, x, y, t_mod, T: int, S: int, x_mask=None, t0_mod=None):
        b, n, c = x.shape
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            self.scale_shift_table[None] + t_mod.reshape(b, 6, c)).chunk(6, dim=1)
        masked = x_mask is not None
        if masked:
            shift_msa0, scale_msa0, gate_msa0, shift_mlp0, scale_mlp0, gate_mlp0 = (
                self.scale_shift_table[None] + t0_mod.reshape(b, 6, c)).chunk(6, dim=1)
        h = t2i_modulate(layer_norm(x), shift_msa, scale_msa)
        if masked:
            h = t_mask_select(x_mask, h, t2i_modulate(layer_norm(x), shift_msa0, scale_msa0), T, S)
        if self.temporal:
            h = h.reshape(b, T, S, c).transpose(1, 2).reshape(b * S, T, c)
            h = self.attn(h).reshape(b, S, T, c).transpose(1, 2).reshape(b, n, c)
        else:
            h = self.attn(h.reshape(b * T, S, c)).reshape(b, n, c)
        g = gate_msa * h
        if masked:
            g = t_mask_select(x_mask, g, gate_msa0 * h, T, S)
        x = x + g
        x = x + self.cross_attn(x, y)
        h = t2i_modulate(layer_norm(x), shift_mlp, scale_mlp)
        if masked:
            h = t_mask_select(x_mask, h, t2i_modulate(layer_norm(x), shift_mlp0, scale_mlp0), T, S)
        h = self.mlp(h)
        g = gate_mlp * h
        if masked:
            g = t_mask_select(x_mask, g, gate_mlp0 * h, T, S)
        return x + g


class DeployedFinalLayer(nn.Module):
    """``T2IFinalLayer.forward`` with an ``x_mask`` (blocks.py l. 575-584; its second norm reads the modulated x)."""

    def __init__(self, hidden: int, num_patch: int, out_channels: int):
        super().__init__()
        self.linear = nn.Linear(hidden, num_patch * out_channels)
        self.scale_shift_table = nn.Parameter(torch.randn(2, hidden) / hidden ** 0.5)

    def forward(self, x, t, x_mask=None, t0=None, T: int = 0, S: int = 0):
        shift, scale = (self.scale_shift_table[None] + t[:, None]).chunk(2, dim=1)
        x = t2i_modulate(layer_norm(x), shift, scale)
        if x_mask is not None:
            shift0, scale0 = (self.scale_shift_table[None] + t0[:, None]).chunk(2, dim=1)
            x = t_mask_select(x_mask, x, t2i_modulate(layer_norm(x), shift0, scale0), T, S)
        return self.linear(x)
