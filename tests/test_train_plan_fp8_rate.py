"""The rate train-plan prices an fp8 recipe's GEMMs at (issue 38): every fp8 GEMM of the layer (forward, dgrad and
wgrad, e4m3 x e4m3 and e5m2 x e4m3) at the H100's fp8 peak x the profile's fp8 efficiency x wave x depth x the fp8
clock held under the power limit, and the fused kernel that holds each one no faster than that GEMM alone.

Expected numbers are closed forms worked out here from the published figures the profile cites: 1978.9 dense fp8
TFLOP/s at 1830 MHz ([H100-WP]), efficiency_fp8 0.854 and k_half_fp8 480 (tilelang's fp8 K sweep), 132 SMs and
256 x 128 tiles, the fp8 stream's 1395 MHz (benchmarks/data/measured_h200_train_run3.jsonl); the GEMM shapes from
the configuration (each linear's fprop, dgrad and wgrad), never from the code under test. And the measured fp8
stream itself: the profile's rate at that clock against the H200's 12 one-second samples.
"""
from __future__ import annotations

import json
import math
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP8_PEAK = 1978.9e12  # [H100-WP] dense FP8 tensor TFLOP/s, stated at 1830 MHz
CLOCK = 1395 / 1830  # the fp8 stream's clock under the 700 W limit over the peak's
H, HEADS, KV, FFN, SEQ, MB = 1024, 8, 2, 2048, 512, 2  # every GEMM dimension a multiple of 256: one wave factor
T = SEQ * MB  # tokens of one micro-batch on one device


def closed_form_s(m: int, n: int, k: int) -> float:
    """Seconds of one fp8 GEMM (m x n, contraction k) on the sustained H100 profile, worked out by hand."""
    tiles = math.ceil(m / 256) * math.ceil(n / 128)
    wave = tiles / (math.ceil(tiles / 132) * 132)
    return 2 * m * n * k / (FP8_PEAK * 0.854 * wave * k / (k + 480) * CLOCK)


def expected_gemms() -> list[float]:
    """The layer's fp8 GEMMs' seconds: per linear (in, out) its fprop (T x out, K in), dgrad (T x in, K out) and
    wgrad (in x out, K T); Llama's linears: fused QKV (h -> h + 2 kv_heads x head dim), output, gate, up, down."""
    d = H // HEADS
    linears = [(H, H + 2 * KV * d), (H, H), (H, FFN), (H, FFN), (FFN, H)]
    return sorted(s for i, o in linears for s in (closed_form_s(T, o, i), closed_form_s(T, i, o),
                                                   closed_form_s(i, o, T)))


@pytest.fixture(scope="module")
def layer():
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.costs import dense_layer
    from mhlo_cost.studies.plan.study import PlanOptions
    from mhlo_cost.studies.study import Study

    cfg = ScaleConfig(layers=2, hidden=H, heads=HEADS, kv_heads=KV, ffn=FFN, seq=SEQ, micro_batch=MB,
                      global_batch=8 * MB, d=8, vocab=1024, mlp_kind="swiglu", arch="llama", dropout=False,
                      attention="fused", precision="fp8-tensorwise")
    hw = PlanOptions(cfg, resolve_profile("dgx-h100")).hardware  # train-plan's default clock: sustained
    study = Study(dense_layer(cfg), training="always", hardware=hw, execution=cfg.execution,
                  attention=cfg.attention, dataflow=True)
    return study.analysis, study.roofline, hw


def _fp8_dots(a):
    return [i for i, r in enumerate(a.rows) if r.kind == "dot" and r.gemm_flops
            and all(t.dtype.startswith("f8") for t in r.operands[:2])]


def test_every_fp8_gemm_runs_at_the_fp8_rate_at_the_held_clock(layer):
    from mhlo_cost.roofline.optime import matrix_key, op_time

    a, _, hw = layer
    dots = _fp8_dots(a)
    assert len(dots) == 15  # five linears x (fprop, dgrad, wgrad): none left in bf16
    assert {matrix_key(a.rows[i], hw) for i in dots} == {"fp8"}  # e5m2 gradients too: never the bf16 peak
    assert {a.phases.phase[i] for i in dots} == {"forward", "backward"}
    priced = sorted(op_time(a.rows[i], hw).compute_s for i in dots)
    assert priced == pytest.approx(expected_gemms(), rel=1e-9)


def test_a_gemms_fused_kernel_is_never_faster_than_the_gemm(layer):
    """What a row's share of a fused kernel's time says is not its GEMM's rate (the kernel's time is shared among
    its members in proportion to their unfused times): the kernel's rate is the one to read, and it is at most the
    GEMM's closed-form rate."""
    a, rf, _ = layer
    by_kernel = {}
    for i in _fp8_dots(a):
        by_kernel.setdefault(rf.fusion.row_kernel[i], []).append(i)
    for k, members in by_kernel.items():
        kern = rf.fusion.kernels[k]
        alone = sum(rf.times[i].compute_s for i in members)
        assert kern.time_s >= alone
        assert kern.compute_s >= alone


def test_the_measured_fp8_stream_is_predicted_at_its_clock():
    """The H200's fp8 8192 x 16384 x 4096 stream at the 700 W limit (12 one-second samples at 1380-1410 MHz): the
    profile's rate at 1395 MHz (closed form: 1118 TFLOP/s) is below the measured median (1190) by under 7%; the
    efficiency was fitted on tilelang's bursts, not on this run."""
    from mhlo_cost.machines.clock import sustained
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.roofline import op_time

    rows = [json.loads(line) for line in open(os.path.join(ROOT, "benchmarks", "data",
                                                             "measured_h200_train_run3.jsonl"))]
    run = next(r for r in rows if r.get("kind") == "sustained" and r.get("dtype") == "fp8")
    m, n, k = run["m"], run["n"], run["k"]
    samples = sorted(s[0] for s in run["tflops_clock_watts"])
    measured = (samples[5] + samples[6]) / 2 * 1e12
    held = sorted(s[1] for s in run["tflops_clock_watts"])[6]
    assert held == 1395
    predicted = 2 * m * n * k / closed_form_s(m, n, k)
    assert predicted == pytest.approx(1118.2e12, rel=1e-3)
    assert 0.93 < predicted / measured < 1.0
    row = _fp8_row(m, n, k)
    assert 2 * m * n * k / op_time(row, sustained(get_profile("h200"))).compute_s == pytest.approx(predicted, rel=1e-9)


def _fp8_row(m: int, n: int, k: int):
    import jax
    import jax.numpy as jnp

    from mhlo_cost import analyze

    f = jax.jit(lambda x, y: jax.lax.dot_general(x, y, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32))
    text = f.lower(jax.ShapeDtypeStruct((m, k), jnp.float8_e4m3fn),
                   jax.ShapeDtypeStruct((k, n), jnp.float8_e4m3fn)).as_text()
    return [r for r in analyze(text).rows if r.kind == "dot"][0]
