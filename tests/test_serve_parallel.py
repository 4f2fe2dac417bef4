"""Parallel serving and speculative decoding in the serving simulation, against closed forms worked out here:
the all-reduce vLLM picks at a size and its alpha-beta time, a step's kernels split over tp GPUs, speculative
decoding's expected tokens per verify step and a request's TTFT / TPOT under it, and the command."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.network.allreduce import allreduce_time, choose, traffic
from mhlo_cost.studies.serve.parallel import ShardedStep, activations_per_device
from mhlo_cost.studies.serve.server import ServerConfig, memory
from mhlo_cost.studies.serve.sim import simulate
from mhlo_cost.studies.serve.simload import Lengths, LoadError, make
from mhlo_cost.studies.serve.simstats import figures
from mhlo_cost.studies.serve.spec import Speculation
from mhlo_cost.studies.serve.stepmodel import Kernels, Rates

GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]
KIB = 1024


@pytest.mark.parametrize("n,nbytes,library,want", [
    (2, 4096 * KIB, "vllm", "one-shot"),  # two GPUs: always one-shot under the 8 MiB buffer
    (4, 511 * KIB, "vllm", "one-shot"), (4, 512 * KIB, "vllm", "two-shot"),
    (8, 255 * KIB, "vllm", "one-shot"), (8, 256 * KIB, "vllm", "two-shot"),
    (8, 8192 * KIB, "vllm", "ring"),  # at the buffer's size: NCCL
    (8, 100 * KIB + 8, "vllm", "ring"),  # not a multiple of 16 bytes: NCCL
    (3, 16 * KIB, "vllm", "ring"),  # a world size the custom kernels do not run
    (8, 16 * KIB, "nccl", "ring"),
])
def test_the_algorithm_vllm_picks(n, nbytes, library, want):
    assert choose(n, nbytes, library) == want


def test_allreduce_time_is_alpha_beta_of_the_algorithms_traffic():
    hw = get_profile("h100")
    lat, bw = hw.hop_latency, hw.link_bandwidth
    # a decode step of 16 tokens of a 4096-wide bf16 hidden state over 8 GPUs: S = 16 x 4096 x 2 = 128 KiB,
    # one-shot: each GPU reads the whole message from its 7 peers in one exchange
    s = 16 * 4096 * 2
    t, algo = allreduce_time(hw, 8, s)
    assert algo == "one-shot" and t == pytest.approx(lat + 7 * s / bw, rel=1e-12)
    # 64 tokens: 512 KiB, two-shot: a reduce-scatter and an all-gather of 7/8 S each, two exchanges
    s = 64 * 4096 * 2
    t, algo = allreduce_time(hw, 8, s)
    assert algo == "two-shot" and t == pytest.approx(2 * lat + 2 * 7 * s / 8 / bw, rel=1e-12)
    # NCCL's ring at the same size: the same bytes, 2 (n - 1) = 14 steps
    ring, _ = allreduce_time(hw, 8, s, "nccl")
    assert ring == pytest.approx(14 * lat + 2 * 7 * s / 8 / bw, rel=1e-12)
    assert traffic("ring", 3, 10) == (14, 4)  # 2 x 2 x 10 / 3 = 13.3.. bytes, rounded up
    assert allreduce_time(hw, 1, s) == (0.0, "none")


def test_gpus_not_joined_all_to_all_take_nccls_ring_beyond_two():
    # vLLM's CustomAllreduce is off for more than two GPUs that are not fully NVLink-connected (PCIe, or NVLink
    # bridges, which join pairs): NCCL's ring; two GPUs keep the one-shot kernel
    s = 16 * 4096 * 2
    for name in ("l40s", "h100-pcie"):
        hw = get_profile(name)
        assert allreduce_time(hw, 4, s)[1] == "ring" and allreduce_time(hw, 2, s)[1] == "one-shot"
    assert allreduce_time(get_profile("h100"), 4, s)[1] == "one-shot"


def test_rates_split_each_kernels_work_but_not_its_fixed_cost():
    # One kernel: 100 FLOPs in 1 s (100 FLOP/s); 200 bytes in 3 s of which 1 s fixed (100 B/s); 0.5 s launch.
    node = Kernels([100], [200], [1.0], [3.0], [0.5], [1.0])
    terms = [np.array([c]) for c in (10.0, 20.0, 0.0, 0.0)]  # FLOPs 10 + 20 x tokens
    moved = [np.array([c]) for c in (40.0, 60.0, 0.0, 0.0)]  # bytes 40 + 60 x tokens
    rates = Rates(node, terms, moved)
    col = np.array([[1.0], [4.0], [0.0], [0.0]])  # a step of 4 tokens: 90 FLOPs, 280 bytes
    for tp in (1, 2, 4):
        want = max(90 / 100 / tp, 1.0 + 280 / 100 / tp) + 0.5
        assert rates.time_s(col, col, shards=tp)[0] == pytest.approx(want, rel=1e-12)


class _Model:
    """A step model whose one-device step is 1 ms + 1 us a token; 32 layers of a 4096-wide bf16 hidden state."""

    shape = {"hidden": 4096, "layers": 32, "itemsize": 2}

    def many(self, tokens, context_flops, context_bytes, longest, shards=1):
        return np.full(len(longest), (1e-3 + 1e-6 * tokens) / shards)


def test_a_sharded_step_adds_two_allreduces_per_layer():
    hw = get_profile("h100")
    lat, bw = hw.hop_latency, hw.link_bandwidth
    step = ShardedStep(_Model(), hw, tp=4)
    s = 8 * 4096 * 2  # 8 tokens: 64 KiB, one-shot at tp 4 (under 512 KiB)
    want = (1e-3 + 8e-6) / 4 + 2 * 32 * (lat + 3 * s / bw)
    assert step(8, 0, 0, 1) == pytest.approx(want, rel=1e-12)
    assert step.comm(8)[1] == "one-shot" and step.comm(8192)[1] == "ring"  # 8192 tokens: 64 MiB
    assert ShardedStep(_Model(), hw, tp=1)(8, 0, 0, 1) == pytest.approx(1e-3 + 8e-6, rel=1e-12)


def test_a_workers_activations_are_its_sharded_models():
    # Llama-2-70b's hidden state: 8,192 x 2 bytes a token, whole on every worker; the rest (here 2,000,000 B a
    # token in all) split 4 ways: 16,384 + (2,000,000 - 16,384) / 4 = 16,384 + 495,904 = 512,288 B a token.
    assert activations_per_device(2_000_000, 16_384, 4) == 512_288
    assert activations_per_device(2_000_001, 16_384, 4) == 512_289  # rounded up
    assert activations_per_device(2_000_000, 16_384, 1) == 2_000_000
    assert activations_per_device(1_000, 16_384, 4) == 1_000  # nothing to split
    # into vLLM's accounting: 80 GB, 34,488,324,096 B of weights a worker (a fourth of Llama-2-70b's fp16), the
    # profiling forward of 30,720 tokens (240 prompts of 128), 1 GiB reserve, blocks of 16 x 81,920 B (80 layers
    # x K and V x 1 of 8 key/value heads x 128 x 2 bytes): 80e9 - 34,488,324,096 - 30,720 x 512,288
    # - 1,073,741,824 = 28,700,446,720 B, 21,896 whole blocks of 1,310,720 B.
    m = memory(ServerConfig(max_num_batched_tokens=30_720, gpu_memory_utilization=1.0), 80_000_000_000,
               34_488_324_096, 81_920, activations_per_device(2_000_000, 16_384, 4))
    assert (m.activations, m.kv_bytes, m.blocks) == (15_737_487_360, 28_700_446_720, 21_896)


def test_expected_tokens_per_verify_step():
    # (1 - a^(k+1)) / (1 - a): a = 1/2, k = 2: (1 - 1/8) / (1/2) = 7/4; a = 0: one token; a = 1: k + 1
    assert Speculation(2, 0.5).expected == 1.75
    assert Speculation(3, 0.0).expected == 1.0
    assert Speculation(3, 1.0).expected == 4.0
    assert Speculation(4, 0.8).expected == pytest.approx((1 - 0.8 ** 5) / 0.2, rel=1e-12)
    with pytest.raises(LoadError):
        Speculation(2, 1.5)


def linear_step(calls):
    def step(tokens, context_flops, context_bytes, longest):
        calls.append((tokens, context_flops, context_bytes, longest))
        return 0.5 + 0.125 * tokens
    return step


def test_speculative_decoding_matches_the_closed_form():
    # One request, 4 prompt tokens, 8 output tokens; k = 2 drafts accepted with alpha = 1/2: E = 7/4 tokens per
    # verify step. The prefill (4 tokens: 0.5 + 0.5 = 1.0 s) gives the first token; the other 7 take
    # ceil(7 / (7/4)) = 4 verify steps of 1 + 2 = 3 tokens (0.5 + 3/8 = 0.875 s): finish 1.0 + 3.5 = 4.5 s,
    # TPOT 3.5 / 7 = 0.5 s (without speculation: 7 steps of 0.625 s, TPOT 0.625 s).
    calls = []
    work = make(Lengths.parse("4"), Lengths.parse("8"), 1, concurrency=1)
    cfg = ServerConfig()
    trace = simulate(work, linear_step(calls), cfg, blocks=100, spec=Speculation(2, 0.5))
    assert trace.first[0] == 1.0 and trace.finish[0] == 1.0 + 4 * 0.875
    fig = figures(trace, work, None, cfg)
    assert fig["latency"]["tpot_mean_s"] == 0.5
    # the verify steps: 3 query tokens after p computed positions (p = 4, then 4 + 1, + 2, + 2: floor(m x 7/4)
    # tokens after m steps): 3p + 1 + 2 + 3 keys scored, p + 3 positions read
    assert calls[1:] == [(3, 3 * p + 6, p + 3, p + 3) for p in (4, 5, 7, 9)]
    plain = simulate(work, linear_step([]), cfg, blocks=100)
    assert figures(plain, work, None, cfg)["latency"]["tpot_mean_s"] == 0.625


def test_drafting_cost_and_throughput_at_concurrency():
    # Two requests at once, as above, drafts costing 1/2 a target decode step each: a verify step of 2 x 3 = 6
    # tokens (0.5 + 0.75 = 1.25 s) plus 2 drafts x 1/2 x a decode step of 2 tokens (0.75 s) = 2.0 s; the prefill
    # of 8 tokens 1.5 s: finish 1.5 + 4 x 2.0 = 9.5 s; throughput 2 x 8 / 9.5 tokens/s.
    work = make(Lengths.parse("4"), Lengths.parse("8"), 2, concurrency=2)
    cfg = ServerConfig()
    trace = simulate(work, linear_step([]), cfg, blocks=100, spec=Speculation(2, 0.5, draft=0.5))
    assert list(trace.finish) == [9.5, 9.5]
    assert figures(trace, work, None, cfg)["throughput"]["output_tokens_per_s"] == 16 / 9.5


def test_cli_tensor_parallel_and_speculative(tmp_path):
    out = tmp_path / "tp.json"
    argv = ["serve", *GPT, "--isl", "64", "--osl", "8", "--concurrency", "4", "--num-requests", "8",
            "--cache-dir", str(tmp_path / "cache"), "-q", "--format", "json"]
    assert main([*argv, "-o", str(tmp_path / "one.json")]) == 0
    assert main([*argv, "--tp", "2", "-o", str(out)]) == 0
    rows = {(r["section"], r["metric"]): r["value"] for r in json.loads(out.read_text())["rows"]}
    one = {(r["section"], r["metric"]): r["value"] for r in json.loads((tmp_path / "one.json").read_text())["rows"]}
    assert rows["setup", "tp"] == 2 and rows["workload", "gpus"] == 2
    assert rows["setup", "allreduce_median_step"].startswith("one-shot")
    assert rows["memory", "weight_bytes"] == -(-one["memory", "weight_bytes"] // 2)
    # the reserve is one worker's: a token's hidden state (64 wide, 2 bytes: the bundled GPT is bf16) whole, the
    # rest halved, times vLLM's 8,192-token profiling forward
    per_token = one["memory", "activation_bytes"] // 8192
    assert one["memory", "activation_bytes"] == per_token * 8192 and per_token > 128
    assert rows["memory", "activation_bytes"] == (128 + -(-(per_token - 128) // 2)) * 8192
    assert main([*argv, "--spec-tokens", "3", "--spec-acceptance", "0.7", "-o", str(tmp_path / "spec.json")]) == 0
    spec = {(r["section"], r["metric"]): r["value"]
            for r in json.loads((tmp_path / "spec.json").read_text())["rows"]}
    assert spec["setup", "spec_expected_tokens_per_step"] == pytest.approx((1 - 0.7 ** 4) / 0.3)
    assert spec["batches", "tokens_per_step_max"] >= 4 * 4  # four decoding sequences verify 1 + 3 tokens
    # the gain: the same run without speculation (the first one above) over this one
    assert spec["setup", "spec_throughput_gain"] == pytest.approx(
        spec["throughput", "output_tokens_per_s"] / one["throughput", "output_tokens_per_s"], rel=1e-12)
    assert spec["setup", "spec_tpot_p50_gain"] == pytest.approx(
        one["latency", "tpot_p50_s"] / spec["latency", "tpot_p50_s"], rel=1e-12)


@pytest.mark.parametrize("extra,what", [
    (["--isl", "64", "--osl", "8", "--concurrency", "2", "--spec-tokens", "2"], "--spec-acceptance"),
    (["--isl", "64", "--osl", "8", "--concurrency", "2", "--spec-acceptance", "0.5"], "--spec-tokens"),
    (["--isl", "64", "--osl", "8", "--concurrency", "2", "--spec-tokens", "2", "--spec-acceptance", "2"], "[0, 1]"),
    (["--isl", "64", "--osl", "8", "--concurrency", "2", "--tp", "3"], "does not divide"),
    (["--decode", "--allreduce", "nccl"], "serving simulation"),
    (["--decode", "--spec-tokens", "2"], "serving simulation"),
])
def test_cli_bad_input_is_one_line(capsys, extra, what):
    assert main(["serve", *GPT, *extra, "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error") and what in err[0], err


def test_a_request_whose_drafts_cannot_fit_is_refused_not_looped():
    # 4 + 8 tokens (11 in the cache) fit 3 blocks of 4; with 2 drafts a verify step needs 13 positions: 4 blocks
    work = make(Lengths.parse("4"), Lengths.parse("8"), 1, concurrency=1)
    simulate(work, linear_step([]), ServerConfig(block_size=4), blocks=3)
    with pytest.raises(LoadError, match="13 tokens"):
        simulate(work, linear_step([]), ServerConfig(block_size=4), blocks=3, spec=Speculation(2, 0.5))
