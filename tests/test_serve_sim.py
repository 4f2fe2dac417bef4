"""The serving simulation (``serve --isl .. --osl .. --concurrency ..``): the scheduler against closed forms worked
out by hand (a step-time function given directly, so that the arithmetic is exact in binary floats), preemption
when the KV blocks run out, Poisson arrivals fixed by the seed, the server's memory, trace files, the step model
against the roofline at a point it did not use, and the command on a tiny bundled gpt."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mhlo_cost.cli import main
from mhlo_cost.studies.serve.server import GIB, ServerConfig, memory
from mhlo_cost.studies.serve.sim import simulate
from mhlo_cost.studies.serve.simload import Lengths, LoadError, make, read_trace
from mhlo_cost.studies.serve.simstats import figures

GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]


def linear_step(calls):
    """0.5 s per step plus 0.125 s per query token (exact in binary); every call's arguments kept."""
    def step(tokens, context_flops, context_bytes, longest):
        calls.append((tokens, context_flops, context_bytes, longest))
        return 0.5 + 0.125 * tokens
    return step


def test_closed_loop_matches_the_closed_form():
    # c = 2 requests in flight, 4 prompt tokens, 3 output tokens, 4 requests: two waves, nothing preempted.
    # Wave: one prefill step of 2 x 4 = 8 tokens (0.5 + 8/8 = 1.5 s: first tokens), two decode steps of
    # 2 tokens (0.75 s each): the wave takes 3.0 s; the second wave arrives at 3.0 and ends at 6.0.
    c, isl, osl = 2, 4, 3
    calls = []
    work = make(Lengths.parse("4"), Lengths.parse("3"), 4, concurrency=c)
    cfg = ServerConfig()
    trace = simulate(work, linear_step(calls), cfg, blocks=1000)
    wave = (0.5 + 0.125 * c * isl) + (osl - 1) * (0.5 + 0.125 * c)
    assert wave == 3.0
    assert list(trace.finish) == [3.0, 3.0, 6.0, 6.0]
    fig = figures(trace, work, None, cfg)
    assert fig["throughput"]["output_tokens_per_s"] == c * osl / wave == 2.0
    assert fig["throughput"]["requests_per_s"] == 4 / 6.0
    assert fig["latency"]["ttft_mean_s"] == fig["latency"]["ttft_p99_s"] == 1.5  # the prefill step's time
    assert fig["latency"]["tpot_mean_s"] == fig["latency"]["itl_p50_s"] == 0.75
    assert fig["kv_cache"]["preemptions"] == 0 and fig["batches"]["batch_max"] == c
    # the compositions: a prefill of 4 tokens scores 1 + 2 + 3 + 4 = 10 keys and reads 4 positions; a decode at
    # 4 computed positions scores 5 keys and reads 5 positions; per sequence, summed.
    assert calls[:3] == [(8, 20, 8, 4), (2, 10, 10, 5), (2, 12, 12, 6)]


def test_chunked_prefill_under_the_token_budget():
    # A budget of 3 tokens: a prompt of 5 is computed as chunks of 3 and 2; the first token comes after both.
    calls = []
    work = make(Lengths.parse("5"), Lengths.parse("2"), 1, concurrency=1)
    trace = simulate(work, linear_step(calls), ServerConfig(max_num_batched_tokens=3), blocks=100)
    # chunk 1: 3 tokens, none before (1+2+3 = 6 keys); chunk 2: 2 tokens after 3 (2*3 + 1 + 2 = 9 keys)
    assert calls == [(3, 6, 3, 3), (2, 9, 5, 5), (1, 6, 6, 6)]
    assert trace.first[0] == (0.5 + 3 * 0.125) + (0.5 + 2 * 0.125)


def test_preemption_when_the_blocks_run_out():
    # Blocks of 2 tokens, 3 blocks; 2 requests of 2 prompt tokens and 3 output tokens, 1 s per step.
    # step 1: both prompts (1 block each, 1 free); both have a first token.
    # step 2: request 0 needs a 2nd block (the last free); request 1 needs one too: none left, so the last
    #         running request (1 itself) is preempted, its block freed; nothing admitted in a step that preempts.
    # step 3: request 0 decodes (2 blocks hold its 4 tokens); request 1 (2 prompt + 1 output = 3 tokens to
    #         recompute, 2 blocks) does not fit the 1 free block; request 0 finishes (3 tokens) and frees 2.
    # step 4: request 1 recomputes 3 tokens and makes its 2nd token; step 5: its 3rd, and it finishes.
    work = make(Lengths.parse("2"), Lengths.parse("3"), 2, concurrency=2)
    trace = simulate(work, lambda *a: 1.0, ServerConfig(block_size=2), blocks=3)
    assert trace.preemptions == 1
    assert trace.step_seqs == [2, 1, 1, 1, 1] and trace.step_tokens == [4, 1, 1, 3, 1]
    assert list(trace.first) == [1.0, 1.0] and list(trace.finish) == [3.0, 5.0]
    assert sorted(trace.itl.tolist()) == [1.0, 1.0, 1.0, 3.0]  # request 1: 1 -> 4 (preempted), 4 -> 5
    assert trace.step_blocks == [2, 2, 2, 2, 2]


def test_poisson_arrivals_follow_the_seed():
    a = make(Lengths.parse("8"), Lengths.parse("4"), 50, rate=2.0, seed=7)
    b = make(Lengths.parse("8"), Lengths.parse("4"), 50, rate=2.0, seed=7)
    c = make(Lengths.parse("8"), Lengths.parse("4"), 50, rate=2.0, seed=8)
    expected = np.cumsum(np.random.default_rng(7).exponential(0.5, size=50))  # fixed lengths draw nothing
    assert np.array_equal(a.arrivals, expected) and np.array_equal(a.arrivals, b.arrivals)
    assert not np.array_equal(a.arrivals, c.arrivals)
    t1 = simulate(a, lambda n, *_: 0.01 + 0.001 * n, ServerConfig(), 1000)
    t2 = simulate(b, lambda n, *_: 0.01 + 0.001 * n, ServerConfig(), 1000)
    assert np.array_equal(t1.finish, t2.finish) and t1.step_s == t2.step_s
    assert np.all(t1.first > t1.arrival)


@pytest.mark.parametrize("load", [dict(concurrency=6), dict(rate=40.0)])
def test_decode_stretches_run_the_same_steps(load):
    """Decode-only stretches run at once give the very steps, tokens and times of the scheduler run step by step
    (drawn lengths, a small cache that preempts, a token budget that chunks)."""
    work = make(Lengths.parse("uniform:5:40"), Lengths.parse("uniform:1:30"), 60, seed=5, **load)
    cfg = ServerConfig(max_num_batched_tokens=32, block_size=4)

    def step(tokens, cf, cb, longest):
        return 0.001 + 1e-4 * tokens + 1e-6 * cf + 3e-7 * longest

    stretched = []

    def many(tokens, cf, cb, longest):  # the vectorised door: each step's time the same expression
        stretched.append(len(cf))
        return [step(tokens, int(f), int(b), int(m)) for f, b, m in zip(cf, cb, longest)]

    step.many = many
    a = simulate(work, step, cfg, blocks=30)
    assert stretched and max(stretched) > 1  # some steps ran as a stretch
    b = simulate(work, step, cfg, blocks=30, stretches=False)
    assert a.preemptions == b.preemptions > 0
    for name in ("step_s", "step_seqs", "step_tokens", "step_blocks"):
        assert getattr(a, name) == getattr(b, name), name
    assert np.array_equal(a.first, b.first) and np.array_equal(a.finish, b.finish)
    assert sorted(a.itl.tolist()) == sorted(b.itl.tolist())


def test_drawn_lengths():
    u = make(Lengths.parse("uniform:10:20"), Lengths.parse("normal:8:100"), 2000, concurrency=4, seed=3)
    assert u.inputs.min() >= 10 and u.inputs.max() <= 20 and set(range(10, 21)) == set(u.inputs.tolist())
    assert u.outputs.min() == 1 and u.outputs.max() == 16  # clipped to [1, 2 x 8]
    for bad in ("0", "uniform:5:4", "normal:8", "gamma:1:2", "x"):
        with pytest.raises(LoadError):
            Lengths.parse(bad)


def test_memory_follows_vllms_accounting():
    # 100 GiB x 0.5 = 50 GiB; weights 20 GiB; activations 1,000 B per token x 8,192; reserve 1 GiB;
    # blocks of 16 tokens x 4,096 B per token (every layer's K and V).
    cfg = ServerConfig(gpu_memory_utilization=0.5)
    m = memory(cfg, 100 * GIB, 20 * GIB, 4096, 1000)
    kv = 50 * GIB - 20 * GIB - 8_192_000 - GIB
    assert (m.budget, m.activations, m.kv_bytes, m.block_bytes) == (50 * GIB, 8_192_000, kv, 65_536)
    assert kv == 29 * GIB - 8_192_000 == 31_130_320_896
    assert m.blocks == 475_011  # 31,130,320,896 / 65,536 = 475,011.97
    with pytest.raises(LoadError, match="no KV cache fits"):
        memory(cfg, 100 * GIB, 60 * GIB, 4096, 1000)


def test_trace_files(tmp_path):
    csv_path, jsonl = tmp_path / "t.csv", tmp_path / "t.jsonl"
    csv_path.write_text("arrival_s,input_tokens,output_tokens\n0.5,10,3\n0.25,20,4\n")
    jsonl.write_text('{"arrival_s": 0.5, "input_tokens": 10, "output_tokens": 3}\n\n'
                     '{"arrival_s": 0.25, "input_tokens": 20, "output_tokens": 4}\n')
    for path in (csv_path, jsonl):
        w = read_trace(str(path))
        assert w.arrivals.tolist() == [0.25, 0.5] and w.inputs.tolist() == [20, 10] and w.outputs.tolist() == [4, 3]
    for text, what in (("arrival_s,input_tokens\n1,2\n", "header"), ("arrival_s,input_tokens,output_tokens\n1,2,0\n",
                                                                    ">= 1"), ('{"arrival_s": 1}\n', "missing"),
                      ('{"arrival_s": 0, "input_tokens": true, "output_tokens": 4}\n', "true/false")):
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(LoadError, match=what):
            read_trace(str(bad))


def test_step_model_reproduces_the_roofline_off_the_grid(tmp_path):
    """The fit's counts are exact at its check point (else it refuses), and its time at a decode step it never
    lowered is the roofline's time of that lowered step (``serve``'s figures, under CUDA graphs)."""
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.grid import StepCache
    from mhlo_cost.studies.serve.serve import figures as step_figures
    from mhlo_cost.studies.serve.serve import launched
    from mhlo_cost.studies.serve.stepmodel import fit

    hw = launched(hardware_from_args("h100", None), "cuda-graphs")
    req = StepRequest(model="gpt", overrides=(("heads", 4), ("hidden", 64), ("layers", 2), ("vocab", 128)))
    cache = StepCache(tmp_path)
    model = fit(req, hw, cache)
    assert model.checked["counts_exact"] and model.kv_token_bytes == 2 * 2 * 64 * 2  # K+V x layers x hidden x bf16
    step, _ = cache.step(StepRequest(model="gpt", batch=24, context=768, overrides=req.overrides))
    want = step_figures(step, hw, launch="cuda-graphs").step_time_s
    assert model.decode_time_s(24, 768) == pytest.approx(want, rel=1e-9)


def test_cli_prints_the_metrics(tmp_path, capsys):
    out = tmp_path / "sim.json"
    argv = ["serve", *GPT, "--isl", "64", "--osl", "8", "--concurrency", "4", "--num-requests", "12",
            "--cache-dir", str(tmp_path / "cache"), "-q"]
    assert main([*argv, "--format", "json", "-o", str(out), "--plot", str(tmp_path / "sim.png")]) == 0
    assert (tmp_path / "sim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv, "--format", "json", "-o", str(tmp_path / "again.json")]) == 0
    assert (tmp_path / "again.json").read_bytes() == out.read_bytes()  # deterministic
    got = json.loads(out.read_text())
    rows = {(r["section"], r["metric"]): r["value"] for r in got["rows"]}
    assert rows["workload", "requests"] == 12 and rows["workload", "output_tokens"] == 96
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "itl_p99_s"):
        assert rows["latency", key] > 0
    assert rows["throughput", "output_tokens_per_s"] == pytest.approx(96 / rows["workload", "duration_s"])
    assert 0 < rows["kv cache", "kv_utilisation_mean"] <= rows["kv cache", "kv_utilisation_max"] <= 1
    assert sum(b["steps"] for b in got["batch_sizes"]) == rows["batches", "steps"]
    assert rows["batches", "batch_sizes_run"] == ", ".join(f"{b['sequences']} x {b['steps']}" for b in got["batch_sizes"])
    assert main([*argv, "-o", str(tmp_path / "sim.txt")]) == 0
    text = (tmp_path / "sim.txt").read_text()
    assert "output tokens/s" in text and "TTFT p50" in text and "batch_sizes_run" in text


@pytest.mark.parametrize("extra,what", [
    (["--isl", "bogus", "--osl", "8", "--concurrency", "4"], "--isl"),
    (["--isl", "64", "--concurrency", "4"], "--isl and --osl"),
    (["--isl", "64", "--osl", "8"], "one of --concurrency"),
    (["--isl", "64", "--osl", "8", "--concurrency", "4", "--decode"], "--decode"),
    (["--trace", "/nonexistent/t.csv"], "cannot read"),
    (["--isl", "64", "--osl", "8", "--request-rate", "0"], "positive number"),
    (["--isl", "64", "--osl", "8", "--request-rate", "1e400"], "positive number"),
    (["--isl", "64", "--osl", "8", "--concurrency", "2", "--graph-reserve-gib", "inf"], "GiB >= 0"),
    (["--isl", "64", "--osl", "8", "--concurrency", "2", "--plot", "x.gif"], ".png"),
    (["--trace", "t.csv", "--isl", "64"], "--trace gives"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, extra, what):
    assert main(["serve", *GPT, *extra, "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error") and what in err[0], err


def test_graph_reserve_is_exact_bytes_and_any_size_is_one_line(tmp_path, capsys):
    from mhlo_cost.cli.cmd_serve_sim import _gib

    assert _gib("0.1") == 107374182  # 0.1 x 2**30 = 107374182.4, from the decimal, not a float product
    assert _gib("1.5") == 3 * 2 ** 29
    # 1e300 GiB overflowed a float into a traceback (OverflowError); now it is a reserve no memory leaves room for
    assert main(["serve", *GPT, "--isl", "64", "--osl", "8", "--concurrency", "2", "--graph-reserve-gib", "1e300",
                 "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error") and "no KV cache fits" in err[0], err


def test_a_run_of_no_duration_has_no_rates_and_no_division_by_zero():
    from mhlo_cost.views.serve_sim import sim_headline

    work = make(Lengths.parse("4"), Lengths.parse("3"), 4, concurrency=2)
    cfg = ServerConfig()
    trace = simulate(work, lambda *a: 0.0, cfg, blocks=1000)
    fig = figures(trace, work, None, cfg)  # was ZeroDivisionError: the duration is 0
    assert fig["workload"]["duration_s"] == 0.0
    assert all(v is None for v in fig["throughput"].values())
    # 4 requests of at most 6 cached tokens, 2 at a time: a block each; every step alike: 2 blocks of 2 in use
    assert fig["kv_cache"]["kv_utilisation_mean"] == 1.0
    assert sim_headline(fig).startswith("no duration | ")
