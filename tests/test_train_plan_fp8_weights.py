"""fp8 weight copies made once a step (``fp8_weight_cache``, :mod:`mhlo_cost.studies.plan.fp8_weights`): Transformer
Engine's ``is_first_microbatch`` as Megatron-Core runs it, against closed forms worked out here; torchao's per-use
casts (the default; rowwise, whose backward casts again) left as lowered."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost

SELENE = resolve_profile("selene")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)


def _fake(cast=(1e-4, 2e-4, 3e-4)) -> LayerCost:
    """A layer of 1 ms forward, 2 ms backward and 0.5 ms recompute whose weight casts take ``cast`` (forward,
    backward, recompute) seconds of them."""
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": 1e-3, "backward": 2e-3, "recompute": 5e-4, "optimizer": 0.0},
                     weight_elems=1000, weight_bytes=2000,
                     weight_cast_s={"forward": cast[0], "backward": cast[1], "recompute": cast[2], "optimizer": 0.0})


def test_one_stage_pays_the_casts_once_a_step():
    """One stage of 4 layers, 8 micro-batches: each micro-batch's forward, backward and (op) recompute leave
    their casts out (8 x 4 x (0.1 + 0.2 + 0.3) ms), the step takes the forward's and the backward's once (4 x 0.3
    ms). (op: a policy whose recompute phase is the program's; under none there is no recompute at all, and
    selective re-runs the core attention, which holds no casts.)"""
    # (rowwise: torchao's axiswise path casts the weight in its forward and its backward, as lowered; its tensorwise
    # path at eab345c saves the forward's cast: tests/test_train_plan_fp8_saved_weight.py)
    cfg = ScaleConfig(**TINY, global_batch=8, precision="fp8-rowwise", recompute="op")
    cost = _fake()
    base, once = compose(cfg, cost, SELENE), compose(cfg.with_split(fp8_weight_cache=True), cost, SELENE)
    assert once.total - base.total == pytest.approx(-8 * 4 * 6e-4 + 4 * 3e-4, rel=1e-9)
    assert once.compute["forward"] - base.compute["forward"] == pytest.approx(-8 * 4 * 1e-4 + 4 * 3e-4, rel=1e-9)
    assert once.compute["backward"] - base.compute["backward"] == pytest.approx(-8 * 4 * 2e-4, rel=1e-9)
    assert once.compute["recompute"] - base.compute["recompute"] == pytest.approx(-8 * 4 * 3e-4, rel=1e-9)
    assert once.bubble == base.bubble


def test_full_recompute_reruns_the_forward_without_its_casts():
    """Full recompute re-runs the forward: its weight casts (0.1 ms a layer) leave the recompute too, since TE's
    flag was cleared by the micro-batch's first forward."""
    cfg = ScaleConfig(**TINY, global_batch=2, precision="fp8-tensorwise", recompute="full")
    cost = _fake()
    base, once = compose(cfg, cost, SELENE), compose(cfg.with_split(fp8_weight_cache=True), cost, SELENE)
    assert once.compute["recompute"] - base.compute["recompute"] == pytest.approx(-2 * 4 * 1e-4, rel=1e-9)


def test_pipeline_fill_takes_every_stages_casts():
    """Two stages of 2 layers, 8 micro-batches: each of the m + p - 1 = 9 slots is shorter by a stage's 2 layers'
    per-micro-batch casts (2 x 0.6 ms); micro-batch 0's forward crosses both stages, so the step adds all 4 layers'
    once-a-step casts (4 x 0.3 ms): the slowest stage's 2 in its forward, the other stage's 2 in the fill
    (op recompute: its casts are the program's recompute phase's)."""
    cfg = ScaleConfig(**TINY, p=2, global_batch=8, precision="fp8-rowwise", recompute="op")
    cost = _fake()
    base, once = compose(cfg, cost, SELENE), compose(cfg.with_split(fp8_weight_cache=True), cost, SELENE)
    assert once.total - base.total == pytest.approx(-9 * 2 * 6e-4 + 4 * 3e-4, rel=1e-9)
    assert once.bubble - base.bubble == pytest.approx(-1 * 2 * 6e-4 + 2 * 3e-4, rel=1e-9)


@pytest.mark.parametrize("kw", [dict(precision="fp8-rowwise"),  # torchao's axiswise path: cast at every use
                                dict(precision="bf16", fp8_weight_cache=True)])  # no fp8 copy to keep
def test_per_use_casts_and_bf16_are_unchanged(kw):
    """Without the cache (torchao's rowwise Float8Linear) or without fp8, the layer's seconds stay as lowered: the same
    iteration whatever its casts take."""
    cfg = ScaleConfig(**TINY, global_batch=8, **kw)
    a, b = compose(cfg, _fake((0.0, 0.0, 0.0)), SELENE), compose(cfg, _fake(), SELENE)
    assert a.total == b.total


def test_the_lowered_layer_marks_two_casts_per_linear():
    """The GPT layer under fp8: each of its 4 linears casts its weight in the forward and again in the backward, an
    amax (one reduce) each, all under the scope fp8_weight: 8 reduces of 12 h^2 x 2 elements in all (qkv 3 h^2,
    projection h^2, fc1 and fc2 4 h^2 each; t = 1); under bf16 no such row."""
    from mhlo_cost.studies.plan.costs import analyse_layer, dense_layer
    from mhlo_cost.studies.study import Study

    h = 64
    cfg = ScaleConfig(**TINY, global_batch=1, precision="fp8-tensorwise", attention="fused", dropout=False)
    a = Study(dense_layer(cfg), training="always").analysis
    reduces = [r for r in a.rows if "fp8_weight" in r.scope.split("/") and r.op.endswith(".reduce")]
    assert len(reduces) == 8
    assert sum(r.multiplicity * r.operands[0].nelems for r in reduces) == 2 * 12 * h * h
    hw = resolve_profile("h100-sxm")
    fp8 = analyse_layer(cfg, hw)
    assert fp8.weight_cast_s["forward"] > 0 and fp8.weight_cast_s["backward"] + fp8.weight_cast_s["recompute"] > 0
    bf16 = analyse_layer(cfg.with_split(precision="bf16"), hw)
    assert sum(bf16.weight_cast_s.values()) == 0
