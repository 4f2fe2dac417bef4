"""STDiT3 as OpenSora 1.2 deploys it (``stdit3_torch.build(cfg, deployed=True)``) and the eager rules it needs:
views a call hands to the next call are not materialised, attention written out op by op runs op by op
(``written="math"``), ``F.layer_norm`` is one kernel."""
from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mhlo_cost import lower_model  # noqa: E402
from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.lower.models import stdit3_torch  # noqa: E402
from mhlo_cost.lower.models.config import STDiT3Config  # noqa: E402
from mhlo_cost.roofline import Roofline  # noqa: E402

B, H, LQ, LK, D = 2, 4, 128, 48, 32


def _eager(module, *specs, written="sdpa"):
    with torch.device("meta"):
        m = module()
    text = lower_model(m, *specs, frontend="torchax").text
    return Roofline(analyze(text, AnalysisOptions(dataflow=True)), get_profile("a100"), execution="eager",
                    written=written)


def _small(dtype="float32"):
    return dataclasses.replace(STDiT3Config().small(), dtype=dtype)


def test_deployed_module_computes_the_counting_module():
    """The all-ones temporal mask selects the unmasked branch, the per-sample cross-attention equals the dense
    block-diagonal one, F.layer_norm the written-out norm: same weights, same output (torch on CPU, f32)."""
    cfg = _small()
    a, b = stdit3_torch.build(cfg, "cpu"), stdit3_torch.build(cfg, "cpu", deployed=True)
    b.load_state_dict(a.state_dict())
    x = stdit3_torch.example_inputs(cfg)
    with torch.no_grad():
        ya, yb = a(*x), b(*x)
    assert ya.shape == yb.shape
    assert torch.allclose(ya, yb, rtol=1e-4, atol=1e-5)


def test_deployed_gemm_flops_closed_form():
    """Deployed minus counting GEMM FLOPs: the cross-attention's two products shrink from (B N) x (B L) to
    B x N x L per block, and the timestep-0 embedding adds t_embedder's two Linears and t_block."""
    from mhlo_cost import analyze

    cfg = _small()
    flops = []
    for deployed in (False, True):
        m = stdit3_torch.build(cfg, deployed=deployed)
        specs = [f"{'x'.join(map(str, s))}:{str(t).replace('torch.', '')}" for s, t in stdit3_torch.input_specs(cfg)]
        flops.append(analyze(lower_model(m, *specs, frontend="torchax").text).summary["gemm_flops"])
    b, c, L = cfg.batch, cfg.hidden, cfg.caption_tokens
    n = cfg.latent_t * -(-cfg.latent_h // 2) * -(-cfg.latent_w // 2)
    blocks = 2 * cfg.depth
    cross_saved = blocks * 2 * (2 * (b * n) * (b * L) * c - 2 * b * n * L * c)
    t0_extra = 2 * b * (cfg.freq_dim * c + c * c) + 2 * b * c * 6 * c
    assert flops[1] == flops[0] - cross_saved + t0_extra


class _MaskedAttention(nn.Module):
    def forward(self, q, k, v, mask):
        s = torch.matmul(q, k.transpose(-2, -1)).to(torch.float32)
        s = s.masked_fill(~mask, -1e30)
        return torch.matmul(torch.softmax(s, dim=-1).to(v.dtype), v)


def test_eager_reads_a_handed_on_mask_at_its_own_size():
    """masked_fill's decomposition expands the (Lq, Lk) mask and the fill value to the scores' shape after the
    ``~mask`` call: eager never materialises those expands, so no kernel writes or reads a score-sized mask."""
    qs = f"{B}x{H}x{LQ}x{D}:bfloat16"
    ks = f"{B}x{H}x{LK}x{D}:bfloat16"
    rf = _eager(_MaskedAttention, qs, ks, ks, f"{LQ}x{LK}:bool")
    att = [k for k in rf.fusion.kernels if k.attention]
    assert len(att) == 1
    score_shape = (B, H, LQ, LK)
    assert not [t for t in att[0].inputs if tuple(t.shape) == score_shape]
    masks = [t for t in att[0].inputs if tuple(t.shape) == (LQ, LK)]
    assert len(masks) == 1
    # the ~mask kernel writes Lq x Lk booleans and the fill value (an f32 scalar), nothing of the scores' size
    others = [k for k in rf.fusion.kernels if not k.attention]
    assert max(k.bytes_written for k in others) == LQ * LK + 4


class _TwoAttentions(nn.Module):
    def forward(self, q, k, v):
        a = F.scaled_dot_product_attention(q, k, v)
        s = torch.softmax((q @ k.transpose(-2, -1)).to(torch.float32), dim=-1).to(v.dtype)
        return a + s @ v


def test_written_attention_math_runs_op_by_op():
    spec = f"{B}x{H}x{LQ}x{D}:bfloat16"
    sdpa = _eager(_TwoAttentions, spec, spec, spec)
    math_ = _eager(_TwoAttentions, spec, spec, spec, written="math")
    assert sum(k.attention for k in sdpa.fusion.kernels) == 2
    assert sum(k.attention for k in math_.fusion.kernels) == 1
    # op by op: the f32 scores (B H Lq Lq x 4 bytes) are written by a kernel
    assert max(k.bytes_written for k in math_.fusion.kernels) >= B * H * LQ * LQ * 4
    with pytest.raises(ValueError):
        _eager(_TwoAttentions, spec, spec, spec, written="fast")


class _LayerNorm(nn.Module):
    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), eps=1e-6)


def test_layer_norm_is_one_kernel():
    """F.layer_norm (nn.LayerNorm, apex's FusedLayerNorm as deployed) reads x once and writes y once."""
    rows, c = 2 * 256, 1152
    rf = _eager(_LayerNorm, f"2x256x{c}:bfloat16")
    ks = [k for k in rf.fusion.kernels if k.bytes_read or k.bytes_written]
    assert len(ks) == 1
    assert ks[0].bytes_written == rows * c * 2
    big = [t for t in ks[0].inputs if t.nelems > 1]  # besides scalars (eps, the row length)
    assert [t.nbytes for t in big] == [rows * c * 2]
