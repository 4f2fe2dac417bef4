"""Transformer Engine's kept fp8 weight copies (``fp8_weight_cache``, :mod:`mhlo_cost.studies.plan.fp8_weights`) in
memory per GPU (a row-wise and a column-wise fp8 copy of every linear's weight: 2 bytes an element), and the MoE
experts' grouped GEMM weights cast once a step as the dense linears' are (TEGroupedLinear's is_first_microbatch),
against closed forms worked out here."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.memory import memory

H = 64
TINY = dict(layers=4, hidden=H, heads=4, seq=32, vocab=128, global_batch=8)
ZERO = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
#: TE's scaling state per fp8 GEMM weight (4 a layer: qkv, proj, fc1, fc2), delayed scaling with TE's default history
#: of 1024 (base.py set_meta_tensor: 3 + 2 quantizers, fp8.py DelayedScalingRecipeState: scale + amax_history fp32)
#: and the kept copy's scale_inv (float8_tensor.py): tests/test_train_plan_fp8_state.py
STATE = 5 * 4 * (1 + 1024) + 4
COST = LayerCost("k", "chip", dict(ZERO), dict(ZERO), {"forward": 1e-3, "backward": 2e-3, "recompute": 0.0,
                                                        "optimizer": 0.0}, weight_elems=1000, weight_bytes=2000)


@pytest.mark.parametrize("kw, per_layer, linears", [
    (dict(), 12 * H * H, 4),  # GPT: qkv 3h^2, projection h^2, fc1 and fc2 4h^2 each
    (dict(t=2, sp=True), 12 * H * H // 2, 4),  # each tensor rank holds 1/t of every linear
    (dict(arch="llama", mlp_kind="swiglu", ffn=96, kv_heads=2),  # q h^2, k v h x 2 x 16 each, o h^2, 3 h x 96
     H * H + 2 * H * 2 * 16 + H * H + 3 * H * 96, 5),  # (q, k, v one fused linear here; fc1, gate, fc2)
])
def test_kept_copies_are_two_bytes_per_linear_weight(kw, per_layer, linears):
    """4 layers on one stage: the cache adds 2 x 4 x (the layer's linear weight elements) bytes to weights (and the
    total), given apart as fp8_weight_copies; no such bytes without the cache or under bf16."""
    cfg = ScaleConfig(**TINY, precision="fp8-tensorwise", **kw)
    off, on = memory(cfg, COST), memory(cfg.with_split(fp8_weight_cache=True), COST)
    assert on["fp8_weight_copies"] == 2 * 4 * per_layer
    assert on["weights"] - off["weights"] == 2 * 4 * per_layer + 4 * 4 * STATE  # (+ TE's scales: .fp8_state)
    # (off: torchao eab345c's tensorwise Float8Linear, whose per-micro-batch saved fp8 weights TE's cached layer does
    # not hold: 4 layers x one micro-batch each (p = 1) x (1 byte a linear weight element + a 4-byte scale a linear))
    saved = 4 * (per_layer + 4 * linears)
    assert off["fp8_saved_weights"] == saved
    assert on["total"] - off["total"] == 2 * 4 * per_layer + 4 * 4 * STATE - saved
    assert "fp8_weight_copies" not in off
    assert memory(cfg.with_split(precision="bf16", fp8_weight_cache=True), COST) == memory(
        cfg.with_split(precision="bf16"), COST)


def test_a_stage_keeps_its_own_layers_copies():
    """Two stages of 3 and 1 layers (uneven): each keeps its own layers' copies (3 and 1 x 12 h^2 x 2)."""
    cfg = ScaleConfig(**TINY, p=2, first_stage_layers=3, last_stage_layers=1, precision="fp8-rowwise",
                      fp8_weight_cache=True)
    assert [memory(cfg, COST, stage=s)["fp8_weight_copies"] for s in (0, 1)] == [3 * 24 * H * H, 1 * 24 * H * H]


MOE = dict(layers=4, hidden=H, heads=4, seq=32, vocab=128, ffn=256, mlp_kind="swiglu", dropout=False, experts=8,
           top_k=2, expert_ffn=32, shared_experts=1, dense_layers=1, ep=4, d=8, global_batch=16,
           precision="fp8-tensorwise")


def test_moe_experts_cast_once_a_step_and_their_copies_are_kept():
    """A MoE of 1 dense and 3 MoE layers on one stage, 2 micro-batches: with the cache the step is shorter by one
    micro-batch's weight casts of every layer (each micro-batch's leave, the step makes them once): the dense
    layer's, the bases' and the routed experts' (TEGroupedLinear); memory keeps 2 bytes per fp8 weight element: the
    dense layer's 4h^2 + 3 h ffn, each base's 4h^2 + 3 h 32 (its shared expert), each MoE layer's 2 local experts'
    3 h 32 (the router stays bf16)."""
    from mhlo_cost.studies.plan.plan import plan

    dgx = resolve_profile("dgx-h100")
    cfg = ScaleConfig(**MOE)
    off, on = plan(cfg, dgx), plan(cfg.with_split(fp8_weight_cache=True), dgx)
    costs = on.moe
    assert costs.experts.weight_cast_s["forward"] > 0 and costs.experts.weight_cast_s["backward"] > 0

    def casts(c):
        return c.weight_cast_s["forward"] + c.weight_cast_s["backward"]

    m = cfg.micro_batches
    assert m == 2
    every = casts(costs.dense) + 3 * (casts(costs.base) + casts(costs.experts))
    assert on.iteration.total - off.iteration.total == pytest.approx(-(m - 1) * every, rel=1e-9)
    dense, base, experts = 4 * H * H + 3 * H * 256, 4 * H * H + 3 * H * 32, 2 * 3 * H * 32
    assert on.memory["fp8_weight_copies"] == 2 * (dense + 3 * (base + experts))
    gemms = 4 + 3 * (4 + 2 * 2)  # the dense layer's and each base's 4 TE linears, 2 local experts' fc1 and fc2
    assert on.memory["fp8_scale_state"] == gemms * STATE
    assert on.memory["weights"] - off.memory["weights"] == 2 * (dense + 3 * (base + experts)) + gemms * STATE
