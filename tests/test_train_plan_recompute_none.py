"""No recompute means no recompute (:mod:`mhlo_cost.studies.plan.recompute`): under ``recompute="none"`` the layer's
step is its forward and the backward of its gradients only, whatever JAX's remat leaves in the program's recompute
phase (the norms' statistics, the GELU's tanh: arithmetic TE's and PyTorch's backward kernels do inline), against
closed forms worked out here."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost, analyse_layer

SELENE = resolve_profile("selene")
B, S, H, L = 2, 32, 64, 4
TINY = dict(layers=L, hidden=H, heads=4, seq=S, vocab=128, micro_batch=B, dropout=False)


def _fake(rec: float = 5e-4) -> LayerCost:
    """A layer of 1 ms forward, 2 ms backward and ``rec`` seconds in its program's recompute phase."""
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": 1e-3, "backward": 2e-3, "recompute": rec, "optimizer": 0.0},
                     weight_elems=1000, weight_bytes=2000)


def test_none_charges_no_recompute_and_op_keeps_the_programs():
    """8 micro-batches of 4 layers on one stage: ``none`` takes nothing of the program's 0.5 ms recompute phase (the
    same iteration as a program without one), torchtitan's ``op`` all of it (8 x 4 x 0.5 ms)."""
    cfg = ScaleConfig(**TINY, global_batch=8 * B)
    none, bare = compose(cfg, _fake(), SELENE), compose(cfg, _fake(0.0), SELENE)
    assert none.compute["recompute"] == 0.0
    assert none.total == bare.total
    op = cfg.with_split(recompute="op")
    assert compose(op, _fake(), SELENE).compute["recompute"] == pytest.approx(8 * L * 5e-4, rel=1e-12)
    assert compose(cfg.with_split(recompute="full"), _fake(), SELENE).compute["recompute"] == pytest.approx(
        8 * L * 1e-3, rel=1e-12)  # full: the whole forward again


def test_lowered_layer_backward_is_the_gradients_only():
    """The GPT layer lowered at b 2, s 32, h 64 (MLP 4h, unfused attention, no dropout), recompute none: its forward
    GEMMs are 2 b s 12 h^2 (QKV 3h^2, projection h^2, fc1 and fc2 4h^2 each) + 4 b s^2 h (scores and values), its
    backward exactly twice that (dgrad and wgrad of every linear, four attention GEMMs), nothing recomputed; the
    program does hold remat'd rows (their seconds > 0), which the plan charges nothing: recompute 0, hardware FLOPs
    = model FLOPs."""
    cfg = ScaleConfig(**TINY, global_batch=4 * B, attention="unfused")
    cost = analyse_layer(cfg, SELENE)
    fwd = 2 * B * S * 12 * H * H + 4 * B * S * S * H
    assert cost.gemm_flops["forward"] == fwd
    assert cost.gemm_flops["backward"] == 2 * fwd
    assert cost.gemm_flops["recompute"] == 0
    assert cost.time_s["recompute"] > 0  # JAX's remat of the unnamed intermediates
    it = compose(cfg, cost, SELENE)
    assert it.compute["recompute"] == 0.0
    assert it.compute["backward"] == pytest.approx(4 * L * cost.time_s["backward"], rel=1e-12)
    assert it.counts["hardware_flops"] == it.counts["model_flops"]


def test_model_with_its_own_layer_keeps_its_recompute():
    """A model that lowers its own layer (STDiT3's, ``lower_layer``) keeps its program's recompute phase under
    ``none`` (there the remat'd rows are the flash attention's remade scores)."""
    from mhlo_cost.studies.plan.recompute import recompute_seconds

    class Own:
        recompute = "none"

        def lower_layer(self):
            return ""

    assert recompute_seconds(Own(), {"forward": 1.0, "recompute": 0.25}) == 0.25
    assert recompute_seconds(ScaleConfig(**TINY, global_batch=B), {"forward": 1.0, "recompute": 0.25}) == 0.0


def test_selective_reruns_the_core_attentions_forward():
    """Megatron-Core's selective recompute re-runs the core attention module's forward, fused kernel or not
    (Korthikanti section 4.2; attention.py ``_checkpointed_attention_forward``): with the attention's forward 0.3 ms
    (scope core), 8 micro-batches of 4 layers recompute 8 x 4 x 0.3 ms, whatever the program's recompute phase holds
    (0.5 ms: its remat'd norm and GELU rows are not charged)."""
    from dataclasses import replace

    cost = replace(_fake(), core_s={"forward": 3e-4, "backward": 6e-4, "recompute": 1e-4, "optimizer": 0.0})
    cfg = ScaleConfig(**TINY, global_batch=8 * B, recompute="selective")
    fused = compose(cfg.with_split(attention="fused"), cost, SELENE)
    assert fused.compute["recompute"] == pytest.approx(8 * L * 3e-4, rel=1e-12)
    unfused = compose(cfg.with_split(attention="unfused"), cost, SELENE)
    assert unfused.compute["recompute"] == pytest.approx(8 * L * 3e-4, rel=1e-12)


def test_lowered_selective_layer_recomputes_the_attention_core_only():
    """The GPT layer lowered at b 2, s 32, h 64 with unfused attention and selective recompute: the plan charges each
    layer-micro-batch the seconds of its ``core`` scope's forward (the program's recompute phase, with its remat'd
    LayerNorm and GELU rows, is not what it charges), and its hardware FLOPs add the core's two products again,
    QK^T and the product with V: 2 x 2 b s^2 h per layer-micro-batch (Korthikanti section 4.2's recomputed
    matrix multiplies), 4 micro-batches of 4 layers."""
    cfg = ScaleConfig(**TINY, global_batch=4 * B, attention="unfused", recompute="selective")
    cost = analyse_layer(cfg, SELENE)
    assert cost.time_s["recompute"] != pytest.approx(cost.core_s["forward"], rel=1e-3)  # (else the test shows nothing)
    it = compose(cfg, cost, SELENE)
    assert it.compute["recompute"] == pytest.approx(4 * L * cost.core_s["forward"], rel=1e-12)
    assert it.counts["hardware_flops"] - it.counts["model_flops"] == 4 * L * 2 * 2 * B * S * S * H
