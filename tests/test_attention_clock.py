"""A fused attention kernel on a profile marked sustained (train-plan's default) runs at the SM clock the board's
power limit leaves it (mhlo_cost/roofline/attention_compute.py ``sm_clock``): board power is the floor plus the
switching activity times the measured curve's part above it (Ujeniya et al. 2026's H100 points, written out here),
so a kernel whose tensor cores issue ``activity`` of their peak per clock holds the clock at which that part is the
stream's at the stream's clock over activity / stream, at most the peak's.
Its products, exponentials and vector work all issue on the SM clock; the backward's two memory-bound passes run at
the HBM's clock. Expected times are closed forms of the shapes and the h100-sxm profile's figures."""
from __future__ import annotations

import dataclasses

import pytest
from attention_case import B, D, H, S, attention_step_program

from mhlo_cost.machines.clock import sustained
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.machines.kernels import AttentionLibrary
from mhlo_cost.roofline import Roofline

PEAK_MHZ, BF16_MHZ = 1830, 1440  # hardware.toml [profile.h100-sxm.clock]
BF16_PEAK = 989.4e12  # [H100-WP] dense BF16
STREAM = 0.88  # hardware.toml [profile.h100-sxm.gemm] efficiency: the large-shape GEMM's fraction per clock
# (SM MHz, board W) under caps of 200-700 W: Ujeniya, Eitzinger, Hager, Wellein 2026, Fig. 6b and 9b (an H100)
POINTS = ((625, 199), (1132, 298), (1501, 395), (1731, 493), (1889, 591), (1969, 647))


def _curve(f):
    """The points joined by straight lines (and the end segments beyond them)."""
    i = next((i for i in range(1, len(POINTS) - 1) if f <= POINTS[i][0]), len(POINTS) - 1)
    (f0, p0), (f1, p1) = POINTS[i - 1], POINTS[i]
    return p0 + (p1 - p0) * (f - f0) / (f1 - f0)


def _held(activity):
    """The kernel's clock over the peak's: where the curve reaches floor + (curve(stream clock) - floor) x
    stream / activity, the floor the first segment's value at 0 MHz; capped at 1."""
    floor = _curve(0)
    target = floor + (_curve(BF16_MHZ) - floor) * STREAM / activity
    for (f0, p0), (f1, p1) in zip(POINTS, POINTS[1:]):
        if target <= p1 or (f1, p1) == POINTS[-1]:
            return min(1.0, (f0 + (f1 - f0) * (target - p0) / (p1 - p0)) / PEAK_MHZ)


@pytest.fixture(scope="module")
def program():
    return attention_step_program()


def _kernels(program, hw):
    return [k for k in Roofline(program, hw, execution="inductor").fusion.kernels if k.attention]


def _h100(fraction: float, exp_exposed: float, rate: float):
    """h100-sxm with its FA2 (what the inductor estimate runs) at ``fraction`` forward and backward, no ramp."""
    h100 = get_profile("h100")
    libs = tuple((n, AttentionLibrary(fraction, fraction, 0.0, exp_exposed) if n == "fa2" else lib)
                 for n, lib in h100.attention.libraries)
    return dataclasses.replace(h100, attention=dataclasses.replace(h100.attention, libraries=libs),
                               transcendental_rate=rate)


def test_the_h100_profile_states_the_clocks_used_here():
    hw = get_profile("h100")
    assert (hw.clock.peak_mhz, dict(hw.clock.sustained_mhz)["bf16"]) == (PEAK_MHZ, BF16_MHZ)
    assert hw.gemm.efficiency == STREAM and not hw.gemm.curve
    assert (hw.attention.get("fa2").forward, hw.attention.get("fa2").backward) == (0.419, 0.349)


def test_a_kernel_as_dense_as_the_stream_holds_the_streams_clock_its_passes_the_hbms(program):
    hw = _h100(STREAM, 0.0, 1e30)  # its products at the stream's fraction; no exponential time
    one = 2 * B * H * S * S * D  # one product of the score's size
    passes = hw.memory_time(B * H * S * D * (2 + 2 + 4 + 4 + 2) + B * H * S * 4, 2)  # bwd pre/postprocess
    slow = PEAK_MHZ / BF16_MHZ
    fwd, bwd = _kernels(program, sustained(hw))
    assert fwd.compute_s == pytest.approx(2 * one / (BF16_PEAK * STREAM) * slow, rel=1e-9)
    assert bwd.compute_s == pytest.approx(5 * one / (BF16_PEAK * STREAM) * slow + passes, rel=1e-9)
    # the same kernels at the peak clock (a profile not marked sustained: report, serve, validate_published)
    fwd0, bwd0 = _kernels(program, hw)
    assert fwd0.compute_s == pytest.approx(2 * one / (BF16_PEAK * STREAM), rel=1e-9)
    assert bwd0.compute_s == pytest.approx(5 * one / (BF16_PEAK * STREAM) + passes, rel=1e-9)


def test_a_sparser_kernel_holds_a_higher_clock_along_the_power_curve(program):
    fraction = 0.6
    hw = _h100(fraction, 0.0, 1e30)
    one = 2 * B * H * S * S * D
    held = _held(fraction)  # 520 W on the curve: 1774 MHz, 0.969 of the peak's
    assert BF16_MHZ / PEAK_MHZ < held
    fwd, _ = _kernels(program, sustained(hw))
    assert held < 1 and fwd.compute_s == pytest.approx(2 * one / (BF16_PEAK * fraction) / held, rel=1e-9)


def test_flashattention2_at_the_profiles_fraction_is_left_the_peaks_clock(program):
    hw = get_profile("h100")  # fa2: forward 0.419, backward 0.349 of the peak (the FA3 paper's FA2 bars)
    assert _held(0.419) == 1  # 711 W on the curve, past its 1969 MHz point, before its exponentials lower it further
    for k, k0 in zip(_kernels(program, sustained(hw)), _kernels(program, hw)):
        assert k.compute_s == k0.compute_s


def test_the_exposed_exponentials_lower_the_activity_and_slow_with_the_clock(program):
    rate = 132 * 16 * PEAK_MHZ * 1e6  # GH100's MUFU: 16 exponentials per clock per SM at the peak clock
    hw = _h100(STREAM, 1.0, rate)
    one = 2 * B * H * S * S * D
    matrix, exps = 2 * one / (BF16_PEAK * STREAM), B * H * S * S / rate  # one exponential per score
    activity = STREAM * matrix / (matrix + exps)
    held = _held(activity)
    assert held < 1
    fwd, _ = _kernels(program, sustained(hw))
    assert fwd.compute_s == pytest.approx((matrix + exps) / held, rel=1e-9)


def test_a_profile_without_a_clock_table_is_not_slowed(program):
    a100 = get_profile("a100")
    assert a100.clock is None
    fwd, bwd = _kernels(program, sustained(a100))
    fwd0, bwd0 = _kernels(program, a100)
    assert (fwd.compute_s, bwd.compute_s) == (fwd0.compute_s, bwd0.compute_s)


def test_a_kernels_products_at_full_issue_are_its_flops_over_the_peak_whatever_its_fraction(program):
    # what the step-average clock reads the attention's power from (studies/plan/power_clock.py): 2 products forward,
    # 5 backward (the score product recomputed), over the dense BF16 peak, at any fraction and on any clock
    one = 2 * B * H * S * S * D
    for fraction in (STREAM, 0.35):
        for hw in (_h100(fraction, 0.0, 1e30), sustained(_h100(fraction, 0.0, 1e30))):
            fwd, bwd = _kernels(program, hw)
            assert fwd.tensor_s == pytest.approx(2 * one / BF16_PEAK, rel=1e-9)
            assert bwd.tensor_s == pytest.approx(5 * one / BF16_PEAK, rel=1e-9)
