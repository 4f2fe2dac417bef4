"""Attention as one kernel: the recogniser on JAX, torchax (and torch-xla where its venv exists) spellings of
STDiT3, nothing in a plain MLP, and the closed-form HBM bytes of one fused attention."""
from __future__ import annotations

import collections
import dataclasses
import importlib.util

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.roofline import Roofline
from mhlo_cost.roofline.attention import find_attention
from stderr_lines import error_line
from helpers import lowered

H100 = get_profile("h100")
B, H, S, D = 2, 4, 256, 64


def attention(q, k, v, mask):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0 + mask
    p = jax.nn.softmax(s.astype(jnp.float32), -1).astype(q.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


@pytest.fixture(scope="module")
def one_attention():
    qkv = ((B, H, S, D), jnp.bfloat16)
    return analyze(lowered(attention, qkv, qkv, qkv, ((S, S), jnp.bfloat16)), AnalysisOptions(dataflow=True))


def test_one_attention_is_one_kernel_reading_q_k_v_mask_writing_o(one_attention):
    rf = Roofline(one_attention, H100, fuse_mode="elementwise")
    assert rf.attention == "fused"
    (k,) = [k for k in rf.fusion.kernels if k.attention]
    assert len(rf.fusion.kernels) == 1
    qkv, mask = B * H * S * D * 2, S * S * 2
    # Q, K, V and the mask once (scalar constants: a few bytes), O once; the B x H x S x S scores never
    assert 0 <= k.bytes_read - (3 * qkv + mask) <= 16
    assert k.bytes_written == qkv
    assert k.flops == sum(r.gemm_flops + r.vector_flops for r in one_attention.rows)
    unfused = Roofline(one_attention, H100, fuse_mode="elementwise", attention="unfused")
    assert not any(k.attention for k in unfused.fusion.kernels)
    assert sum(k.bytes_read + k.bytes_written for k in unfused.fusion.kernels) >= 4 * qkv + mask + B * H * S * S * 2


def test_plain_mlp_has_no_attention():
    def mlp(x, w1, w2):
        h = jax.nn.gelu(x @ w1)
        return jax.nn.softmax(h @ w2, -1)  # a softmax after a dot, but no second dot: not attention

    d = analyze(lowered(mlp, ((64, 128), jnp.float32), ((128, 256), jnp.float32),
                                 ((256, 128), jnp.float32)), AnalysisOptions(dataflow=True))
    assert find_attention(d.rows, d.producers) == []


def _fp8(t, axis=None):
    """An fp8 cast (torchao's float8 training): amax of the whole tensor (tensorwise) or along the contracted axis
    (rowwise), a scale, the cast."""
    scale = jnp.max(jnp.abs(t), axis=axis, keepdims=True).astype(jnp.float32) / 448.0
    return (t.astype(jnp.float32) / scale).astype(jnp.float8_e4m3fn), scale


def _fp8_dot(a, b, rowwise=False):
    (qa, sa), (qb, sb) = _fp8(a, -1 if rowwise else None), _fp8(b, 0 if rowwise else None)
    return (jnp.dot(qa, qb, preferred_element_type=jnp.float32) * sa * sb).astype(jnp.bfloat16)


def _fp8_rowwise_dot(a, b):
    return _fp8_dot(a, b, rowwise=True)


def _swiglu(dot):
    def mlp(x, w1, w3, w2):
        return dot(jax.nn.silu(dot(x, w1)) * dot(x, w3), w2)
    return mlp


@pytest.mark.parametrize("dot", [_fp8_dot, _fp8_rowwise_dot, jnp.dot], ids=["fp8-tensorwise", "fp8-rowwise", "bf16"])
def test_swiglu_mlp_is_no_attention(dot):
    # GEMM, SiLU's exponential, (fp8: the amax reduce over the whole tensor or each row, the scale divide), GEMM:
    # an exponential and a reduction between two dots, but no sum of exponentials over the keys: no attention.
    x, w13, w2 = ((64, 128), jnp.bfloat16), ((128, 256), jnp.bfloat16), ((256, 128), jnp.bfloat16)
    d = analyze(lowered(_swiglu(dot), x, w13, w13, w2), AnalysisOptions(dataflow=True))
    assert sum(r.kind == "dot" for r in d.rows) == 3
    assert any(r.kind == "transcendental" for r in d.rows)
    assert find_attention(d.rows, d.producers) == []
    rf = Roofline(d, H100, fuse_mode="elementwise")
    assert not any(k.attention for k in rf.fusion.kernels)


def test_attention_after_an_fp8_mlp_is_still_one_attention():
    # The fp8 MLP's amax stays outside; the attention that reads its output is found with its own two dots.
    def block(x, w1, w3, w2, wq, wk, wv):
        h = x + _swiglu(_fp8_dot)(x, w1, w3, w2)
        q, k, v = (jnp.einsum("sd,dhe->hse", h, w) for w in (wq, wk, wv))
        p = jax.nn.softmax(jnp.einsum("hqe,hke->hqk", q, k).astype(jnp.float32) / 8.0, -1)
        return jnp.einsum("hqk,hke->hqe", p.astype(jnp.bfloat16), v)

    bf = jnp.bfloat16
    proj = ((128, 2, 64), bf)
    d = analyze(lowered(block, ((64, 128), bf), ((128, 256), bf), ((128, 256), bf), ((256, 128), bf), proj, proj,
                        proj), AnalysisOptions(dataflow=True))
    (att,) = find_attention(d.rows, d.producers)
    assert d.rows[att.qk].result.shape == (2, 64, 64)
    assert d.rows[att.pv].result.shape == (2, 64, 64)


def _count(text: str) -> collections.Counter:
    d = analyze(text, AnalysisOptions(dataflow=True))
    return collections.Counter(d.rows[a.qk].scope.split("/")[-1] for a in find_attention(d.rows, d.producers))


def _deep():
    from mhlo_cost.lower.models.config import STDiT3Config

    return dataclasses.replace(STDiT3Config().small(), depth=28)


def test_stdit3_depth_28_through_jax_has_56_self_and_56_cross_attentions():
    from mhlo_cost.lower.frontends import jax_frontend

    assert _count(jax_frontend.lower("stdit3", _deep()).text) == {"attn": 56, "cross_attn": 56}


@pytest.mark.skipif(importlib.util.find_spec("torchax") is None, reason="torchax is not installed")
def test_stdit3_depth_28_through_torchax_has_56_self_and_56_cross_attentions():
    from mhlo_cost.lower.frontends._torch_shim import import_torchax

    import_torchax()
    from mhlo_cost.lower.frontends import torchax_frontend as tf

    assert _count(tf.lower("stdit3", _deep()).text) == {"attn": 56, "cross_attn": 56}


def test_stdit3_through_torch_xla_finds_every_attention():
    from mhlo_cost.lower.frontends import torch_xla_frontend as xf
    from mhlo_cost.lower.frontends import to_text

    if not xf.available():
        pytest.skip(f"torch-xla venv missing ({xf.venv_python()})")
    cfg = dataclasses.replace(_deep(), depth=4)
    counts = _count(to_text(xf.lower("stdit3", cfg).bytecode))
    assert sum(counts.values()) == 16  # 4 spatial + 4 temporal blocks, a self and a cross attention each


ATTENTION_ERROR = ("mhlo-cost: error: --attention goes with --fuse elementwise (--execution compiled) "
                   "or --execution inductor")


def test_report_names_attention_kernels(tmp_path, capsys):
    qkv = ((B, H, S, D), jnp.bfloat16)
    p = tmp_path / "att.mlir"
    p.write_text(lowered(attention, qkv, qkv, qkv, ((S, S), jnp.bfloat16)))
    assert main(["report", str(p), "--hardware", "h100", "--fuse", "elementwise", "--by", "op", "-q"]) == 0
    assert "attention" in capsys.readouterr().out
    assert main(["report", str(p), "--hardware", "h100", "--fuse", "elementwise", "--attention", "nope"]) == 2
    assert main(["report", str(p), "--hardware", "h100", "--attention", "fused", "-q"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == ATTENTION_ERROR
    for cmd in (["report"], ["blocks"]):  # without a profile too (it decides the fused memory figure)
        assert main([*cmd, str(p), "--attention", "unfused", "-q"]) == 2
        assert error_line(capsys.readouterr().err) == ATTENTION_ERROR
