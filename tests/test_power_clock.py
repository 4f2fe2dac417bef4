"""The board power of tensor-core work against its clock and the step-average clock (mhlo_cost/machines/power.py,
machines/clock.py's step_average / at_clocks, studies/plan/power_clock.py: train-plan's --clock average)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mhlo_cost.machines.clock import CLOCKS, at_clocks, clock_factor, step_average, sustained
from mhlo_cost.machines.hardware import HardwareError, get_profile, load_profiles
from mhlo_cost.machines.power import curve_w, floor_w, step_clock, stream_clock, stream_w

# Ujeniya et al. 2026 (arXiv 2604.11391) Fig. 6b / 9b, H100, ViT-L/16: (SM MHz, board W) per power cap 200-700 W
PAPER = [(625, 199), (1132, 298), (1501, 395), (1731, 493), (1889, 591), (1969, 647)]
TOY = ('[profile.toy]\ndescription = "toy"\nhbm_bandwidth_gb_s = 100\nhbm_capacity_gb = 8\n'
       'link_bandwidth_gb_s = 1\nhop_latency_us = 1\nkernel_overhead_us = 1\ntranscendental_tops = 0.1\n'
       '[profile.toy.matrix_tflops]\nbf16 = 100\n[profile.toy.vector_tflops]\nf32 = 1\n')


def toy(tmp_path, clock: str):
    p = tmp_path / "hw.toml"
    p.write_text(TOY + "[profile.toy.clock]\n" + clock)
    return load_profiles(p)["toy"]


def test_the_curve_passes_through_the_papers_points_and_its_floor_extends_the_first_segment():
    for mhz, w in PAPER:
        assert curve_w(mhz) == pytest.approx(w, abs=1e-9)
    assert curve_w(1316.5) == pytest.approx((298 + 395) / 2)  # halfway between 1132 and 1501 MHz
    assert floor_w() == pytest.approx(199 - 625 * (298 - 199) / (1132 - 625))  # 76.96 W at zero clock


def test_a_stream_scales_the_curve_above_its_floor_through_its_measured_point():
    p0 = 199 - 625 * 99 / 507
    at_1440 = 298 + (1440 - 1132) * 97 / 369  # the curve at the H200 stream's 1440 MHz
    assert stream_w(1440, 1440, 700) == pytest.approx(700)
    assert stream_w(1501, 1440, 700) == pytest.approx(p0 + (700 - p0) * (395 - p0) / (at_1440 - p0))
    assert stream_w(1731, 1440, 700) > 700 > stream_w(1132, 1440, 700)


def test_the_500_w_clock_of_the_700_w_stream_is_where_it_draws_500_w():
    p0 = 199 - 625 * 99 / 507
    at_1440 = 298 + (1440 - 1132) * 97 / 369
    want = p0 + (at_1440 - p0) * (500 - p0) / (700 - p0)  # the curve's power at the 500 W clock (ViT-equivalent)
    f = 625 + (want - 199) * (1132 - 625) / (298 - 199)  # on the 625-1132 MHz segment
    assert stream_clock(500, 1440, 700) == pytest.approx(f, abs=0.01)
    assert 1000 < f < 1100  # well below the cube law's 1440 x (5/7)^(1/3) = 1287 MHz
    teton = dict(get_profile("h100-sxm-96gb-500w").clock.sustained_mhz)
    assert teton["bf16"] == round(f)  # the 500 W profile's clock is this one (h100-sxm's 1440 MHz at 700 W)
    assert teton["fp8"] == round(stream_clock(500, 1395, 700))
    with pytest.raises(ValueError, match="floor"):
        stream_clock(50, 1440, 700)


def test_the_step_clock_is_the_one_whose_average_power_is_the_limit():
    kw = dict(peak_mhz=1830, stream_mhz=1440, limit_w=700, memory_w=300, idle_w=137)
    dots, mem, idle = 0.7, 0.2, 0.1  # seconds at the peak's clock
    f = step_clock(dots, mem, idle, **kw)
    assert 1440 < f < 1830
    t_dots = dots * 1830 / f
    energy = t_dots * stream_w(f, 1440, 700) + mem * 300 + idle * 137
    assert energy / (t_dots + mem + idle) == pytest.approx(700, rel=1e-9)


def test_the_step_clock_stays_between_the_streams_and_the_peaks():
    kw = dict(peak_mhz=1830, stream_mhz=1440, limit_w=700, memory_w=300, idle_w=137)
    assert step_clock(1.0, 0.0, 0.0, **kw) == 1440  # products alone: the stream
    assert step_clock(0.0, 1.0, 0.0, **kw) == 1830  # no products: nothing pulls the clock down
    assert step_clock(0.1, 0.0, 1.0, **kw) == 1830  # mostly waiting: under the limit even at the peak
    clocks = [step_clock(1.0, 0.0, idle, **kw) for idle in (0.05, 0.1, 0.2, 0.4)]
    assert clocks == sorted(clocks) and len(set(clocks)) == 4  # more waiting, a higher clock


def test_the_power_fields_are_read_checked_and_written(tmp_path):
    hw = toy(tmp_path, "power_limit_w = 300\npeak_mhz = 2000\nbf16 = 1500\nmemory_w = 120\nidle_w = 60\n")
    assert (hw.clock.memory_w, hw.clock.idle_w) == (120, 60) and hw.clock.has_power
    assert hw.clock.as_toml() == {"power_limit_w": 300, "peak_mhz": 2000, "memory_w": 120, "idle_w": 60,
                                  "bf16": 1500}
    for bad, words in (("memory_w = 120\n", "go together"), ("memory_w = 300\nidle_w = 60\n", "at or above")):
        with pytest.raises(HardwareError, match=words):
            toy(tmp_path, "power_limit_w = 300\npeak_mhz = 2000\nbf16 = 1500\n" + bad)
    assert not toy(tmp_path, "power_limit_w = 300\npeak_mhz = 2000\nbf16 = 1500\n").clock.has_power


def test_the_h200_power_of_the_other_kernels_is_the_decode_measurements():
    for name in ("h200", "h100", "h100-sxm-96gb-500w"):
        model = get_profile(name).clock
        # Ma et al. 2026 (arXiv 2605.11999): memory-bound decode on an H200 at 700 W draws 137-300 W
        assert (model.memory_w, model.idle_w) == (300, 137)
    assert step_average(get_profile("a100"), 1.0, 0.0, 0.0) == {}  # no clock table


def test_at_clocks_prices_the_dots_at_the_solved_clock():
    hw = get_profile("h200")
    got = at_clocks(hw, {"bf16": 1600.0})
    assert got.sustained and clock_factor(got, "bf16") == pytest.approx(1600 / 1830)
    assert clock_factor(got, "fp8") == pytest.approx(1395 / 1830)  # a key not solved keeps its stream clock
    assert clock_factor(at_clocks(hw, {"bf16": 5000.0}), "bf16") == 1.0  # never above the peak


def test_the_breakdown_takes_the_products_time_from_the_two_pricings():
    from mhlo_cost.studies.plan.power_clock import breakdown

    peak = SimpleNamespace(total=10.0, compute={"forward": 2.0, "backward": 4.0, "recompute": 1.0}, optimizer=1.0)
    slower = 5.0 * (1830 / 1440 - 1)  # 5 s of products at the peak's clock, at the stream's
    # the pipeline's fill and drain (in the total, not the busy kernels) grow too: not products a second time
    stream = SimpleNamespace(total=10.0 + 3 * slower, compute={"forward": 2.0 + slower, "backward": 4.0,
                                                             "recompute": 1.0}, optimizer=1.0)
    dots, mem, idle = breakdown(peak, stream, 1830, 1440)
    assert dots == pytest.approx(5.0) and mem == pytest.approx(8.0 - 5.0) and idle == pytest.approx(2.0)
    # 1 s of attention at the peak's clock that its own clock stretches to 1.2 s: its 0.2 s is not products' time
    stream.compute["backward"] += 0.2
    dots, mem, idle = breakdown(peak, stream, 1830, 1440, attention=(1.0, 1.2))
    assert dots == pytest.approx(5.0 + 1.0) and mem == pytest.approx(8.0 - 6.0) and idle == pytest.approx(2.0)


def test_average_is_a_clock_train_plan_takes_and_lies_between_the_other_two():
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.study import PlanOptions, PlanStudy

    assert "average" in CLOCKS
    hw = resolve_profile("grand-teton-h100")
    cfg = ScaleConfig(layers=2, hidden=256, heads=4, seq=128, vocab=1024, global_batch=8, micro_batch=1, d=8)
    totals = {c: PlanStudy(PlanOptions(cfg, hw, clock=c)).plan for c in ("peak", "average", "sustained")}
    assert totals["peak"].iteration.total <= totals["average"].iteration.total <= totals["sustained"].iteration.total
    clock = totals["average"].iteration.counts["dot_clock_mhz"]
    assert dict(sustained(hw).clock.sustained_mhz)["bf16"] <= clock <= hw.clock.peak_mhz


def test_a_limit_at_the_curves_floor_is_refused_not_priced_at_the_peak():
    from mhlo_cost.machines.clock import parse_clock
    from mhlo_cost.machines.power import step_clock, stream_clock

    floor = 199 - 625 * (298 - 199) / (1132 - 625)  # the first segment of the published points at 0 MHz: 76.96 W
    with pytest.raises(ValueError, match="floor"):
        step_clock(1.0, 0.0, 0.0, peak_mhz=2000, stream_mhz=1500, limit_w=70, memory_w=50, idle_w=30)
    with pytest.raises(ValueError, match="floor"):
        stream_clock(600, 1440, 70)
    with pytest.raises(ValueError, match="power_limit_w"):
        parse_clock({"power_limit_w": floor - 1, "peak_mhz": 1830, "memory_w": 50, "idle_w": 30, "bf16": 1440},
                    "profile.x.clock", ("bf16",))
    held = parse_clock({"power_limit_w": floor - 1, "peak_mhz": 1830, "bf16": 1440}, "x", ("bf16",))
    assert not held.has_power  # without the other kernels' power no step-average clock is asked of it
