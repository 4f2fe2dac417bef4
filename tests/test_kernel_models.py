"""Kernel models from measurements (issue 25, item 2): achievable HBM bandwidth by kernel size, attention
kernels per library with a causal mask and a backward recognised, cross-entropy not an attention, long rows
one kernel, and the accuracy statement (item 4)."""
import dataclasses

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.machines.accuracy import median_error, statement
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import HardwareError, get_profile, load_profiles
from mhlo_cost.roofline.attention import find_attention
from mhlo_cost.roofline.attention_backward import find_attention_backward
from mhlo_cost.roofline.attention_compute import is_causal
from mhlo_cost.roofline.estimate import Roofline

F32, BF16 = jnp.float32, jnp.bfloat16
A100 = get_profile("a100")


def lowered(f, *shapes):
    return jax.jit(f).lower(*[jax.ShapeDtypeStruct(s, d) for s, d in shapes]).as_text()


def attn(q, k, v, causal=False):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=F32)
    if causal:
        i = jax.lax.iota(jnp.int32, q.shape[2])
        s = jnp.where(i[:, None] >= i[None, :], s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1).astype(q.dtype), v)


TOY = '''schema_version = 1
[profile.toy]
description = "toy"
hbm_bandwidth_gb_s = 1000
hbm_capacity_gb = 8
link_bandwidth_gb_s = 10
hop_latency_us = 1
kernel_overhead_us = 0
transcendental_tops = 1
[profile.toy.matrix_tflops]
bf16 = 100
[profile.toy.vector_tflops]
f32 = 10
[profile.toy.memory]
efficiency = 0.5
half_size_mb = 4
'''


def test_small_kernels_reach_less_of_the_bandwidth(tmp_path):
    p = tmp_path / "toy.toml"
    p.write_text(TOY)
    hw = load_profiles(p)["toy"]
    # n bytes in one kernel take (n + 4 MB) / (1000 GB/s x 0.5): 4 MB reach a quarter of the datasheet figure
    assert hw.memory_time(4e6, 1) == pytest.approx(8e6 / 5e11)
    assert hw.memory_time(4e9, 1) == pytest.approx(4.004e9 / 5e11)
    assert 4e6 / hw.memory_time(4e6, 1) < 4e9 / hw.memory_time(4e9, 1)
    assert hw.memory_time(4e6) == 4e6 / 1e12  # kernels=0: the datasheet figure


@pytest.mark.parametrize("bad, says", [("efficiency = 0.5", "efficiency = 2"), ("half_size_mb = 4", "half = 4")])
def test_bad_memory_table_is_one_clear_error(tmp_path, bad, says):
    p = tmp_path / "toy.toml"
    p.write_text(TOY.replace(bad, says))
    with pytest.raises(HardwareError, match="memory"):
        load_profiles(p)


def test_causal_mask_is_recognised_and_prices_half_the_blocks():
    b, h, s, d = 1, 8, 4096, 128
    shapes = [((b, h, s, d), BF16)] * 3
    times = {}
    for causal in (False, True):
        a = analyze(lowered(lambda q, k, v: attn(q, k, v, causal), *shapes), AnalysisOptions(dataflow=True))
        (att,) = find_attention(a.rows, a.producers)
        assert is_causal(a.rows, a.producers, att.members) is causal
        rf = Roofline(a, A100, fuse_mode="elementwise")
        (k,) = [k for k in rf.fusion.kernels if k.attention]
        times[causal] = k.compute_s  # the attention kernel (the mask is made by a kernel of its own)
        assert rf.flops >= 4 * b * h * s * s * d  # the program's FLOPs stay what the IR says
    n = s // 128  # key tiles: a causal kernel computes n (n + 1) / 2 of the n^2 blocks
    assert times[True] / times[False] == pytest.approx((n + 1) / (2 * n), rel=0.02)


def test_the_library_sets_the_attention_speed():
    a = analyze(lowered(attn, *[((2, 16, 4096, 128), BF16)] * 3), AnalysisOptions(dataflow=True))
    h100 = get_profile("h100")
    t = {}
    for lib in ("fa2", "fa3"):
        hw = dataclasses.replace(h100, attention=dataclasses.replace(h100.attention, library=lib))
        t[lib] = Roofline(a, hw, fuse_mode="elementwise").totals()["est_time_fused_s"]
    b, h, s, d = 2, 16, 4096, 128
    n = s / h100.attention.tile  # key tiles one query tile visits

    def closed_form(lib):  # the products at the library's rate (after its ramp), plus its exposed exponentials
        e = h100.attention.get(lib)
        matrix = 4 * b * h * s * s * d / (989.4e12 * e.forward * n / (n + e.ramp))
        return matrix + e.exp_exposed * b * h * s * s / h100.transcendental_rate
    assert t["fa2"] / t["fa3"] == pytest.approx(closed_form("fa2") / closed_form("fa3"), rel=0.03)
    assert t["fa3"] == pytest.approx(closed_form("fa3"), rel=0.05)


def test_exposed_exponentials_add_to_the_products_time():
    """exp_exposed = 1: the kernel takes its products' time plus its exponentials' (B H S^2 at the transcendental
    rate); 0: the larger of the two, as before. Head dim 64 feels it most (the exponentials per FLOP double)."""
    b, h, s, d = 4, 16, 2048, 64
    a = analyze(lowered(attn, *[((b, h, s, d), BF16)] * 3), AnalysisOptions(dataflow=True))
    h100 = get_profile("h100")
    t = {}
    for exposed in (0.0, 1.0):
        libs = tuple((name, dataclasses.replace(lib, exp_exposed=exposed)) for name, lib in h100.attention.libraries)
        hw = dataclasses.replace(h100, attention=dataclasses.replace(h100.attention, libraries=libs))
        t[exposed] = Roofline(a, hw, fuse_mode="elementwise").totals()["est_time_fused_s"]
    exps = b * h * s * s / h100.transcendental_rate
    assert t[1.0] - t[0.0] == pytest.approx(exps, rel=0.02)


def test_attention_backward_is_one_kernel_without_scores_in_hbm():
    b, h, s, d = 1, 4, 2048, 64
    loss = lambda q, k, v, w: (attn(q, k, v).astype(F32) ** 2 * w).sum()  # noqa: E731  (needs O itself)
    a = analyze(lowered(jax.grad(loss, argnums=(0, 1, 2)), *[((b, h, s, d), BF16)] * 4), AnalysisOptions(dataflow=True))
    fwd = find_attention(a.rows, a.producers)
    bwd, shapes = find_attention_backward(a.rows, a.producers, fwd)
    assert len(fwd) == 1 and len(bwd) == 1 and (b, h, s, s) in shapes
    dots = {i for i, r in enumerate(a.rows) if r.kind == "dot"}
    assert len(dots) == 6 and dots <= set(fwd[0].members) | set(bwd[0].members)  # QK, PV, dV, dP, dQ, dK
    rf = Roofline(a, A100, fuse_mode="elementwise")
    score = b * h * s * s * 2
    assert rf.totals()["fused_bytes"] < score  # Q, K, V, dO, dQ, dK, dV: no S x S matrix goes through HBM


def test_softmax_cross_entropy_is_not_an_attention():
    def loss(x, w, t):
        logits = (x @ w).astype(F32)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), t[:, None], 1).mean()
    a = analyze(lowered(jax.grad(loss), ((512, 256), BF16), ((256, 4096), BF16), ((512,), jnp.int32)),
                AnalysisOptions(dataflow=True))
    assert find_attention(a.rows, a.producers) == []


def test_a_row_reduction_over_any_row_length_is_one_kernel():
    def rms(x):
        xf = x.astype(F32)
        return (xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)).astype(x.dtype)
    a = analyze(lowered(rms, ((64, 65536), BF16)), AnalysisOptions(dataflow=True))
    rf = Roofline(a, A100, fuse_mode="elementwise")
    assert rf.totals()["fused_kernels"] == 1
    assert 0 <= rf.totals()["fused_bytes"] - 2 * 64 * 65536 * 2 < 64  # read x once, write y once (+ scalars)


def test_accuracy_statement_beside_an_estimate():
    e = median_error("a100-sxm-80gb", "model")
    assert e is not None and 0 <= e < 1
    assert f"{e:.0%}" in statement("a100-sxm-80gb", "model")
    assert "no published measurement" in statement("no-such-chip")
    assert median_error("a100-sxm-80gb", "model", "eager") is None
