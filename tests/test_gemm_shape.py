"""The shape terms of the GEMM efficiency model (mhlo_cost/machines/gemm.py): the small-K depth K / (K + k_half) on
top of wave quantization, through a profile table and op_time; and k_half's validation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost import analyze
from mhlo_cost.machines.hardware import HardwareError, load_profiles
from mhlo_cost.roofline import op_time

TOY = ('[profile.toy]\ndescription = "toy"\nhbm_bandwidth_gb_s = 1000000\nhbm_capacity_gb = 8\n'
       'link_bandwidth_gb_s = 1\nhop_latency_us = 1\nkernel_overhead_us = 0\ntranscendental_tops = 0.1\n'
       '[profile.toy.matrix_tflops]\nf32 = 1\n[profile.toy.vector_tflops]\nf32 = 1\n[profile.toy.gemm]\n')


def toy(tmp_path, table):
    p = tmp_path / "hw.toml"
    p.write_text(TOY + table)
    return load_profiles(p)["toy"]


def dot_row(m, k, n, batch=None):
    lead = (batch,) if batch else ()
    f = jax.jit(lambda x, y: x @ y)
    s = jax.ShapeDtypeStruct
    text = f.lower(s(lead + (m, k), jnp.float32), s(lead + (k, n), jnp.float32)).as_text()
    return [r for r in analyze(text).rows if r.kind == "dot"][0]


@pytest.mark.parametrize("k", [32, 96, 1000])
def test_short_contraction_pays_k_half_steps_per_tile(tmp_path, k):
    hw = toy(tmp_path, "efficiency = 0.5\nk_half = 96\n")
    t = op_time(dot_row(64, k, 64), hw)
    # 1 TFLOP/s x 0.5 x K / (K + 96), no compute units: no wave term
    assert t.compute_s == pytest.approx(2 * 64 * k * 64 / (1e12 * 0.5 * k / (k + 96)), rel=1e-12)


def test_depth_and_wave_multiply(tmp_path):
    hw = toy(tmp_path, "efficiency = 1\ncompute_units = 4\ntile = [32, 32]\nk_half = 64\n")
    t = op_time(dot_row(32, 64, 32, batch=5), hw)  # 5 tiles on 4 units: 2 waves, 5 / 8 busy; K = 64: half rate
    assert t.compute_s == pytest.approx(2 * 5 * 32 * 64 * 32 / (1e12 * (5 / 8) * (64 / 128)), rel=1e-12)


def test_no_k_half_is_no_small_k_loss(tmp_path):
    hw = toy(tmp_path, "efficiency = 0.25\n")
    assert op_time(dot_row(16, 2, 16), hw).compute_s == pytest.approx(2 * 16 * 2 * 16 / 0.25e12, rel=1e-12)


def test_k_half_round_trips_through_the_profile_dict(tmp_path):
    hw = toy(tmp_path, "k_half = 7\n")
    assert hw.as_dict()["gemm"]["k_half"] == 7


@pytest.mark.parametrize("value", ["-1", "1.5", "true", '"64"'])
def test_bad_k_half_is_a_hardware_error(tmp_path, value):
    with pytest.raises(HardwareError, match="k_half must be a whole number"):
        toy(tmp_path, f"k_half = {value}\n")
