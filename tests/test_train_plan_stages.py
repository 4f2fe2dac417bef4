"""Training at scale, per pipeline stage and as a page: checked against closed forms worked out here.

Megatron's schedule (warm-up forwards + the one in flight, at most the iteration's micro-batches) for the
activations each stage holds, Korthikanti et al. 2022 (Table 2) for one layer's bytes; the stage times add up
to the iteration, the last stage's idle time is the bubble ((p-1)/v stage times), the others wait for the head.
"""
from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import layer_cost
from mhlo_cost.studies.plan.memory import memory
from mhlo_cost.studies.plan.plan import plan
from mhlo_cost.studies.plan.stages import COMPONENTS, stage_frame, stage_rows

TINY = dict(layers=12, hidden=64, heads=4, seq=32, vocab=128)
SELENE = resolve_profile("selene")
ARGS = ["train-plan", "--layers", "12", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "-t", "2", "--sp", "-p", "3", "--global-batch", "6", "--recompute", "selective"]


def _layer_bytes(s, b, h, a, t):  # Korthikanti Table 2, sequence parallel + selective recompute
    return Fraction(s * b * h, t) * 34


@pytest.mark.parametrize("p,v,m", [(3, 1, 6), (3, 1, 2), (2, 3, 4), (2, 2, 2)])
def test_each_stage_holds_megatrons_warmup_plus_one(p, v, m):
    cfg = ScaleConfig(**TINY, t=2, sp=True, p=p, interleave=v, global_batch=m, recompute="selective")
    cost = layer_cost(cfg, SELENE)
    per_layer = _layer_bytes(32, 1, 64, 4, 2)
    for s in range(p):
        if v == 1:
            held = min(p - s, m) * (12 // p)  # 1F1B: p - s micro-batches in flight, L/p layers each
        else:  # interleaved: 2(p - s - 1) + (v - 1) p warm-up chunks + 1, of L/(p v) layers, at most m v
            held = min(2 * (p - s - 1) + (v - 1) * p + 1, m * v) * (12 // (p * v))
        assert memory(cfg, cost, stage=s)["activations"] == held * per_layer
    if v > 1 and m * v >= (v + 1) * p:  # uncapped: the first stage is Korthikanti's L/p x p (1 + (p-1)/(p v))
        assert memory(cfg, cost)["activations"] == 12 * (1 + Fraction(p - 1, p * v)) * per_layer


def test_stages_add_up_and_only_the_last_runs_the_head():
    cfg = ScaleConfig(**TINY, t=2, sp=True, p=3, global_batch=6, recompute="selective")
    pl = plan(cfg, SELENE)
    rows, it = stage_rows(pl), pl.iteration
    assert [r["stage"] for r in rows] == [0, 1, 2] and [r["devices"] for r in rows] == ["0-1", "2-3", "4-5"]
    head = layer_cost(cfg, SELENE, part="head").time_s
    m, f, b = 6, pl.cost.time_s["forward"], pl.cost.time_s["backward"]
    for r in rows:
        assert sum(r[k] for k in COMPONENTS) == pytest.approx(it.total, rel=1e-12)
    last = rows[-1]
    stage_time = (it.compute["forward"] + it.compute["backward"] + it.compute["recompute"] + it.tp_comm) / m
    assert last["idle"] == pytest.approx((3 - 1) * stage_time, rel=1e-12)  # the bubble: (p - 1) stage times
    assert last["forward"] == pytest.approx(m * (4 * f + head["forward"]), rel=1e-12)
    for r in rows[:-1]:
        assert r["forward"] == pytest.approx(m * 4 * f, rel=1e-12)
        assert r["backward"] == pytest.approx(m * 4 * b, rel=1e-12)
        assert r["idle"] == pytest.approx(last["idle"] + m * (head["forward"] + head["backward"]), rel=1e-9)
    assert [r["mem_activations"] for r in rows] == [
        int(min(3 - s, 6) * 4 * _layer_bytes(32, 1, 64, 4, 2)) for s in range(3)]
    assert list(stage_frame(pl)["mem_total"]) == [r["mem_total"] for r in rows]


def test_by_stage_csv_and_json(capsys):
    assert main(ARGS + ["--by", "stage", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("stage,devices,forward_s") and len(lines) == 1 + 3
    assert main(ARGS + ["--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [s["stage"] for s in payload["stages"]] == [0, 1, 2]
    assert payload["stages"][0]["mem_activations"] == payload["memory"]["activations"]


def test_html_page_is_deterministic_and_has_a_bar_per_stage(tmp_path, capsys):
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    assert main(ARGS + ["--format", "html", "-o", str(a)]) == 0
    assert main(ARGS + ["--format", "html", "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    page = a.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count('<g class="bar"') == 3
    assert 'id="stages"' in page and 'id="breakdown"' in page and "pipeline bubble" in page
    # the per-stage table carries the exact bytes (data-v) the plan computes
    cfg = ScaleConfig(**TINY, t=2, sp=True, p=3, global_batch=6, recompute="selective")
    total0 = plan(cfg, SELENE).memory["total"]
    assert re.search(rf'data-v="{total0}"', page)


LLAMA = ["--hf", "LlamaForCausalLM", "--config", "llama", "--set", "num_hidden_layers=4", "--set", "hidden_size=64",
         "--set", "num_attention_heads=4", "--set", "num_key_value_heads=2", "--set", "intermediate_size=160",
         "--set", "vocab_size=128", "--seq", "32"]


def test_hf_llama_maps_with_gqa_and_swiglu(capsys):
    pytest.importorskip("transformers")
    assert main(["train-plan", *LLAMA, "-t", "2", "--sp", "--global-batch", "2", "--format", "json"]) == 0
    c = json.loads(capsys.readouterr().out)
    b, s, h, kvd, f, n, vcb = 2, 32, 64, 2 * 16, 160, 4, 128
    # q and o: h x h; k and v: h x kv d (GQA); gate, up, down: h x f (SwiGLU); QK^T and PV; the logits
    per_layer = 6 * b * s * (2 * h * h + 2 * h * kvd + 3 * h * f) + 12 * b * s * s * h
    assert c["counts"]["model_flops"] == n * per_layer + 6 * b * s * h * vcb
    t = 2
    weights = (h * (h + 2 * kvd) + h * h + 3 * h * f) // t + 2 * h  # the Llama layer: no biases, two RMSNorm scales
    # bf16, one stage holds every layer, the embedding and the untied LM head (V/t x h each)
    assert c["memory"]["weights"] == 2 * weights * n + 2 * 2 * (vcb // t) * h


def test_hf_that_is_not_llama_says_why(capsys):
    pytest.importorskip("transformers")
    assert main(["train-plan", "--hf", "GPT2LMHeadModel", "--config", "gpt2"]) == 2
    assert "mhlo-cost: error: train-plan --hf maps Llama-family decoders" in capsys.readouterr().err
