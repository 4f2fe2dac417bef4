"""Precision recipes in transformers causal LMs (issue 36): a Llama-3.1-8B-shaped decode step (two layers) lowered
through torchax with its linears quantised and an fp8 KV cache; FLOPs by precision, weight bytes (with scales and
zeros) and KV bytes against closed forms worked out here from Llama-3.1-8B's published configuration, never read
back from the code's own formulas; the fp8 cache's attention against plain softmax attention; a recipe the torchax
path cannot lower is one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mhlo_cost.analysis import analyze
from mhlo_cost.cli import main
from mhlo_cost.studies.serve import StepRequest, lower_step

# Llama-3.1-8B's config.json (meta-llama/Llama-3.1-8B): hidden 4096, 32 heads of 128, 8 key/value heads, MLP 14336,
# vocabulary 128,256, untied LM head, no biases; two of its 32 layers.
C, HEADS, KV_HEADS, D, F, VOCAB, LAYERS = 4096, 32, 8, 128, 14336, 128_256, 2
LLAMA_31_8B = (("num_hidden_layers", LAYERS), ("hidden_size", C), ("intermediate_size", F),
               ("num_attention_heads", HEADS), ("num_key_value_heads", KV_HEADS), ("vocab_size", VOCAB))
# (in, out) of q, k, v, o, gate, up, down in every layer
LINEARS = ((C, HEADS * D), (C, KV_HEADS * D), (C, KV_HEADS * D), (HEADS * D, C), (C, F), (C, F), (F, C))
# bf16 parameters outside the linears: token embedding, LM head, two RMSNorm scales per layer and the final one
OTHER = 2 * (VOCAB * C + C * VOCAB + LAYERS * 2 * C + C)


def _step(precision, batch=4, context=1024, overrides=LLAMA_31_8B):
    req = StepRequest(mode="decode", hf="LlamaForCausalLM", config="llama", batch=batch, context=context,
                      overrides=overrides, precision=precision)
    return lower_step(req)


def test_llama_fp8_rowwise_decode_with_an_fp8_cache_matches_closed_forms():
    batch, context = 4, 1024
    step = _step("fp8-rowwise,kv-fp8", batch, context)
    # weights: each linear's e4m3 weight (1 byte a value) and a float32 scale per output channel; no biases
    assert step.weight_bytes == LAYERS * sum(i * o + 4 * o for i, o in LINEARS) + OTHER
    # KV: layers x (K and V) x batch x kv heads x context x head_dim x 1 byte, and a float32 K and V scale per layer
    assert step.layout.nbytes == LAYERS * (2 * batch * KV_HEADS * context * D + 2 * 4)
    assert step.layout.dtype == "float8_e4m3fn"
    s = analyze(step.lowered.text).summary
    assert s["unknown_ops"] == 0
    # each linear one fp8 dot of 2 m k n (m = batch tokens); the attention's two dots against the fp8 cache in fp8
    # (2 x batch x heads x context x head_dim each: every query head reads its shared key/value head); the LM head
    # in bf16
    attention = LAYERS * 2 * (2 * batch * HEADS * context * D)
    assert s["gemm_flops_fp8"] == LAYERS * sum(2 * batch * i * o for i, o in LINEARS) + attention
    assert s["gemm_flops"] == s["gemm_flops_fp8"] + 2 * batch * C * VOCAB


def test_the_program_takes_the_weights_and_cache_at_their_widths():
    """The lowered entry's arguments are the stored parameters (e4m3 weights, f32 row scales) and the fp8 cache
    with its two f32 scales per layer: counted from the IR's own signature."""
    step = _step("fp8-rowwise,kv-fp8", batch=1, context=256)
    text = step.lowered.text
    entry = text[text.index("func.func public @main"):]
    sig = entry[:entry.index(") -> (")]  # the arguments
    assert sig.count(f"tensor<{C}x{HEADS * D}xf8E4M3FN>") == 2 * LAYERS  # q and o (in, out)
    assert sig.count(f"tensor<{F}x{C}xf8E4M3FN>") == LAYERS  # down
    assert sig.count(f"tensor<{F}xf32>") == 2 * LAYERS  # gate's and up's row scales
    assert sig.count(f"tensor<1x{KV_HEADS}x256x{D}xf8E4M3FN>") == 2 * LAYERS  # K and V
    assert sig.count("tensor<f32>") == 2 * LAYERS  # their scales


def test_llama_int4_awq_counts_packed_weights_scales_and_zeros():
    step = _step("w4a16-awq", batch=1, context=256)
    # AWQ: in x out / 2 (int4, two a byte) + (in/128) x out x 2 (fp16 scales) + (in/128) x out / 2 (int4 zeros)
    awq = sum(i * o // 2 + (i // 128) * o * 2 + (i // 128) * o // 2 for i, o in LINEARS)
    assert step.weight_bytes == LAYERS * awq + OTHER
    assert step.layout.nbytes == LAYERS * 2 * KV_HEADS * 256 * D * 2  # the cache stays bf16
    a = analyze(step.lowered.text)
    assert not any(k.startswith("gemm_flops_") for k in a.summary)  # dequantised: the dots run in bf16
    assert a.summary["gemm_flops"] == LAYERS * (sum(2 * i * o for i, o in LINEARS) + 2 * 2 * HEADS * 256 * D) \
        + 2 * C * VOCAB
    shifts = [r for r in a.rows if r.op.endswith("shift_right_logical")]
    assert sum(r.multiplicity for r in shifts) == LAYERS * len(LINEARS) * 2  # weights and zeros unpacked


SMALL = (("num_hidden_layers", 1), ("hidden_size", 256), ("intermediate_size", 512), ("num_attention_heads", 4),
         ("num_key_value_heads", 2), ("vocab_size", 512))
SMALL_LINEARS = ((256, 256), (256, 128), (256, 128), (256, 256), (256, 512), (256, 512), (512, 256))


@pytest.mark.parametrize("recipe, key, stored", [
    ("fp8-tensorwise", "gemm_flops_fp8", lambda i, o: i * o + 4),
    ("fp8-blockwise-128", "gemm_flops_fp8", lambda i, o: i * o + (i // 128) * (o // 128) * 4),
    ("w8a8-int8", "gemm_flops_int8", lambda i, o: i * o + 4 * o),
    ("w8a16", None, lambda i, o: i * o + 2 * o),
])
def test_each_lowerable_recipe_stores_and_counts_its_width(recipe, key, stored):
    batch = 2
    step = _step(recipe, batch, 128, SMALL)
    other = 2 * (512 * 256 * 2 + 2 * 256 + 256)
    assert step.weight_bytes == sum(stored(i, o) for i, o in SMALL_LINEARS) + other
    s = analyze(step.lowered.text).summary
    assert s["unknown_ops"] == 0
    low = {k: v for k, v in s.items() if k.startswith("gemm_flops_")}
    assert low == ({key: sum(2 * batch * i * o for i, o in SMALL_LINEARS)} if key else {})


def test_the_fp8_cache_attention_agrees_with_softmax_attention():
    """Grouped-query attention over an fp8 cache (query and probabilities cast to e4m3, scales applied) against
    plain float64 softmax attention with each key/value head repeated for its query heads, under a boolean mask."""
    import jax.numpy as jnp

    from mhlo_cost.lower.inference.hf_quant import fp8_kv_attention

    rng = np.random.default_rng(0)
    b, h, hk, n, length, d = 2, 4, 2, 1, 16, 32
    q, k, v = (rng.standard_normal(s) for s in ((b, h, n, d), (b, hk, length, d), (b, hk, length, d)))
    ks, vs = np.abs(k).max() / 448.0, np.abs(v).max() / 448.0
    kc, vc = (jnp.asarray(t / sc, jnp.float8_e4m3fn) for t, sc in ((k, ks), (v, vs)))
    mask = np.zeros((b, 1, n, length), bool)
    mask[..., :11] = True  # eleven positions filled
    got = np.asarray(fp8_kv_attention(jnp.asarray(q, jnp.float32), kc, vc, jnp.asarray(mask),
                                      (jnp.float32(ks), jnp.float32(vs)), d ** -0.5), np.float64)
    kr, vr = np.repeat(k, h // hk, axis=1), np.repeat(v, h // hk, axis=1)
    scores = np.einsum("bhnd,bhld->bhnl", q, kr) * d ** -0.5
    scores = np.where(mask, scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = np.einsum("bhnl,bhld->bnhd", p / p.sum(-1, keepdims=True), vr)
    assert got.shape == (b, n, h, d)
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()  # e4m3 keeps 3 mantissa bits
    assert np.abs(got - want).max() > 0  # (the fp8 casts are really made)


def test_serve_takes_a_recipe_for_a_transformers_model(capsys):
    """serve's figures carry the recipe; the program's arguments less the weights and the cache counted are the
    token ids and the position (4 x batch + 4 bytes) and the rotary table (a buffer: head_dim / 2 bf16 values): the
    weights and cache are counted as the program takes them."""
    argv = ["serve", "--hf", "LlamaForCausalLM", "--config", "llama", *[f"--set={k}={v}" for k, v in SMALL],
            "--decode", "--batch", "2", "--context", "128", "--precision", "fp8-rowwise,kv-fp8", "--format", "json",
            "--no-cache", "-q"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    assert d["precision"] == "fp8-rowwise,kv-fp8"
    assert d["input_bytes"] == 4 * 2 + 4 + (64 // 2) * 2
    attention = 2 * (2 * 2 * 4 * 128 * 64)
    assert d["gemm_flops_fp8"] == sum(2 * 2 * i * o for i, o in SMALL_LINEARS) + attention


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "nvfp4,kv-fp8"])
def test_a_recipe_the_torchax_path_cannot_lower_is_one_line(capsys, recipe):
    argv = ["serve", "--hf", "LlamaForCausalLM", "--config", "llama", "--decode", "--precision", recipe]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "torchax" in err[0], err
    assert "fp8-rowwise" in err[0]  # it names what --hf takes


def test_a_block_that_does_not_divide_is_one_line(capsys):
    """An input dimension (the contraction) not a multiple of the block is refused; an output dimension may end in
    a partial block, as DeepSeek-V3 ships (tests/test_precision_hf_moe.py)."""
    sets = [f"--set={k}={v}" for k, v in SMALL if k != "intermediate_size"]
    argv = ["serve", "--hf", "LlamaForCausalLM", "--config", "llama", *sets, "--set", "intermediate_size=320",
            "--decode", "--precision", "fp8-blockwise-128"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in features (320) are not a multiple of its block (128)" in err[0], err


def test_the_fp8_cache_is_written_in_place(capsys):
    """The new key and value are written into the donated fp8 cache in place: the step's activations hold no copy of
    a layer's cache (not even of its keys alone: batch x kv heads x context x head_dim bytes)."""
    sets = [f"--set={k}={v}" for k, v in SMALL]
    assert main(["serve", "--hf", "LlamaForCausalLM", "--config", "llama", *sets, "--decode", "--batch", "2",
                 "--context", "2048", "--precision", "kv-fp8", "--format", "json", "--no-cache", "-q"]) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    keys = 2 * 2 * 2048 * 64  # batch x kv heads x context x head_dim, one byte each
    assert d["kv_cache_layer_bytes"] == [2 * keys + 8]
    assert d["activation_bytes"] < keys // 4
