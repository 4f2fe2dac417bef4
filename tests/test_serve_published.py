"""The serving simulation's memory as a server holds it (issue 37): the activation reserve at no cached context
(a server's profiling forward runs flash/paged attention: no scores, no copy of the cache) and a block count given
outright (vLLM's num_gpu_blocks_override, TurboMind's cache_max_entry_count above 1)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.studies.serve import StepRequest, lower_step
from mhlo_cost.studies.serve.serve import activation_bytes, step_study
from mhlo_cost.studies.serve.server import GIB, ServerConfig, memory
from mhlo_cost.studies.serve.simload import LoadError
from mhlo_cost.studies.serve.stepmodel import context_free_activations

# transformers' Llama at toy widths (grouped-query attention: 4 heads, 2 key/value heads of 16)
BASE = StepRequest(mode="decode", hf="LlamaForCausalLM", config="llama", tokens=1, batch=8, overrides=(
    ("hidden_size", 64), ("intermediate_size", 128), ("max_position_embeddings", 2048), ("num_attention_heads", 4),
    ("num_hidden_layers", 2), ("num_key_value_heads", 2), ("vocab_size", 64)))


def _memory(context: int):
    step = lower_step(replace(BASE, context=context))
    return step, step_study(step, get_profile("h100")).fused_memory


def test_the_activation_reserve_does_not_grow_with_the_lowered_context():
    mems = {c: _memory(c) for c in (256, 512, 1024, 2048)}
    low = context_free_activations({c: mems[c][1] for c in (256, 512)})
    high = context_free_activations({c: mems[c][1] for c in (1024, 2048)})
    # every live value is sized by 1 or by the context at a fixed batch, so the extrapolation to no context is
    # the same from either pair of contexts
    assert low == high > 0
    # the decode step as lowered at 2048 holds, besides, what grows with the context (the scores, a layer's
    # updated keys beside the cache): about one layer's keys (batch x key/value heads x context x head dim)
    step, mem = mems[2048]
    as_lowered = activation_bytes(mem, step.layout.nbytes)
    keys = step.layout.layers[0]
    assert tuple(keys.key) == (8, 2, 2048, 16)
    assert as_lowered - low >= 8 * 2 * 2048 * 16 * keys.itemsize * 9 // 10


def test_a_block_count_given_outright_is_the_servers():
    # 1,000 blocks of 128 tokens x 4,096 B per token, whatever the memory says
    m = memory(ServerConfig(block_size=128, num_gpu_blocks=1000), 80 * GIB, 20 * GIB, 4096, 1000)
    assert (m.blocks, m.block_bytes, m.kv_bytes) == (1000, 524_288, 524_288_000)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(LoadError, match="num-gpu-blocks"):
            ServerConfig(num_gpu_blocks=bad)


def test_the_command_line_takes_a_block_count(tmp_path, capsys):
    import json

    from mhlo_cost.cli import main

    gpt = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]
    argv = ["serve", *gpt, "--isl", "32", "--osl", "4", "--concurrency", "2", "--num-requests", "4",
            "--num-gpu-blocks", "7", "--format", "json", "--no-cache", "-q"]
    assert main(argv) == 0
    rows = {(r["section"], r["metric"]): r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["kv cache", "kv_blocks"] == 7
    assert rows["setup", "memory_accounting"].endswith("; 7 blocks given")
    # one step refuses it, in one line
    assert main(["serve", *gpt, "--decode", "--batch", "2", "--context", "64", "--num-gpu-blocks", "7",
                 "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--num-gpu-blocks is an option of the serving simulation" in err[0], err
