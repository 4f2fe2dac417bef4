"""Precision recipes (issue 36): the vocabulary, the bundled GPT's steps lowered with each, and their FLOPs by
precision, weight bytes and KV bytes against closed forms worked out here (never read back from the code's own
formulas), and every spelling of a precision on the command line either working or one error line (exit 2)."""
from __future__ import annotations

import json

import pytest

from mhlo_cost.analysis import analyze
from mhlo_cost.cli import main
from mhlo_cost.machines.precision import RECIPES, PrecisionError, parse
from mhlo_cost.studies.serve import StepRequest, lower_step

# The bundled GPT at Llama-3.1-8B's widths (hidden 4096, 32 heads, vocabulary 128,256), two layers; its MLP is the
# GPT's (GELU, 4 x hidden), its attention multi-head (no grouped KV heads).
C, HEADS, VOCAB, LAYERS = 4096, 32, 128_256, 2
F = 4 * C
LLAMA_WIDTHS = (("heads", HEADS), ("hidden", C), ("layers", LAYERS), ("vocab", VOCAB))
LINEARS = ((C, 3 * C), (C, C), (C, F), (F, C))  # (in, out) of qkv, proj, fc1, fc2 in every layer


def _other_params_bytes(seq: int, c: int = C, vocab: int = VOCAB, layers: int = LAYERS) -> int:
    """bf16 parameters outside the quantised linears: token and position embeddings, two LayerNorms per layer
    (scale, bias), the final LayerNorm, the LM head (weight and bias)."""
    return 2 * (vocab * c + seq * c + layers * 4 * c + 2 * c + c * vocab + vocab)


def _step(precision, batch=4, context=1024, widths=LLAMA_WIDTHS, mode="decode"):
    req = StepRequest(mode=mode, model="gpt", batch=batch, context=context, tokens=context if mode == "prefill"
                      else 1, overrides=widths, precision=precision)
    return lower_step(req)


def test_recipes_have_sources_and_combine():
    assert set(RECIPES) == {"bf16", "fp8-tensorwise", "fp8-rowwise", "fp8-blockwise-128", "mxfp8", "nvfp4",
                            "w4a16-awq", "w8a8-int8", "w8a16", "kv-fp8"}
    assert all(r.source for r in RECIPES.values())
    r = parse("fp8-rowwise,kv-fp8")
    assert (r.weight, r.activation, r.kv, r.name) == ("float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn",
                                                      "fp8-rowwise,kv-fp8")
    assert parse("kv-fp8").weight is None and parse(None).name == "bf16"
    for bad, words in (("fp9", "unknown recipe"), ("fp8-rowwise,w8a16", "at most one"), ("", "name a recipe"),
                       ("kv-fp8,kv-fp8", "at most one")):
        with pytest.raises(PrecisionError, match=words):
            parse(bad)


def test_fp8_rowwise_decode_with_an_fp8_cache_matches_closed_forms():
    batch, context = 4, 1024
    step = _step("fp8-rowwise,kv-fp8", batch, context)
    # weights: each linear's e4m3 weight (1 byte), a float32 scale per output channel, a bf16 bias
    linears = sum(i * o * 1 + o * 4 + o * 2 for i, o in LINEARS)
    assert step.weight_bytes == LAYERS * linears + _other_params_bytes(seq=context)
    # KV: layers x (K and V) x batch x heads x context x head_dim x 1 byte, plus a float32 K and V scale per layer
    kv = LAYERS * (2 * batch * HEADS * context * (C // HEADS) * 1 + 2 * 4)
    assert step.layout.nbytes == kv and step.layout.dtype == "float8_e4m3fn"
    a = analyze(step.lowered.text)
    s = a.summary
    # every quantised linear is one fp8 dot of 2 m n k (m = batch tokens); against the fp8 cache the two attention
    # dots (scores, probabilities x values: 2 x batch x heads x context x head_dim each) run in fp8 too, as
    # FlashAttention-3's fp8 path runs them; the LM head stays bf16
    attention = LAYERS * 2 * (2 * batch * HEADS * context * (C // HEADS))
    assert s["gemm_flops_fp8"] == LAYERS * sum(2 * batch * i * o for i, o in LINEARS) + attention
    assert s["gemm_flops"] == s["gemm_flops_fp8"] + 2 * batch * C * VOCAB
    assert list(s).index("gemm_flops_fp8") == list(s).index("gemm_flops") + 1


def test_serve_figures_carry_the_recipe_and_the_arguments_agree(capsys, tmp_path):
    """The program's own arguments (the IR's entry) hold exactly the weights and cache counted, plus the token ids
    and the position: input_bytes (arguments less weights less cache) is 4 x batch + 4."""
    assert main(["serve", "--model", "gpt", *[f"--set={k}={v}" for k, v in LLAMA_WIDTHS], "--decode", "--batch", "4",
                 "--context", "1024", "--precision", "fp8-rowwise,kv-fp8", "--format", "json", "--no-cache",
                 "-q"]) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    assert d["input_bytes"] == 4 * 4 + 4
    assert d["precision"] == "fp8-rowwise,kv-fp8"
    attention = LAYERS * 2 * (2 * 4 * HEADS * 1024 * (C // HEADS))
    assert d["gemm_flops_fp8"] == LAYERS * sum(2 * 4 * i * o for i, o in LINEARS) + attention
    assert "precision_note" not in d  # h100 has an fp8 rate
    # the largest batch follows the one-byte cache: no copy of it in bf16 is made, so the per-sequence room is the
    # cache's (2 x layers x heads x context x head_dim bytes) plus the step's small activations
    per_seq = LAYERS * 2 * HEADS * 1024 * (C // HEADS)
    room = d["capacity_bytes"] - d["weight_bytes"]
    assert room // (per_seq * 11 // 10) <= d["max_batch"] <= room // per_seq


def test_int4_awq_counts_packed_weights_scales_and_zeros():
    step = _step("w4a16-awq", batch=1, context=256)
    # AWQ: in x out / 2 (int4, two a byte) + (in/128) x out x 2 (fp16 scales) + (in/128) x out / 2 (int4 zeros)
    awq = sum(i * o // 2 + (i // 128) * o * 2 + (i // 128) * o // 2 + o * 2 for i, o in LINEARS)
    assert step.weight_bytes == LAYERS * awq + _other_params_bytes(seq=256)
    a = analyze(step.lowered.text)
    assert not any(k.startswith("gemm_flops_") for k in a.summary)  # dequantised: the dots run in bf16
    packed = [r for r in a.rows if r.op.endswith("shift_right_logical")]
    assert sum(r.multiplicity for r in packed) == LAYERS * 4 * 2  # weights and zeros unpacked in every linear


@pytest.mark.parametrize("recipe, key, weight, scales", [
    ("fp8-tensorwise", "gemm_flops_fp8", lambda i, o: i * o, lambda i, o: 4),
    ("fp8-blockwise-128", "gemm_flops_fp8", lambda i, o: i * o, lambda i, o: (i // 128) * (o // 128) * 4),
    ("mxfp8", "gemm_flops_fp8", lambda i, o: i * o, lambda i, o: (i // 32) * o * 1),
    ("nvfp4", "gemm_flops_fp4", lambda i, o: i * o // 2, lambda i, o: (i // 16) * o * 1 + 4),
    ("w8a8-int8", "gemm_flops_int8", lambda i, o: i * o, lambda i, o: o * 4),
    ("w8a16", None, lambda i, o: i * o, lambda i, o: o * 2),
])
def test_each_recipe_stores_and_counts_its_width(recipe, key, weight, scales):
    c, batch, context = 256, 2, 128
    widths = (("heads", 4), ("hidden", c), ("layers", LAYERS), ("vocab", 512))
    step = _step(recipe, batch, context, widths)
    linears = ((c, 3 * c), (c, c), (c, 4 * c), (4 * c, c))
    assert step.weight_bytes == (LAYERS * sum(weight(i, o) + scales(i, o) + 2 * o for i, o in linears)
                                 + _other_params_bytes(context, c, 512))
    s = analyze(step.lowered.text).summary
    assert s["unknown_ops"] == 0  # every op of the recipe (casts to e8m0 and e2m1, shifts, ands) has a rule
    low = {k: v for k, v in s.items() if k.startswith("gemm_flops_")}
    assert low == ({key: LAYERS * sum(2 * batch * i * o for i, o in linears)} if key else {})


def test_prefill_in_fp8_counts_its_prompt():
    """The prompt's linears in fp8; its attention reads the new bf16 keys and values (the fp8 cache is written)."""
    c, batch, tokens = 256, 2, 64
    widths = (("heads", 4), ("hidden", c), ("layers", 1), ("vocab", 512))
    step = _step("fp8-rowwise,kv-fp8", batch, tokens, widths, mode="prefill")
    assert step.layout.nbytes == 2 * batch * 4 * tokens * (c // 4) * 1 + 2 * 4  # one layer's e4m3 K, V and scales
    s = analyze(step.lowered.text).summary
    assert s["gemm_flops_fp8"] == sum(2 * batch * tokens * i * o for i, o in ((c, 3 * c), (c, c), (c, 4 * c),
                                                                              (4 * c, c)))


def test_a_bf16_program_has_no_precision_breakdown():
    s = analyze(_step(None, 1, 128, (("heads", 4), ("hidden", 64), ("layers", 1), ("vocab", 128))).lowered.text)
    assert not any(k.startswith("gemm_flops_") for k in s.summary)


def test_a_chip_without_the_precision_prices_it_upcast_and_says_so(capsys, tmp_path):
    src = tmp_path / "fp8.mlir"
    src.write_text(_step("fp8-rowwise", 1, 128, (("heads", 4), ("hidden", 256), ("layers", 1),
                                                  ("vocab", 512))).lowered.text)
    for chip, note in (("a100", "no fp8 matrix rate: fp8 dots are priced at its f16 rate"), ("h100", None)):
        assert main(["report", str(src), "--hardware", chip, "--format", "json", "-q"]) == 0
        d = json.loads(capsys.readouterr().out)["summary"]
        assert (note in d["precision_note"]) if note else "precision_note" not in d


def test_the_upcast_note_names_the_rate_the_dot_is_priced_at():
    """A chip with only a tf32 matrix rate and f32_matmul = tf32 prices an fp8 dot at tf32 (the chain reaches f32,
    which runs as tf32): the note says tf32 (it said f32); with no matrix rate on the chain, the vector unit."""
    import dataclasses

    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.machines.precision import upcast_note

    tf32 = dataclasses.replace(get_profile("a100"), matrix_flops={"tf32": 1.0e14}, f32_matmul="tf32")
    assert "priced at its tf32 rate" in upcast_note(tf32, "fp8") and tf32.matrix_peak("fp8") == 1.0e14
    f64 = dataclasses.replace(tf32, matrix_flops={"f64": 2.0e13}, f32_matmul="f32")
    assert upcast_note(f64, "fp8").endswith("priced on its vector unit")
    assert f64.matrix_peak("fp8") == f64.vector_peak("f32")


GPT = ["--model", "gpt", "--set", "layers=1", "--set", "hidden=64", "--set", "heads=4", "--set", "vocab=128"]
SPELLINGS = ("int8", "fp8", "float8_e4m3fn", "torch.float8_e5m2", "int4", "fp4", "nvfp4", "uint8", "e4m3")


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("argv", [
    ["serve", *GPT, "--decode"],
    ["lower", *GPT[:2], "--decode", "-o", "{tmp}/x.mlir"],
    ["lower", "--hf", "LlamaForCausalLM", "--config", "llama", "-o", "{tmp}/x.mlir"],
    ["sweep", "--model", "gpt", "--hardware", "h100"],
])
def test_a_precision_spelled_as_a_dtype_is_one_line(capsys, tmp_path, argv, spelling):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*argv, "--dtype", spelling]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "--precision" in err[0], err


@pytest.mark.parametrize("argv, words", [
    (["serve", *GPT, "--decode", "--precision", "fp9"], "unknown recipe"),
    (["serve", "--hf", "LlamaForCausalLM", "--config", "llama", "--decode", "--precision", "mxfp8"],
     "the bundled gpt, --model gpt, lowers every recipe"),
    (["lower", "--model", "gpt", "--precision", "fp8-rowwise", "-o", "x.mlir"], "inference steps"),
    (["train-plan", "--model", "gpt-22b", "--precision", "fp9"], "unknown recipe"),
])
def test_bad_recipes_are_one_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and words in err[0], err


def test_fp8_training_runs_every_linear_gemm_in_fp8_and_keeps_fp32_state():
    """train-plan's per-device layer under fp8-rowwise: the forward, dgrad and wgrad GEMMs of the four linears are
    fp8 (3 x 2 m n k each, m = micro-batch x sequence); the attention's stay bf16; the weights are bf16 arguments,
    the master weights and AdamW's two moments float32, as in bf16 training."""
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.layer import lower_layer

    h, seq = 256, 128
    for precision in ("fp8-rowwise", "fp8-tensorwise"):
        cfg = ScaleConfig(layers=2, hidden=h, heads=4, seq=seq, precision=precision)
        a = analyze(lower_layer(cfg))
        m = 1 * seq
        assert a.summary["gemm_flops_fp8"] == sum(3 * 2 * m * i * o for i, o in ((h, 3 * h), (h, h), (h, 4 * h),
                                                                                 (4 * h, h)))
        from mhlo_cost.analysis import AnalysisOptions

        b = analyze(lower_layer(cfg), AnalysisOptions(arguments=True))
        params = 3 * h * h + 3 * h + h * h + h + 4 * h * h + 4 * h + 4 * h * h + h + 4 * h
        by: dict = {}
        for arg in b.arguments:
            root = arg.name.split("[")[0]
            by[root] = by.get(root, 0) + arg.type.nbytes
        assert by["params"] == 2 * params and by["master"] == 4 * params


def test_train_plan_takes_the_training_recipes_and_refuses_the_others(capsys):
    base = ["train-plan", "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--hardware",
            "dgx-h100", "--no-cache", "--format", "json", "-q"]
    assert main([*base, "--precision", "fp8-rowwise"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["precision"] == "fp8-rowwise"
    assert main([*base]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert "precision" not in bf16["config"] and bf16["memory"] == d["memory"]  # fp8 casts are never stored
    for bad in ("w4a16-awq", "nvfp4", "kv-fp8"):
        assert main([*base, "--precision", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "a training step runs bf16, fp8-tensorwise, fp8-rowwise" in err[0]
    assert main([*base, "--dtype", "int8"]) == 2  # train-plan takes no --dtype: one line
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_block_table_has_each_blocks_fp8_flops(capsys, tmp_path):
    c, batch, context = 256, 2, 128
    widths = (("heads", 4), ("hidden", c), ("layers", LAYERS), ("vocab", 512))
    for precision, column in (("fp8-rowwise", True), (None, False)):
        src = tmp_path / f"{precision}.mlir"
        src.write_text(_step(precision, batch, context, widths).lowered.text)
        assert main(["blocks", str(src), "-q"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        header = lines[0].split(",")
        assert ("gemm_flops_fp8" in header) is column
        if not column:
            continue
        assert header.index("gemm_flops_fp8") == header.index("gemm_flops") + 1
        per = {ln.split(",")[0]: int(ln.split(",")[header.index("gemm_flops_fp8")]) for ln in lines[1:]}
        layer = sum(2 * batch * i * o for i, o in ((c, 3 * c), (c, c), (c, 4 * c), (4 * c, c)))
        assert per == {"embed": 0, "layers.0": layer, "layers.1": layer, "ln_f": 0, "lm_head": 0,
                       "TOTAL": LAYERS * layer}


def test_an_f64_dot_is_not_counted_as_fp6():
    # f64 begins with "f6": the precision classes are the f8E*/f6E*/f4E* element types, not a prefix of f64.
    text = """func.func @main(%a: tensor<4x8xf64>, %b: tensor<8x2xf64>) -> tensor<4x2xf64> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xf64>, tensor<8x2xf64>) -> tensor<4x2xf64>
  return %0 : tensor<4x2xf64>
}"""
    s = analyze(text).summary
    assert s["gemm_flops"] == 2 * 4 * 8 * 2
    assert not any(k.startswith("gemm_flops_") for k in s)
