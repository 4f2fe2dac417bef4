"""`mhlo-cost serve` writes its answer through the shared views and renderers: every figure of the text is in
JSON and CSV with its exact value, the KV cache is the closed form worked out by hand, and each format is
deterministic. A tiny bundled gpt: layers 2, hidden 64, heads 4 (head_dim 16, no grouped-query heads), bf16."""
from __future__ import annotations

import csv
import io
import json
import re

import pytest

from mhlo_cost.cli import main

GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]
LAYERS, KV_HEADS, HEAD_DIM, BF16 = 2, 4, 64 // 4, 2
FORMATS = ("table", "json", "csv", "markdown")
STEPS = {"decode": ["--decode", "--batch", "2", "--context", "32"],
         "prefill_tp2": ["--prefill", "--tokens", "16", "--tp", "2"]}
SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _serve(out, cache, argv) -> str:
    assert main(["serve", *GPT, *argv, "--cache-dir", str(cache), "-q", "-o", str(out)]) == 0
    return out.read_text()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Each step in each format, twice: from one cache (the second run reads the figures it kept) and from a
    fresh one (the step lowered and estimated again)."""
    root = tmp_path_factory.mktemp("serve")
    got = {}
    for name, argv in STEPS.items():
        for fmt in FORMATS:
            got[name, fmt] = _serve(root / f"{name}.{fmt}", root / "cache", [*argv, "--format", fmt])
        for fmt in ("table", "json"):
            got[name, fmt, "again"] = _serve(root / f"{name}.again.{fmt}", root / "fresh", [*argv, "--format", fmt])
    return got


def text_figures(text: str) -> dict:
    """metric -> (section, cell) of the aligned text: headings unindented, figures indented under them."""
    lines = text.splitlines()
    body = lines[lines.index(next(line for line in lines if line.startswith("---"))) + 1:]
    out, section = {}, None
    for line in body:
        if not line.startswith("  "):
            section = line
            continue
        metric, cell = line.strip().split(None, 1)
        assert metric not in out, metric
        out[metric] = (section, cell)
    return out


def shows(cell: str, value) -> bool:
    """Whether the text's ``cell`` is ``value`` as the text rounds it, read without the code under test."""
    if isinstance(value, bool):
        return cell == str(value)
    if isinstance(value, int):
        return re.fullmatch(r"-?[\d,]+", cell) is not None and int(cell.replace(",", "")) == value
    if isinstance(value, list):
        counts = {}
        for part in cell.split("; "):
            n, _, x = part.rpartition(" x ")
            counts[int(x.replace(",", ""))] = int(n or 1)
        return counts == {x: value.count(x) for x in value}
    if isinstance(value, float):
        m = re.fullmatch(r"([\d.]+) (ns|us|ms|s)", cell)
        if m:  # seconds, two decimals in a human unit
            return abs(float(m[1]) * SECONDS[m[2]] - value) <= 0.005 * SECONDS[m[2]] * (1 + 1e-9)
        return float(cell) == pytest.approx(value, rel=5e-4)  # four significant digits
    return cell == value


def csv_is(cell: str, value) -> bool:
    """Whether the CSV's ``cell`` is ``value`` exactly (every digit of an int, the float's shortest repr)."""
    if isinstance(value, list):
        return json.loads(cell) == value
    if isinstance(value, float):
        return float(cell) == value
    return cell == str(value)


@pytest.mark.parametrize("name", list(STEPS))
def test_every_figure_of_the_text_is_exact_in_json_and_csv(outputs, name):
    shown = text_figures(outputs[name, "table"])
    d = json.loads(outputs[name, "json"])
    rows = list(csv.DictReader(io.StringIO(outputs[name, "csv"])))
    assert list(shown) == list(d["summary"]) == [r["metric"] for r in d["rows"]] == [r["metric"] for r in rows]
    for r, c in zip(d["rows"], rows):
        section, cell = shown[r["metric"]]
        assert r["section"] == c["section"] == section
        assert r["value"] == d["summary"][r["metric"]]
        assert shows(cell, r["value"]), (r["metric"], cell, r["value"])
        assert csv_is(c["value"], r["value"]), (r["metric"], c["value"], r["value"])
    sections = [line for line in outputs[name, "table"].splitlines()[5:] if not line.startswith("  ")]
    assert sections[:2] == ["step", "KV cache"] and sections[2].startswith("memory per device")
    assert sections[3].startswith("time") and sections[4] == "blocks (one device)"
    assert outputs[name, "table"].splitlines()[1] == d["headline"]
    assert d["what"] == outputs[name, "table"].splitlines()[0]
    md = outputs[name, "markdown"]
    assert all(f"| {m} | " in md for m in shown) and f"**{d['headline']}**" in md


def test_the_figures_worked_out_by_hand(outputs):
    s = json.loads(outputs["decode", "json"])["summary"]
    kv = 2 * LAYERS * KV_HEADS * HEAD_DIM * 32 * 2 * BF16  # K and V x layers x heads x head_dim x context x batch
    assert type(s["kv_cache_bytes"]) is int and s["kv_cache_bytes"] == kv == 32_768
    assert s["kv_cache_layer_bytes"] == [kv // LAYERS] * LAYERS
    assert s["input_bytes"] == 2 * 1 * 4 + 4  # token ids (batch 2 x 1, int32) and the position (an int32)
    assert s["memory_bytes"] == s["weight_bytes"] + kv + s["input_bytes"] + s["activation_bytes"]
    assert s["tokens_per_s"] == pytest.approx(2 / s["step_time_s"], rel=1e-12)
    assert s["tokens_per_s_per_sequence"] == pytest.approx(s["tokens_per_s"] / 2, rel=1e-12)
    assert s["TOTAL.est_time_s"] == pytest.approx(s["step_time_s"], rel=1e-9)
    assert "KV cache 32.77 KB" in outputs["decode", "table"].splitlines()[1]

    p = json.loads(outputs["prefill_tp2", "json"])["summary"]
    kv = 2 * LAYERS * KV_HEADS * HEAD_DIM * 16 * 1 * BF16  # the prompt's 16 positions, batch 1
    assert p["kv_cache_bytes"] == kv and p["tp"] == 2 and p["tokens"] == 16
    assert p["input_bytes"] == 1 * 16 * 4  # the prompt's token ids (batch 1 x 16, int32), not split by tp
    assert p["memory_bytes"] == -(-p["weight_bytes"] // 2) + kv // 2 + p["input_bytes"] + p["activation_bytes"]
    assert p["tokens_per_s"] == pytest.approx(16 / p["step_time_s"], rel=1e-12)
    assert "tokens_per_s_per_sequence" not in p and p["comm_time_s"] > 0
    assert "time to first token" in outputs["prefill_tp2", "table"]
    assert "memory per device (weights and cache / 2)" in outputs["prefill_tp2", "table"]


@pytest.mark.parametrize("name", list(STEPS))
def test_every_format_is_deterministic(outputs, name):
    assert outputs[name, "json", "again"] == outputs[name, "json"]
    assert outputs[name, "table", "again"] == outputs[name, "table"]


def test_a_sweep_is_one_frame_in_every_format(tmp_path):
    argv = ["--decode", "--batches", "1,2", "--contexts", "32"]
    got = {fmt: _serve(tmp_path / f"sweep.{fmt}", tmp_path / "cache", [*argv, "--format", fmt])
           for fmt in FORMATS}
    rows = json.loads(got["json"])["rows"]
    table = list(csv.DictReader(io.StringIO(got["csv"])))
    assert [(r["batch"], r["context"]) for r in rows] == [(1, 32), (2, 32)]
    for r, c in zip(rows, table):
        assert r["kv_cache_bytes"] == 2 * LAYERS * KV_HEADS * HEAD_DIM * 32 * r["batch"] * BF16
        assert all(csv_is(c[k], v) for k, v in r.items()), (r, c)
        assert r["tokens_per_s"] == pytest.approx(r["batch"] / r["step_time_s"], rel=1e-12)
    lines = got["table"].splitlines()
    assert "step_time[us]" in lines[1] and all(f"{r['kv_cache_bytes']:,}" in got["table"] for r in rows)
    assert got["markdown"].startswith("### decode of the bundled gpt")


def test_headings_are_additive_in_the_pairs_renderer():
    from mhlo_cost.views.pairs import heading, render_pairs

    plain = [("ops", 3), ("params", 10)]
    parted = [heading("counts"), ("ops", 3), heading("model"), ("params", 10)]
    assert render_pairs(plain, "csv", "raw", meta={}, title="t") == "metric,value\nops,3\nparams,10\n"
    assert render_pairs(parted, "csv", "raw", meta={}, title="t") == \
        "section,metric,value\ncounts,ops,3\nmodel,params,10\n"
    d = json.loads(render_pairs(parted, "json", "raw", meta={"headline": "mine"}, title="t"))
    assert d["headline"] == "mine" and d["summary"] == {"ops": 3, "params": 10}
    assert d["rows"][1] == {"section": "model", "metric": "params", "value": 10}
    assert "section" not in json.loads(render_pairs(plain, "json", "raw", meta={}, title="t"))["rows"][0]
    text = render_pairs(parted, "table", "raw", meta={}, title="t").splitlines()
    assert text[-4:] == ["counts", "  ops         3", "model", "  params     10"]


def test_a_step_view_of_figures_made_by_hand():
    """No lowering: Figures written here; a cache of sliding windows only (no largest context), no blocks."""
    from mhlo_cost.studies.serve.serve import Figures
    from mhlo_cost.views.serve import step_view
    from mhlo_cost.views.render import render

    f = Figures(step="decode", batch=4, context=4096, tokens=1, hardware="h100-sxm", tp=1, kv_cache_bytes=3 * 2**20,
                kv_cache_layer_bytes=[2**20, 2**19, 2**20, 2**19], weight_bytes=10**9, activation_bytes=2**10,
                memory_bytes=10**9 + 3 * 2**20 + 2**10, capacity_bytes=80 * 10**9, fits=True, flops=4 * 10**9,
                bytes_moved=10**9, step_time_s=0.002, comm_time_s=0.0, tokens_per_s=2000.0, intensity=4.0,
                ridge=295.0, bound="memory", max_batch=100, max_context=None, launch="cuda-graphs")
    table = step_view(f, "by hand")
    d = json.loads(render(table, "json"))
    assert d["summary"]["max_context"] == "unbounded" and d["summary"]["kv_cache_bytes"] == 3 * 2**20
    assert d["headline"] == ("decode: 2 ms per output token, 2,000.0 tokens/s (500.0 per sequence) on h100-sxm, "
                             "one CUDA graph | KV cache 3.15 MB | memory 1.00 GB per device of 80.00 GB: fits | "
                             "memory-bound")
    text = render(table, "table")
    assert "  kv_cache_layer_bytes       2 x 1,048,576; 2 x 524,288" in text and "blocks" not in text
    assert render(table, "csv") == render(step_view(f, "by hand"), "csv")
