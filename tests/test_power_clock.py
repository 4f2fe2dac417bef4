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


def _segment(f):
    """The slope and intercept (W, W/MHz) of the published points' segment that holds ``f`` MHz."""
    i = next((i for i in range(1, len(PAPER) - 1) if f <= PAPER[i][0]), len(PAPER) - 1)
    (f0, p0), (f1, p1) = PAPER[i - 1], PAPER[i]
    slope = (p1 - p0) / (f1 - f0)
    return p0 - slope * f0, slope


def test_the_attention_at_its_own_activity_solves_to_the_clock_worked_out_by_hand():
    # products t_d, attention t_a whose tensor cores issue r of the stream's, memory t_m, waits t_i (s at 1830 MHz)
    peak, fs, lim, pm, pi = 1830, 1440, 700, 300, 137
    t_d, t_a, r, t_m, t_i = 0.6, 0.2, 0.4, 0.1, 0.05
    p0 = 199 - 625 * (298 - 199) / (1132 - 625)
    k = (lim - p0) / (298 + (fs - 1132) * 97 / 369 - p0)  # the stream's activity: it draws the limit at fs
    e_m = t_m * (pm - lim) + t_i * (pi - lim)
    # the average power is the limit: (t_d + r t_a) k (a + b f - p0) + (t_d + t_a)(p0 - L) + f e_m / peak = 0, linear
    # in f on one segment a + b f of the curve; solved on the segment it lands in
    a, b = _segment(1700)
    f = ((t_d + t_a) * (lim - p0) - (t_d + r * t_a) * k * (a - p0)) / ((t_d + r * t_a) * k * b + e_m / peak)
    assert _segment(f) == (a, b) and 1501 < f < 1731
    kw = dict(peak_mhz=peak, stream_mhz=fs, limit_w=lim, memory_w=pm, idle_w=pi)
    got = step_clock(t_d, t_m, t_i, others=((t_a, r * t_a, fs),), **kw)
    assert got == pytest.approx(f, abs=1e-6)
    # the attention priced as products (its power the stream's: the bound the step clock took before) holds less
    as_products = step_clock(t_d + t_a, t_m, t_i, **kw)
    assert as_products == pytest.approx(step_clock(t_d, t_m, t_i, others=((t_a, t_a, fs),), **kw), abs=1e-6)
    assert as_products < got


def test_the_step_clocks_average_power_is_the_limit_with_each_class_at_its_own():
    kw = dict(peak_mhz=1830, stream_mhz=1440, limit_w=700, memory_w=300, idle_w=137)
    t_d, t_a, w_a, t_m, t_i = 0.6, 0.2, 0.07, 0.15, 0.05
    f = step_clock(t_d, t_m, t_i, others=((t_a, w_a, 1440),), **kw)
    p0 = floor_w()
    stretch = 1830 / f
    att_w = p0 + (w_a / t_a) * (stream_w(f, 1440, 700) - p0)  # its activity's share of the stream's dynamic part
    energy = stretch * (t_d * stream_w(f, 1440, 700) + t_a * att_w) + t_m * 300 + t_i * 137
    assert energy / (stretch * (t_d + t_a) + t_m + t_i) == pytest.approx(700, rel=1e-9)
    # attention alone, no products: still pulled below the peak when it draws enough, never below the stream's
    assert 1440 < step_clock(0.0, 0.0, 0.0, others=((1.0, 0.5, 1440),), **kw) <= 1830
    # a kernel switching more than the stream holds the step below the stream's clock (the solve is not clamped)
    assert step_clock(0.0, 0.0, 0.0, others=((1.0, 1.2, 1440),), **kw) < 1440


def test_step_average_reads_the_attentions_activity_against_the_bf16_stream():
    hw = get_profile("h100")
    stream = hw.gemm.base(1 << 62, "bf16")
    got = step_average(hw, 0.5, 0.2, 0.1, attention=(0.3, 0.3 * 0.35))
    kw = dict(peak_mhz=hw.clock.peak_mhz, limit_w=700, memory_w=300, idle_w=137)
    bf16 = dict(hw.clock.sustained_mhz)["bf16"]
    for key, mhz in hw.clock.sustained_mhz:  # fp8's products at fp8's stream; the attention's bf16 at bf16's
        want = step_clock(0.5, 0.2, 0.1, stream_mhz=mhz, others=((0.3, 0.3 * 0.35 / stream, bf16),), **kw)
        assert got[key] == pytest.approx(want, rel=1e-12)
    assert step_average(hw, 0.5, 0.2, 0.1) == step_average(hw, 0.5, 0.2, 0.1, attention=(0.0, 0.0))


def test_the_plans_attention_is_solved_at_its_own_activity_and_without_it_with_the_products():
    from mhlo_cost.studies.plan.power_clock import step_clocks

    hw = get_profile("h100")
    cfg = SimpleNamespace(precision="bf16", recompute="full", attention="fused", micro_batches=4, execution="compiled")

    def plan(compute, tensor):  # 2 layers on the busiest stage; full recompute: the attention's forward again
        it = SimpleNamespace(total=12.0, compute=compute, optimizer=0.5, stages=[{"layers": 2}], layer={}, cfg=cfg)
        cost = SimpleNamespace(core_s={"forward": 0.1, "backward": 0.2, "recompute": 0.0},
                               core_tensor_s={"forward": 0.04, "backward": tensor, "recompute": 0.0})
        return SimpleNamespace(iteration=it, cost=cost)

    slow = 1830 / 1440
    peak = plan({"forward": 2.0, "backward": 5.0, "recompute": 2.0}, 0.07)
    # 6 s of products (4 of them the attention's 4 x 2 x (0.1 + 0.2 + 0.1) = 3.2 s kept at the peak's clock here)
    stream = plan({"forward": 2.0 + (6.0 - 3.2) * (slow - 1), "backward": 5.0, "recompute": 2.0}, 0.07)
    att, tensor = 4 * 2 * (0.1 + 0.2 + 0.1), 4 * 2 * (0.04 + 0.07 + 0.04)
    dots, mem, idle = 6.0 - att, 9.5 - 6.0, 12.0 - 9.5
    assert step_clocks(cfg, hw, peak, stream) == pytest.approx(step_average(hw, dots, mem, idle, (att, tensor)))
    unknown = plan({"forward": 2.0, "backward": 5.0, "recompute": 2.0}, 0.0)
    unknown.cost.core_tensor_s["forward"] = 0.0  # no fused kernel's activity known: the attention with the products
    assert step_clocks(cfg, hw, unknown, stream) == pytest.approx(step_average(hw, 6.0, mem, idle))
