"""benchmarks/model_zoo.py: a model that fails to lower is a row (lowered n, the command's one-line reason), never
a crash of the table; a model that lowers is counted against FlopCounterMode and its blocks against its
configuration, and the last line sums the rows."""
from __future__ import annotations

import importlib.util
import os
import re
import sys

import pytest

pytest.importorskip("torch")
if any(importlib.util.find_spec(m) is None for m in ("torchax", "transformers")):
    pytest.skip("torchax or transformers not installed", allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import model_zoo  # noqa: E402
import model_zoo_models  # noqa: E402


def test_failing_model_is_a_row(tmp_path, monkeypatch):
    bad = ("hf", "NoSuchModelForCausalLM", None, {}, ["2x16:int64"], {}, lambda m: 2)
    monkeypatch.setitem(model_zoo.MODELS, "bad", bad)
    row = model_zoo.run_one("bad", str(tmp_path))
    assert row["lowered"] == "n" and "no class 'NoSuchModelForCausalLM'" in row["note"]
    assert "\n" not in row["note"]
    text = model_zoo.table([row])
    assert text.splitlines()[-1] == ("0 of 1 lowered, 0 with difference 0, blocks found = expected for 0, "
                                     "params = numel for 0, eager peak within 10% of MemTracker for 0")


def test_one_model_row_and_last_line(capsys):
    assert model_zoo.main(["--only", "bert", "--no-backward"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(ln for ln in out if ln.startswith("| bert |"))
    # BERT, 2 layers of width 64 (MLP 128) on 2 x 16 tokens: q, k, v, o and the MLP, QK^T and PV; the pooler's
    # d x d on the 2 first tokens (closed form)
    n, d = 2 * 16, 64
    per_layer = 2 * n * d * d * 4 + 2 * 2 * n * d * 128 + 2 * 2 * 2 * 16 * 16 * d
    total = 2 * per_layer + 2 * 2 * d * d
    # parameters (closed form): word (256), position (512) and token-type (2) embeddings and their norm; per
    # layer q, k, v, o, the MLP's two and two norms; the pooler
    params = (256 + 512 + 2) * d + 2 * d + 2 * (4 * (d * d + d) + 2 * d * 128 + 128 + d + 4 * d) + d * d + d
    assert f"| {total:,} | {total:,} | +0 | 2/2 | 2/2 | {params:,} / {params:,} | " in row
    ours, ref, ratio = re.search(r"\| ([\d,]+) / ([\d,]+) \(([\d.]+)\) \|", row).groups()
    assert abs(int(ours.replace(",", "")) / int(ref.replace(",", "")) - 1) <= 0.10 and float(ratio) > 0
    assert out[-1] == ("1 of 1 lowered, 1 with difference 0, blocks found = expected for 1, params = numel for 1, "
                       "eager peak within 10% of MemTracker for 1")


def test_unknown_name_is_refused(capsys):
    assert model_zoo.main(["--only", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("model_zoo: error: unknown model nosuch")


def test_models_cover_the_issue():
    models = model_zoo_models.MODELS
    assert len(models) == 55 and set(model_zoo_models.MOE) <= set(models) and set(model_zoo_models.REAL) <= set(models)
    held_out = {"OlmoeForCausalLM", "GptOssForCausalLM", "Llama4ForCausalLM", "Qwen2VLForConditionalGeneration",
                "eva02_tiny_patch14_224", "regnety_002", "ModernBertModel", "Gemma2ForCausalLM", "WanTransformer3DModel",
                "JambaForCausalLM"}
    assert held_out <= {m[1] for m in models.values()}


def test_an_input_by_value_is_passed_by_value_and_counted_with_its_values():
    """Lumina2's mask is given by value (its forward reads the sequence lengths): ``lower --input-value`` and, for
    the counter, a tensor holding those values."""
    import torch

    argv = model_zoo._argv("lumina2", "out.mlir")
    i = argv.index("--input-value")
    assert argv[i + 1] == "encoder_attention_mask=[[true,true,true,true,true,true]]:bool"
    assert "encoder_attention_mask=1x6:bool" not in argv and "lumina2" in model_zoo_models.REAL
    pos, kw = model_zoo._tensors("lumina2", None)
    assert [tuple(t.shape) for t in pos] == [(1, 4, 8, 8)] and set(kw) >= {"timestep", "encoder_attention_mask"}
    mask = kw["encoder_attention_mask"]
    assert mask.dtype == torch.bool and mask.device.type == "cpu" and mask.tolist() == [[True] * 6]
