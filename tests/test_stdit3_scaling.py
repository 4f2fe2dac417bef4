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
