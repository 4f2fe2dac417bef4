"""Whole-model rows of the published validation (issue 35, done-when 2): benchmarks/data/published_models.toml parses,
each row names its source (a repository file at a commit) and exact configuration, no fitted profile value reads them
(every source held out), and a row of each source prices to a finite time no faster than its arithmetic or its
weights allow on the chip's datasheet rates (closed forms here; no fitted constant)."""
from __future__ import annotations

import math
import os
import re
import sys
import tomllib

import pytest

pytest.importorskip("jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import held_out  # noqa: E402
import published_models as pm  # noqa: E402
import validate_published as vp  # noqa: E402

from mhlo_cost.machines.hardware import get_profile  # noqa: E402

with open(vp.MODELS, "rb") as _f:
    ROWS = tomllib.load(_f)["m"]


def test_the_file_parses_and_every_row_has_its_source_and_configuration():
    assert len(ROWS) >= 5
    for m in ROWS:
        assert m["category"] == "model", m["id"]
        assert m["program"] in pm.PROGRAMS and m["execution"] in pm.EXECUTIONS, m["id"]
        assert m["measured"] > 0 and m["unit"] in ("ms", "tokens/s", "samples/s"), m["id"]
        assert re.match(r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/", m["source"]), m["id"]
        assert str(m["params"]["batch"]) in m["config"] and len(m["config"]) > 80, m["id"]
        assert m["config"].count(str(m["measured"])) >= 1, m["id"]  # the figure is quoted where it is typed
        get_profile(m["chip"])  # a shipped profile prices it
        assert not m.get("cudagraphs") or m["execution"] == "inductor", m["id"]


def test_ids_are_unique_across_the_corpus_and_the_sources_are_new():
    corpus = vp.load_corpus()
    ids = [m["id"] for m in corpus]
    assert len(ids) == len(set(ids))
    with open(vp.DATA, "rb") as f:
        old = {held_out.source_of(m) for m in tomllib.load(f)["m"]}
    new = {held_out.source_of(m) for m in ROWS}
    assert len(new) >= 3 and not new & old  # at least three sources, none of them already in the corpus
    models = {m["params"].get("name") or m["params"].get("hf") + str(m["params"].get("set")) for m in ROWS}
    assert len(models) >= 5


def test_no_fitted_value_reads_a_whole_model_row():
    fits = held_out.load(vp.FITS)
    assert not [(sf.fit.name, m["id"]) for sf in fits for m in ROWS if held_out.matches(sf.fit, m)]


def test_a_throughput_is_one_step_of_the_batch():
    m = {"id": "x", "unit": "tokens/s", "measured": 104.9, "params": {"batch": 1}, "program": "decode"}
    assert vp.measured_s(m) == pytest.approx(1 / 104.9)
    m = dict(m, unit="ms", measured=342.132, program="timm")
    assert vp.measured_s(m) == pytest.approx(0.342132)


def _first(prefix):
    return next(m for m in ROWS if m["id"].startswith(prefix))


def _small(m, **params):
    return dict(m, params=dict(m["params"], **params))


def test_a_timm_row_prices_no_faster_than_its_multiply_adds():
    m = _small(_first("timm-resnet50-4090-eager"), batch=2)
    hw = get_profile(m["chip"])
    t = pm.estimated_s(m, hw)
    # timm's own count for resnet50 at 224: 4.11 GMACs per image (infer_gmacs in the benchmark CSV)
    floor = 2 * 4.11e9 * 2 / hw.matrix_flops["f16"]  # FLOP/s
    assert math.isfinite(t) and t > floor * 0.95


def test_a_transformers_row_prices_to_a_finite_time_under_each_execution():
    m = _small(_first("hfdocs-resnet50-a100-eager"), batch=1)
    hw = get_profile(m["chip"])
    eager = pm.estimated_s(m, hw)
    compiled = pm.estimated_s(dict(m, execution="inductor"), hw)
    assert math.isfinite(eager) and math.isfinite(compiled) and 0 < compiled <= eager * 1.0001


def test_a_decode_row_prices_no_faster_than_reading_its_weights():
    m = _first("gptfast-llama2-7b")
    m = _small(m, set=dict(m["params"]["set"], num_hidden_layers=1))
    hw = get_profile(m["chip"])
    t = pm.estimated_s(m, hw)
    s = m["params"]["set"]
    h, f, v = s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    weights = 2 * (4 * h * h + 3 * h * f + v * h)  # one layer (q, k, v, o; gate, up, down) and the LM head, bf16
    assert math.isfinite(t) and t > weights / hw.hbm_bandwidth  # bytes/s


def test_cuda_graphs_need_the_inductor_execution():
    m = dict(_first("gptfast-"), execution="eager")
    with pytest.raises(ValueError, match="cudagraphs"):
        pm.estimated_s(m, get_profile("a100"))


def test_the_breakdown_of_a_far_row_covers_its_whole_estimate():
    m = _first("hfdocs-resnet50-a100-eager-b1")
    hw = get_profile(m["chip"])
    parts, _, gaps = pm.kernel_parts(m, hw)
    assert sum(t for _, t, _ in parts.values()) == pytest.approx(pm.estimated_s(m, hw), rel=1e-9)
    assert parts["gemm/conv"][0] == 53 + 1  # ResNet-50: 53 convolutions and the classifier
    assert gaps > 0
    lines = pm.breakdown_lines([(m, 0.2, True), (dict(m, id="near"), 1.1, True)], pm.measured_s)
    assert len(lines) == 2 and m["id"] in lines[1] and "gemm/conv 54 kernels" in lines[1]
    calls, extra = pm.merged_calls(m, hw)
    assert 0 <= calls <= 49 and (extra > 0) == (calls > 0)  # at most ResNet-50's 49 activation calls
    assert f"{calls} module calls share the kernel" in lines[1]
