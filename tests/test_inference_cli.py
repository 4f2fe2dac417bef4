"""`mhlo-cost serve` and `lower --decode`: the figures on a tiny bundled gpt, and bad options as one error line."""
from __future__ import annotations

import json

import pytest

from mhlo_cost.cli import main

GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]


def test_serve_json_gives_the_exact_cache(capsys, tmp_path):
    assert main(["serve", *GPT, "--decode", "--batch", "2", "--context", "32", "--format", "json",
                 "--cache-dir", str(tmp_path), "-q"]) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    assert d["kv_cache_bytes"] == 2 * 2 * 4 * 16 * 32 * 2 * 2
    assert d["kv_cache_layer_bytes"] == [d["kv_cache_bytes"] // 2] * 2
    assert d["tokens_per_s"] == pytest.approx(2 / d["step_time_s"])
    assert d["fits"] == "yes"  # as report, the sweep and serve's own sweep spell it
    assert d["intensity"] < d["ridge"] and d["bound"] == "overhead"  # a tiny step: fixed kernel costs outweigh it


@pytest.mark.parametrize("argv, words", [
    (["serve", "--decode"], "name one model"),
    (["serve", *GPT, "--decode", "--prefill"], "exclude each other"),
    (["serve", *GPT, "--decode", "--tokens", "8"], "--tokens is the prefill"),
    (["serve", *GPT, "--prefill", "--tokens", "64", "--context", "32"], "does not fit the cache"),
    (["serve", *GPT, "--batch", "0"], "positive integer"),
    (["serve", *GPT, "--batches", "1,x"], "comma-separated"),
    (["serve", *GPT, "--plot", "x.png"], "--plot draws a sweep"),
    (["lower", "--model", "gpt", "--context", "8"], "--context goes with --decode"),
])
def test_bad_options_are_one_error_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mhlo-cost: error:") and words in err[-1]
