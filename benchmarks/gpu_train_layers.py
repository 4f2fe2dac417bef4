"""The training programs ``benchmarks/gpu_train_measure.py`` times on a GPU, in plain PyTorch, so that the same
modules can be lowered here (torchax, on ``meta`` tensors) and priced against the measurement.

* :class:`GPTLayer`: the layer NeMo's GPT-3 configurations train (pre-LayerNorm with biases, one fused QKV
  linear, causal SDPA, the output projection, LayerNorm, fc1, GELU (tanh), fc2, two residuals; no dropout).
* :class:`LlamaLayer`: torchtitan's Llama 3 ``TransformerBlock`` as written at 9dec370
  (torchtitan/models/llama/model.py): RMSNorm, wq/wk/wv without biases, rotary embedding through complex
  numbers (``view_as_complex`` times ``freqs_cis``, ``view_as_real``), ``repeat_kv`` of the key/value heads
  to the query heads, causal SDPA, wo; RMSNorm, SwiGLU (w1, w3, w2). Written from the file, not copied.
* :func:`ring_schedule`: the per-rank calls of PyTorch's ring attention with load-balanced causal chunks
  (torch/distributed/tensor/experimental/_attention.py, ``_templated_ring_attention``): step 0 the causal call
  over the rank's two chunks; at step i >= 1 either all queries against the first half of the arriving keys,
  or the second half of the queries against all of them; each step's output merged into an fp32 output by its
  log-sum-exp.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: name: (hidden, heads, kv_heads, ffn, seq) of the published runs whose layers are timed
SHAPES = {
    "gpt3-5b": dict(hidden=4096, heads=32, ffn=16384, seq=2048),  # NeMo 24.07 gpt3 5b yaml
    "llama3-8b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192),  # Llama 3 8B, seq of torchtitan Table 1
}


class GPTLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, **_):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def freqs_cis(head_dim: int, seq: int, theta: float = 500000.0, device=None):
    f = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float() / head_dim))
    t = torch.arange(seq, device=device, dtype=torch.float32)
    return torch.polar(torch.ones(seq, head_dim // 2, device=device), torch.outer(t, f))


def rotary(xq, xk, fc):
    q = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    k = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = fc.view(1, q.shape[1], 1, q.shape[-1])
    return (torch.view_as_real(q * fc).flatten(3).type_as(xq), torch.view_as_real(k * fc).flatten(3).type_as(xk))


class LlamaLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int, seq: int, **_):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hidden // heads
        self.attention_norm, self.ffn_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.wq = nn.Linear(hidden, hidden, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(hidden, hidden, bias=False)
        self.w1, self.w3 = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.register_buffer("fc", freqs_cis(self.hd, seq), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(b, s, self.heads, self.hd)
        k = self.wk(h).view(b, s, self.kv_heads, self.hd)
        v = self.wv(h).view(b, s, self.kv_heads, self.hd)
        q, k = rotary(q, k, self.fc[:s])
        rep = self.heads // self.kv_heads
        k = k[:, :, :, None, :].expand(b, s, self.kv_heads, rep, self.hd).reshape(b, s, self.heads, self.hd)
        v = v[:, :, :, None, :].expand(b, s, self.kv_heads, rep, self.hd).reshape(b, s, self.heads, self.hd)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Stack(nn.Module):
    """``depth`` layers of one kind, one after the other."""

    def __init__(self, kind: str, depth: int, **shape):
        super().__init__()
        cls = GPTLayer if kind == "gpt" else LlamaLayer
        self.layers = nn.ModuleList(cls(**shape) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def ring_schedule(cp: int, local: int, rank: int | None = None) -> list[tuple[int, int, bool, str]]:
    """(queries, keys, causal, which) of each step's attention call on one rank of a ``cp``-way ring with
    ``local`` positions per rank (two load-balanced chunks of local/2). ``which``: the part of the rank's queries
    (``all``, ``second``) the call covers. Every rank makes the same number of calls of each size; ``rank``
    (default cp // 2) only orders them."""
    rank = cp // 2 if rank is None else rank
    half = local // 2
    steps = [(local, local, True, "all")]
    for i in range(1, cp):
        steps.append((local, half, False, "all") if i <= rank else (half, local, False, "second"))
    return steps
