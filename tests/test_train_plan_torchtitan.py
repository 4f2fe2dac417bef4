"""train-plan as torchtitan runs a step: its selective op activation checkpointing (``recompute="op"``: every second
linear's output recomputed, torchtitan's ``_save_list`` policy) and the execution model of the step (``execution``:
PyTorch eager or torch.compile beside the fused kernels). Expected figures are closed forms worked out here: the
recomputed GEMMs' FLOPs and the bytes kept, from the layer's shapes."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer

H100 = resolve_profile("dgx-h100")
# a Llama-shaped layer: grouped-query attention (2 key/value heads of 4) and a SwiGLU MLP
B, S, H, A, KV, F = 2, 64, 128, 4, 2, 384
D = H // A
LLAMA = dict(layers=2, hidden=H, heads=A, kv_heads=KV, ffn=F, seq=S, vocab=256, mlp_kind="swiglu",
             micro_batch=B, global_batch=B, dropout=False, attention="fused")


def _cost(**kw):
    return analyse_layer(ScaleConfig(**{**LLAMA, **kw}), H100)


def test_the_op_policy_recomputes_wk_wo_and_the_gate_and_keeps_the_rest():
    sel, op = _cost(recompute="selective"), _cost(recompute="op")
    scores = 2 * B * A * S * S * D  # the attention's q k^T, recomputed under either policy (the backward's P)
    assert sel.gemm_flops["recompute"] == scores
    # torchtitan's order wq, wk, wv, wo, w1, w3, w2: the 2nd, 4th, 6th (wk, wo and one of the MLP's h x ffn) again
    assert op.gemm_flops["recompute"] == scores + 2 * B * S * (H * KV * D + H * H + H * F)
    assert op.gemm_flops["forward"] == sel.gemm_flops["forward"]
    assert op.gemm_flops["backward"] == sel.gemm_flops["backward"]
    assert op.weight_elems == sel.weight_elems  # three projections for one: the same weights


def test_the_op_policy_keeps_q_v_the_attention_output_and_one_mlp_input():
    op = _cost(recompute="op")
    # bf16: wq's output (b s h), wv's (b s kv d), the SDPA output (b s h), fc1's (b s ffn); w2's output, which the
    # backward never reads, is not kept by the program (torchtitan keeps it: b s h more)
    assert op.saved_bytes == 2 * B * S * (H + KV * D + H + F)
    assert op.saved_bytes < _cost(recompute="selective").saved_bytes


def test_the_op_policy_is_a_recompute_choice_and_changes_the_layer_key():
    cfg = ScaleConfig(**LLAMA, recompute="op")
    assert cfg.invalid() is None
    assert cfg.layer_key() != ScaleConfig(**LLAMA, recompute="selective").layer_key()
    assert "one of" in ScaleConfig(**LLAMA, recompute="ops").invalid()


def test_eager_and_compiled_steps_count_the_same_flops_and_eager_is_slower():
    comp, eager = _cost(recompute="op"), _cost(recompute="op", execution="eager")
    assert eager.gemm_flops == comp.gemm_flops and eager.vector_flops == comp.vector_flops
    assert eager.saved_bytes == comp.saved_bytes
    # one kernel per framework op (each elementwise op a round trip through memory, a launch each) against fused
    assert eager.time_s["forward"] > comp.time_s["forward"]
    assert eager.time_s["backward"] > comp.time_s["backward"]


def test_the_execution_is_checked_keyed_and_labelled():
    base = ScaleConfig(**LLAMA)
    assert base.execution == "compiled"
    eager = ScaleConfig(**LLAMA, execution="eager")
    assert eager.invalid() is None and eager.layer_key() != base.layer_key()
    assert eager.layer_key()[:len(base.layer_key())] == base.layer_key()  # (compiled keys unchanged)
    assert eager.label().endswith(" eager") and "eager" not in base.label()
    assert "execution must be one of" in ScaleConfig(**LLAMA, execution="jit").invalid()
    unfused = ScaleConfig(**{**LLAMA, "attention": "unfused"}, execution="inductor")
    assert "needs fused attention" in unfused.invalid()


ARGS = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "--global-batch", "8", "--format", "json"]


def test_command_options(capsys):
    assert main(ARGS + ["--attention", "fused", "--execution", "eager", "--recompute", "op"]) == 0
    row = json.loads(capsys.readouterr().out)["config"]
    assert (row["execution"], row["recompute"]) == ("eager", "op")
    assert main(ARGS) == 0
    assert "execution" not in json.loads(capsys.readouterr().out)["config"]  # default rows unchanged
    assert main(ARGS + ["--execution", "eager"]) == 2  # eager runs the attention as an SDPA call: fused only
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and err.count("\n") == 1
