"""Inference steps (prefill, decode with a static KV cache): the cache each model really holds, against closed
forms worked out here from the configuration; the decode program's weight and cache bytes; the sweep's marks.

Tiny configurations (2 layers, hidden 64) so that each lowering takes seconds."""
from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("torchax") is None:  # (imported through mhlo-cost's shim, never directly)
    pytest.skip("torchax is not installed", allow_module_level=True)
pytest.importorskip("transformers")

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.studies.serve import StepRequest, lower_step  # noqa: E402
from mhlo_cost.ir.loader import load  # noqa: E402

B, CTX, BF16 = 3, 24, 2
LAYERS, HIDDEN, HEADS, KV, INTER, VOCAB = 2, 64, 4, 2, 128, 128
HD = HIDDEN // HEADS
LLAMA = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
             num_key_value_heads=KV, vocab_size=VOCAB)
MLA = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
           num_key_value_heads=HEADS, vocab_size=VOCAB, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
           qk_nope_head_dim=16, v_head_dim=16, first_k_dense_replace=LAYERS)


def hf(cls, typ, sets, mode="decode", batch=B, context=CTX, tokens=1):
    return lower_step(StepRequest(mode=mode, batch=batch, context=context, tokens=tokens, hf=cls, config=typ,
                                  overrides=tuple(sorted(sets.items()))))


def donated_argument_bytes(text: str) -> int:
    """Bytes of the entry's arguments aliased to an output (tf.aliasing_output), read from the IR itself."""
    from jaxlib.mlir import ir

    loaded = load(text)
    with loaded.context:
        for op in loaded.module.body.operations:
            if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
                fn = op
        attrs = [ir.DictAttr(a) for a in ir.ArrayAttr(fn.attributes["arg_attrs"])]
        total = 0
        for a, d in zip(fn.regions[0].blocks[0].arguments, attrs):
            if "tf.aliasing_output" in d:
                t = ir.RankedTensorType(a.type)
                n = 1
                for s in t.shape:
                    n *= s
                total += n * (t.element_type.width // 8)
        return total


def test_llama_gqa_cache_is_the_closed_form_and_an_argument_updated_in_place():
    step = hf("LlamaForCausalLM", "llama", LLAMA)
    closed = 2 * LAYERS * KV * HD * CTX * B * BF16
    assert step.layout.nbytes == closed
    assert step.layout.per_layer_bytes == [closed // LAYERS] * LAYERS
    assert donated_argument_bytes(step.lowered.text) == closed  # the cache is the program's, donated


def test_mistral_holds_only_its_sliding_window():
    window = 8
    step = hf("MistralForCausalLM", "mistral", {**LLAMA, "sliding_window": window})
    assert step.layout.nbytes == 2 * LAYERS * KV * HD * min(window, CTX) * B * BF16
    assert donated_argument_bytes(step.lowered.text) == step.layout.nbytes
    assert step.layout.bounded
    # at a context inside the window, the whole context
    assert step.layout.at(context=5).nbytes == 2 * LAYERS * KV * HD * 5 * B * BF16


def test_gpt2_mha_cache_has_every_head():
    step = hf("GPT2LMHeadModel", "gpt2", dict(n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=VOCAB))
    assert step.layout.nbytes == 2 * LAYERS * HEADS * HD * CTX * B * BF16


def test_deepseek_mla_caches_its_latent():
    step = hf("DeepseekV3ForCausalLM", "deepseek_v3", MLA)
    latent = MLA["kv_lora_rank"] + MLA["qk_rope_head_dim"]  # per position per layer: no factor 2, no heads
    assert step.layout.nbytes == LAYERS * latent * CTX * B * BF16
    assert donated_argument_bytes(step.lowered.text) == step.layout.nbytes


def test_decode_reads_the_closed_form_weights_and_cache():
    step = hf("LlamaForCausalLM", "llama", LLAMA)
    a = analyze(step.lowered.text, AnalysisOptions(dataflow=True))
    per_layer = (HIDDEN * HIDDEN * 2 + 2 * HIDDEN * KV * HD + 3 * HIDDEN * INTER + 2 * HIDDEN)
    weights = (2 * VOCAB * HIDDEN + LAYERS * per_layer + HIDDEN) * BF16  # untied embedding and head
    assert step.weight_bytes == weights
    assert a.memory.param_bytes == weights  # what the analysis finds the program reads as parameters
    cache = 2 * LAYERS * KV * HD * CTX * B * BF16
    assert a.summary["bytes_read"] >= weights + cache


def test_bundled_gpt_prefill_and_decode():
    sets = (("heads", 4), ("hidden", 64), ("layers", 2), ("vocab", 128))
    dec = lower_step(StepRequest(mode="decode", batch=B, context=CTX, model="gpt", overrides=sets))
    assert dec.layout.nbytes == 2 * 2 * 4 * 16 * CTX * B * BF16
    assert donated_argument_bytes(dec.lowered.text) == dec.layout.nbytes
    pre = lower_step(StepRequest(mode="prefill", batch=B, context=CTX, tokens=16, model="gpt", overrides=sets))
    a = analyze(pre.lowered.text, AnalysisOptions(dataflow=True))
    # the prompt's projections: 2 x tokens x batch x (qkv 3h^2 + proj h^2 + mlp 8h^2) per layer, and the head
    # on the last position only
    h = 64
    proj = 2 * 16 * B * 12 * h * h * 2 + 2 * B * h * 128
    attn = 2 * 2 * B * 4 * 16 * 16 * 16 * 2  # q k^T and p v per layer over the prompt
    assert a.summary["gemm_flops"] == proj + attn


def test_sweep_marks_points_that_do_not_fit(tmp_path):
    from dataclasses import replace

    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.studies.serve.grid import StepCache, sweep, table

    hw = get_profile("h100")
    small = replace(hw, hbm_capacity=2_000_000.0)  # 2 MB: the weights fit, a big cache does not
    base = StepRequest(mode="decode", model="gpt", overrides=(("heads", 4), ("hidden", 64), ("layers", 2),
                                                              ("vocab", 128)))
    figs = sweep(base, [1, 64], [16, 256], small, cache=StepCache(tmp_path))
    df = table(figs)
    assert list(df["batch"]) == [1, 1, 64, 64]
    for f, fits in zip(figs, df["fits"]):
        need = f.weight_bytes + f.kv_cache_bytes + f.input_bytes + f.activation_bytes
        assert f.memory_bytes == need and (fits == "yes") == (need <= 2_000_000)
    assert set(df["fits"]) == {"yes", "no"}
    big = figs[-1]  # batch 64, context 256: 64 x 256 x 2 x 2 x 4 x 16 x 2 bytes of cache
    assert big.kv_cache_bytes == 64 * 256 * 2 * 2 * 4 * 16 * 2 and not big.fits
    # the largest batch that fits really fits, one more does not (cache exact, activations per sequence)
    f = figs[1]
    per_seq = f.kv_cache_bytes // f.batch + -(-(f.activation_bytes + f.input_bytes) // f.batch)
    assert f.weight_bytes + f.max_batch * per_seq <= 2_000_000 < f.weight_bytes + (f.max_batch + 1) * per_seq
    again = sweep(base, [1, 64], [16, 256], small, cache=StepCache(tmp_path))  # read back, not lowered again
    assert [x.tokens_per_s for x in again] == [x.tokens_per_s for x in figs]
