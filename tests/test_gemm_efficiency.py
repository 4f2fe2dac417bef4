"""The GEMM efficiency model (mhlo_cost/machines/gemm.py): closed forms for large, wave-quantized and curve-priced
dots, and the TOML table's validation."""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost import analyze
from mhlo_cost.machines.gemm import GemmModel
from mhlo_cost.machines.hardware import HardwareError, get_profile, load_profiles
from mhlo_cost.roofline import op_time

H100 = get_profile("h100")


def dot_row(m, k, n, dtype=jnp.bfloat16, batch=None):
    lead = (batch,) if batch else ()
    f = jax.jit(lambda x, y: x @ y)
    text = f.lower(jax.ShapeDtypeStruct(lead + (m, k), dtype), jax.ShapeDtypeStruct(lead + (k, n), dtype)).as_text()
    return [r for r in analyze(text).rows if r.kind == "dot"][0]


def test_large_bf16_matmul_runs_at_peak_times_efficiency_times_wave():
    n = 8192
    t = op_time(dot_row(n, n, n), H100)
    # h100: efficiency 0.88, 132 SMs, 256 x 128 tiles: 32 x 64 = 2048 tiles in ceil(2048 / 132) = 16 waves
    wave = 2048 / (16 * 132)
    assert t.compute_s == pytest.approx(2 * n**3 / (989.4e12 * 0.88 * wave), rel=1e-12)
    assert t.utilisation < 0.88


def test_one_tile_short_of_a_wave_costs_a_whole_wave():
    hw = dataclasses.replace(H100, gemm=GemmModel(efficiency=0.5, compute_units=4, tile=(128, 128)))
    full = op_time(dot_row(256, 1024, 256), hw)  # 2 x 2 = 4 tiles: one full wave
    five = op_time(dot_row(256 + 1, 1024, 256), hw)  # 3 x 2 = 6 tiles: 2 waves, 6 / 8 busy
    assert full.compute_s == pytest.approx(2 * 256 * 1024 * 256 / (989.4e12 * 0.5), rel=1e-12)
    assert five.compute_s == pytest.approx(2 * 257 * 1024 * 256 / (989.4e12 * 0.5 * 6 / 8), rel=1e-12)


def test_batched_dot_counts_tiles_per_batch():
    hw = dataclasses.replace(H100, gemm=GemmModel(efficiency=1.0, compute_units=10, tile=(64, 64)))
    t = op_time(dot_row(64, 32, 64, batch=7), hw)  # 7 tiles on 10 units: one wave, 7 / 10 busy
    assert t.compute_s == pytest.approx(2 * 7 * 64 * 32 * 64 / (989.4e12 * 0.7), rel=1e-12)


def test_calibrated_curve_interpolates_on_log_flops(tmp_path):
    p = tmp_path / "hw.toml"
    p.write_text(
        '[profile.toy]\ndescription = "toy"\nhbm_bandwidth_gb_s = 100\nhbm_capacity_gb = 8\n'
        'link_bandwidth_gb_s = 1\nhop_latency_us = 1\nkernel_overhead_us = 1\ntranscendental_tops = 0.1\n'
        '[profile.toy.matrix_tflops]\nf32 = 1\n[profile.toy.vector_tflops]\nf32 = 1\n'
        '[profile.toy.gemm.curve]\nf32 = [[0.001, 0.2], [1.0, 0.8]]\n')
    hw = load_profiles(p)["toy"]
    small, big = op_time(dot_row(8, 8, 8, jnp.float32), hw), op_time(dot_row(1024, 1024, 1024, jnp.float32), hw)
    assert small.compute_s == pytest.approx(2 * 8**3 / (1e12 * 0.2), rel=1e-12)  # below the curve: its first point
    assert big.compute_s == pytest.approx(2 * 1024**3 / (1e12 * 0.8), rel=1e-12)  # above: its last
    mid = op_time(dot_row(100, 100, 100, jnp.float32), hw)  # 2e6 FLOPs, between 1e6 and 1e9 on a log scale
    frac = 0.2 + (math.log(2e6) - math.log(1e6)) / (math.log(1e9) - math.log(1e6)) * 0.6
    assert mid.compute_s == pytest.approx(2e6 / (1e12 * frac), rel=1e-12)


@pytest.mark.parametrize("table, msg", [
    ("efficiency = 1.5", "efficiency must be a number in [0.0001, 1]"),
    ("tile = [128]", "tile must be [rows, columns]"),
    ("compute_units = -1", "compute_units must be a whole number"),
    ("speed = 2", "unknown field 'speed'"),
    ("curve = { f32 = [[1.0, 0.5], [0.5, 0.6]] }", "strictly ascending"),
])
def test_bad_gemm_table_is_a_hardware_error(tmp_path, table, msg):
    p = tmp_path / "hw.toml"
    p.write_text(
        '[profile.toy]\ndescription = "toy"\nhbm_bandwidth_gb_s = 100\nhbm_capacity_gb = 8\n'
        'link_bandwidth_gb_s = 1\nhop_latency_us = 1\nkernel_overhead_us = 1\ntranscendental_tops = 0.1\n'
        f'[profile.toy.matrix_tflops]\nf32 = 1\n[profile.toy.vector_tflops]\nf32 = 1\n[profile.toy.gemm]\n{table}\n')
    with pytest.raises(HardwareError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_profiles(p)


def test_split_k_fills_the_units_and_an_empty_batch_is_no_division():
    g = GemmModel(1.0, 108, (128, 128), split_k=True)
    # 4 output tiles on 108 units: split 108 // 4 = 27 ways along K, 108 tile-slices in one wave
    assert g.wave(1, 256, 256) == 1.0
    # 5 tiles: 21 slices each, 105 of 108 units
    assert g.wave(1, 5 * 128, 128) == 105 / 108
    assert GemmModel(1.0, 108, (128, 128)).wave(1, 5 * 128, 128) == 5 / 108
    for split in (False, True):  # a zero-size batch divided by zero tiles
        assert GemmModel(1.0, 108, (128, 128), split_k=split).wave(0, 128, 128) == 1.0
