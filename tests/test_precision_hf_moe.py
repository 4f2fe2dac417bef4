"""Precision recipes on mixture-of-experts models lowered through torchax (issue 36): the routed experts, which
transformers keeps as stacked 3-D parameters (not ``nn.Linear``), are stored at the recipe's widths with their scales
and run through the recipe's matmuls (:mod:`mhlo_cost.lower.inference.hf_experts_quant`).

Every expected figure is a closed form worked out here from the configuration. The lowering runs the static
dispatch of :mod:`mhlo_cost.lower.frontends.moe`: under dropless routing the experts compute the routed token
copies only (batch x top-k rows in all, spread evenly), never every expert on every token; so the expert FLOPs are
rows x (2 h 2f + 2 f h) for a gated expert of hidden size h and width f (its gate_up_proj h -> 2f, its down_proj
f -> h), which the tests tell apart from the dense alternative (batch x E rows)."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

_MISSING = [m for m in ("torch", "torchax", "transformers") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"{', '.join(_MISSING)} not installed (pip install 'mhlo-cost[models]')", allow_module_level=True)

from mhlo_cost.analysis import analyze  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.studies.serve import StepRequest, lower_step  # noqa: E402

from stderr_lines import error_line  # noqa: E402

# A Mixtral-shaped model (MixtralForCausalLM: every layer a mixture, no shared expert, no biases, untied head):
# hidden 256, two query heads of 128 sharing one key/value head, E = 4 experts of width 256, top-2, two layers.
C, HEADS, KV, D, V, LAYERS, E, K, F = 256, 2, 1, 128, 512, 2, 4, 2, 256
MIXTRAL = (("num_hidden_layers", LAYERS), ("hidden_size", C), ("intermediate_size", F), ("num_attention_heads", HEADS),
           ("num_key_value_heads", KV), ("head_dim", D), ("vocab_size", V), ("num_local_experts", E),
           ("num_experts_per_tok", K))
ATTENTION = ((C, HEADS * D), (C, KV * D), (C, KV * D), (HEADS * D, C))  # q, k, v, o: (in, out)
EXPERT = ((C, 2 * F), (F, C))  # gate_up_proj, down_proj: (in, out)
# bf16 parameters outside the linears and experts: embeddings, LM head, two RMSNorms a layer and the final one, the
# router's E x C weight a layer
MIXTRAL_OTHER = 2 * (V * C + C * V + LAYERS * 2 * C + C + LAYERS * E * C)


def blockwise(i: int, o: int) -> int:
    """Bytes of an (in, out) weight in e4m3 with one float32 scale per 128 x 128 block, a partial last block of
    outputs with a scale of its own (DeepSeek-V3's layout: its kv_a_proj_with_mqa of 576 outputs has 5 x 56)."""
    return i * o + (i // 128) * -(-o // 128) * 4


def awq(i: int, o: int) -> int:
    """int4 packed two a byte, a float16 scale and an int4 zero (packed two a byte) per group of 128 inputs and
    output channel."""
    return i * o // 2 + (i // 128) * o * 2 + (i // 128) * o // 2


def _step(precision, cls="MixtralForCausalLM", config="mixtral", overrides=MIXTRAL, batch=4, context=128):
    req = StepRequest(mode="decode", hf=cls, config=config, batch=batch, context=context, overrides=overrides,
                      precision=precision)
    return lower_step(req)


def _signature(text: str) -> str:
    entry = text[text.index("func.func public @main"):]
    return entry[:entry.index(") -> (")]


def test_mixtral_fp8_blockwise_decode_stores_and_runs_the_experts_in_fp8():
    batch, context = 4, 128
    step = _step("fp8-blockwise-128", batch=batch, context=context)
    per_expert = sum(blockwise(i, o) for i, o in EXPERT)
    assert step.lowered.info["expert_weight_bytes"] == LAYERS * E * per_expert
    assert step.weight_bytes == LAYERS * (sum(blockwise(i, o) for i, o in ATTENTION) + E * per_expert) \
        + MIXTRAL_OTHER
    sig = _signature(step.lowered.text)
    # the experts' weights as the program takes them: (E, in, out) e4m3, (E, in/128, out/128) float32 scales
    assert sig.count(f"tensor<{E}x{C}x{2 * F}xf8E4M3FN>") == LAYERS
    assert sig.count(f"tensor<{E}x{F}x{C}xf8E4M3FN>") == LAYERS
    assert sig.count(f"tensor<{E}x{C // 128}x{2 * F // 128}xf32>") == LAYERS
    assert f"x{2 * F}x{C}xbf16>" not in sig  # no bf16 copy of the experts
    s = analyze(step.lowered.text).summary
    assert s["unknown_ops"] == 0
    # the routed copies only: batch x top-k rows through each layer's experts (dropless), not batch x E
    routed = batch * K
    assert routed != batch * E
    experts = LAYERS * routed * sum(2 * i * o for i, o in EXPERT)
    linears = LAYERS * sum(2 * batch * i * o for i, o in ATTENTION)
    assert s["gemm_flops_fp8"] == experts + linears
    # bf16: the router (batch x C x E), the attention's two dots over the cache, the LM head
    attention = LAYERS * 2 * (2 * batch * HEADS * context * D)
    assert s["gemm_flops"] - s["gemm_flops_fp8"] == LAYERS * 2 * batch * C * E + attention + 2 * batch * C * V


# A DeepSeek-V3-shaped model: the first layer dense (first_k_dense_replace=1), the second a mixture of 8 routed
# experts of width 128 (top-2) and one shared expert of the same width; multi-head latent attention (q rank 128, kv
# rank 128, two heads, nope 64, rope 64, v 64). Every input dimension a multiple of 128 (the recipe's block); as in
# DeepSeek-V3 (512 + 64), kv_a_proj_with_mqa's outputs (128 + 64) end in a partial block.
DS = dict(num_hidden_layers=2, hidden_size=C, vocab_size=V, num_attention_heads=2, num_key_value_heads=2,
          first_k_dense_replace=1, intermediate_size=256, moe_intermediate_size=128, n_routed_experts=8,
          num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1, q_lora_rank=128, kv_lora_rank=128,
          qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64)


def test_deepseek_v3_fp8_blockwise_decode_matches_closed_forms():
    batch, context = 4, 128
    step = _step("fp8-blockwise-128", "DeepseekV3ForCausalLM", "deepseek_v3", tuple(DS.items()), batch, context)
    h, heads, lq, lkv, nope, rope, v = C, 2, 128, 128, 64, 64, 64
    mla = ((h, lq), (lq, heads * (nope + rope)), (h, lkv + rope), (heads * v, h))  # q_a, q_b, kv_a, o
    kv_b = (lkv, heads * (nope + v))
    dense, f, e = 256, 128, 8
    mlp = ((h, dense), (h, dense), (dense, h))
    shared = ((h, f), (h, f), (f, h))
    expert = ((h, 2 * f), (f, h))
    experts = e * sum(blockwise(i, o) for i, o in expert)
    assert step.lowered.info["expert_weight_bytes"] == experts  # one mixture layer
    attention = sum(blockwise(i, o) for i, o in (*mla, kv_b)) + 2 * (lq + lkv)  # and the two latent norms (bf16)
    bf16 = 2 * (2 * V * h + 2 * 2 * h + h + e * h)  # embeddings, head, norms, the router's weight
    assert step.weight_bytes == 2 * attention + sum(blockwise(i, o) for i, o in (*mlp, *shared)) + experts + bf16
    s = analyze(step.lowered.text).summary
    assert s["unknown_ops"] == 0
    # fp8: the linears on the step's tokens; kv_b_proj on every cached latent (transformers' DeepSeek keeps the
    # latent and expands all of it each step); the routed copies (batch x top-k) through the experts
    linears = 2 * sum(2 * batch * i * o for i, o in mla) + sum(2 * batch * i * o for i, o in (*mlp, *shared))
    expand = 2 * (2 * batch * context * kv_b[0] * kv_b[1])
    routed = batch * 2 * sum(2 * i * o for i, o in expert)
    assert s["gemm_flops_fp8"] == linears + expand + routed
    # bf16 / f32: the attention's two dots per layer over the cache (q.k over nope + rope, p.v over v), the router
    # (float32 in DeepSeek-V3), the LM head
    attn = 2 * (2 * batch * heads * context * (nope + rope) + 2 * batch * heads * context * v)
    assert s["gemm_flops"] - s["gemm_flops_fp8"] == attn + 2 * batch * h * e + 2 * batch * h * V


def test_mixtral_int4_awq_counts_packed_expert_weights_scales_and_zeros():
    batch, context = 4, 128
    step = _step("w4a16-awq", batch=batch, context=context)
    per_expert = sum(awq(i, o) for i, o in EXPERT)
    assert step.lowered.info["expert_weight_bytes"] == LAYERS * E * per_expert
    assert step.weight_bytes == LAYERS * (sum(awq(i, o) for i, o in ATTENTION) + E * per_expert) + MIXTRAL_OTHER
    sig = _signature(step.lowered.text)
    assert sig.count(f"tensor<{E}x{C // 2}x{2 * F}xui8>") == LAYERS  # gate_up_proj packed along its input
    assert sig.count(f"tensor<{E}x{C // 128}x{2 * F}xf16>") == LAYERS  # its scales
    assert sig.count(f"tensor<{E}x{C // 128}x{F}xui8>") == LAYERS  # its zeros, packed along the output
    a = analyze(step.lowered.text)
    assert not any(k.startswith("gemm_flops_") for k in a.summary)  # weight-only: the matmuls run in bf16
    routed = LAYERS * batch * K * sum(2 * i * o for i, o in EXPERT)
    linears = LAYERS * sum(2 * batch * i * o for i, o in ATTENTION)
    attention = LAYERS * 2 * (2 * batch * HEADS * context * D)
    assert a.summary["gemm_flops"] == routed + linears + LAYERS * 2 * batch * C * E + attention + 2 * batch * C * V
    shifts = sum(r.multiplicity for r in a.rows if r.op.endswith("shift_right_logical"))
    assert shifts == LAYERS * (len(ATTENTION) + len(EXPERT)) * 2  # each weight and its zeros unpacked once


@pytest.mark.parametrize("recipe, stored, key", [
    ("fp8-rowwise", lambda i, o: i * o + 4 * o, "gemm_flops_fp8"),
    ("fp8-tensorwise", lambda i, o: i * o + 4, "gemm_flops_fp8"),
    ("w8a8-int8", lambda i, o: i * o + 4 * o, "gemm_flops_int8"),
    ("w8a16", lambda i, o: i * o + 2 * o, None),
])
def test_each_recipe_stores_the_experts_at_its_width(recipe, stored, key):
    """Three sequences over four experts: six copies, the first two experts one more than the others (the static
    dispatch's remainder group runs through the same quantised kernel, on a slice of the experts' weights)."""
    batch = 3
    step = _step(recipe, batch=batch)
    assert step.lowered.info["expert_weight_bytes"] == LAYERS * E * sum(stored(i, o) for i, o in EXPERT)
    s = analyze(step.lowered.text).summary
    low = {k: v for k, v in s.items() if k.startswith("gemm_flops_")}
    want = LAYERS * (batch * K * sum(2 * i * o for i, o in EXPERT) + sum(2 * batch * i * o for i, o in ATTENTION))
    assert low == ({key: want} if key else {})


QWEN2_MOE = dict(num_hidden_layers=1, hidden_size=C, vocab_size=V, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=256, moe_intermediate_size=128, shared_expert_intermediate_size=256,
                 num_experts=8, num_experts_per_tok=2)


def test_qwen2_moe_quantises_its_experts_and_shared_expert_not_its_gates():
    """Qwen2-MoE: the routed experts and the shared expert in fp8; the router and the shared expert's one-output
    sigmoid gate in bf16 (a plain torch linear in vLLM's Qwen2-MoE)."""
    batch = 4
    step = _step("fp8-rowwise", "Qwen2MoeForCausalLM", "qwen2_moe", tuple(QWEN2_MOE.items()), batch)
    rowwise = lambda i, o: i * o + 4 * o  # noqa: E731
    assert step.lowered.info["expert_weight_bytes"] == 8 * (rowwise(C, 256) + rowwise(128, C))
    sig = _signature(step.lowered.text)
    assert sig.count(f"tensor<{C}x1xbf16>") + sig.count(f"tensor<1x{C}xbf16>") == 1  # shared_expert_gate
    s = analyze(step.lowered.text).summary
    shared = ((C, 256), (C, 256), (256, C))
    attention = ((C, 256), (C, 128), (C, 128), (256, C))
    assert s["gemm_flops_fp8"] == batch * 2 * (2 * C * 256 + 2 * 128 * C) \
        + sum(2 * batch * i * o for i, o in (*shared, *attention))


def test_serve_runs_a_mixtral_fp8_blockwise_decode_with_the_experts_in_its_memory(capsys):
    batch, context = 4, 128
    argv = ["serve", "--hf", "MixtralForCausalLM", "--config", "mixtral", *[f"--set={k}={v}" for k, v in MIXTRAL],
            "--decode", "--batch", str(batch), "--context", str(context), "--precision", "fp8-blockwise-128",
            "--format", "json", "--no-cache", "-q"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    assert d["precision"] == "fp8-blockwise-128"
    per_expert = sum(blockwise(i, o) for i, o in EXPERT)
    # the memory table's weights: the experts at one byte a value plus their block scales
    assert d["weight_bytes"] == LAYERS * (sum(blockwise(i, o) for i, o in ATTENTION) + E * per_expert) \
        + MIXTRAL_OTHER
    assert d["kv_cache_bytes"] == LAYERS * 2 * batch * KV * context * D * 2  # the cache stays bf16
    assert d["gemm_flops_fp8"] == LAYERS * (batch * K * sum(2 * i * o for i, o in EXPERT)
                                            + sum(2 * batch * i * o for i, o in ATTENTION))


def test_an_expert_layout_the_recipe_cannot_reach_is_one_line(capsys):
    """JetMoE's experts (JetMoeParallelExperts) are not a layout the recipe reaches: refused, naming the class,
    rather than lowered with bf16 experts under an fp8 name."""
    sets = dict(num_hidden_layers=1, hidden_size=64, vocab_size=256, num_attention_heads=4)
    argv = ["serve", "--hf", "JetMoeForCausalLM", "--config", "jetmoe", "--decode", "--precision", "fp8-rowwise",
            "--no-cache", "-q"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 2
    line = error_line(capsys.readouterr().err)
    assert "--precision fp8-rowwise" in line and "JetMoeParallelExperts" in line and "cannot reach" in line


def test_stray_3d_expert_weights_are_refused():
    """A layer not named like an expert layer whose 3-D weights are led by the expert count is refused too."""
    import torch
    from transformers import PretrainedConfig

    from mhlo_cost.lower.frontends import FrontendError
    from mhlo_cost.lower.inference.hf_experts_quant import refuse_unreached
    from mhlo_cost.machines.precision import parse

    class Bank(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4, 8, 8))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = PretrainedConfig(num_local_experts=4)
            self.bank = Bank()
            self.conv = torch.nn.Conv1d(8, 8, 3)  # a 3-D weight not led by the expert count

    with pytest.raises(FrontendError, match=r"expert layer Bank \(bank\) holds its experts in a layout"):
        refuse_unreached(Model(), parse("fp8-rowwise"))
    refuse_unreached(Model(), parse("kv-fp8"))  # the weights untouched: nothing to refuse


def test_the_quantised_experts_compute_each_experts_product():
    """experts_dense under fp8-blockwise-128 against float64 x @ W per expert, on experts 1..2 of 3 (a slice)."""
    import jax.numpy as jnp

    from mhlo_cost.lower.inference.hf_experts_quant import experts_dense
    from mhlo_cost.machines.precision import parse

    rng = np.random.default_rng(0)
    e, i, o, c = 3, 256, 128, 5
    w = rng.standard_normal((e, i, o))
    blocks = np.abs(w.reshape(e, i // 128, 128, o // 128, 128)).max(axis=(2, 4)) / 448.0  # (e, i/128, o/128)
    wq = w / np.repeat(np.repeat(blocks, 128, axis=1), 128, axis=2)
    p = {"w": jnp.asarray(wq, jnp.float8_e4m3fn), "w_scale": jnp.asarray(blocks, jnp.float32)}
    x = rng.standard_normal((2, c, i))
    got = np.asarray(experts_dense(p, jnp.asarray(x, jnp.float32), parse("fp8-blockwise-128"), start=1), np.float64)
    want = np.einsum("eci,eio->eco", x, w[1:])
    assert got.shape == (2, c, o)
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()  # e4m3 keeps 3 mantissa bits
    assert np.abs(got - np.einsum("eci,eio->eco", x, w[:2])).max() > np.abs(want).max()  # the right experts


def test_a_partial_last_block_of_outputs_has_a_scale_of_its_own():
    """An (in 256, out 192) linear under fp8-blockwise-128: 2 x 2 float32 block scales (the second block of outputs
    64 wide), and the product against float64 x @ W."""
    import jax.numpy as jnp

    from mhlo_cost.lower.inference.hf_quant import dense, stored_shapes
    from mhlo_cost.machines.precision import parse

    recipe = parse("fp8-blockwise-128")
    shapes = stored_shapes(256, 192, recipe, "bfloat16", bias=False)
    assert {k: (s.shape, s.dtype.name) for k, s in shapes.items()} == {
        "w": ((256, 192), "float8_e4m3fn"), "w_scale": ((2, 2), "float32")}
    rng = np.random.default_rng(1)
    w = rng.standard_normal((256, 192))
    padded = np.pad(np.abs(w), ((0, 0), (0, 64)))
    blocks = padded.reshape(2, 128, 2, 128).max(axis=(1, 3)) / 448.0
    wq = w / np.repeat(np.repeat(blocks, 128, axis=0), 128, axis=1)[:, :192]
    x = rng.standard_normal((3, 256))
    p = {"w": jnp.asarray(wq, jnp.float8_e4m3fn), "w_scale": jnp.asarray(blocks, jnp.float32)}
    got = np.asarray(dense(p, jnp.asarray(x, jnp.float32), recipe), np.float64)
    want = x @ w
    assert got.shape == (3, 192)
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


SMALL = dict(num_hidden_layers=1, hidden_size=C, vocab_size=V, num_attention_heads=2, num_key_value_heads=1)


@pytest.mark.parametrize("cls, config, sets, experts, f, bias", [
    # gpt-oss: (E, in, out) weights with a bias a projection (kept bf16)
    ("GptOssForCausalLM", "gpt_oss", dict(SMALL, head_dim=128, intermediate_size=128, num_local_experts=4,
                                          num_experts_per_tok=2, sliding_window=8), 4, 128, True),
    # Llama 4: its own expert layer (Llama4TextExperts), routed by its holder
    ("Llama4ForCausalLM", "llama4_text", dict(SMALL, head_dim=128, intermediate_size=128, intermediate_size_mlp=256,
                                              num_local_experts=4, num_experts_per_tok=2), 4, 128, False),
    ("OlmoeForCausalLM", "olmoe", dict(SMALL, intermediate_size=128, num_experts=8, num_experts_per_tok=2), 8, 128,
     False),
])
def test_other_expert_layers_take_the_recipe(cls, config, sets, experts, f, bias):
    """fp8-rowwise experts of gpt-oss, Llama 4 and OLMoE: e4m3 weights and a float32 scale per output channel (and
    gpt-oss's bf16 biases); the fp8 FLOPs of the experts are the routed copies' (batch x 2 rows)."""
    batch = 4
    step = _step("fp8-rowwise", cls, config, tuple(sets.items()), batch)
    rowwise = lambda i, o: i * o + 4 * o  # noqa: E731
    biases = experts * (2 * f + C) * 2 if bias else 0
    assert step.lowered.info["expert_weight_bytes"] == experts * (rowwise(C, 2 * f) + rowwise(f, C)) + biases
    rows = [r for r in analyze(step.lowered.text).rows if r.kind == "dot" and "/experts/" in r.scope + "/"]
    assert rows and all(r.operands[0].dtype == "f8E4M3FN" for r in rows)
    assert sum(r.cost.gemm_flops * r.multiplicity for r in rows) == batch * 2 * (2 * C * 2 * f + 2 * f * C)
