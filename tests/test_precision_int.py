"""int8 / int4 / fp4 GEMM rows of ``benchmarks/data/published_precision.toml`` (issue 36, items 3 and 5): every row has
a source, a configuration and a profile to be priced on; every source one role; a priced row of each new precision
(fp4 matmul, w4a16 and w8a16 weight-only) gives the time worked out here from the profile's peak x efficiency and
its memory model; a weight-only GEMM runs on the activations' matrix unit (no int4 MMA, as Marlin runs it on A100)."""
from __future__ import annotations

import math
import os
import sys

import pytest

from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.machines.precision import dtype_bits, weight_only_time

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import validate_precision as vpr  # noqa: E402

STORED = {"fp8": ("float8_e4m3fn", "float8_e5m2"), "fp4": ("float4_e2m1fn",), "int8": ("int8",), "int4": ("int4",)}


def rows_by_id():
    return {m["id"]: m for m in vpr.load()[1]}


def memory_s(hw, nbytes, kernels=1):
    """HBM time of ``kernels`` kernels moving ``nbytes``: each kernel's fill and drain (half_size_mb) and the bytes
    at the datasheet bandwidth x the streaming efficiency (the profile's measured memory model)."""
    mem = hw.memory
    return (nbytes + kernels * mem.half_bytes) / (hw.hbm_bandwidth * mem.efficiency)


def wave(hw, m, n):
    g = hw.gemm
    tiles = math.ceil(m / g.tile[0]) * math.ceil(n / g.tile[1])
    return tiles / (math.ceil(tiles / g.compute_units) * g.compute_units)


# -- the data file ------------------------------------------------------------------------------------------------
def test_every_new_row_has_a_source_a_config_and_a_profile():
    sources, rows = vpr.load()
    assert {"fp4", "int8", "int4"} <= {m["precision"] for m in rows}
    for m in rows:
        assert m["source"] in sources and m["config"].strip() and m["measured"] > 0
        assert m["params"]["dtype"] in STORED[m["precision"]], m["id"]
        assert m["program"] in ("matmul", "weight_only")
        get_profile(vpr.profile_name(m))  # a shipped profile prices it
        if "price_on" in m or m["program"] == "weight_only":
            assert m.get("price_note", "").strip(), m["id"]  # where it is priced otherwise, the row says why
        if m["program"] == "weight_only":
            p = m["params"]
            assert p["act_dtype"] in ("float16", "bfloat16") and p["group"] >= 0 and p["scale_dtype"]


def test_every_source_has_exactly_one_role_and_each_new_precision_a_held_out_source():
    sources, rows = vpr.load()
    assert all(s["role"] in ("fit", "held_out") for s in sources.values())
    for p in ("fp4", "int8", "int4"):
        held = {m["source"] for m in rows if m["precision"] == p and sources[m["source"]]["role"] == "held_out"}
        assert held, p


def test_a_row_on_a_chip_without_its_precisions_rate_must_say_the_path(tmp_path):
    p = tmp_path / "d.toml"
    src = '[[source]]\ntag = "a"\nurl = "https://x"\nrole = "held_out"\ntiming = "kernel"\n'
    row = ('[[m]]\nid = "r"\ncategory = "gemm"\nprecision = "fp4"\nchip = "h100-sxm"\nprogram = "matmul"\n'
           'params = { batch = 1, m = 8, n = 8, k = 8, dtype = "float4_e2m1fn", out_dtype = "bfloat16" }\n'
           'measured = 1.0\nunit = "ms"\nsource = "a"\nconfig = "c"\n')
    p.write_text(src + row)
    with pytest.raises(ValueError, match="h100-sxm has no fp4 matrix rate"):
        vpr.load(p)
    p.write_text(src + row + 'price_note = "upcast to fp8, as the library runs it on Hopper"\n')
    assert len(vpr.load(p)[1]) == 1


def test_a_weight_only_row_is_never_fitted_on():
    sources, rows = vpr.load()

    class Seen:
        ids = set()

        def ratio(self, m, value):
            self.ids.add(m["id"])
            return 0.6 / value[0]

    seen = Seen()
    vpr.fits(sources, rows, seen)
    assert not any(m["program"] == "weight_only" for m in rows if m["id"] in seen.ids)


def test_dtype_bits_of_packed_and_scale_types():
    assert [dtype_bits(d) for d in ("int4", "float4_e2m1fn", "int8", "float8_e4m3fn", "bfloat16", "float32")] == \
        [4, 4, 8, 8, 16, 32]
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_bits("int3x")


# -- priced rows: closed forms ------------------------------------------------------------------------------------
def test_an_fp4_compute_bound_row_is_flops_over_the_fp4_peak_times_its_fitted_efficiency():
    m = rows_by_id()["torchao-nvfp4-8192x8192x8192"]
    hw = get_profile("b200")
    eff, k_half = dict(hw.gemm.by_dtype)["fp4"], dict(hw.gemm.k_half_by_dtype)["fp4"]
    s = 8192
    compute = 2 * s ** 3 / (hw.matrix_flops["fp4"] * eff * wave(hw, s, s) * s / (s + k_half))
    # the bytes: two packed fp4 operands (half a byte an element) and the bf16 result; compute-bound here
    assert memory_s(hw, 2 * s * s // 2 + 2 * s * s) < compute
    est = vpr.Pricer(vpr.load()[0]).ratio(m, (eff, k_half)) * vpr.measured_s(m)
    assert est == pytest.approx(compute, rel=1e-9)  # the source times the kernel: no launch overhead


def test_an_fp4_memory_bound_row_is_its_packed_bytes_over_the_bandwidth():
    m = rows_by_id()["flashinfer-nvfp4-1x8192x8192"]
    hw = get_profile("b200")
    value = (dict(hw.gemm.by_dtype)["fp4"], dict(hw.gemm.k_half_by_dtype)["fp4"])
    nbytes = 8192 * 8192 // 2 + 8192 // 2 + 8192 * 2  # fp4 weight, fp4 activation row, bf16 result
    est = vpr.Pricer(vpr.load()[0]).ratio(m, value) * vpr.measured_s(m)
    assert est == pytest.approx(memory_s(hw, nbytes), rel=1e-9)  # a CUDA graph's time: no launch overhead


def test_an_int8_row_is_priced_at_the_int8_peak_times_the_fitted_int8_efficiency():
    m = rows_by_id()["sglang3093-sgl-int8-2048x6144x4096"]
    hw = get_profile("a100-sxm-80gb")
    eff, k_half = dict(hw.gemm.by_dtype)["int8"], dict(hw.gemm.k_half_by_dtype)["int8"]
    mm, n, k = 2048, 6144, 4096
    depth = k / (k + k_half) if k_half else 1.0
    compute = 2 * mm * n * k / (hw.matrix_flops["int8"] * eff * wave(hw, mm, n) * depth)
    assert memory_s(hw, mm * k + k * n + 2 * mm * n) < compute  # int8 operands, an fp16 result: compute-bound
    est = vpr.Pricer(vpr.load()[0]).ratio(m, (eff, k_half)) * vpr.measured_s(m)
    assert est == pytest.approx(compute, rel=1e-9)


def test_an_int8_rows_time_is_the_sources_printed_figure_inverted():
    """SGLang's bench_int8_gemm.py prints ((2MNK - MN) x 1 + 3MN x 4) x 1e-9 / seconds and calls it GB/s."""
    m = rows_by_id()["sglang2752-sgl-int8-2048x8192x21760"]
    mm, n, k = 2048, 8192, 21760
    assert vpr.measured_s(m) == pytest.approx(((2 * mm * n * k - mm * n) + 12 * mm * n) * 1e-9 / 501544.442461,
                                              rel=1e-5)


@pytest.mark.parametrize("rid, bits", [("marlin-w4a16-1x8192x8192", 4), ("marlin-w8a16-4x8192x8192", 8)])
def test_a_weight_only_row_is_the_weight_at_its_width_plus_scales_over_the_bandwidth(rid, bits):
    m = rows_by_id()[rid]
    hw = get_profile("h100-sxm")
    rows, n, k = m["params"]["m"], 8192, 8192
    nbytes = rows * k * 2 + k * n * bits // 8 + n * 2 + rows * n * 2  # f16 in, packed weight, a scale a column, out
    assert weight_only_time(hw, 1, rows, n, k, m["params"]["dtype"]).bytes == nbytes
    est = vpr.Pricer(vpr.load()[0]).ratio(m, None) * vpr.measured_s(m)
    assert est == pytest.approx(memory_s(hw, nbytes) + hw.kernel_overhead, rel=1e-9)


def test_grouped_scales_and_zeros_are_counted_at_their_widths():
    hw = get_profile("a100-sxm-80gb")
    m, n, k, g = 16, 4096, 4096, 128
    t = weight_only_time(hw, 1, m, n, k, "int4", group=g, zero=True)
    # AWQ: int4 weight, a float16 scale and an int4 zero per 128 inputs of each output channel
    assert t.bytes == m * k * 2 + k * n // 2 + (k // g) * n * 2 + (k // g) * n // 2 + m * n * 2
    assert t.time_s == pytest.approx(memory_s(hw, t.bytes) + hw.kernel_overhead, rel=1e-12)


def test_an_a100_int4_weight_only_gemm_runs_at_the_f16_rate_not_the_int4_one():
    """Marlin dequantises to fp16 and runs fp16 MMAs: the A100's int4 tensor rate (1,248 TOPS) is never used."""
    hw = get_profile("a100-sxm-80gb")
    m, n, k = 4096, 8192, 8192
    t = weight_only_time(hw, 1, m, n, k, "int4", group=128)
    g = hw.gemm
    eff = g.efficiency * wave(hw, m, n) * (k / (k + g.k_half) if g.k_half else 1.0)
    assert t.compute_s == pytest.approx(2 * m * n * k / (hw.matrix_flops["f16"] * eff), rel=1e-12)
    assert hw.matrix_flops["int4"] > hw.matrix_flops["f16"] and t.compute_s > t.memory_s
    assert "f16 MMAs" in t.note and "int4" in t.note


@pytest.mark.parametrize("args", [(1, 0, 8, 8), (1, 4, 8, 100)])
def test_a_bad_weight_only_shape_is_a_value_error(args):
    batch, m, n, k = args
    with pytest.raises(ValueError, match="sizes must be positive and the group divide K"):
        weight_only_time(get_profile("h100-sxm"), batch, m, n, k, "int4", group=64)
