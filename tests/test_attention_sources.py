"""The attention rows of benchmarks/data/published_gpu.toml come from more than one source per library (issue 35):
every attention fit of benchmarks/data/published_fits.toml has rows from at least two sources, so leaving one source
out (benchmarks/held_out.py) always leaves rows to fit on and no attention row is priced with a value fitted on its
own source. Each row says where it was printed (a GitHub file at a commit, an issue or pull-request thread, a paper)
and what was run."""
from __future__ import annotations

import os
import re
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import held_out  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data", "published_gpu.toml")
FITS = os.path.join(ROOT, "benchmarks", "data", "published_fits.toml")
# the sources added for issue 35's held-out attention rows: id prefix -> the source_of value of its rows
NEW = {"cudnnfe24-": "NVIDIA/cudnn-frontend", "pt137036-": "pytorch/pytorch", "pt142132-": "pytorch/pytorch",
       "tb1256-": "meta-pytorch/tritonbench",
       "fa1438-": "Dao-AILab/flash-attention"}


@pytest.fixture(scope="module")
def rows():
    with open(DATA, "rb") as f:
        return tomllib.load(f)["m"]


def _attention(rows):
    return [m for m in rows if m["category"] in ("attention_fwd", "attention_bwd")]


def test_the_corpus_parses_with_unique_ids(rows):
    assert len({m["id"] for m in rows}) == len(rows)
    assert sum(m["id"].startswith(tuple(NEW)) for m in rows) >= 50


def test_every_attention_fit_has_rows_from_two_sources_or_more(rows):
    """Without a second source a fit cannot be refitted when its source is held out (held_out.loso lists such rows
    as not held out); the FlashAttention-3 backward was in that state with the FA3 paper alone."""
    fits = [sf for sf in held_out.load(FITS) if sf.fit.rows["category"].startswith("attention")]
    assert {sf.fit.rows["library"] for sf in fits} == {"fa2", "fa3", "cudnn"}
    for sf in fits:
        sources = {held_out.source_of(m) for m in rows if held_out.matches(sf.fit, m)}
        assert len(sources) >= 2, (sf.fit.name, sources)


def test_the_new_sources_are_distinct_from_the_fa3_paper(rows):
    for prefix, want in NEW.items():
        mine = [m for m in rows if m["id"].startswith(prefix)]
        assert mine, prefix
        assert {held_out.source_of(m) for m in mine} == {want}, prefix
        assert want != "arxiv:2407.08608"
    fa3_bwd = {held_out.source_of(m) for m in rows if m["category"] == "attention_bwd"
               and m["params"]["library"] == "fa3"}
    assert fa3_bwd == {"arxiv:2407.08608", "pytorch/pytorch", "meta-pytorch/tritonbench"}


def test_every_attention_row_names_its_configuration_and_a_fixed_address(rows):
    for m in _attention(rows):
        p = m["params"]
        assert {"batch", "heads", "seq", "head_dim", "causal", "dtype", "library"} <= set(p), m["id"]
        assert m["unit"] in ("ms", "TFLOP/s") and m["measured"] > 0, m["id"]
        # a backward row is priced as the forward and its VJP and counted as 2.5 forwards
        want = "attention_bwd" if m["category"] == "attention_bwd" else "attention"
        assert m["program"] == want and m["flops"] == want, m["id"]
        assert len(m["config"]) > 80, m["id"]
        url = m["source"]
        assert url.startswith("https://"), m["id"]
        if "/blob/" in url:  # a file of a repository: at a commit, not a branch
            assert re.search(r"/blob/[0-9a-f]{40}/", url), m["id"]
        if m["id"].startswith(tuple(NEW)):
            assert re.search(r"/blob/[0-9a-f]{40}/|/(issues|pull)/\d+$", url), m["id"]
            assert f"{p['head_dim']}" in m["config"] and f"{p['seq']}" in m["config"], m["id"]


def _tflops(m):
    """4 B H S^2 D (/2 causal) FLOPs, x2.5 for a backward (FlashAttention's count), over the row's time."""
    p = m["params"]
    flops = 4 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"] // (2 if p["causal"] else 1)
    flops = flops * 5 // 2 if m["category"] == "attention_bwd" else flops
    return m["measured"] if m["unit"] == "TFLOP/s" else flops / (m["measured"] * 1e-3) / 1e12


def test_the_new_rows_are_physical_rates_in_their_units(rows):
    """A unit slip (us read as ms) shows as a rate off by 1000: every new row lies between 100 TFLOP/s and the
    989 TFLOP/s bf16 dense peak of a GH100; the PR 137036 FA3 forward is the 501 TFLOP/s its config states."""
    by_id = {m["id"]: m for m in rows}
    for m in rows:
        if m["id"].startswith(tuple(NEW)):
            assert 100 < _tflops(m) < 989, (m["id"], _tflops(m))
    # 4 x 4 x 16 x 16384^2 x 64 FLOPs in 8778.528 us
    assert _tflops(by_id["pt137036-fa3-fwd-h100-d64-s16384"]) == pytest.approx(4.398e12 / 8778.528e-6 / 1e12, rel=1e-3)
    assert round(_tflops(by_id["pt137036-fa3-fwd-h100-d64-s16384"])) == 501
