"""Per-chip figures that hold on held-out sources and chips (issue 39): the fitted parameters of
``benchmarks/data/chip_fits.toml`` (the value at which the median estimate / measured over the fit rows is 1; leave
one chip out, or one source out), fit rows never counted as held out; split-K for outputs too small to fill a GPU;
a causal attention kernel skips the exponentials of the blocks it skips."""
from __future__ import annotations

import math
import os
import statistics
import sys

import pytest

from mhlo_cost.machines.catalogue import get_profile, load_profiles
from mhlo_cost.machines.gemm import GemmModel

jax = pytest.importorskip("jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import chip_fits as cf  # noqa: E402
import validate_chips as vc  # noqa: E402
import validate_published as vp  # noqa: E402

CHIP = """
[profile.{name}]
description = "test chip"
hbm_bandwidth_gb_s = 1000000
hbm_capacity_gb = 80
link_bandwidth_gb_s = 100
hop_latency_us = 1
kernel_overhead_us = 0
transcendental_tops = {trans}
matrix_tflops = {{ bf16 = 1000 }}
vector_tflops = {{ f32 = 1000000, bf16 = 1000000, int32 = 1000000 }}
[profile.{name}.gemm]
efficiency = 0.5
[profile.{name}.attention]
library = "cudnn"
cudnn = {{ forward = 0.5, backward = 0.4, ramp = 0 }}
"""


def _profiles(tmp_path, trans=1000.0):
    p = tmp_path / "hw.toml"
    p.write_text("".join(CHIP.format(name=n, trans=trans) for n in ("chip-a", "chip-b")))
    return load_profiles(p)


def _row(rid, chip, k, source="https://github.com/o/fit/x", category="gemm"):
    return {"id": rid, "chip": chip, "category": category, "source": source, "params": {}, "k": k}


FIT_TOML = """
[[fit]]
name = "gemm fraction"
chips = ["chip-a", "chip-b"]
fields = ["gemm.efficiency"]
rows = {{ category = "gemm", source = "o/fit" }}
held_out = "{mode}"
{ship}
tied = {{ "attention.cudnn.forward" = 0.5 }}
"""


def _fits(tmp_path, mode):
    p = tmp_path / "fits.toml"
    p.write_text(FIT_TOML.format(mode=mode, ship='ship = "chip-a"' if mode == "chip" else ""))
    return cf.load_fits(p)


@pytest.fixture
def closed_form(monkeypatch):
    """A row's estimate / measured as a closed form: k / the profile's GEMM efficiency (a time inversely
    proportional to the fraction), so the fitted value is the median of k over the fit rows."""
    def ratio(m, profiles):
        return m["k"] / get_profile(m["chip"], profiles).gemm.efficiency
    monkeypatch.setattr(vc, "_ratio", ratio)


def test_the_fit_is_the_value_at_which_the_median_ratio_is_one(tmp_path, closed_form):
    profiles = _profiles(tmp_path)
    (fit,) = _fits(tmp_path, "source")
    rows = [_row(f"r{i}", "chip-a", k) for i, k in enumerate((0.30, 0.42, 0.61, 0.35, 0.50))]
    base = {"chip-a": profiles["chip-a"]}
    value = cf.fit_value(fit, rows, base, lambda m, variants: m["k"] / variants[m["chip"]].gemm.efficiency)
    assert value == pytest.approx(statistics.median([0.30, 0.42, 0.61, 0.35, 0.50]), abs=0.002)
    hw = cf.set_fields(profiles["chip-a"], fit, 0.42)
    assert hw.gemm.efficiency == 0.42 and hw.attention.get("cudnn").forward == 0.21  # tied: 0.5 x the value
    assert profiles["chip-a"].gemm.efficiency == 0.5  # the loaded profile is not touched


def test_leave_one_chip_out_prices_each_chip_with_the_other_chips_fit(tmp_path, closed_form):
    profiles = _profiles(tmp_path)
    fits = _fits(tmp_path, "chip")
    rows = [_row("a1", "chip-a", 0.40), _row("a2", "chip-a", 0.44), _row("a3", "chip-a", 0.48),
            _row("b1", "chip-b", 0.70), _row("b2", "chip-b", 0.74), _row("b3", "chip-b", 0.90)]
    use, fit_ids, lines = vc.fitted(rows, fits, profiles)
    assert use["chip-a"].gemm.efficiency == pytest.approx(0.74, abs=0.002)  # fitted on chip-b's rows only
    assert use["chip-b"].gemm.efficiency == pytest.approx(0.44, abs=0.002)  # the shipped fit: chip-a's rows
    assert fit_ids == {"chip-a": set(), "chip-b": set()}  # every row of each chip is held out for its figure
    assert lines[0].startswith("fit: gemm fraction = 0.44 on 3 rows (a1, a2, a3)") and "UPDATE" in lines[0]
    # moving chip-a's own measurements does not move the values chip-a is priced with
    moved = [dict(m, k=m["k"] * 3) if m["chip"] == "chip-a" else m for m in rows]
    assert vc.fitted(moved, fits, profiles)[0]["chip-a"].gemm.efficiency == use["chip-a"].gemm.efficiency


def test_a_source_fit_marks_its_rows_and_never_counts_them_as_held_out(tmp_path, closed_form):
    profiles = _profiles(tmp_path)
    fits = _fits(tmp_path, "source")
    rows = [_row("a1", "chip-a", 0.40), _row("a2", "chip-a", 0.50), _row("b1", "chip-b", 0.60),
            _row("a3", "chip-a", 0.80, source="https://github.com/o/other/x")]
    use, fit_ids, _ = vc.fitted(rows, fits, profiles)
    assert fit_ids == {"chip-a": {"a1", "a2"}, "chip-b": {"b1"}}
    assert use["chip-a"].gemm.efficiency == pytest.approx(0.50, abs=0.002)  # the median of 0.4, 0.5, 0.6
    results = [("chip-a", "gemm", vc.source_name(m["source"]), m["id"], 1.0, 1.0, m["k"] / 0.5)
               for m in rows if m["chip"] == "chip-a"]
    table = vc.per_chip(results, fit_ids)
    assert table["chip-a"]["overall"] == (pytest.approx(0.6), pytest.approx(1.6), 1)  # a3 alone: 0.8 / 0.5
    assert table["chip-a"]["fit"] == 2 and table["chip-a"]["sources"] == ["o/other"]
    out = vc.summary(results, {}, fit_ids)
    assert "fit rows (not counted): a1, a2" in "\n".join(out)
    assert vc.final_line(results, fit_ids).endswith("over 1 rows on 1 chips (held out; 2 fit rows not counted)")


def test_the_shipped_profiles_hold_the_values_the_fits_give():
    """The catalogue's fitted fields are the values chip_fits.toml's fits give on the published rows (the
    script's run, not re-derived here: the values are read off its fit lines) and the tied fields follow them."""
    fits = {f.name: f for f in cf.load_fits(vc.FITS)}
    amd = fits["AMD Instinct (CDNA 3/4) achievable GEMM fraction"]
    for chip in amd.chips:
        hw = get_profile(chip)
        e = hw.gemm.efficiency
        assert hw.attention.get("fa2").forward == round(0.795 * e, 3)
        assert hw.attention.get("fa2").backward == round(0.648 * e, 3)
    bw = fits["Blackwell cuDNN attention forward fraction"]
    assert {get_profile(c).attention.get("cudnn").forward for c in bw.chips} == {0.663}
    assert bw.ship == "gb200" and bw.held_out == "chip"


# -- split-K -------------------------------------------------------------------------------------------------
def test_split_k_fills_the_units_an_output_of_few_tiles_leaves_idle():
    whole = GemmModel(1.0, 170, (256, 128))
    split = GemmModel(1.0, 170, (256, 128), split_k=True)
    tiles = (1024 // 256) * (1024 // 128)  # 32 output tiles
    assert whole.wave(1, 1024, 1024) == pytest.approx(tiles / 170)
    assert split.wave(1, 1024, 1024) == pytest.approx(tiles * (170 // tiles) / 170)  # 5 slices of K each
    assert split.wave(1, 8192, 8192) == whole.wave(1, 8192, 8192)  # 2048 tiles: nothing to split
    assert split.as_toml()["split_k"] is True and "split_k" not in whole.as_toml()


def test_split_k_must_be_a_boolean(tmp_path):
    from mhlo_cost.machines.hardware import HardwareError
    p = tmp_path / "hw.toml"
    p.write_text(CHIP.format(name="chip-a", trans=1.0).replace("efficiency = 0.5\n", "efficiency = 0.5\nsplit_k = 1\n"))
    with pytest.raises(HardwareError, match="split_k must be true or false"):
        load_profiles(p)


# -- a causal kernel skips its masked blocks whole ----------------------------------------------------------
def test_a_causal_kernel_skips_the_exponentials_of_the_blocks_above_the_diagonal(tmp_path):
    """On a chip whose exponentials bound the kernel (a slow transcendental unit, everything else fast), a causal
    attention costs (n + 1) / (2n) of the full one, n = key tiles of 128: the blocks on and below the diagonal."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline.estimate import Roofline
    hw = _profiles(tmp_path, trans=0.001)["chip-a"]
    b, h, s, d = 1, 2, 1024, 64
    times = {}
    for causal in (False, True):
        fn, args = vp.attention(b, h, s, d, causal, "bfloat16", "cudnn")
        text = jax.jit(fn).lower(*args).as_text()
        rf = Roofline(analyze(text, AnalysisOptions(dataflow=True)), hw, fuse_mode="elementwise")
        times[causal] = rf.totals()["est_time_fused_s"]
    exps = b * h * s * s  # one exponential per score
    assert times[False] == pytest.approx(exps / 1e9, rel=0.01)  # 0.001 TOP/s
    n = math.ceil(s / 128)
    assert times[True] / times[False] == pytest.approx((n + 1) / (2 * n), rel=0.01)
