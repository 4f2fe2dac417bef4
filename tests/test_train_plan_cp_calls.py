"""Context parallelism's ring attention as its per-step fused calls (:mod:`mhlo_cost.studies.plan.cp_calls`),
against the load-balanced split walked here position by position: each rank holds chunks ``r`` and ``2 cp - 1 - r``
of ``2 cp``; at ring step ``i`` it holds the K/V of rank ``(r - i) mod cp``; TE's ``AttnFuncWithCP`` (v1.8) and
PyTorch's ``_templated_ring_attention`` (0123248a) take the local step causally, a step ``i <= r`` against the first
received chunk only. The scores a call computes are counted here as the (query, key) pairs with key <= query."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.cp_calls import ring_call_seconds, ring_calls, single_kernel
from mhlo_cost.studies.plan.sharding import cp_exposure
from mhlo_cost.studies.plan.te_cp_passes import te_cp_pass_seconds

H100 = resolve_profile("dgx-h100")


def _cfg(**kw) -> ScaleConfig:
    """b 2, 8 heads of 16 on t 2 (4 a rank), s 256 on cp 4: 64 positions a rank, chunks of 32."""
    base = dict(layers=2, hidden=128, heads=8, kv_heads=2, seq=256, vocab=128, cp=4, t=2, micro_batch=2,
                global_batch=2, cp_comm="p2p", attention="fused")
    return ScaleConfig(**(base | kw))


def _chunks(cfg, rank: int) -> list[range]:
    h = cfg.seq // (2 * cfg.cp)
    return [range(c * h, (c + 1) * h) for c in (rank, 2 * cfg.cp - 1 - rank)]


def _pairs(queries, keys) -> int:
    return sum(1 for q in queries for k in keys if k <= q)


def _step_pairs(cfg, rank: int, i: int) -> tuple[int, int, int]:
    """(queries, keys, causal pairs) of rank ``rank``'s forward step ``i``, from the split itself."""
    q = [p for c in _chunks(cfg, rank) for p in c]
    src = _chunks(cfg, (rank - i) % cfg.cp)
    keys = [p for c in src for p in c] if i == 0 else list(src[0])
    assert i == 0 or _pairs(q, src[1]) == 0  # the other received chunk lies above the diagonal
    return len(q), len(keys), _pairs(q, keys)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_each_call_is_the_steps_scores(cp):
    """The last rank's calls: the local call causal over its 2 chunks (half the square and its diagonal), each
    other one every query against half the received keys (a full rectangle); 4 b (heads/t) d FLOPs a score."""
    cfg = _cfg(cp=cp)
    fwd, _ = ring_calls(cfg)
    rows, d = 2 * 8 // 2, 128 // 8
    assert len(fwd) == cp
    for i, c in enumerate(fwd):
        sq, sk, pairs = _step_pairs(cfg, cp - 1, i)
        assert (c.sq, c.sk, c.causal) == (sq, sk, i == 0)
        assert c.flops() == 4 * rows * d * pairs
    local = cfg.seq // cp
    assert fwd[0].flops() == 4 * rows * d * local * (local + 1) // 2  # the square's half with its diagonal
    assert fwd[1].flops() == 4 * rows * d * local * local // 2


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_calls_sum_to_the_single_kernels_scores(cp):
    """The calls' FLOPs together are the single kernel's: the rank's queries against every key at or before them
    (counted over the global positions), half its dense L x cp L rectangle plus the diagonal's L / 2 x 2 chunks;
    and a kernel visiting 128-key tiles visits as many blocks either way."""
    cfg = _cfg(cp=cp, seq=128 * 2 * cp)
    fwd, bwd = ring_calls(cfg)
    rows, d, local = 8, 16, cfg.seq // cp
    mine = [p for c in _chunks(cfg, cp - 1) for p in c]
    want = 4 * rows * d * sum(p + 1 for p in mine)
    assert sum(c.flops() for c in fwd) == want == sum(c.flops() for c in bwd)
    assert want == 4 * rows * d * (local * cp * local // 2 + local // 2)
    assert sum(c.flops(128) for c in fwd) == single_kernel(cfg).flops(128)


def test_order_of_the_calls():
    """TE's backward runs the local step last (``i == cp - 1``); PyTorch's runs it first, as its forward."""
    te_f, te_b = ring_calls(_cfg())
    pt_f, pt_b = ring_calls(_cfg(cp_comm="torch-alltoall"))
    assert te_f[0].causal and te_b[-1].causal and not any(c.causal for c in te_b[:-1])
    assert pt_f == pt_b == te_f
    assert ring_calls(_cfg(cp=1))[0] == (single_kernel(_cfg(cp=1)),)


def _fake(core) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": 1.0, "backward": 2.0, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=1000, weight_bytes=2000, core_s=core)


CORE = {"forward": 4e-3, "backward": 1e-2, "recompute": 0.0, "optimizer": 0.0}


def test_no_ramp_no_change_a_ramp_adds():
    """A library reaching its rate at any number of key tiles (ramp 0) runs the calls in the single kernel's time
    (they visit its blocks, no more); with the profile's ramp the smaller calls run slower: they add."""
    hw = H100
    cfg = _cfg(seq=4096 * 4, hidden=4096, heads=32, kv_heads=8, t=1, micro_batch=1, attention_library="cudnn")
    lib = hw.attention.get("cudnn")
    flat = dataclasses.replace(hw, attention=dataclasses.replace(hw.attention, libraries=tuple(
        (n, dataclasses.replace(x, ramp=0.0)) for n, x in hw.attention.libraries)))
    r0 = ring_call_seconds(cfg, flat, CORE)
    assert r0.added_forward == pytest.approx(0.0, abs=1e-12) and r0.added_backward == pytest.approx(0.0, abs=1e-12)
    assert sum(r0.forward) == pytest.approx(CORE["forward"], rel=1e-9)
    r = ring_call_seconds(cfg, hw, CORE)
    assert lib.ramp > 0 and r.added_forward > 0 and r.added_backward > 0
    # a half call (32 key tiles) against the single kernel (128): its fraction n / (n + ramp) lower by that ratio
    slow = (128 / (128 + lib.ramp)) / (16 / (16 + lib.ramp))
    assert r.forward[1] / r0.forward[1] == pytest.approx(slow, rel=0.02)


def test_cp1_and_no_profile_unchanged():
    """cp 1: no calls added and the layer as before; without a profile, or with the attention unfused, each call
    is 1/cp of the core."""
    one = _cfg(cp=1)
    r = ring_call_seconds(one, H100, CORE)
    assert (r.added_forward, r.added_backward) == (0.0, 0.0)
    it = compose(one, _fake(CORE), H100)
    assert it.layer["forward"] == 1.0 and it.layer["backward"] == 2.0
    for hw, cfg in ((None, _cfg()), (H100, _cfg(attention="unfused"))):
        r = ring_call_seconds(cfg, hw, CORE)
        assert r.forward == (CORE["forward"] / 4,) * 4 and r.added_forward == 0.0


@pytest.mark.parametrize("comm", ["all_gather", "a2a"])
def test_no_ring_no_ring_calls(comm):
    """TE's all-gather CP (AttnFuncWithCPAndKVAllGather: one call per local query chunk against the gathered keys)
    and Ulysses make no ring of per-step calls: nothing added to the core."""
    r = ring_call_seconds(_cfg(cp_comm=comm), H100, CORE)
    assert (r.added_forward, r.added_backward) == (0.0, 0.0)
    assert r.backward == (CORE["backward"] / 4,) * 4


def test_each_exchange_beside_its_own_call():
    """TE's ring: the exchange of step i + 1 beside call i (the local, causal call first), the backward's beside
    its first cp - 1 calls (the local one last). The core is set so that a step's exchange outlasts the local call
    (it visits fewer blocks' worth of time) and not the others: forward, the local call's step alone exposes;
    backward, nothing does (no SMs taken). The layer's compute takes what the calls add."""
    cfg = _cfg(seq=4096 * 4, hidden=4096, heads=32, kv_heads=8, t=1, micro_batch=1)
    x = cp_exposure(cfg, H100.topology, _fake(CORE), (0, 0), H100)
    step_f, step_b = x.forward_total / 3, x.backward_total / 3
    r = ring_call_seconds(cfg, H100, CORE)
    assert r.forward[0] < r.forward[1] and r.backward[-1] < r.backward[0]  # the local call, the quickest
    # a call is affine in the core (a backward call's memory-bound passes do not scale): the core whose quickest
    # and next calls straddle the step, from two cores
    mid = [ring_call_seconds(cfg, H100, {"forward": c, "backward": c}) for c in (1e-3, 2e-3)]
    cores = {}
    for phase, step, pick in (("forward", step_f, (0, 1)), ("backward", step_b, (-1, 0))):
        y = [sum(getattr(m, phase)[i] for i in pick) / 2 for m in mid]
        cores[phase] = 1e-3 + (step - y[0]) * 1e-3 / (y[1] - y[0])
    core = cores
    r = ring_call_seconds(cfg, H100, core)
    assert r.forward[0] < step_f < r.forward[1] and r.backward[-1] < step_b < r.backward[0]
    x = cp_exposure(cfg, H100.topology, _fake(core), (0, 0), H100)
    assert x.forward == pytest.approx(step_f - r.forward[0], rel=1e-9) and x.forward > 0
    assert x.backward == 0.0
    it = compose(cfg, _fake(core), H100)
    te_f, te_b = te_cp_pass_seconds(cfg, H100)
    assert it.layer["forward"] == pytest.approx(1.0 + te_f + r.added_forward, rel=1e-12)
    assert it.layer["backward"] == pytest.approx(2.0 + te_b + r.added_backward, rel=1e-12)


def test_torch_ring_pairs_the_same_way():
    """PyTorch's ring (all_to_all rotation): the K/V permute of step i + 1 beside call i, the dK/dV permute of
    step i waited for after call i + 1, the last one after the loop: with no attention time every exchange shows;
    with a long one only the last dK/dV."""
    cfg = _cfg(seq=4096 * 4, hidden=4096, heads=32, kv_heads=8, t=1, micro_batch=1, cp_comm="torch-alltoall")
    bare = cp_exposure(cfg, H100.topology, _fake({"forward": 0.0, "backward": 0.0}), (0, 0), H100)
    assert (bare.forward, bare.backward) == (bare.forward_total, bare.backward_total)
    x = cp_exposure(cfg, H100.topology, _fake({"forward": 1.0, "backward": 1.0}), (0, 0), H100)
    kv_f = bare.forward_total / 3
    dkv = (bare.backward_total - 3 * kv_f) / 4  # 3 K/V permutes (as forward's) and 4 dK/dV (fp32, twice the bytes)
    assert x.forward == 0.0 and x.backward == pytest.approx(dkv, rel=1e-9)
