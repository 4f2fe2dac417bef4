"""The SMs an overlapped collective's kernel takes from the compute beside it (:mod:`mhlo_cost.studies.plan.sm_share`),
checked against closed forms worked out here: the compute runs at (S - n)/S of its rate while the collective runs
and at full rate after it; NCCL takes one SM per channel (24 on an A100 node, 16 on an H100 node: NCCL's logs),
Transformer Engine's pipelined overlap launches its GEMM on S - 16 SMs. Collective seconds are the network model's
own (:func:`mhlo_cost.network.estimate`); what is checked is how much of them the overlap leaves exposed."""
from __future__ import annotations

import pytest

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.dp_overlap import stage_exposed
from mhlo_cost.studies.plan.sm_share import chip_sms, contended, margin, nccl_sms, overlap_tax

H100 = resolve_profile("dgx-h100")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)


def _piecewise(g: float, c: float, n: int, s: int) -> float:
    """A GEMM of g seconds (on all s SMs) beside a collective of c seconds on n SMs, step by step: while the
    collective runs the GEMM gets s - n SMs, so it does c (s - n)/s of its work; the rest at full rate after."""
    done_during = c * (s - n) / s
    if g <= done_during:  # the GEMM ends first, at g s / (s - n); the pair ends with the collective
        return max(c, g * s / (s - n))
    return c + (g - done_during)


@pytest.mark.parametrize("n, s", [(16, 132), (24, 108)])
@pytest.mark.parametrize("g, c", [(1.0, 0.1), (0.1, 1.0), (0.5, 0.57), (2.0, 2.0), (0.0, 1.0), (1.0, 0.0)])
def test_a_gemm_beside_a_collective_runs_on_the_sms_left_while_it_runs(g, c, n, s):
    assert contended(g, c, n, s) == pytest.approx(_piecewise(g, c, n, s), rel=1e-12, abs=1e-15)


def test_a_short_gemm_ends_at_g_times_132_over_116_under_the_collective():
    """G = 0.5 s beside a 1 s all-gather on 16 of 132 SMs: the GEMM ends at 0.5 x 132/116 = 0.569 s, inside the
    collective, so the pair takes 1 s; a 1 s GEMM beside a 0.5 s collective: 1 + 0.5 x 16/132 s."""
    assert 0.5 * 132 / 116 < 1.0
    assert contended(0.5, 1.0, 16, 132) == 1.0
    assert contended(1.0, 0.5, 16, 132) == pytest.approx(1.0 + 0.5 * 16 / 132, rel=1e-12)
    assert overlap_tax(0.5, (16, 132)) == pytest.approx(0.5 * 16 / 132, rel=1e-12)


def test_a_pipelined_gemm_runs_on_the_sms_its_reduce_scatter_leaves():
    """TE's set_sm_margin: the whole GEMM on 132 - 16 SMs: G x 132 / 116."""
    assert margin(1.0, 16, 132) == pytest.approx(132 / 116, rel=1e-12)
    assert margin(1.0, 0, 132) == 1.0 and margin(1.0, 16, 0) == 1.0  # nothing taken, or SMs unknown


def test_the_channels_are_nccls_on_each_chip_and_unknown_ones_are_not_charged():
    assert nccl_sms(H100) == (16, 132)
    assert nccl_sms(resolve_profile("dgx-a100")) == (24, 108)
    assert chip_sms(None) == 0 and nccl_sms(None) == (0, 0)
    assert contended(1.0, 0.5, 0, 132) == 1.0 and overlap_tax(0.5, (0, 132)) == 0.0


def _fake(fwd: float, bwd: float, w: int) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=w, weight_bytes=2 * w)


def test_fsdp_layer_compute_loses_the_sms_of_its_prefetched_collectives():
    """FSDP on the 8 GPUs of one H100 node, 2 micro-batches of 4 layers of 1 s forward / 1 s backward (far longer
    than their collectives): each layer's all-gather (forward), all-gather and reduce-scatter (backward) run on
    16 of the 132 SMs, so each layer exposes 16/132 of them."""
    w = 50_000_000
    cfg = ScaleConfig(**TINY, d=8, global_batch=16, zero=3)
    group = (tuple(range(8)),)
    gather = estimate(H100.topology, "all_gather", 2 * w, group).time_s
    scatter = estimate(H100.topology, "reduce_scatter", 4 * w, group).time_s
    assert 0 < 2 * gather + scatter < 0.1
    it = compose(cfg, _fake(1.0, 1.0, w), H100)
    assert it.dp_exposed == pytest.approx(2 * 4 * (2 * gather + scatter) * 16 / 132, rel=1e-9)
    assert it.total == pytest.approx(2 * 4 * 2.0 + it.dp_exposed, rel=1e-9)


def test_the_reduction_hidden_under_the_last_backward_slows_it():
    """ZeRO 0 with dp_overlap on 8 GPUs, one stage of 4 layers of 1 s backward: the all-reduce of the fp32 gradients
    (the layers' and the untied embedding and head's, 2 x 128 x 64 elements) hides under the last micro-batch's
    backward, which runs on 116 of 132 SMs meanwhile: 16/132 of it is exposed, where without the overlap all of it
    is."""
    w = 10_000_000
    cfg = ScaleConfig(**TINY, d=8, global_batch=16)
    reduce = estimate(H100.topology, "all_reduce", 4 * (4 * w + 2 * 128 * 64), (tuple(range(8)),)).time_s
    off = compose(cfg, _fake(1.0, 1.0, w), H100)
    on = compose(cfg.with_split(dp_overlap=True), _fake(1.0, 1.0, w), H100)
    assert 0 < reduce < 1.0
    assert off.total - on.total == pytest.approx(reduce * (1 - 16 / 132), rel=1e-9)
    assert on.dp_exposed == pytest.approx(reduce * 16 / 132, rel=1e-9)


def test_a_reduction_outlasting_the_backward_it_hides_under_exposes_its_excess_only():
    """As above with a last backward of half the reduction C (4 layers of C/8): the backward, slowed to
    G + C x 16/132, still ends inside the reduction (C x 116/132 > C / 2), so the pair takes C and exposes C - G:
    no SM tax on top (max(C, G + C n / S), not C - G + G n / S)."""
    w = 10_000_000
    cfg = ScaleConfig(**TINY, d=8, global_batch=16)
    reduce = estimate(H100.topology, "all_reduce", 4 * (4 * w + 2 * 128 * 64), (tuple(range(8)),)).time_s
    on = compose(cfg.with_split(dp_overlap=True), _fake(1.0, reduce / 8, w), H100)
    assert on.dp_exposed == pytest.approx(reduce - 4 * reduce / 8, rel=1e-9)


def test_a_later_stages_bucket_runs_beside_the_first_stages_backward():
    """Megatron-Core's DDP, p 2: stage 1 launches its one bucket (4 layers and the LM head, 4 bytes a gradient)
    one backward slot before the first stage's end; a slot of 1 s outlasts it, so none of it is exposed and all of
    it ran beside compute (the SMs it took are charged by the caller: its seconds x n / S)."""
    w = 1_000_000
    cfg = ScaleConfig(**TINY, p=2, d=8, global_batch=16, zero=1, dp_overlap=True, ddp="megatron",
                      overlap_param_gather=True)
    head = 128 * 64
    group = (tuple(range(8)),)
    reduce = estimate(H100.topology, "reduce_scatter", 4 * (2 * w + head), group).time_s
    assert 0 < reduce < 1.0
    rs, _, beside = stage_exposed(cfg, H100.topology, 1, 2, w, (head, 0), 1.0, 1.0)
    assert rs == 0.0
    assert beside == pytest.approx(reduce, rel=1e-9)


def test_a_ring_step_hidden_under_its_attention_block_still_takes_its_sms():
    """Megatron's ring attention, cp 4 on one H100 node: each of the 3 forward steps (K, V to the next rank) beside
    a block of the attention far longer than it exposes 16/132 of it; with no attention, all of it."""
    cfg = ScaleConfig(layers=2, hidden=8192, heads=64, seq=65536, vocab=128, cp=4, micro_batch=1, global_batch=1)
    kv = 2 * 1 * (65536 // 4) * 8192 * 2
    pairs = tuple((c, (c + 1) % 4) for c in range(4))
    step_f = estimate(H100.topology, "collective_permute", kv, pairs).time_s
    step_b = estimate(H100.topology, "collective_permute", 2 * kv, pairs).time_s
    core = {"forward": 4.0, "backward": 4.0, "recompute": 0.0, "optimizer": 0.0}  # 1 s blocks
    assert step_f < 1.0 and step_b < 1.0
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    cost = LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": 1.0, "backward": 1.0, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=1000, weight_bytes=2000, core_s=core)
    it = compose(cfg, cost, H100)
    assert it.cp_comm == pytest.approx(2 * 3 * (step_f + step_b) * 16 / 132, rel=1e-9)
