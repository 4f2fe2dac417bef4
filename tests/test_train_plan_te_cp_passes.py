"""Transformer Engine's context-parallel ring's own memory passes (:mod:`mhlo_cost.studies.plan.te_cp_passes`),
against the statements of ``AttnFuncWithCP`` (``transformer_engine/pytorch/attention.py`` at v1.8, causal, ``sbhd``)
walked here step by step for any context rank, each statement one kernel reading its inputs once and writing its
outputs once: the last rank's bytes are the module's, and no other rank moves more."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.te_cp_passes import te_cp_pass_seconds, te_cp_passes
from plan_stubs import stub_cost

BF16, F32, F64 = 2, 4, 8
H100 = resolve_profile("dgx-h100")


def _cfg(**kw) -> ScaleConfig:
    """b 1, 4 query heads of 16, 2 K/V heads, s 64 on cp 4: 16 positions a rank."""
    base = dict(layers=2, hidden=64, heads=4, kv_heads=2, seq=64, vocab=128, cp=4, micro_batch=1, global_batch=1,
                attention="fused")
    return ScaleConfig(**(base | kw))


def _flash_passes(rows: int, d: int) -> int:
    """A fused backward call's D = rowsum(dO * O) (dO, O read, D fp32 written) and fp32 dQ accumulator (zeroed,
    read, written back as bf16 dQ) over ``rows`` query rows of ``d``."""
    return rows * d * (BF16 + BF16) + rows * F32 + rows * d * F32 + rows * d * (F32 + BF16)


def _forward(n: int, r: int, e: int, k: int, lse: int) -> int:
    """Rank ``r``'s forward bytes: step i <= r takes its full queries and the first half of the received K/V
    (``kv_inputs[...][:, 0].contiguous()``); a later step i > r the second half of its queries (``q[1].contiguous()``)
    and the merges of that half only."""
    out = 2 * k * (BF16 + BF16)  # torch.cat((k, v)) into the first send buffer
    for i in range(1, n):
        out += k * (BF16 + BF16) if i <= r else (e // 2) * (BF16 + BF16)
    out += e * BF16 + lse * (F32 + F32) + lse * (F32 + F64)  # out zeroed; lse cloned, widened to fp64
    for j in range(1, n):  # step j's log-sum-exps merged (all rows if j <= r, else the second half's)
        rows = lse if j <= r else lse // 2
        out += rows * (F64 + F32 + F64)
    out += lse * (F64 + F32)  # softmax_lse.to(torch.float)
    for i in range(n):  # out.add_(out_step * exp(lse_step - lse)) over the rows the step covered
        el, rows = (e, lse) if i <= r else (e // 2, lse // 2)
        out += el * (BF16 + BF16 + BF16) + rows * (F32 + F32)
    return out


def _backward(n: int, r: int, e: int, k: int, lse: int, d: int) -> int:
    """Rank ``r``'s backward bytes (steps in reverse: i = n - 1 the local one; i >= n - r - 1 full queries against
    half K/V; else half queries, with their O and dO, against the whole)."""
    out = (lse // 2) * (F32 + F32) + 2 * k * (BF16 + BF16)  # lse second half copied; K/V into the send buffer
    for i in range(n):
        local, full_q = i == n - 1, i >= n - r - 1
        if not local and full_q:
            out += k * (BF16 + BF16)  # kv[:, 0].contiguous()
            out += _flash_passes(lse, d)
        elif not local:
            out += 3 * (e // 2) * (BF16 + BF16)  # q[1], out[1], dout[1] made contiguous
            out += _flash_passes(lse // 2, d)
        half_kv = full_q and not local
        out += (k if half_kv else 2 * k) * (BF16 + BF16)  # torch.cat((dk_, dv_))
        if full_q and i > n - r - 1:
            out += e * 3 * BF16  # dq.add_(dq_)
        elif i == n - r - 1:  # the first full-query step: copied whole (last rank), else half copied, half added
            out += e * 2 * BF16 if r == n - 1 else (e // 2) * 2 * BF16 + (e // 2) * 3 * BF16
        else:
            out += (e // 2) * (3 * BF16 if i > 0 else 2 * BF16)  # dq[1] added / copied
        if local:  # rank 0: first half added, second copied; any other rank: all added
            out += k * 3 * BF16 + k * 2 * BF16 if r == 0 else 2 * k * 3 * BF16
        elif half_kv:
            out += k * (2 * BF16 if i == 0 and r == n - 1 else 3 * BF16)
        else:
            out += 2 * k * (3 * BF16 if i > 0 else 2 * BF16)
    return out


@pytest.mark.parametrize("cp", [2, 4])
def test_last_rank_bytes_match_the_statements(cp):
    cfg = _cfg(cp=cp)
    s = 64 // cp
    e, k, lse, d = 4 * s * 16, 2 * s * 16, 4 * s, 16
    p = te_cp_passes(cfg)
    assert p.forward_bytes == _forward(cp, cp - 1, e, k, lse)
    assert p.backward_bytes == _backward(cp, cp - 1, e, k, lse, d)
    # cat, n - 1 half copies, zero, clone + widen, n - 1 lse merges, narrow, n output merges
    assert p.forward_kernels == 1 + (cp - 1) + 1 + 2 + (cp - 1) + 1 + cp
    # lse half, send buffer copy, n - 1 half copies, n cats, n dQ, n dK/dV, two passes per further call
    assert p.backward_kernels == 2 + (cp - 1) + 3 * cp + 2 * (cp - 1)


@pytest.mark.parametrize("kv_heads", [2, 4])
@pytest.mark.parametrize("cp", [2, 4])
def test_no_rank_moves_more_than_the_last(cp, kv_heads):
    s = 64 // cp
    e, k, lse = 4 * s * 16, kv_heads * s * 16, 4 * s
    totals = [_forward(cp, r, e, k, lse) + _backward(cp, r, e, k, lse, 16) for r in range(cp)]
    assert max(totals) == totals[-1]


def test_only_te_p2p_ring():
    for cfg in (_cfg(cp=1), _cfg(cp_comm="all_gather"), _cfg(cp_comm="torch-allgather"), _cfg(attention="unfused")):
        assert te_cp_passes(cfg).forward_bytes == 0 and te_cp_pass_seconds(cfg, H100) == (0.0, 0.0)


def _cost() -> LayerCost:
    return stub_cost(forward=1e-3, backward=2e-3)


def test_compose_adds_them_to_each_layer():
    cfg = _cfg(cp=2, d=1)
    f, b = te_cp_pass_seconds(cfg, H100)
    assert f > 0 and b > 0
    it = compose(cfg, _cost(), H100)
    assert it.layer["ring_forward"] == f and it.layer["ring_backward"] == b
    assert it.layer["forward"] == pytest.approx(1e-3 + f) and it.layer["backward"] == pytest.approx(2e-3 + b)


@pytest.mark.parametrize("recompute, rerun", [("none", False), ("op", False), ("selective", True), ("full", True)])
def test_a_recompute_that_reruns_the_core_attention_runs_the_rings_forward_passes_again(recompute, rerun):
    """Megatron-Core's selective recompute checkpoints the core attention module: its backward calls
    ``AttnFuncWithCPAndKVP2P.forward`` again, merges and copies included, as full recompute does (the layer's time
    here is the ring's passes alone: no attention, no recompute of the program's own)."""
    cfg = _cfg(cp=2, d=1, recompute=recompute)
    f, _ = te_cp_pass_seconds(cfg, H100)
    it = compose(cfg, _cost(), H100)
    expected = (1e-3 + f if recompute == "full" else f) if rerun else 0.0
    assert it.layer["recompute"] == pytest.approx(expected, rel=1e-12, abs=0.0)
