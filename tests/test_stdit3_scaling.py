"""benchmarks/stdit3_scaling.py's published 8 x A100 Ulysses rows and its excess figure: the four times as the
data file holds them, their speed-ups over the one-A100 rows as issue 35 quotes them (7.19 / 7.60 / 4.13 / 5.67),
and the excess T_n - T_1 / n worked out by hand."""
from __future__ import annotations

import math
import os
from helpers import script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench():
    return script("benchmarks/stdit3_scaling.py", "stdit3_scaling_t")


def test_published_ulysses_times_and_speedups():
    b = _bench()
    got = b.measured_ulysses(8)
    assert got == {"204_640_360": 13.76, "408_640_360": 26.61, "51_1280_720": 25.26, "102_1280_720": 36.5}
    quoted = {"204_640_360": 7.19, "408_640_360": 7.60, "51_1280_720": 4.13, "102_1280_720": 5.67}
    for shape, speedup in quoted.items():
        assert round(b.MEASURED_S[shape] / got[shape], 2) == speedup, shape
    assert b.measured_ulysses(16) == {}  # no 16-device A100 row: nothing made up


def test_excess_over_a_perfect_split():
    b = _bench()
    assert math.isclose(b.excess(99.0, 13.76, 8), 13.76 - 99.0 / 8)
    assert b.excess(80.0, 10.0, 8) == 0.0  # a perfect split has no excess


def test_partners_have_equal_tokens():
    # the published table's S x T (its shape table: 920 x 60, 920 x 120, 3600 x 15, 3600 x 30)
    b = _bench()
    tokens = {"204_640_360": 55_200, "408_640_360": 110_400, "51_1280_720": 54_000, "102_1280_720": 108_000}
    for hi, lo in b.PARTNERS.items():
        assert "1280_720" in hi and "640_360" in lo
        assert abs(tokens[hi] / tokens[lo] - 1) < 0.025, (hi, lo)


def test_measured_h200_forwards_as_the_data_file_holds_them():
    got = _bench().measured_forward_h200()
    assert got == {"204_640_360": 1.689072, "408_640_360": 3.415951, "51_1280_720": 1.759477,
                   "102_1280_720": 3.480433}


def test_t1_room_recovers_a_per_run_term():
    b = _bench()
    # two runs made of forwards F and a per-run term V: T1 = F + V; the room is V_hi - r V_lo, r = F_hi / F_lo
    f_lo, f_hi, v_lo, v_hi = 90.0, 99.0, 2.0, 14.0
    assert math.isclose(b.t1_room(f_hi + v_hi, f_lo + v_lo, f_hi / f_lo), v_hi - 1.1 * v_lo)
    assert math.isclose(b.t1_room(f_hi, f_lo, f_hi / f_lo), 0.0, abs_tol=1e-12)  # no per-run term: no room
    # the published pair 51_1280_720 / 204_640_360 with the H200's forward ratio, by hand: 104.24 - 1.04168 x 99
    r = 1.759477 / 1.689072
    assert math.isclose(b.t1_room(104.24, 99.0, r), 1.11345, abs_tol=5e-5)  # 104.24 - 103.12655


def test_beyond_tokens():
    b = _bench()
    # an excess that grows with tokens alone leaves nothing beyond them
    assert b.beyond_tokens(2.0, 1.0, 200, 100) == 0.0
    assert math.isclose(b.beyond_tokens(5.0, 1.0, 200, 100), 3.0)
    # the published 51_1280_720 / 204_640_360 pair, by hand: (25.26 - 104.24 / 8) - (13.76 - 99 / 8) x 54,000 / 55,200
    hand = (25.26 - 13.03) - (13.76 - 12.375) * 54_000 / 55_200
    assert math.isclose(b.beyond_tokens(25.26 - 104.24 / 8, 13.76 - 99.0 / 8, 54_000, 55_200), hand)
    assert 10.8 < hand < 11.0
