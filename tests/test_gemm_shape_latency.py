"""Calibration on a chosen statistic (mhlo_cost/roofline/calibrate.py) and the alternating rounds of
benchmarks/validate_latency.py: a round's profile prices the runs of the same round, and each ratio is the
estimate over that statistic of the runs."""
from __future__ import annotations

import os

import jax.numpy as jnp
import pytest

from mhlo_cost.machines.hardware import get_profile, load_profiles
from mhlo_cost.roofline.calibrate import STATISTICS, calibrate, profile_toml
from helpers import script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _validate_latency():
    return script("benchmarks/validate_latency.py")


def test_statistics_are_the_fastest_and_the_median_run():
    ts = [3.0, 1.0, 7.0, 2.0, 9.0]
    assert STATISTICS["fastest"](ts) == 1.0
    assert STATISTICS["median"](ts) == 3.0


@pytest.mark.parametrize("statistic", ["fastest", "median"])
def test_quick_calibration_says_its_statistic_and_loads(tmp_path, statistic):
    cal = calibrate(quick=True, statistic=statistic)
    assert cal.statistic == statistic
    text = profile_toml(cal)
    assert f"# Each figure: the {statistic} of several timed runs" in text
    p = tmp_path / "cpu.toml"
    p.write_text(text)
    hw = load_profiles(p)["calibrated"]
    assert hw.matrix_peak("f32") > 0 and hw.hbm_bandwidth > 0


def test_unknown_statistic_is_refused():
    with pytest.raises(KeyError):
        calibrate(quick=True, statistic="mean")


def test_each_round_takes_its_own_profile_and_ratios_are_per_round_medians():
    vl = _validate_latency()
    x = jnp.ones((64, 64), jnp.float32)
    programs = [("matmul 64", lambda a, b: a @ b, (x, x)), ("add 64", lambda a: a + 1.0, (x,))]
    a100, h100 = get_profile("a100"), get_profile("h100")
    asked = []

    def profile(r):
        asked.append(r)
        return (a100, h100, h100)[r]
    rows = vl.evaluate(programs, profile, "unfused", runs=3, rounds=3)
    assert asked == [0, 1, 2]  # one profile per round, in order
    an = vl.analyses(programs)
    for (p, m, b, rm, rb), a in zip(rows, an):
        on = sorted([vl.predict(a, a100, "unfused")] + [vl.predict(a, h100, "unfused")] * 2)
        assert p == on[1]  # the median of the rounds' estimates
        assert 0 < b <= m
    # one round: the ratios are the estimate over the median and over the fastest of that round's runs
    (p, m, b, rm, rb), = vl.evaluate(programs[:1], lambda r: h100, "unfused", runs=5, rounds=1)
    assert rm == p / m and rb == p / b

