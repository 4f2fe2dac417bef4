"""benchmarks/validate_published.py holds out by source (issue 35 item 5): each fitted profile value is refitted
without the source whose rows are priced (benchmarks/held_out.py); a row whose value has no other source (and no
prior) is listed and never counted as held out; the corpus names a source, configuration and unit for every row."""
from __future__ import annotations

import os
import statistics
import sys
import tomllib

import pytest

from mhlo_cost.machines.catalogue import load_profiles

pytest.importorskip("jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import held_out  # noqa: E402
import validate_published as vp  # noqa: E402

CHIP = """
[profile.{name}]
description = "test chip"
hbm_bandwidth_gb_s = 1000
hbm_capacity_gb = 80
link_bandwidth_gb_s = 100
hop_latency_us = 1
kernel_overhead_us = 0
transcendental_tops = 1000
matrix_tflops = {{ bf16 = 1000 }}
vector_tflops = {{ f32 = 1000 }}
[profile.{name}.gemm]
efficiency = 0.5
"""
FITS = """
[[fit]]
name = "gemm fraction"
chips = ["chip-a"]
fields = ["gemm.efficiency"]
rows = {{ category = "gemm" }}
held_out = "source"
{prior}
"""


def _base(tmp_path):
    p = tmp_path / "hw.toml"
    p.write_text(CHIP.format(name="chip-a"))
    return {"chip-a": load_profiles(p)["chip-a"]}


def _fits(tmp_path, prior=""):
    p = tmp_path / "fits.toml"
    p.write_text(FITS.format(prior=prior))
    return held_out.load(p)


def _row(rid, k, source):
    return {"id": rid, "chip": "chip-a", "category": "gemm", "source": source, "params": {}, "k": k}


def ratio(m, profiles):
    """A closed form: k / the GEMM efficiency (a time inversely proportional to the fraction), so the value fitted on
    some rows is the median of their k."""
    return m["k"] / profiles[m["chip"]].gemm.efficiency


def test_each_source_is_priced_with_the_value_fitted_on_the_others(tmp_path):
    rows = [_row("a1", 0.40, "https://github.com/o/a/x"), _row("a2", 0.44, "https://github.com/o/a/y"),
            _row("b1", 0.60, "https://github.com/o/b/x"), _row("c1", 0.80, "https://arxiv.org/abs/1234.5678")]
    results, lines = held_out.loso(_fits(tmp_path), rows, _base(tmp_path), ratio)
    got = {m["id"]: (r, h) for m, r, h in results}
    # o/a's rows: the value fitted on o/b and the paper = the median of 0.60 and 0.80 = 0.70
    assert got["a1"] == (pytest.approx(0.40 / 0.70, rel=1e-3), True)
    assert got["b1"][0] == pytest.approx(0.60 / statistics.median([0.40, 0.44, 0.80]), rel=1e-3)
    assert got["c1"][0] == pytest.approx(0.80 / statistics.median([0.40, 0.44, 0.60]), rel=1e-3)
    assert any("fit: gemm fraction = 0.52 (fit on 4 rows" in s for s in lines)  # on every source: median 0.52
    assert any(s.startswith("  arxiv:1234.5678: priced with gemm fraction = 0.44 (fit on 3 rows") for s in lines)


def test_a_value_with_a_single_source_leaves_its_rows_out_or_prices_them_with_its_prior(tmp_path):
    rows = [_row("a1", 0.40, "https://github.com/o/a/x"), _row("a2", 0.44, "https://github.com/o/a/y")]
    results, lines = held_out.loso(_fits(tmp_path), rows, _base(tmp_path), ratio)
    assert [h for _, _, h in results] == [False, False]
    assert any("has no row outside this source and no prior" in s for s in lines)
    results, lines = held_out.loso(_fits(tmp_path, 'prior = 0.4\nprior_basis = "a datasheet"'), rows,
                                   _base(tmp_path), ratio)
    assert [(round(r, 3), h) for _, r, h in results] == [(1.0, True), (1.1, True)]
    assert any("prior (a datasheet)" in s for s in lines)


def test_sources_are_repositories_papers_or_hosts():
    assert held_out.source_of({"source": "https://github.com/NVIDIA/cudnn-frontend/blob/abc/x.csv"}) == \
        "NVIDIA/cudnn-frontend"
    assert held_out.source_of({"source": "https://arxiv.org/abs/2407.08608"}) == "arxiv:2407.08608"
    assert held_out.source_of({"source": "https://example.com/a/b"}) == "example.com"


def test_the_shipped_fits_name_fields_the_profiles_have():
    fits = held_out.load(vp.FITS)
    assert len(fits) >= 5
    from mhlo_cost.machines.catalogue import get_profile
    import chip_fits as cf
    for sf in fits:
        for chip in sf.fit.chips:
            assert all(cf.get_field(get_profile(chip), f) is not None for f in sf.fit.fields), (sf.fit.name, chip)


def test_the_corpus_has_the_head_dims_libraries_and_kernels_it_is_judged_on():
    with open(vp.DATA, "rb") as f:
        rows = tomllib.load(f)["m"]
    assert len({m["id"] for m in rows}) == len(rows)
    attn = [m for m in rows if m["category"].startswith("attention")]
    assert {m["params"]["head_dim"] for m in attn} >= {64, 128, 256}
    for cat in ("attention_fwd", "attention_bwd"):
        assert {m["params"]["library"] for m in attn if m["category"] == cat} == {"fa2", "fa3", "cudnn"}
    assert {m.get("impl") for m in rows if m["category"] == "memory"} >= {None, "torch", "cudnn", "inductor"}
    for m in rows:
        assert m["source"].startswith("https://") and m["config"] and m["unit"] in ("ms", "TFLOP/s"), m["id"]
        assert m["program"] in vp.BUILDERS or m["program"] == "gpt_train", m["id"]
    # every category is reported on at least two sources, so each can be held out
    for cat in vp.CATEGORIES:
        assert len({held_out.source_of(m) for m in rows if m["category"] == cat}) >= 2 or cat == "model", cat


def test_torch_eager_norm_kernels_are_reported_apart_from_the_compiled_figure():
    row = {"category": "memory", "impl": "torch", "params": {}}
    assert vp.category(row) == "memory_eager" and vp.category(row) not in vp.CATEGORIES
    assert vp.category(dict(row, impl="inductor")) == "memory" == vp.category({"category": "memory", "params": {}})
    lines = vp.summary_lines([({"category": "memory", "impl": "torch", "params": {}, "source": "https://x.org/a"}, 0.5),
                              ({"category": "memory", "params": {}, "source": "https://x.org/a"}, 1.1)])
    assert any(s.split()[:2] == ["overall", "(compiled"] and "n=  1" in s and "10.0%" in s for s in lines)
    assert any(s.split()[0] == "memory_eager" and "50.0%" in s for s in lines)
