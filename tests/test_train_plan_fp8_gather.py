"""The collectives torchao's float8 training moves in fp8 (:mod:`mhlo_cost.studies.plan.fp8_gather`), against
closed forms worked out here from torchao eab345c / torchtitan 9dec370 (the versions of torchtitan's 2024-12 tables):

* TP (``Float8ColwiseParallel`` / ``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput``): the input is cast to
  fp8 before the ``Shard(1) -> Replicate`` all-gather and the output gradient before the backward's all-gather, so
  per layer and micro-batch the 2 + 2 all-gathers move b x s x h bytes (1 an element) and the 2 + 2 reduce-scatters
  b x s x h x 2 (bf16); Transformer Engine's stacks (execution ``compiled``) are not torchao's;
* FSDP2 (``enable_fsdp_float8_all_gather``): ``fsdp_pre_all_gather`` returns the fp8 data (1 byte a linear weight
  element; the norms and biases stay 2) and, without precomputed scales, all-reduces each linear's amax (one fp32)
  first; with ``precompute_float8_dynamic_scale_for_fsdp``, one all-reduce of every linear's fp32 amax after the
  optimizer step instead."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.plan.async_tp import async_tp_exposure
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.tp_overlap import LINEARS
from plan_stubs import BW, LINK, StubHW as _HW, stub_cost as _cost, stub_price as _price

BIG = dict(layers=4, hidden=8192, heads=64, seq=8192, vocab=128, micro_batch=1, global_batch=1, attention="fused",
           execution="inductor", precision="fp8-tensorwise")
S = 1 * 8192 * 8192 * 2  # b x s x h, bf16: what a bf16 TP collective moves

H, L = 64, 4
TINY = dict(layers=L, hidden=H, heads=4, seq=32, vocab=128, global_batch=64, precision="fp8-tensorwise", d=8, zero=3,
            fsdp_version=2)
LINEAR = 12 * H * H  # a GPT layer's linear weights: qkv 3h^2, projection h^2, fc1 and fc2 4h^2 each
OTHER = 4 * H + 3 * H + H + 4 * H + H  # two LayerNorms' scale and bias, the four linears' biases
GPT_LINEARS = 4  # qkv, proj, fc1, fc2


@pytest.mark.parametrize("execution, precision, ag_bytes", [
    ("inductor", "fp8-tensorwise", S // 2), ("eager", "fp8-tensorwise", S // 2), ("inductor", "bf16", S),
    ("compiled", "fp8-tensorwise", S)])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_tp_all_gathers_move_fp8_under_torchao(execution, precision, ag_bytes, recompute):
    """Plain sequence-parallel TP over 4 on Selene's network, each collective exposed: forward 2 all-gathers of
    ``ag_bytes`` (b s h under torchao's float8, 1 byte an element) and 2 reduce-scatters of b s h x 2; backward 2
    all-gathers (the output gradients, fp8) and 2 reduce-scatters (bf16), and full recompute's forward again (under
    torch.compile, inductor, but w2's reduce-scatter: .recompute.compiled_full). With Megatron's kernels
    (``compiled``) its 2 re-gathers, at bf16."""
    from mhlo_cost.network import estimate, resolve_profile
    from mhlo_cost.studies.plan.compose import compose

    dgx = resolve_profile("selene")
    group = (tuple(range(4)),)
    ag = estimate(dgx.topology, "all_gather", ag_bytes, group).time_s
    rs = estimate(dgx.topology, "reduce_scatter", S, group).time_s
    cfg = ScaleConfig(**(BIG | {"execution": execution, "precision": precision}), t=4, sp=True, recompute=recompute)
    it = compose(cfg, _cost(dict.fromkeys(LINEARS, 1.0)), dgx)
    fwd = 2 * ag + 2 * rs
    assert it.layer["tp_forward"] == pytest.approx(fwd, rel=1e-12)
    regather = 2 if execution == "compiled" else 0
    again = (fwd - (rs if execution == "inductor" else 0.0)) if recompute == "full" else 0.0
    want = (2 + regather) * ag + 2 * rs + again
    assert it.layer["tp_backward"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("precision, ag", [("fp8-tensorwise", S // 2), ("bf16", S)])
def test_async_tp_pulls_fp8_shards(precision, ag):
    """Async TP over 4, every GEMM 0 s (each pull exposed whole): forward, the QKV and w1/w3 gathers pull 3 shards
    of ``ag`` / 4 each, the wo and w2 reduce-scatters 3 of S / 4 (bf16) and their final sums, (S + S/4) / BW;
    backward, the two output-gradient gathers 3 pulls of ``ag`` / 4 each, the two unfused reduce-scatters 3/4 S."""
    cfg = ScaleConfig(**(BIG | {"precision": precision}), t=4, sp=True, async_tp=True)
    out = async_tp_exposure(cfg, _cost(), S, _price, _HW())
    pull_ag, pull_rs, rpass = ag / 4 / LINK, S / 4 / LINK, (S + S // 4) / BW
    assert out["forward"] == pytest.approx(2 * 3 * pull_ag + 2 * (3 * pull_rs + rpass), rel=1e-12)
    assert out["backward"] == pytest.approx(2 * 3 * pull_ag + 2 * (3 / 4) * S / LINK, rel=1e-12)


def _rows(cfg):
    from mhlo_cost.studies.plan.sharding import dp_collectives

    return [(c.what, c.kind, c.nbytes, c.per, c.count) for c in dp_collectives(cfg, _cost(elems=LINEAR + OTHER), L)]


def test_fsdp_parameter_gathers_move_fp8_linear_weights():
    """FSDP over 8, a GPT layer of LINEAR linear and OTHER other weight elements: bf16 gathers 2 (LINEAR + OTHER)
    bytes forward and backward; the fp8 all-gather LINEAR + 2 OTHER, each after 4 amax all-reduces of 4 bytes; with
    precomputed scales no per-gather amax, one all-reduce of 4 x 4 linears x L layers after the step. The gradients'
    reduce-scatter stays fp32 (4 bytes)."""
    bf16 = ScaleConfig(**TINY)
    gathers = [(p, 2 * (LINEAR + OTHER)) for p in ("layer_forward", "layer_backward")]
    assert [(r[3], r[2]) for r in _rows(bf16) if r[1] == "all_gather"] == gathers
    on = bf16.with_split(fsdp_float8_all_gather=True)
    rows = _rows(on)
    assert [(r[3], r[2]) for r in rows if r[1] == "all_gather"] == [(p, LINEAR + 2 * OTHER) for p, _ in gathers]
    amax = [r for r in rows if r[0] == "weight amaxes"]
    assert amax == [("weight amaxes", "all_reduce", 4, p, GPT_LINEARS) for p, _ in gathers]
    assert ("gradients", "reduce_scatter", 4 * (LINEAR + OTHER), "layer_backward", 1) in rows
    pre = [r for r in _rows(on.with_split(fsdp_float8_precompute_scale=True)) if r[0] == "weight amaxes"]
    assert pre == [("weight amaxes", "all_reduce", 4 * GPT_LINEARS * L, "step", 1)]


def test_fsdp_fp8_gather_seconds_and_the_step_all_reduce():
    """On Selene's network: a layer's forward FSDP communication is the fp8 gather plus 4 amax all-reduces of 4
    bytes; with precomputed scales the gather alone, and the iteration's optimizer time grows by one all-reduce of
    4 x 4 x L bytes over the sharding group."""
    from mhlo_cost.network import estimate, resolve_profile
    from mhlo_cost.studies.plan.compose import compose
    from mhlo_cost.studies.plan.sharding import dp_exposure, shard_groups

    dgx = resolve_profile("selene")
    on = ScaleConfig(**TINY, fsdp_float8_all_gather=True)
    groups = shard_groups(on)
    ag = estimate(dgx.topology, "all_gather", LINEAR + 2 * OTHER, groups).time_s
    ar = estimate(dgx.topology, "all_reduce", 4, groups).time_s
    cost = _cost(elems=LINEAR + OTHER)
    assert dp_exposure(on, dgx.topology, cost, L, 1.0, 1.0).forward_total == pytest.approx(ag + 4 * ar, rel=1e-12)
    pre = on.with_split(fsdp_float8_precompute_scale=True)
    assert dp_exposure(pre, dgx.topology, cost, L, 1.0, 1.0).forward_total == pytest.approx(ag, rel=1e-12)
    step = estimate(dgx.topology, "all_reduce", 4 * GPT_LINEARS * L, groups).time_s
    assert compose(pre, cost, dgx).optimizer - compose(on, cost, dgx).optimizer == pytest.approx(step, rel=1e-9)


def test_precomputed_scales_need_the_fp8_all_gather(capsys):
    from mhlo_cost.cli import main

    assert "precomputed" in ScaleConfig(**TINY, fsdp_float8_precompute_scale=True).invalid()
    assert ScaleConfig(**TINY, fsdp_float8_all_gather=True, fsdp_float8_precompute_scale=True).invalid() is None
    args = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128", "-d",
            "8", "--zero", "3", "--precision", "fp8-tensorwise", "--fsdp-float8-precompute-scale"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and "precomputed" in err and err.count("\n") == 1
