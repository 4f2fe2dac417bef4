"""Mixture-of-experts models from transformers' own classes (small configurations, no weights), lowered by
``mhlo-cost lower`` under the default dropless routing, against two references that are not this code:

* the closed form written out here per model (per token: attention projections, QK^T and PV, the router
  h x E, k experts x 3 GEMMs of h x f, the shared experts, the dense layers, the lm head);
* torch's FlopCounterMode on the same model with random weights and the *eager* expert implementation
  (``experts_implementation="eager"``: one ``linear`` per expert on the tokens the router really sent it,
  which FlopCounterMode sees, where it misses the grouped GEMMs of the default kernel). A dropless router
  computes tokens x k expert rows whatever it decides, so the two agree exactly, per block and per part.
"""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "transformers") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"{', '.join(_MISSING)} not installed (pip install 'mhlo-cost[models]')", allow_module_level=True)

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.analysis.collectors import assign_blocks  # noqa: E402
from mhlo_cost.lower.frontends import hub  # noqa: E402

B, T = 2, 16
N = B * T  # tokens
H, V = 64, 256  # hidden size, vocabulary
ATTN = dict(num_hidden_layers=2, hidden_size=H, vocab_size=V, num_attention_heads=4, attn_implementation="eager")
MIXTRAL = dict(ATTN, intermediate_size=128, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)
DSV3 = dict(ATTN, first_k_dense_replace=1, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=4,
            n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
            q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
QWEN2 = dict(ATTN, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
             num_key_value_heads=2, num_experts=8, num_experts_per_tok=2)
QWEN3 = dict(ATTN, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=2,
             num_experts=8, num_experts_per_tok=2)
MODELS = {"mixtral": ("MixtralForCausalLM", MIXTRAL), "deepseek_v3": ("DeepseekV3ForCausalLM", DSV3),
          "qwen2_moe": ("Qwen2MoeForCausalLM", QWEN2), "qwen3_moe": ("Qwen3MoeForCausalLM", QWEN3)}


def gqa(heads=4, kv_heads=2, hd=16):
    """q, k, v, o projections and QK^T, PV of grouped-query attention on N tokens."""
    return 2 * N * H * hd * (2 * heads + 2 * kv_heads) + 2 * 2 * B * heads * T * T * hd


def mla(heads=4, q_rank=32, kv_rank=16, nope=16, rope=8, v=16):
    """DeepSeek's multi-head latent attention: q down / up, kv down (with the shared rope key) / up, o; QK^T
    over nope + rope, PV over v."""
    proj = H * q_rank + q_rank * heads * (nope + rope) + H * (kv_rank + rope) + kv_rank * heads * (nope + v) \
        + heads * v * H
    return 2 * N * proj + 2 * B * heads * T * T * (nope + rope) + 2 * B * heads * T * T * v


def mlp(f):
    return 3 * 2 * N * H * f  # gate, up, down


def routed(experts, k, f):
    """(router, experts): the router's h x E product, and k experts of 3 GEMMs h x f per token."""
    return 2 * N * H * experts, k * mlp(f)


# model -> per-layer {part: GEMM FLOPs} closed forms, the lm head
def closed_forms():
    mix_router, mix_experts = routed(4, 2, 128)
    ds_router, ds_experts = routed(8, 2, 32)
    q_router, q_experts = routed(8, 2, 32)
    return {
        "mixtral": [{"self_attn": gqa(), "router": mix_router, "experts": mix_experts}] * 2,
        "deepseek_v3": [{"self_attn": mla(), "mlp": mlp(128)},
                        {"self_attn": mla(), "router": ds_router, "experts": ds_experts, "shared_experts": mlp(32)}],
        # Qwen2-MoE's shared expert has a sigmoid gate: a 1-wide h x 1 product per token
        "qwen2_moe": [{"self_attn": gqa(), "router": q_router, "experts": q_experts,
                       "shared_experts": mlp(64) + 2 * N * H}] * 2,
        "qwen3_moe": [{"self_attn": gqa(), "router": q_router, "experts": q_experts}] * 2,
    }


@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    """model -> (analysis, blocks); each lowered once by ``mhlo-cost lower`` (default routing)."""
    tmp = tmp_path_factory.mktemp("moe")
    out = {}
    for key, (cls, sets) in MODELS.items():
        path = tmp / f"{key}.mlir"
        argv = ["lower", "--hf", cls, "--config", key, "--input", f"{B}x{T}:int64", "-o", str(path), "-q"]
        argv += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
        assert main(argv) == 0, key
        a = analyze(path)
        out[key] = (a, assign_blocks(a))
    return out


def flop_counter(key):
    """FlopCounterMode on the model with random weights and eager experts: per-module GEMM FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    cls_name, sets = MODELS[key]
    cls = getattr(hub.import_library("hf"), cls_name)
    cfg = hub.hf_config(cls, key, sets)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).eval()
    ids = torch.randint(0, V, (B, T))
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(ids)
    per_module = {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}
    return fc.get_total_flops(), per_module


def part_gemm(a, blocks, block: str) -> dict:
    i = [b.name for b in blocks.blocks].index(block)
    out: dict[str, int] = {}
    for r, ids, part in zip(a.rows, blocks.row_blocks, blocks.row_parts):
        if i in ids and r.gemm_flops:
            out[part] = out.get(part, 0) + r.gemm_flops
    return out


@pytest.mark.parametrize("key", list(MODELS))
def test_moe_gemm_equals_closed_form(lowered, key):
    a, blocks = lowered[key]
    layers = closed_forms()[key]
    assert [b.name for b in blocks.blocks] == ["model/layers.0", "model/layers.1"]
    for i, parts in enumerate(layers):
        assert part_gemm(a, blocks, f"model/layers.{i}") == parts, i
    assert a.summary["gemm_flops"] == sum(sum(p.values()) for p in layers) + 2 * N * H * V  # + the lm head
    assert a.summary["unknown_ops"] == 0


@pytest.mark.parametrize("key", list(MODELS))
def test_moe_gemm_equals_flop_counter_with_eager_experts(lowered, key):
    a, blocks = lowered[key]
    total, per_module = flop_counter(key)
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] - total == 0
    for layer in (0, 1):
        name = f"model/layers.{layer}"
        parts = part_gemm(a, blocks, name)
        assert sum(parts.values()) == per_module[f"model.layers.{layer}"]
        mod = f"model.layers.{layer}.mlp"
        if "router" in parts:
            assert parts["router"] == per_module[f"{mod}.gate"]
            assert parts["experts"] == per_module[f"{mod}.experts"]
        if "shared_experts" in parts:
            shared = sum(v for k, v in per_module.items() if k.startswith(f"{mod}.shared_expert")
                         and k.count(".") == mod.count(".") + 1)
            assert parts["shared_experts"] == shared


def test_moe_experts_run_as_batched_gemms_of_even_loads(lowered):
    """Each expert projection is one dot_general with the experts as batch dimension and tokens x k / E rows
    each (Mixtral: 32 tokens x top-2 over 4 experts: 16 rows), under the routing's scope."""
    a, _ = lowered["mixtral"]
    rows = [r for r in a.rows if r.op.endswith("dot_general") and "/experts/" in r.scope]
    assert len(rows) == 4  # gate_up_proj and down_proj of two layers
    for r in rows:
        assert "/experts/dropless/" in r.scope
        assert tuple(r.result.shape[:2]) == (4, 16), r.result
