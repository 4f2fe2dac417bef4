"""The Inductor execution model (--execution inductor): kernels and bytes against what Inductor's scheduler rules
give, worked out by hand; CUDA graphs removing the launches; the compile gain in the report."""
from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from helpers import lowered, run_cli
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline
from mhlo_cost.roofline.inductor import GRAPH_FILL_S, GRAPH_GAP_S, fits, inductor
from stderr_lines import error_line

H100 = dataclasses.replace(get_profile("h100"), gemm=None)
B, C = 512, 256
F32 = 4


def _analysis(f, *shapes):
    return analyze(lowered(f, *shapes), AnalysisOptions(dataflow=True))


def ln_gelu_residual(x, g, b):
    """LayerNorm (two row reductions), tanh GELU, and the residual add: one Triton kernel in Inductor."""
    m = x.mean(-1, keepdims=True)
    c = x - m
    v = (c * c).mean(-1, keepdims=True)
    y = c * lax.rsqrt(v + 1e-5) * g + b
    return jax.nn.gelu(y, approximate=True) + x


def test_layernorm_gelu_residual_is_one_kernel_reading_x_once():
    a = _analysis(ln_gelu_residual, ((B, C), jnp.float32), ((C,), jnp.float32), ((C,), jnp.float32))
    f = inductor(a, H100)
    assert len(f.kernels) == 1
    k = f.kernels[0]
    # reads x, gamma, beta once (plus a few f32 scalar constants), writes the output once
    assert 0 <= k.bytes_read - (B * C + 2 * C) * F32 <= 16 * F32
    assert k.bytes_written == B * C * F32
    assert (k.numel, k.rnumel) == (B, C)


def test_gemm_is_a_library_call_with_its_bias_and_the_chain_a_kernel_after_it():
    def f(x, w, bias, g, b):
        h = x @ w + bias
        return ln_gelu_residual(h, g, b)

    K = 128
    a = _analysis(f, ((B, K), jnp.float32), ((K, C), jnp.float32), ((C,), jnp.float32), ((C,), jnp.float32),
                  ((C,), jnp.float32))
    f_ = inductor(a, H100)
    assert len(f_.kernels) == 2
    gemm, chain = f_.kernels
    assert gemm.extern and gemm.has_dot and not chain.extern
    assert [a.rows[i].op.split(".")[-1] for i in gemm.members] == ["dot_general", "add"]  # addmm: the bias only
    assert gemm.bytes_read == (B * K + K * C + C) * F32 and gemm.bytes_written == B * C * F32
    # the chain reads h (for the norm and the residual: once), gamma and beta; writes the output
    assert 0 <= chain.bytes_read - (B * C + 2 * C) * F32 <= 16 * F32
    assert chain.bytes_written == B * C * F32


def test_a_reduction_of_another_shape_splits_the_kernel():
    def f(x):
        return jax.nn.softmax(x, -1).sum(0)  # rows of C, then columns of B: two iteration spaces

    a = _analysis(f, ((B, C), jnp.float32))
    ks = inductor(a, H100).kernels
    assert len(ks) == 2
    assert (ks[0].numel, ks[0].rnumel) == (B, C) and (ks[1].numel, ks[1].rnumel) == (C, B)
    assert 0 <= ks[0].bytes_read - B * C * F32 <= 16 * F32  # x (and scalar constants)
    assert ks[0].bytes_written == B * C * F32  # the probabilities
    assert 0 <= ks[1].bytes_read - B * C * F32 <= 16 * F32 and ks[1].bytes_written == C * F32


@pytest.mark.parametrize("kernel,row,joined", [
    ((64, 1), (64, 1), (64, 1)), ((64, 1), (32, 1), None),  # pointwise: the same numel only
    ((8, 8), (64, 1), (8, 8)), ((8, 8), (8, 1), (8, 8)), ((8, 8), (16, 1), None),  # into a reduction: in or out
    ((64, 1), (8, 8), (8, 8)), ((8, 1), (8, 8), (8, 8)),  # a reduction over a pointwise kernel's space
    ((8, 8), (8, 8), (8, 8)), ((8, 8), (4, 16), None), ((8, 8), (8, 4), None),  # reductions: the same group
])
def test_groups_fuse_as_the_triton_backend_allows(kernel, row, joined):
    assert fits(kernel, row) == joined


def attention(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


def test_written_attention_is_rewritten_to_sdpa_or_runs_as_three_kernels():
    BH, S, D = 4, 1024, 64
    a = _analysis(attention, *[((1, BH, S, D), jnp.bfloat16)] * 3)
    fused = inductor(a, H100)
    unfused = inductor(a, H100, attention="unfused")
    assert [k.attention for k in fused.kernels] == [True] and fused.kernels[0].backend == "flash"
    # bmm, one softmax kernel (the scale fused into it), bmm
    assert len(unfused.kernels) == 3 and [k.extern for k in unfused.kernels] == [True, False, True]
    soft = unfused.kernels[1]
    scores = BH * S * S * 2
    assert 0 <= soft.bytes_read - scores <= 64 and soft.bytes_written == scores  # (and scalar constants)
    fb = sum(k.bytes_read + k.bytes_written for k in fused.kernels)
    ub = sum(k.bytes_read + k.bytes_written for k in unfused.kernels)
    assert 0 <= ub - fb - 4 * scores <= 64  # written by the bmm, read and written by softmax, read by the bmm


def tiny_chain(x):
    for _ in range(3):  # x: [8, 16]; reductions over 8 and over 16 alternate: six kernels
        x = x + x.sum(0, keepdims=True)
        x = x * x.sum(1, keepdims=True)
    return x


def test_cuda_graphs_remove_the_host_launches():
    a = _analysis(tiny_chain, ((8, 16), jnp.float32))
    plain, graphs = inductor(a, H100), inductor(a, H100, cudagraphs=True)
    n = len(plain.kernels)
    assert n == len(graphs.kernels) == 6
    full = H100.hbm_bandwidth * H100.memory.efficiency
    fill = H100.memory.half_bytes / full  # 13.3 MB at 0.92 x 3.35 TB/s: about 4.3 us, above the graph's 2 us
    assert fill > GRAPH_FILL_S
    # each kernel moves a few hundred bytes: outside a graph its bytes plus the profile's fill and drain, in a graph
    # its bytes plus GRAPH_FILL_S (worked out here from the profile's fields) ...
    nbytes = [k.bytes_read + k.bytes_written for k in plain.kernels]
    assert nbytes == [k.bytes_read + k.bytes_written for k in graphs.kernels] and all(0 < b < 4096 for b in nbytes)
    dev_plain = math.fsum(b / full + fill for b in nbytes)
    dev_graphs = math.fsum(b / full + GRAPH_FILL_S for b in nbytes)
    assert math.fsum(max(k.compute_s, k.memory_s) for k in plain.kernels) == pytest.approx(dev_plain, rel=1e-9)
    assert math.fsum(max(k.compute_s, k.memory_s) for k in graphs.kernels) == pytest.approx(dev_graphs, rel=1e-9)
    # ... after a launch gap of the profile's each without graphs, or the host's launch of a Triton kernel of four
    # arguments (x, the output, xnumel, rnumel) where that is longer: 6.8 us with none, 9.1 us with 19 (tritonbench
    # PR #1017); the graph's gap with graphs, and no host launch
    assert all((len(k.outputs), k.rnumel > 1) == (1, True) for k in plain.kernels)
    host = 6.8e-6 + (9.1e-6 - 6.8e-6) / 19 * 4
    assert all(k.host_s == pytest.approx(host, rel=1e-12) for k in plain.kernels)
    per = [b / full + fill + H100.kernel_overhead for b in nbytes]
    assert plain.time_s == pytest.approx(math.fsum(max(t, host) for t in per), rel=1e-9)
    assert graphs.time_s == pytest.approx(dev_graphs + n * GRAPH_GAP_S, rel=1e-9)
    assert all(k.host_s == 0 for k in graphs.kernels)


def test_cuda_graphs_keep_a_fill_shorter_than_the_graph_floor():
    """A profile whose fill and drain is already under GRAPH_FILL_S keeps it in a graph: the cap only lowers."""
    half = GRAPH_FILL_S / 4 * H100.hbm_bandwidth * H100.memory.efficiency  # a fill of 0.5 us
    hw = dataclasses.replace(H100, memory=dataclasses.replace(H100.memory, half_bytes=half))
    a = _analysis(tiny_chain, ((8, 16), jnp.float32))
    plain, graphs = inductor(a, hw), inductor(a, hw, cudagraphs=True)
    assert [k.memory_s for k in graphs.kernels] == [k.memory_s for k in plain.kernels]
    assert all(k.memory_s >= GRAPH_FILL_S / 4 for k in graphs.kernels)


def test_a_graph_replayed_gemv_streams_its_weight_after_the_graph_fill():
    """Decode's matrix-vector product (a 4096 x 11008 bf16 weight, one token) on A100: memory-bound; in a graph
    its bytes at the profile's streaming rate plus GRAPH_FILL_S, outside one plus the profile's fill."""
    a100 = get_profile("a100")
    a = _analysis(lambda x, w: x @ w, ((1, 4096), jnp.bfloat16), ((4096, 11008), jnp.bfloat16))
    plain, graphs = inductor(a, a100), inductor(a, a100, cudagraphs=True)
    [kp], [kg] = plain.kernels, graphs.kernels
    nbytes = 2 * (4096 + 4096 * 11008 + 11008)  # bf16 vector, weight, result
    assert kg.bytes_read + kg.bytes_written == nbytes and kg.extern
    full = a100.hbm_bandwidth * a100.memory.efficiency
    assert kp.memory_s == pytest.approx((nbytes + a100.memory.half_bytes) / full, rel=1e-9)
    assert kg.memory_s == pytest.approx(nbytes / full + GRAPH_FILL_S, rel=1e-9)
    assert kg.bound == "memory" and kg.memory_s < kp.memory_s


def test_compile_gain_is_eager_over_inductor_in_summary_and_blocks():
    a = _analysis(tiny_chain, ((8, 16), jnp.float32))
    rf = Roofline(a, H100, execution="inductor")
    tot = rf.totals()
    eager = Roofline(a, H100, execution="eager").totals()["est_time_fused_overlap_s"]
    assert tot["est_time_eager_overlap_s"] == eager
    assert tot["compile_gain"] == eager / tot["est_time_fused_overlap_s"]
    from mhlo_cost.analysis.collectors import assign_blocks

    df = rf.block_frame(assign_blocks(a))
    total = df[df["block"] == "TOTAL"].iloc[0]
    assert total["compile_gain"] == pytest.approx(tot["compile_gain"], rel=1e-12)


def test_report_inductor_json_and_option_refusals(tmp_path, capsys):
    p = tmp_path / "m.mlir"
    p.write_text(lowered(ln_gelu_residual, ((B, C), jnp.float32), ((C,), jnp.float32), ((C,), jnp.float32)))
    code, out, _ = run_cli(["report", p, "--hardware", "h100", "--execution", "inductor", "--cudagraphs",
                            "--format", "json", "-q"], capsys)
    assert code == 0
    doc = json.loads(out)
    flat = json.dumps(doc)
    assert '"execution": "inductor"' in flat and "compile_gain" in flat
    for argv in (["--cudagraphs"], ["--execution", "eager", "--cudagraphs"]):
        code, _, err = run_cli(["report", p, "--hardware", "h100", "-q", *argv], capsys)
        assert code == 2 and "--cudagraphs" in error_line(err)


def test_batchnorm_statistics_are_inlined_into_the_normalisation():
    """Inference BatchNorm + ReLU over NCHW: rsqrt(var + eps) over channels is read only through a broadcast, so
    Inductor inlines it: one kernel reading x and the four channel vectors, writing the output."""
    N, Ch, H, W = 2, 64, 16, 16

    def bn_relu(x, mean, var, g, b):
        c = (1, Ch, 1, 1)
        y = (x - mean.reshape(c)) * lax.rsqrt(var.reshape(c) + 1e-5) * g.reshape(c) + b.reshape(c)
        return jnp.maximum(y, 0.0)

    a = _analysis(bn_relu, ((N, Ch, H, W), jnp.float32), *[((Ch,), jnp.float32)] * 4)
    ks = inductor(a, H100).kernels
    assert len(ks) == 1
    assert 0 <= ks[0].bytes_read - (N * Ch * H * W + 4 * Ch) * F32 <= 16 * F32
    assert ks[0].bytes_written == N * Ch * H * W * F32
