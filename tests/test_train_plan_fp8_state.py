"""Transformer Engine's fp8 scaling state in memory per GPU (:mod:`mhlo_cost.studies.plan.fp8_state`) and what
each stack keeps of its fp8 weights under FSDP (:mod:`mhlo_cost.studies.plan.fp8_weights`), against closed forms
worked out here from the frameworks' code:

* TE at 006257e: each fp8 GEMM has 3 forward and 2 backward quantizers (module/base.py ``set_meta_tensor``); under
  delayed scaling each holds a fp32 scale and a fp32 amax history of the recipe's length (fp8.py
  ``DelayedScalingRecipeState``), under current scaling a fp32 scale and amax (float8_tensor.py
  ``Float8CurrentScalingQuantizer``); the kept weight copy holds one fp32 scale_inv;
* TE's kept copies are the module's, per tensor-parallel shard, whole over the data-parallel group at any ZeRO stage;
* torchao's fp8 all-gather under FSDP gathers the fp8 linears' weights as uint8 (fsdp_utils.py
  ``fsdp_post_all_gather``): the gathered layers' linear weights at 1 byte instead of bf16's 2."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.memory import memory

H, L = 64, 4
TINY = dict(layers=L, hidden=H, heads=4, seq=32, vocab=128, global_batch=64, precision="fp8-tensorwise")
ZERO = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
LINEAR = 12 * H * H  # a GPT layer's linear weights: qkv 3h^2, projection h^2, fc1 and fc2 4h^2 each
OTHER = 4 * H + 3 * H + H + 4 * H + H  # two LayerNorms' scale and bias, the four linears' biases
COST = LayerCost("k", "chip", dict(ZERO), dict(ZERO), {"forward": 1e-3, "backward": 2e-3, "recompute": 0.0,
                                                        "optimizer": 0.0},
                 weight_elems=LINEAR + OTHER, weight_bytes=2 * (LINEAR + OTHER))


@pytest.mark.parametrize("history, per_quantizer", [(1024, 4 + 4 * 1024), (16, 4 + 4 * 16), (1, 8)])
def test_te_scale_state_per_gemm(history, per_quantizer):
    """4 layers of 4 TE linears each (qkv, proj, fc1, fc2: one GEMM each): 16 x (5 quantizers x (scale + history)
    + the copy's scale_inv) bytes, counted in weights; history 1 is current scaling's scale and amax (8 bytes)."""
    cfg = ScaleConfig(**TINY, fp8_weight_cache=True, fp8_amax_history=history)
    m = memory(cfg, COST)
    assert m["fp8_scale_state"] == L * 4 * (5 * per_quantizer + 4)
    plain = memory(cfg.with_split(fp8_weight_cache=False), COST)
    assert m["weights"] - plain["weights"] == 2 * L * LINEAR + m["fp8_scale_state"]
    assert "fp8_scale_state" not in plain  # torchao's dynamic scaling keeps none between uses


def test_llama_counts_megatrons_four_te_linears():
    """A SwiGLU layer with grouped-query attention is still 4 TE modules in Megatron-Core (linear_qkv; linear_fc1
    holds the gate and up projections): 4 x 4 x (5 x 4 x 1025 + 4) bytes for 4 layers."""
    cfg = ScaleConfig(**TINY, arch="llama", mlp_kind="swiglu", ffn=96, kv_heads=2, fp8_weight_cache=True)
    assert memory(cfg, COST)["fp8_scale_state"] == L * 4 * (5 * 4 * 1025 + 4)


@pytest.mark.parametrize("zero, d", [(1, 8), (2, 8), (3, 8), (3, 64)])
def test_te_copies_stay_whole_over_data_parallel(zero, d):
    """TE's kept copies are the modules' (per TP shard, 2 bytes a linear weight element x 4 layers) under the
    distributed optimizer and under FSDP alike: the data-parallel degree and the ZeRO stage leave them whole."""
    cfg = ScaleConfig(**TINY, d=d, zero=zero, fp8_weight_cache=True)
    assert memory(cfg, COST)["fp8_weight_copies"] == 2 * L * LINEAR


@pytest.mark.parametrize("reshard, held", [(True, 2), (False, L)])
def test_torchao_fp8_all_gather_holds_fp8_gathered_weights(reshard, held):
    """FSDP2 over 8 with torchao's fp8 all-gather: no bf16 shard is kept (the fp32 shard is the optimizer's parameter,
    cast into the all-gather: counted in the optimizer state) and the gathered layers (2 in flight; every layer with
    reshard-after-forward off) hold their linear weights at 1 byte and the rest at 2; no kept copy, no scale
    state."""
    cfg = ScaleConfig(**TINY, d=8, zero=3, fsdp_version=2, reshard_after_forward=reshard)
    on = memory(cfg.with_split(fsdp_float8_all_gather=True), COST)
    assert on["weights"] == held * (LINEAR + 2 * OTHER)
    assert memory(cfg, COST)["weights"] - on["weights"] == held * LINEAR
    assert "fp8_weight_copies" not in on


def test_fp8_state_options_are_checked():
    assert "fp8_amax_history" in ScaleConfig(**TINY, fp8_amax_history=0).invalid()
    assert "all-gather" in ScaleConfig(**dict(TINY, precision="bf16"), zero=3, d=8,
                                       fsdp_float8_all_gather=True).invalid()
    assert "all-gather" in ScaleConfig(**TINY, zero=3, d=8, fsdp_float8_all_gather=True,
                                       fp8_weight_cache=True).invalid()
    assert ScaleConfig(**TINY, zero=3, d=8, fsdp_version=2, fsdp_float8_all_gather=True).invalid() is None
    # torchao's fp8 all-gather runs through FSDP2's fsdp_pre_all_gather / fsdp_post_all_gather hooks
    assert "FSDP2" in ScaleConfig(**TINY, zero=3, d=8, fsdp_float8_all_gather=True).invalid()
    # torchao's Float8LinearConfig: enable_fsdp_float8_all_gather supports tensorwise scaling only; FSDP only
    assert "tensorwise" in ScaleConfig(**dict(TINY, precision="fp8-rowwise"), zero=3, d=8, fsdp_version=2,
                                       fsdp_float8_all_gather=True).invalid()
    assert "ZeRO 3" in ScaleConfig(**TINY, d=8, fsdp_float8_all_gather=True).invalid()


def test_amax_history_goes_with_the_weight_cache(capsys):
    from mhlo_cost.cli import main

    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--precision", "fp8-tensorwise", "--fp8-amax-history", "16"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fp8-weight-cache" in err[0]
