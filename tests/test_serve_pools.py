"""Parallel serving in the simulation (``serve --pp N``, ``--dp N``, ``--disaggregate P:D``): the runs against
closed forms worked out by hand on toy cases (fixed lengths, no preemption; step times exact in binary floats),
vLLM's layer split, the stages' weights, a stage's program as the kernels of its layers, and the command."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mhlo_cost.cli import main
from mhlo_cost.studies.serve.pipeline import pp_partition, stage_shares, stage_weights
from mhlo_cost.studies.serve.pools import Lane, simulate_pools
from mhlo_cost.studies.serve.server import ServerConfig
from mhlo_cost.studies.serve.sim import simulate
from mhlo_cost.studies.serve.simload import Lengths, make
from mhlo_cost.studies.serve.simstats import figures

GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]


def linear(calls=None, fixed=0.5, per_token=0.125):
    def step(tokens, context_flops, context_bytes, longest):
        if calls is not None:
            calls.append((tokens, context_flops, context_bytes, longest))
        return fixed + per_token * tokens
    return step


def work(n, c, isl="4", osl="3"):
    return make(Lengths.parse(isl), Lengths.parse(osl), n, concurrency=c)


def test_one_engine_is_the_plain_simulation():
    w = make(Lengths.parse("uniform:3:40"), Lengths.parse("uniform:1:9"), 30, concurrency=5, seed=3)
    cfg = ServerConfig(max_num_batched_tokens=32, block_size=4)
    plain = simulate(w, linear(), cfg, blocks=16, stretches=False)
    got = simulate_pools(w, cfg, lambda: Lane([linear()]), blocks=16).trace()
    assert plain.preemptions > 0  # (the blocks run out: preemption is taken the same way)
    assert np.array_equal(got.first, plain.first) and np.array_equal(got.finish, plain.finish)
    assert got.step_seqs == plain.step_seqs and got.step_tokens == plain.step_tokens
    assert got.step_s == pytest.approx(plain.step_s, rel=1e-12)


def test_data_parallel_replicas_match_the_closed_form():
    # 2 replicas, 4 requests in flight, 8 requests of 4 prompt and 3 output tokens. Least loaded routing gives
    # each replica 2: a wave is one prefill of 8 tokens (0.5 + 1 = 1.5 s) and two decodes of 2 (0.75 s each):
    # 3.0 s; the 4 requests sent at 3.0 split 2 and 2 again and end at 6.0.
    cfg = ServerConfig()
    pools = simulate_pools(work(8, 4), cfg, lambda: Lane([linear()]), blocks=1000, dp=2)
    trace = pools.trace()
    assert list(trace.finish) == [3.0] * 4 + [6.0] * 4
    assert [sorted(np.flatnonzero(~np.isnan(e.trace.finish)).tolist()) for e in pools.front] == [[0, 2, 4, 6],
                                                                                                [1, 3, 5, 7]]
    fig = figures(trace, pools.work, None, cfg, gpus=2)
    assert fig["throughput"]["output_tokens_per_s"] == 2 * 2 * 3 / 3.0 == 4.0
    assert fig["throughput"]["output_tokens_per_s_per_gpu"] == 2.0
    assert fig["latency"]["ttft_p50_s"] == 1.5 and fig["latency"]["tpot_p50_s"] == 0.75


def test_pipeline_virtual_engines_match_the_closed_form():
    # 2 stages of 0.25 + 0.0625 s a token, a 0.125 s send between them; 2 virtual engines (V0: requests 0, 2;
    # V1: 1, 3), each a prefill of 8 tokens (0.75 s a stage) then two decodes of 2 (0.375 s a stage).
    # V0 prefill: stage 0 [0, .75], send, stage 1 [.875, 1.625]. V1 prefill: stage 0 [.75, 1.5] (waits for
    # V0), stage 1 [1.625, 2.375]. V0 decode: [1.625, 2], stage 1 waits for V1: [2.375, 2.75]. V1 decode:
    # [2.375, 2.75], [2.875, 3.25]. V0: [2.75, 3.125], [3.25, 3.625]. V1: [3.25, 3.625], [3.75, 4.125].
    calls = []
    half = linear(calls, 0.25, 0.0625)
    pools = simulate_pools(work(4, 4), ServerConfig(), lambda: Lane([half, half], lambda n: 0.125),
                           blocks=2000, pp=2)
    trace = pools.trace()
    assert list(trace.first) == [1.625, 2.375, 1.625, 2.375]
    assert list(trace.finish) == [3.625, 4.125, 3.625, 4.125]
    assert [e.blocks for e in pools.front] == [1000, 1000]  # each virtual engine 1/pp of the blocks
    lane = pools.front[0].lane
    assert pools.front[1].lane is lane and lane.busy == [0.75 * 2 + 0.375 * 4] * 2
    assert calls[:2] == [(8, 20, 8, 4)] * 2  # the first stage, then the second, of V0's prefill


def test_disaggregated_prefill_and_decode_match_the_closed_form():
    # 1 prefill and 1 decode instance, 2 requests of 4 prompt and 3 output tokens, 0.25 s to send a prompt's
    # KV. Prefill: one step of 8 tokens (1.5 s). Both handed over at 1.75; the decode instance computes each
    # prompt's last token (0.75 s: the first token at 2.5 = 1.5 + 0.25 + 0.75), then two decodes: 4.0.
    pre, dec = [], []
    lanes = iter([Lane([linear(pre)]), Lane([linear(dec)])])
    pools = simulate_pools(work(2, 2), ServerConfig(), lambda: next(lanes), blocks=100, disaggregate=(1, 1),
                           transfer=lambda r: 0.25)
    trace = pools.trace()
    assert list(trace.first) == [2.5, 2.5] and list(trace.finish) == [4.0, 4.0]
    assert pre == [(8, 20, 8, 4)]  # prompts only
    # the decode side: a token after 3 cached positions (scores 4 keys, reads 4), then decodes at 4 and 5
    assert dec == [(2, 8, 8, 4), (2, 10, 10, 5), (2, 12, 12, 6)]
    assert pools.back[0].blocks - pools.back[0].s.free == 0 and pools.front[0].s.free == 100  # all freed
    fig = figures(trace, pools.work, None, ServerConfig(), gpus=2)
    assert fig["latency"]["ttft_mean_s"] == 2.5 and fig["throughput"]["output_tokens_per_s"] == 6 / 4.0


def test_vllms_layer_split():
    # vllm/distributed/utils.py get_pp_indices: the remainder to the stages before the last, from the second
    # last backwards (vLLM's documented examples: 61 layers over 4 stages 15,15,16,15; over 2 31,30)
    assert pp_partition(32, 4) == [8, 8, 8, 8]
    assert pp_partition(61, 4) == [15, 15, 16, 15]
    assert pp_partition(61, 2) == [31, 30]
    assert pp_partition(22, 4) == [5, 6, 6, 5]
    assert pp_partition(7, 3) == [2, 3, 2]
    with pytest.raises(ValueError, match="each stage needs a layer"):
        pp_partition(3, 4)


def test_stage_weights_and_kernel_shares():
    # 1,000,000 B of weights, an untied 10,000 B embedding table and head, 4 layers over 2 stages:
    # (1,000,000 - 20,000) / 2 = 490,000 a stage, plus the table on the first and the head on the last.
    assert stage_weights(1_000_000, 10_000, False, [2, 2]) == [500_000, 500_000]
    assert stage_weights(1_000_000, 10_000, True, [3, 1]) == [742_500 + 10_000, 247_500 + 10_000]
    place = ["pre", (0,), (1,), (2,), (0, 1, 2, 3), "post"]  # a loop over the 4 layers: split by them
    shares, placed = stage_shares(place, 4, [3, 1])
    assert placed and shares == [[1, 1, 1, 1, 0.75, 0], [0, 0, 0, 0, 0.25, 1]]
    shares, placed = stage_shares(place, 3, [3, 1])  # the blocks are not the layers: by the layer shares
    assert not placed and shares == [[0.75] * 6, [0.25] * 6]


def test_a_stage_is_the_kernels_of_its_layers(tmp_path):
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.grid import StepCache
    from mhlo_cost.studies.serve.stepmodel import fit

    req = StepRequest(model="gpt", overrides=(("heads", 4), ("hidden", 64), ("layers", 3), ("vocab", 128)))
    model = fit(req, hardware_from_args("h100", None), StepCache(tmp_path))
    place, blocks = model.place
    assert blocks == 3 and place[0] == "pre" and place[-1] == "post"
    shares, placed = stage_shares(place, blocks, pp_partition(3, 2))  # [2, 1]
    assert placed
    first, last = (model.part(s) for s in shares)
    comp = (40, 900, 700, 30)
    whole = model.time_s(*comp)
    assert first.time_s(*comp) + last.time_s(*comp) == pytest.approx(whole, rel=1e-12)
    # the layers' kernels are alike: the second layer's take the third's time (the first's ln1 is fused with
    # the embedding's last kernel, so its kernels are not), and the first stage holds the embedding's
    one, two = (model.part([1.0 if p == (i,) else 0.0 for p in place]).time_s(*comp) for i in (1, 2))
    assert one == pytest.approx(two, rel=1e-12) and one > 0
    pre = model.part([1.0 if p == "pre" else 0.0 for p in place]).time_s(*comp)
    post = model.part([1.0 if p == "post" else 0.0 for p in place]).time_s(*comp)
    assert last.time_s(*comp) == pytest.approx(two + post, rel=1e-12)
    assert first.time_s(*comp) == pytest.approx(whole - two - post, rel=1e-12) and pre > 0


def _rows(path):
    got = json.loads(path.read_text())
    return {(r["section"], r["metric"]): r["value"] for r in got["rows"]}


def test_cli_pipeline_data_parallel_and_disaggregated(tmp_path):
    base = ["serve", *GPT, "--isl", "64", "--osl", "8", "--concurrency", "4", "--num-requests", "8",
            "--cache-dir", str(tmp_path / "cache"), "-q", "--format", "json"]
    assert main([*base, "--pp", "2", "-o", str(tmp_path / "pp.json"), "--plot", str(tmp_path / "pp.png")]) == 0
    assert main([*base, "--pp", "2", "-o", str(tmp_path / "pp2.json")]) == 0
    assert (tmp_path / "pp.json").read_bytes() == (tmp_path / "pp2.json").read_bytes()  # deterministic
    pp = _rows(tmp_path / "pp.json")
    assert pp["setup", "gpus"] == 2 and pp["pipeline", "layers_per_stage"] == "1, 1"
    # untied: each stage holds one layer's share, the first the embedding table and the last the head
    assert pp["pipeline", "stage0.weight_bytes"] + pp["pipeline", "stage1.weight_bytes"] == _weights(tmp_path)
    assert pp["pipeline", "stage0.kv_token_bytes"] == 2 * 64 * 2  # K and V of one layer, bf16
    assert pp["gain", "against"] == "2 replicas of tp 1" and pp["gain", "throughput_gain"] > 0
    assert main([*base, "--dp", "2", "-o", str(tmp_path / "dp.json")]) == 0
    dp = _rows(tmp_path / "dp.json")
    assert dp["throughput", "output_tokens_per_s_per_gpu"] == pytest.approx(
        dp["throughput", "output_tokens_per_s"] / 2)
    assert dp["pool", "instances"] == 2 and dp["gain", "against"] == "1 replica of tp 1"
    assert main([*base, "--disaggregate", "1:1", "--link-gbps", "25", "-o", str(tmp_path / "pd.json")]) == 0
    pd = _rows(tmp_path / "pd.json")
    kv_token = 2 * 2 * 64 * 2  # K and V, 2 layers, hidden 64, bf16
    assert pd["decode pool", "kv_transfer_bytes_max"] == 64 * kv_token
    assert pd["decode pool", "kv_transfer_bytes_total"] == 8 * 64 * kv_token
    assert pd["prefill pool", "tokens_per_step_mean"] >= 64 and pd["decode pool", "tokens_per_step_mean"] <= 4
    assert pd["gain", "against"] == "2 replicas of tp 1"


def _weights(tmp_path) -> int:
    """The bundled gpt's weight bytes as serve's one step reports them (an independent path: the step's figures),
    at the context the simulation's fit lowers last (1024: the gpt's position table is as long as its context)."""
    out = tmp_path / "step.json"
    assert main(["serve", *GPT, "--decode", "--context", "1024", "--no-cache", "-q", "--format", "json",
                 "-o", str(out)]) == 0
    return _rows(out)["memory per device", "weight_bytes"]


@pytest.mark.parametrize("extra,what", [
    (["--pp", "3"], "each stage needs a layer"),
    (["--dp", "2", "--spec-tokens", "2", "--spec-acceptance", "0.5"], "one server"),
    (["--disaggregate", "1:1", "--pp", "2"], "no --pp or --dp"),
    (["--disaggregate", "0:1"], "P:D"),
    (["--disaggregate", "x"], "P:D"),
    (["--link-gbps", "10"], "give one"),
    (["--pp", "2", "--link-gbps", "0"], "GB/s"),
    (["--dp", "2000"], "[1, 64]"),
    (["--dp", "40", "--pp", "2"], "at most 64"),
])
def test_cli_bad_combinations_are_one_line(capsys, extra, what):
    assert main(["serve", *GPT, "--isl", "64", "--osl", "8", "--concurrency", "4", *extra, "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error") and what in err[0], err


def test_one_step_refuses_the_pool_options(capsys):
    assert main(["serve", *GPT, "--decode", "--pp", "2", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pp is an option of the serving simulation" in err[0], err


def test_a_transformers_models_embedding_table_and_tie():
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.studies.serve.pipeline import embedding_bytes, tied

    sets = (("hidden_size", 64), ("vocab_size", 1000))
    r = StepRequest(hf="LlamaForCausalLM", config="llama", overrides=sets)
    assert embedding_bytes(r, 2) == 1000 * 64 * 2 and not tied(r)
    assert tied(StepRequest(hf="LlamaForCausalLM", config="llama", overrides=(*sets, ("tie_word_embeddings", True))))
