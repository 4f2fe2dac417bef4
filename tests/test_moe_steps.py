"""Mixture-of-experts inference steps (``lower --decode`` / ``--prefill``, ``serve``) and Llama 4's routed experts,
on transformers' own classes at small configurations (no weights). The expert layers run the static dispatch of
:mod:`mhlo_cost.lower.frontends.moe` as the forward does, so every expected expert GEMM count is the routed
closed form worked out here from the configuration: rows x (2 h 2f + 2 f h) for a gated (SwiGLU-style) expert
of hidden size h and expert width f, its ``gate_up_proj`` h x 2f and its ``down_proj`` f x h, where rows is
tokens x k under dropless routing and E x ceil(F tokens k / E) under a capacity factor F. Llama 4's library
experts, which run every expert on every token, are measured by torch's FlopCounterMode on real tensors."""
from __future__ import annotations

import importlib.util
import json
import math

import pytest

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "transformers") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"{', '.join(_MISSING)} not installed (pip install 'mhlo-cost[models]')", allow_module_level=True)

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.analysis.collectors import assign_blocks  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.lower.frontends import hub  # noqa: E402

from stderr_lines import error_line  # noqa: E402

H, V, LAYERS = 64, 256, 2  # hidden size, vocabulary, decoder layers
ATTN = dict(num_hidden_layers=LAYERS, hidden_size=H, vocab_size=V, num_attention_heads=4, num_key_value_heads=2)
# model type -> (class, configuration, experts E, top-k, expert width f, layers with experts)
MODELS = {
    "olmoe": ("OlmoeForCausalLM", dict(ATTN, intermediate_size=32, num_experts=8, num_experts_per_tok=2), 8, 2, 32, 2),
    "gpt_oss": ("GptOssForCausalLM", dict(ATTN, head_dim=16, intermediate_size=32, num_local_experts=4,
                                          num_experts_per_tok=2, sliding_window=8), 4, 2, 32, 2),
    "qwen2_moe": ("Qwen2MoeForCausalLM", dict(ATTN, intermediate_size=128, moe_intermediate_size=32,
                                              shared_expert_intermediate_size=64, num_experts=8,
                                              num_experts_per_tok=2), 8, 2, 32, 2),
    "qwen3_moe": ("Qwen3MoeForCausalLM", dict(ATTN, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                                              num_experts_per_tok=2), 8, 2, 32, 2),
    "mixtral": ("MixtralForCausalLM", dict(ATTN, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2),
                4, 2, 128, 2),
    "deepseek_v3": ("DeepseekV3ForCausalLM", dict(ATTN, first_k_dense_replace=1, intermediate_size=128,
                                                  moe_intermediate_size=32, num_key_value_heads=4, n_routed_experts=8,
                                                  num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
                                                  q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                                                  qk_rope_head_dim=8, v_head_dim=16), 8, 2, 32, 1),
    # Llama 4's text model: every layer a mixture (interleave step 1), one expert per token, a shared expert of
    # the same width as the routed ones
    "llama4_text": ("Llama4ForCausalLM", dict(ATTN, head_dim=16, intermediate_size=32, intermediate_size_mlp=64,
                                              num_local_experts=4, num_experts_per_tok=1), 4, 1, 32, 2),
}


def argv_of(key: str) -> list[str]:
    cls, sets, *_ = MODELS[key]
    return ["--hf", cls, "--config", key] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def expert_row(f: int) -> int:
    """GEMM FLOPs of one token copy through a gated expert: gate_up_proj (h x 2f), then down_proj (f x h)."""
    return 2 * H * 2 * f + 2 * f * H


def routed(key: str, tokens: int, capacity: float | None = None) -> int:
    """The expert GEMM FLOPs of ``tokens`` tokens through every expert layer of ``key``: tokens x k rows
    (dropless), or E x ceil(F x tokens x k / E) rows with a capacity factor F."""
    _, _, e, k, f, layers = MODELS[key]
    rows = tokens * k if capacity is None else e * math.ceil(capacity * tokens * k / e)
    return layers * rows * expert_row(f)


def expert_gemm(a) -> int:
    return sum(r.gemm_flops for r in a.rows if "/experts/" in r.scope)


def lower(tmp_path, capsys, key: str, *step: str) -> tuple[object, str]:
    """``mhlo-cost lower`` of ``key`` with the ``step`` options: (its analysis, its stderr)."""
    path = tmp_path / f"{key}.mlir"
    assert main(["lower", *argv_of(key), *step, "-o", str(path)]) == 0, key
    return analyze(path), capsys.readouterr().err


@pytest.mark.parametrize("key", list(MODELS))
def test_decode_step_experts_count_the_routed_closed_form(tmp_path, capsys, key):
    """One decode step of 4 sequences: 4 tokens, each to k experts, as batched GEMMs under the routing's scope;
    nothing unknown (no aten::_grouped_mm left), and the routing line says the loads."""
    a, err = lower(tmp_path, capsys, key, "--decode", "--batch", "4", "--context", "32")
    assert expert_gemm(a) == routed(key, 4)
    assert a.summary["unknown_ops"] == 0
    _, _, e, k, *_ = MODELS[key]
    assert "mixture of experts, routing dropless (dropless top-k, token copies spread evenly over the experts)" in err
    assert f"4 tokens x top-{k} over {e} experts" in err
    assert all("/experts/dropless/" in r.scope for r in a.rows if "/experts/" in r.scope and r.gemm_flops)


@pytest.mark.parametrize("key, step, tokens, capacity", [
    # 1 x 5 prompt tokens x top-2 = 10 copies over 4 experts: 2 each and one more for the first two
    ("gpt_oss", ("--prefill", "--tokens", "5", "--context", "16"), 5, None),
    # 2 x 16 tokens x top-2 = 64 copies over 8 experts at capacity 1.25: ceil(1.25 x 64 / 8) = 10 rows each
    ("qwen2_moe", ("--prefill", "--batch", "2", "--tokens", "16", "--context", "32", "--routing", "capacity:1.25"),
     32, 1.25),
    ("llama4_text", ("--prefill", "--batch", "2", "--tokens", "8", "--context", "16"), 16, None),
])
def test_prefill_experts_count_the_routed_closed_form(tmp_path, capsys, key, step, tokens, capacity):
    a, err = lower(tmp_path, capsys, key, *step)
    assert expert_gemm(a) == routed(key, tokens, capacity)
    assert a.summary["unknown_ops"] == 0
    assert f"routing {'dropless' if capacity is None else 'capacity:1.25'} (" in err


def test_serve_reports_a_moe_decode_step(capsys):
    """OLMoE's decode step on an H100: the KV cache in closed form (layers x K and V x batch x kv heads x context x
    head dim x 2 bytes of bfloat16), a step time, and the routing with its loads."""
    assert main(["serve", *argv_of("olmoe"), "--decode", "--batch", "4", "--context", "64", "--format", "json",
                 "--no-cache", "-q"]) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    assert d["kv_cache_bytes"] == LAYERS * 2 * 4 * 2 * 64 * (H // 4) * 2
    assert d["step_time_s"] > 0 and d["tokens_per_s"] == pytest.approx(4 / d["step_time_s"])
    assert d["routing"] == "dropless" and d["expert_layers"] == 2 and d["dropped_copies"] == 0
    assert d["expert_loads"] == "4 tokens x top-2 over 8 experts: 1 per expert, 0 dropped"


def test_serve_takes_a_capacity_routing(capsys):
    """A capacity factor of 2 on one decode token of OLMoE: 2 copies over 8 experts, ceil(2 x 2 / 8) = 1 row
    computed by each expert, as the table says."""
    assert main(["serve", *argv_of("olmoe"), "--decode", "--context", "16", "--routing", "capacity:2",
                 "--format", "json", "--no-cache", "-q"]) == 0
    d = json.loads(capsys.readouterr().out)["summary"]
    assert d["routing"] == "capacity:2"
    assert d["expert_loads"] == "1 tokens x top-2 over 8 experts: 0-1 per expert, 1 rows computed per expert " \
                                "(capacity), 0 dropped"


@pytest.mark.parametrize("argv, words", [
    (["lower", "--model", "gpt", "--decode", "--routing", "dropless"], "--routing applies to mixture-of-experts"),
    (["serve", "--model", "gpt", "--decode", "--routing", "dropless"], "--routing applies to mixture-of-experts"),
    (["serve", *argv_of("olmoe"), "--decode", "--routing", "top3"], "unknown routing 'top3'"),
])
def test_bad_step_routing_is_one_error_line(capsys, argv, words):
    assert main(argv) == 2
    assert words in error_line(capsys.readouterr().err)


def test_step_routing_on_a_model_without_experts_is_refused(capsys):
    sets = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=64)
    argv = ["serve", "--hf", "LlamaForCausalLM", "--config", "llama", "--decode", "--context", "16", "--no-cache",
            "--routing", "capacity:2"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 2
    assert "LlamaForCausalLM has no expert layer" in error_line(capsys.readouterr().err)


# -- Llama 4's forward ------------------------------------------------------------------------------------------

B, T = 2, 16
N = B * T


def library_expert_flops() -> int:
    """FlopCounterMode on Llama 4's own expert layer (random weights, real tensors): every expert on every
    token, summed over the layers."""
    from torch.utils.flop_counter import FlopCounterMode

    cls_name, sets, *_ = MODELS["llama4_text"]
    cls = getattr(hub.import_library("hf"), cls_name)
    cfg = hub.hf_config(cls, "llama4_text", dict(sets, attn_implementation="eager"))
    torch.manual_seed(0)
    model = cls(cfg).eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(torch.randint(0, V, (B, T)))
    counts = fc.get_flop_counts()
    return sum(sum(counts[f"{cls_name}.model.layers.{i}.feed_forward.experts"].values()) for i in range(LAYERS))


def test_llama4_forward_experts_count_the_routed_closed_form(tmp_path, capsys):
    """32 tokens, top-1 of 4 experts: the experts compute 32 rows per layer, where the library's module
    computes 4 x 32 (FlopCounterMode: E / k = 4 times the routed work); the router (h x E per token) and the
    shared expert (3 GEMMs h x f per token) as the library runs them; the routing line printed."""
    a, err = lower(tmp_path, capsys, "llama4_text", "--input", f"{B}x{T}:int64")
    _, _, e, k, f, layers = MODELS["llama4_text"]
    assert expert_gemm(a) == routed("llama4_text", N) == layers * N * k * 3 * 2 * H * f
    assert library_expert_flops() == e // k * expert_gemm(a)
    assert "mixture of experts, routing dropless" in err and "32 tokens x top-1 over 4 experts: 8 per expert" in err
    blocks = assign_blocks(a)
    assert [b.name for b in blocks.blocks] == ["model/layers.0", "model/layers.1"]
    parts: dict[str, int] = {}
    for r, part in zip(a.rows, blocks.row_parts):
        if r.gemm_flops:
            parts[part] = parts.get(part, 0) + r.gemm_flops
    assert parts["router"] == layers * 2 * N * H * e
    assert parts["experts"] == expert_gemm(a)
    assert parts["shared_experts"] == layers * 3 * 2 * N * H * f
    assert parts[""] == 2 * N * H * V  # the lm head


def test_llama4_forward_takes_a_capacity_routing(tmp_path, capsys):
    """Capacity 1.5: ceil(1.5 x 32 x 1 / 4) = 12 rows per expert, 48 per layer, none dropped."""
    a, err = lower(tmp_path, capsys, "llama4_text", "--input", f"{B}x{T}:int64", "--routing", "capacity:1.5")
    assert expert_gemm(a) == routed("llama4_text", N, 1.5) == 2 * 48 * expert_row(32)
    assert "routing capacity:1.5" in err and "12 rows computed per expert (capacity)" in err


# -- training steps -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, capacity", [("olmoe", 1.25), ("llama4_text", None)])
def test_training_step_experts_count_three_routed_forwards(tmp_path, capsys, key, capacity):
    """--train: each expert GEMM of the forward (rows x in -> out) has two of the same size in the backward,
    the input's gradient (rows x out -> in) and the weight's (in x rows -> out): three times the routed closed
    form of 2 x 16 tokens (OLMoE at capacity 1.25: ceil(1.25 x 32 x 2 / 8) = 10 rows per expert)."""
    routing = ("--routing", f"capacity:{capacity}") if capacity else ()
    a, err = lower(tmp_path, capsys, key, "--input", f"{B}x{T}:int64", "--train", *routing)
    assert expert_gemm(a) == 3 * routed(key, N, capacity)
    assert a.summary["unknown_ops"] == 0
    assert f"routing {'capacity:1.25' if capacity else 'dropless'} (" in err


# -- expert layers the static routing does not know ----------------------------------------------------------


class DenseExperts(torch.nn.Module):
    """Named like an expert layer, but not one the static routing knows (as DBRX's or JetMoE's)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4, 8, 8))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = DenseExperts()
        self.shared = type("FooSharedExperts", (torch.nn.Module,), {})()


def test_unrouted_expert_layers_are_named_never_passed_over():
    from mhlo_cost.lower.frontends import FrontendError
    from mhlo_cost.lower.frontends.moe import Routing, unrouted, wrap

    block = Block()
    assert unrouted(block) == [("experts", "DenseExperts")]  # shared experts are dense by design
    info: dict = {}
    assert wrap(lambda x: x + 1, block, None, info)(1) == 2
    assert info["unrouted"] == ["DenseExperts (experts)"]

    def fails(x):
        raise ValueError("data-dependent shape\nmore")

    with pytest.raises(FrontendError, match=r"Block: its expert layers DenseExperts \(experts\) are not ones "
                                            r"mhlo-cost routes .* ValueError: data-dependent shape \("):
        wrap(fails, block, None, {})(1)
    with pytest.raises(FrontendError, match=r"Block's \(DenseExperts\) are not among them"):
        wrap(fails, block, Routing(), {})


def test_a_model_whose_experts_escape_is_one_error_line(tmp_path, capsys):
    """JetMoE's experts (JetMoeParallelExperts) dispatch by data-dependent shapes: one line that names them."""
    sets = dict(num_hidden_layers=2, hidden_size=64, vocab_size=256, num_attention_heads=4)
    argv = ["lower", "--hf", "JetMoeForCausalLM", "--config", "jetmoe", "--input", "2x16:int64",
            "-o", str(tmp_path / "j.mlir")] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 2
    line = error_line(capsys.readouterr().err)
    assert "JetMoeForCausalLM: its expert layers JetMoeParallelExperts (model.layers.0.mlp.input_linear and" in line
