"""The decode attention kernel's reads of the KV cache (issues 36 and 37: large-batch grouped-query decode): how often
a library's kernel reads a key/value group's cache (TensorRT-LLM v0.6's masked MHA: once per query head; TurboMind
v0.1: once per 4 query heads; XQA / FlashAttention: once), and that the step model charges exactly the extra
cache bytes, at the attention kernels' own byte rate, and nothing else. Expected values are worked out here."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.studies.limits import LimitError
from mhlo_cost.studies.serve import StepRequest
from mhlo_cost.studies.serve.parallel import ShardedStep, kv_reads
from mhlo_cost.studies.serve.simload import Lengths
from mhlo_cost.studies.serve.simstudy import SimOptions
from mhlo_cost.studies.serve.stepmodel import Kernels, Rates, fit


@pytest.mark.parametrize("heads,kv_heads,per_read,want", [
    (64, 8, 1, 8),  # Llama-2-70b under TensorRT-LLM v0.6's masked MHA: a block per query head, 8 per group
    (16, 2, 1, 8),  # the same at tp 4 (16 query heads and 2 key/value heads a GPU): the group is unchanged
    (64, 8, 4, 2),  # TurboMind v0.1: HeadPerCta 4 of a group of 8
    (64, 8, None, 1),  # XQA, FlashAttention, FlashInfer: the group from one read
    (32, 32, 1, 1),  # multi-head attention: a group of one, read once by any kernel
    (64, 8, 16, 1),  # more heads a read than the group has: one read
    (8, 1, 3, 3),  # multi-query, 8 heads, 3 a read: ceil(8 / 3)
])
def test_kv_reads_per_kernel(heads, kv_heads, per_read, want):
    assert kv_reads(heads, kv_heads, per_read) == want


def test_an_attention_kernel_rereads_only_its_cache():
    # Two kernels. A GEMM: 1,000 FLOPs in 1 s, 100 bytes in 1 s (nothing fixed). An attention kernel: 10 FLOPs
    # in 1 s, 400 bytes in 2 s of which 0.5 s fixed (400 / 1.5 B/s). Per sequence-position (the b*c monomial) the
    # attention kernel moves 4 bytes, 3 of them the cache (cache_share 0.75); per token the GEMM 50 FLOPs, 10 bytes.
    node = Kernels([1000, 10], [100, 400], [1.0, 1.0], [1.0, 2.0], [0.1, 0.2], [0.0, 0.5], ("gemm", "attention"))
    flops = [np.array(x, float) for x in ([0, 0], [50, 0], [0, 0], [0, 1])]
    moved = [np.array(x, float) for x in ([0, 0], [10, 0], [0, 0], [0, 4])]
    rates = Rates(node, flops, moved, cache_share=0.75)
    col = np.array([[1.0], [8.0], [9.0], [600.0]])  # 8 tokens, 600 positions attended
    byte_rate = 400 / 1.5
    for tp, reads in ((1, 1), (1, 8), (2, 8), (4, 2)):
        gemm = max(400 / 1000 / tp, 80 / 100 / tp)
        attention = max(600 / 10 / tp, 0.5 + (600 * 4 + (reads - 1) * 600 * 3) / byte_rate / tp)
        got = rates.parts(col, col, shards=tp, kv_reads=reads)
        assert got["gemm"] == pytest.approx(gemm + 0.1, rel=1e-12)
        assert got["attention"] == pytest.approx(attention + 0.2, rel=1e-12)
        assert got["other"] == 0.0
        assert rates.time_s(col, col, tp, reads)[0] == pytest.approx(gemm + attention + 0.3, rel=1e-12)


class _Model:
    """A step model that records the reads it is asked for; 2 layers of a 64-wide bf16 hidden state."""

    shape = {"hidden": 64, "layers": 2, "itemsize": 2}

    def __init__(self):
        self.asked = []

    def many(self, tokens, context_flops, context_bytes, longest, shards=1, kv_reads=1):
        self.asked.append(kv_reads)
        return np.full(len(longest), 1e-3 * kv_reads / shards)


def test_a_sharded_step_passes_its_reads_to_the_model():
    model, hw = _Model(), get_profile("h100")
    assert ShardedStep(model, hw, tp=1, kv_reads=8)(8, 80, 80, 11) == pytest.approx(8e-3, rel=1e-12)
    assert ShardedStep(model, hw, tp=1)(8, 80, 80, 11) == pytest.approx(1e-3, rel=1e-12)
    assert model.asked == [8, 1]


# transformers' Llama at toy widths: 4 query heads, 2 key/value heads of 16, 2 layers (a group of 2)
TOY = StepRequest(mode="decode", hf="LlamaForCausalLM", config="llama", tokens=1, batch=8, overrides=(
    ("hidden_size", 64), ("intermediate_size", 128), ("max_position_embeddings", 2048), ("num_attention_heads", 4),
    ("num_hidden_layers", 2), ("num_key_value_heads", 2), ("vocab_size", 64)))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One step cache for the module's lowerings of the toy (the fit's seven)."""
    return tmp_path_factory.mktemp("steps")


def test_the_lowered_attention_reads_the_cache_and_only_it_is_read_again(cache_dir):
    from mhlo_cost.studies.serve.grid import StepCache

    hw = get_profile("h100")
    model = fit(TOY, hw, StepCache(cache_dir))
    # the cache of one position: 2 layers x (K, V) x 2 key/value heads x 16 x 2 bytes (bfloat16)
    assert model.kv_token_bytes == 2 * 2 * 2 * 16 * 2
    kinds = model._rates[0].kinds
    per_position = model._terms[3][model._k:][kinds == "attention"]
    assert len(per_position) == 2  # one fused attention per layer
    # each reads its layer's keys and values of every position (and a mask value: at most 8 bytes a position)
    assert all(128 <= float(x) <= 128 + 8 for x in per_position)
    assert model.cache_share(tuple(kinds)) * float(per_position.sum()) == pytest.approx(256, rel=1e-12)
    # a decode step of 64 sequences at 1,000 cached positions, its attention reading the cache twice (a group of
    # two, a block per query head): only the attention kernels take longer, by at least the extra cache bytes
    # at the HBM's rate (64 x 1,001 positions x 256 bytes)
    one = model.parts(64, 64 * 1001, 64 * 1001, 1001)
    two = model.parts(64, 64 * 1001, 64 * 1001, 1001, kv_reads=kv_reads(4, 2, 1))
    assert (two["gemm"], two["other"]) == (one["gemm"], one["other"])
    assert two["attention"] - one["attention"] >= 64 * 1001 * 256 / hw.hbm_bandwidth * 0.999



def test_only_the_decoding_sequences_caches_are_read_again(cache_dir):
    """A prefill's attention is another kernel (TensorRT-LLM's context FMHA, TurboMind's prefill) that reads its
    cache once: a step's re-reads are of the decoding sequences' positions only (the review of issue 37's change:
    a prefill-only step was charged the decode kernel's re-reads)."""
    from mhlo_cost.studies.serve.grid import StepCache
    from mhlo_cost.studies.serve.parallel import step_seconds

    hw = get_profile("h100")
    model = fit(TOY, hw, StepCache(cache_dir))
    once, twice = ShardedStep(model, hw, 1, "vllm", 1), ShardedStep(model, hw, 1, "vllm", kv_reads(4, 2, 1))
    # a prefill of 2 prompts of 64 tokens, nothing decoding: the same seconds whatever the decode kernel
    prefill = (128, 2 * (64 * 65 // 2), 128, 64, 0)
    assert step_seconds(twice, *prefill) == step_seconds(once, *prefill)
    # 8 sequences decoding at 500 cached positions (501 with the new token) beside a 64-token prompt chunk:
    # the re-read is of the 8 x 501 decoding positions alone, 256 bytes each (the toy's cache of one position),
    # at the attention kernels' byte rate; at least the HBM's time for those bytes, and less than for the prompt's too
    mixed = (8 + 64, 8 * 501 + 64 * 65 // 2, 8 * 501 + 64, 501, 8 * 501)
    extra = step_seconds(twice, *mixed) - step_seconds(once, *mixed)
    every = twice(*mixed[:4]) - once(*mixed[:4])
    assert extra >= 8 * 501 * 256 / hw.hbm_bandwidth * 0.999
    assert extra < every and every - extra >= 64 * 256 / hw.hbm_bandwidth * 0.999


def test_heads_per_kv_read_must_be_a_positive_whole_number():
    base = dict(request=replace(TOY, batch=1), hardware=get_profile("h100"), isl=Lengths.parse("8"),
                osl=Lengths.parse("4"), concurrency=1)
    assert SimOptions(**base, heads_per_kv_read=1).heads_per_kv_read == 1
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(LimitError, match="heads_per_kv_read"):
            SimOptions(**base, heads_per_kv_read=bad)


def test_the_simulation_says_how_often_its_attention_reads_the_cache(cache_dir):
    from mhlo_cost.studies.serve.simstudy import SimStudy

    def study(**kw):
        return SimStudy(SimOptions(request=TOY, hardware=get_profile("h100"), isl=Lengths.parse("8"),
                                   osl=Lengths.parse("4"), concurrency=2, num_requests=2, cache_dir=cache_dir, **kw))

    reread = study(heads_per_kv_read=1)
    assert reread.step_time.kv_reads == 2  # a group of two query heads, a read each
    assert "attention_kv_reads" in str(reread.view().pairs)
    plain = study()
    assert plain.step_time.kv_reads == 1 and "attention_kv_reads" not in str(plain.view().pairs)
    # the same requests take longer where the cache is read twice
    assert sum(reread.trace.step_s) > sum(plain.trace.step_s)


def test_the_command_line_takes_heads_per_kv_read(tmp_path, capsys):
    """``serve --heads-per-kv-read N``: the simulation's option (the same toy Llama as above, through the command
    line); one step refuses it in one line."""
    from mhlo_cost.cli import main

    model = ["serve", "--hf", "LlamaForCausalLM", "--config", "llama", *[a for k, v in TOY.overrides
                                                                      for a in ("--set", f"{k}={v}")]]
    base = [*model, "--isl", "8", "--osl", "4", "--concurrency", "2", "--num-requests", "2",
            "--cache-dir", str(tmp_path / "cache"), "-q", "--format", "json"]
    assert main([*base, "--heads-per-kv-read", "1", "-o", str(tmp_path / "one.json")]) == 0
    assert main([*base, "-o", str(tmp_path / "plain.json")]) == 0
    rows = {p: {(r["section"], r["metric"]): r["value"] for r in json.loads((tmp_path / p).read_text())["rows"]}
            for p in ("one.json", "plain.json")}
    said = [v for (s, m), v in rows["one.json"].items() if m == "attention_kv_reads"]
    assert said and str(said[0]).startswith("2 ")  # a group of two query heads, a read each
    assert not any(m == "attention_kv_reads" for _, m in rows["plain.json"])
    capsys.readouterr()
    assert main([*model, "--decode", "--heads-per-kv-read", "1", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error: --heads-per-kv-read is an option of the serving")
