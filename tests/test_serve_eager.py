"""``serve --execution eager``: a step as plain transformers ``generate`` runs it (DynamicCache grown by
concatenation, one kernel per op launched from the host), against closed forms worked out here from the
configuration: the past each layer is handed, the concatenation's bytes, the memory with its transient, and
the combinations refused in one line.

Tiny configurations (2 layers, hidden 64) so that each lowering takes seconds."""
from __future__ import annotations

import importlib.util
import json
import re
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("torchax") is None:  # (imported through mhlo-cost's shim, never directly)
    pytest.skip("torchax is not installed", allow_module_level=True)
pytest.importorskip("transformers")

from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.lower.frontends import FrontendError  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.studies.serve import StepRequest, lower_step  # noqa: E402
from mhlo_cost.studies.serve.eager import dynamic_memory  # noqa: E402
from mhlo_cost.studies.serve.serve import figures, step_study  # noqa: E402

B, CTX, BF16 = 3, 24, 2
LAYERS, HIDDEN, HEADS, KV, INTER, VOCAB = 2, 64, 4, 2, 128, 128
HD = HIDDEN // HEADS
LLAMA = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
             num_key_value_heads=KV, vocab_size=VOCAB)
SETS = [a for k, v in LLAMA.items() for a in ("--set", f"{k}={v}")]
#: One layer's keys (or values) at ``n`` positions, bytes.
ROW = B * KV * HD * BF16


def request(mode="decode", context=CTX, tokens=1, cache="dynamic"):
    return StepRequest(mode=mode, batch=B, context=context, tokens=tokens, hf="LlamaForCausalLM", config="llama",
                       overrides=tuple(sorted(LLAMA.items())), dtype="bfloat16", cache=cache)


@pytest.fixture(scope="module")
def step():
    return lower_step(request())


def _concats(text: str) -> list[tuple[str, str]]:
    """(operand shapes, result shape) of every concatenate of bf16 tensors of four dims in the IR."""
    pat = re.compile(r"stablehlo\.concatenate .*: \((tensor<[^)]*)\) -> (tensor<\d+x\d+x\d+x\d+xbf16>)")
    return [m.groups() for m in map(pat.search, text.splitlines()) if m]


def test_decode_is_handed_the_past_and_concatenates_it_per_layer(step):
    text = step.lowered.text
    grown = f"tensor<{B}x{KV}x{CTX}x{HD}xbf16>"
    cats = [(ops, out) for ops, out in _concats(text) if out == grown]
    # keys and values of every layer: past (context - 1 positions) joined with the new position, along dim 2
    assert len(cats) == 2 * LAYERS
    assert all(ops == f"tensor<{B}x{KV}x{CTX - 1}x{HD}xbf16>, tensor<{B}x{KV}x1x{HD}xbf16>" for ops, _ in cats)
    assert "tf.aliasing_output" not in text  # nothing donated: the concatenation makes a new buffer
    assert step.layout.nbytes == LAYERS * 2 * CTX * ROW


def test_eager_prices_each_concatenation_as_reading_and_writing_the_whole_layer(step):
    study = step_study(step, get_profile("h100"), execution="eager")
    rf = study.roofline
    rows = study.analysis.rows
    cats = [k for k in rf.fusion.kernels
            if any(rows[i].op.endswith("concatenate") and rows[i].bytes_written == CTX * ROW for i in k.members)]
    assert len(cats) == 2 * LAYERS
    for k in cats:  # reads the past and the new position, writes the grown tensor
        assert k.bytes_read == (CTX - 1) * ROW + ROW and k.bytes_written == CTX * ROW


def test_memory_adds_the_largest_layers_past_beside_its_copy(step):
    past = (CTX - 1) * ROW * 2  # one layer's keys and values, one position short
    mem = SimpleNamespace(argument_bytes=step.weight_bytes + LAYERS * past + 100,
                          peak_bytes=step.weight_bytes + LAYERS * past + 100 + step.layout.nbytes + 5000)
    assert dynamic_memory(step, mem) == (5000, 100, past)
    fig = figures(step, get_profile("h100"), execution="eager")
    assert fig.execution == "eager" and fig.launch == "stream"
    assert fig.memory_bytes == step.weight_bytes + step.layout.nbytes + fig.input_bytes + fig.activation_bytes
    assert fig.activation_bytes >= past  # the transient is in the activations


def test_eager_decode_is_slower_than_the_compiled_step_and_says_so(step):
    hw = get_profile("h100")
    eager = figures(step, hw, execution="eager")
    static = figures(lower_step(request(cache="static")), hw, execution="compiled")
    # eager: a kernel per op plus the host's dispatch per framework op; compiled: fused kernels
    assert eager.step_time_s > static.step_time_s
    # the arguments beyond weights and cache: the same token ids and buffers; the dynamic step takes its
    # positions from its cache's length, so the int32 position argument is unused (and dropped)
    assert eager.input_bytes == static.input_bytes - 4 > 0
    assert eager.row()["execution"] == "eager" and "execution" not in static.row()


def test_prefill_starts_from_an_empty_cache():
    step = lower_step(request(mode="prefill", context=16, tokens=16))
    main_line = next(x for x in step.lowered.text.splitlines() if "func.func public @main" in x)
    args, results = main_line.split(") -> (")
    grown = f"tensor<{B}x{KV}x16x{HD}xbf16>"
    # no past is handed in; every layer's keys and values of the prompt come out
    assert not re.search(r"tensor<\d+x\d+x\d+x\d+x", args)
    assert results.count(grown) == 2 * LAYERS and step.layout.nbytes == LAYERS * 2 * 16 * ROW
    with pytest.raises(FrontendError, match="dynamic cache holds what it has seen"):
        request(mode="prefill", context=32, tokens=16).check()


def test_cli_eager_step_json(tmp_path):
    out = tmp_path / "eager.json"
    assert main(["serve", "--hf", "LlamaForCausalLM", "--config", "llama", *SETS, "--dtype", "bfloat16",
                 "--batch", str(B), "--context", str(CTX), "--execution", "eager", "--hardware", "h100",
                 "--cache-dir", str(tmp_path / "c"), "-q", "--format", "json", "-o", str(out)]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(out.read_text())["rows"]}
    assert rows["execution"] == "eager" and rows["launch"] == "stream"
    assert rows["kv_cache_bytes"] == LAYERS * 2 * CTX * ROW


@pytest.mark.parametrize("extra,what", [
    (["--model", "gpt"], "bundled gpt is a JAX model"),
    (["--hf", "LlamaForCausalLM", "--isl", "64", "--osl", "8", "--concurrency", "2"], "static batch with no server"),
    (["--hf", "LlamaForCausalLM", "--launch", "cuda-graphs"], "cuda-graphs"),
    (["--hf", "LlamaForCausalLM", "--tp", "2"], "one device"),
    (["--hf", "LlamaForCausalLM", "--tps", "1,2"], "one device"),
    (["--hf", "LlamaForCausalLM", "--precision", "fp8-rowwise"], "model's dtype"),
    (["--hf", "LlamaForCausalLM", "--prefill", "--tokens", "8", "--context", "16"], "holds what it has seen"),
])
def test_cli_refuses_what_plain_generate_does_not_run(capsys, extra, what):
    assert main(["serve", *extra, "--execution", "eager", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error") and what in err[0], err


def test_a_sliding_layer_is_handed_its_window_less_one():
    # transformers' DynamicSlidingWindowLayer keeps window - 1 positions and concatenates the new one
    window = 8
    sets = dict(LLAMA, sliding_window=window)
    step = lower_step(StepRequest(mode="decode", batch=B, context=CTX, hf="MistralForCausalLM", config="mistral",
                                  overrides=tuple(sorted(sets.items())), dtype="bfloat16", cache="dynamic"))
    grown = f"tensor<{B}x{KV}x{window}x{HD}xbf16>"
    cats = [ops for ops, out in _concats(step.lowered.text) if out == grown]
    assert cats == [f"tensor<{B}x{KV}x{window - 1}x{HD}xbf16>, tensor<{B}x{KV}x1x{HD}xbf16>"] * (2 * LAYERS)
    assert step.layout.nbytes == LAYERS * 2 * window * ROW


def test_a_sweeps_table_says_the_execution(step):
    from mhlo_cost.studies.serve.grid import table

    df = table([figures(step, get_profile("h100"), execution="eager")])
    assert list(df.columns[:4]) == ["batch", "context", "tp", "execution"] and list(df["execution"]) == ["eager"]


def test_the_api_refuses_eager_on_a_static_cache():
    """``ServeOptions(execution="eager")`` prices what plain ``generate`` runs: a request with the static, donated
    cache of a compiled server is refused (from the review: only the command line set the dynamic cache)."""
    from dataclasses import replace

    from mhlo_cost.studies.limits import OptionError
    from mhlo_cost.studies.serve.study import ServeOptions

    req = StepRequest(mode="decode", hf="LlamaForCausalLM", config="llama", batch=1, context=CTX,
                      overrides=tuple(LLAMA.items()))
    with pytest.raises(OptionError, match="DynamicCache"):
        ServeOptions(req, get_profile("h100"), execution="eager")
    assert ServeOptions(replace(req, cache="dynamic"), get_profile("h100"), execution="eager").execution == "eager"
