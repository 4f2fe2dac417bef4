"""Per-precision GEMM efficiencies and their validation (issue 36): ``efficiency_<dtype>`` / ``k_half_<dtype>`` in a
profile's gemm table price dots of that dtype only; ``benchmarks/data/published_precision.toml`` parses with a
declared source (at a commit) for every row; a row's FLOPs are the closed form; the held-out split never fits on a
held-out source."""
from __future__ import annotations

import os
import re
import sys

import pytest

from mhlo_cost import analyze
from mhlo_cost.machines.hardware import HardwareError, get_profile, load_profiles
from mhlo_cost.roofline import op_time

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import validate_precision as vpr  # noqa: E402

TOY = ('[profile.toy]\ndescription = "toy"\nhbm_bandwidth_gb_s = 1000000\nhbm_capacity_gb = 8\n'
       'link_bandwidth_gb_s = 1\nhop_latency_us = 1\nkernel_overhead_us = 1\ntranscendental_tops = 0.1\n'
       '[profile.toy.matrix_tflops]\nbf16 = 100\nfp8 = 200\n[profile.toy.vector_tflops]\nf32 = 1\n'
       '[profile.toy.gemm]\n')


def toy(tmp_path, table):
    p = tmp_path / "hw.toml"
    p.write_text(TOY + table)
    return load_profiles(p)["toy"]


def dot_row(m, k, n, dtype):
    f = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32))
    text = f.lower(jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype)).as_text()
    return [r for r in analyze(text).rows if r.kind == "dot"][0]


# -- the profile fields -------------------------------------------------------------------------------------------
def test_fp8_efficiency_and_k_half_price_fp8_dots_only(tmp_path):
    hw = toy(tmp_path, "efficiency = 0.8\nk_half = 64\nefficiency_fp8 = 0.5\nk_half_fp8 = 192\n")
    m, k, n = 256, 64, 512
    fp8, bf16 = op_time(dot_row(m, k, n, jnp.float8_e4m3fn), hw), op_time(dot_row(m, k, n, jnp.bfloat16), hw)
    flops = 2 * m * k * n
    # no compute units: no wave factor; depth = K / (K + k_half) with the dtype's own k_half
    assert fp8.compute_s == pytest.approx(flops / (200e12 * 0.5 * (64 / (64 + 192))), rel=1e-12)
    assert bf16.compute_s == pytest.approx(flops / (100e12 * 0.8 * (64 / (64 + 64))), rel=1e-12)


def test_without_the_dtype_fields_fp8_runs_at_the_shared_efficiency(tmp_path):
    hw = toy(tmp_path, "efficiency = 0.8\n")
    t = op_time(dot_row(128, 128, 128, jnp.float8_e4m3fn), hw)
    assert t.compute_s == pytest.approx(2 * 128 ** 3 / (200e12 * 0.8), rel=1e-12)
    assert hw.gemm.as_toml() == {"efficiency": 0.8, "compute_units": 0, "tile": [128, 128]}


def test_dtype_fields_round_trip_through_as_toml(tmp_path):
    g = toy(tmp_path, "efficiency_fp8 = 0.7\nk_half_fp8 = 300\n").gemm
    assert g.as_toml()["efficiency_fp8"] == 0.7 and g.as_toml()["k_half_fp8"] == 300


@pytest.mark.parametrize("table, msg", [
    ("efficiency_fp8 = 1.5", "efficiency_fp8 must be a number in"),
    ("k_half_fp8 = -1", "k_half_fp8 must be a whole number"),
    ("k_half_fp8 = true", "k_half_fp8 must be a whole number"),
    ("efficiency_fp9 = 0.5", "unknown field 'efficiency_fp9'"),
])
def test_bad_dtype_field_is_a_hardware_error(tmp_path, table, msg):
    with pytest.raises(HardwareError, match=re.escape(msg)):
        toy(tmp_path, table)


def test_shipped_hopper_profiles_carry_a_sourced_fp8_efficiency():
    for name in ("h100-sxm", "h200-sxm"):
        hw = get_profile(name)
        fp8, shared = dict(hw.gemm.by_dtype)["fp8"], hw.gemm.efficiency
        assert 0 < fp8 <= 1 and fp8 != shared  # fp8 no longer uses the bf16-fitted value
        assert dict(hw.gemm.k_half_by_dtype)["fp8"] > 0


# -- the data file ------------------------------------------------------------------------------------------------
def test_data_file_parses_every_row_with_a_declared_source_at_a_commit():
    sources, rows = vpr.load()
    assert {s["role"] for s in sources.values()} == {"fit", "held_out"}
    for s in sources.values():
        # a file at a commit (not a branch), or a pull request's or an issue's description
        assert re.search(r"/blob/[0-9a-f]{40}/|/(pull|issues)/[0-9]+$", s["url"]), s["url"]
    for m in rows:
        assert m["source"] in sources and m["unit"] in ("TFLOP/s", "ms") and m["measured"] > 0
        if m["precision"] == "fp8":
            assert m["params"]["dtype"] == "float8_e4m3fn"
    assert len({m["id"] for m in rows}) == len(rows)


def test_undeclared_source_or_role_is_refused(tmp_path):
    p = tmp_path / "d.toml"
    p.write_text('[[source]]\ntag = "a"\nurl = "https://x"\nrole = "fit"\ntiming = "kernel"\n'
                 '[[m]]\nid = "r"\nsource = "b"\n')
    with pytest.raises(ValueError, match="'b' is not a"):
        vpr.load(p)
    p.write_text('[[source]]\ntag = "a"\nurl = "https://x"\nrole = "both"\ntiming = "kernel"\n')
    with pytest.raises(ValueError, match="role must be one of"):
        vpr.load(p)


def test_a_rows_flops_are_the_closed_form_and_the_programs_count():
    _, rows = vpr.load()
    m = next(r for r in rows if r["id"] == "deepgemm-dense-4096x7168x16384")
    assert vpr.counted_flops(m) == 2 * 4096 * 7168 * 16384 == 962_072_674_304
    assert vpr.measured_s(m) == pytest.approx(962_072_674_304 / 1426e12, rel=1e-12)
    dot = [r for r in analyze(vpr.lowered_text(m)).rows if r.kind == "dot"][0]
    assert dot.gemm_flops == 962_072_674_304
    g = next(r for r in rows if r["id"] == "deepgemm-grouped-4x8192x4096x7168")
    grouped = [r for r in analyze(vpr.lowered_text(g)).rows if r.kind == "dot"][0]
    assert grouped.gemm_flops == vpr.counted_flops(g) == 2 * 4 * 8192 * 4096 * 7168


# -- the split ----------------------------------------------------------------------------------------------------
class Recorder:
    """A pricer whose ratio is 0.6 / efficiency x (1 + k_half / 1000), recording every row it prices."""

    def __init__(self):
        self.seen = set()

    def ratio(self, m, value):
        self.seen.add(m["id"])
        return 0.6 / value[0] * (1 + value[1] / 1000)


def test_the_fit_never_prices_a_held_out_source():
    sources, rows = vpr.load()
    held = {m["id"] for m in rows if sources[m["source"]]["role"] == "held_out"}
    assert held
    rec = Recorder()
    got = vpr.fits(sources, rows, rec)
    assert rec.seen and not rec.seen & held
    assert got["fp8"] == (0.6, 0)  # the closed form's minimum: ratio 1 at efficiency 0.6, k_half 0
    for tag in sources:
        rec = Recorder()
        vpr.fits(sources, rows, rec, leave_out=tag)
        assert not any(m["source"] == tag for m in rows if m["id"] in rec.seen)


# -- the fp8 decode rows (validate_precision_decode.py) -----------------------------------------------------------
def test_the_decode_rows_are_six_or_more_held_out_fp8_figures_each_expressible():
    """Every row has a declared https source, an fp8 recipe the --hf path lowers, its load and a figure; the step
    it is priced with carries the recipe (validate_serving's options with the row's precision)."""
    import validate_precision_decode as vd

    from mhlo_cost.machines.precision import parse

    rows = vd.load()
    assert len(rows) >= 6 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        recipe = parse(r["recipe"])
        assert recipe.weight == "float8_e4m3fn" and recipe.kv == "float8_e4m3fn"
        assert ("batch" in r) != ("concurrency" in r) and r["isl"] > 0 and r["osl"] > 0
        opts = vd.row_options(r)
        assert opts.request.precision == r["recipe"] and opts.request.hf == r["express"]["hf"]
        assert opts.tp == r["tp"]
        opts.request.check()  # the recipe and the configuration are accepted without lowering anything


def test_a_decode_row_without_a_recipe_or_a_declared_source_is_refused(tmp_path):
    import validate_precision_decode as vd

    p = tmp_path / "d.toml"
    p.write_text('[sources]\na = "https://x"\n[[row]]\nid = "r"\nsource = "b"\nrecipe = "fp8-rowwise"\nitl_ms = 1\n')
    with pytest.raises(ValueError, match="source must be"):
        vd.load(p)
    p.write_text('[sources]\na = "https://x"\n[[row]]\nid = "r"\nsource = "a"\nitl_ms = 1\n')
    with pytest.raises(ValueError, match="needs a recipe"):
        vd.load(p)
