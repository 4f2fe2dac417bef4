"""PyTorch ring attention's own memory passes (:mod:`mhlo_cost.studies.plan.ring_passes`), against the statements of
``torch/distributed/tensor/experimental/_attention.py`` walked here step by step for the last context rank (every
later step of it an ``i <= rank`` step: its full queries against the first half of the received keys), each
statement group one kernel reading its inputs once and writing its outputs once."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.ring_passes import ring_pass_seconds, ring_passes
from mhlo_cost.studies.plan.te_cp_passes import te_cp_pass_seconds

BF16, F32 = 2, 4
SELENE = resolve_profile("selene")


def _cfg(**kw) -> ScaleConfig:
    """b 1, 4 query heads of 16, 2 K/V heads, s 64 on cp 4: 16 positions a rank."""
    base = dict(layers=2, hidden=64, heads=4, kv_heads=2, seq=64, vocab=128, cp=4, micro_batch=1, global_batch=1,
                cp_comm="torch-allgather")
    return ScaleConfig(**(base | kw))


def _walk(cp: int, e: int, ekv: int, rows: int, d: int, every_step_cat: bool) -> tuple[int, int]:
    """(forward, backward) bytes as the ring's code runs on the last rank, statement by statement."""
    fwd = 2 * ekv * (BF16 + BF16)  # key.contiguous(), value.contiguous()
    for i in range(cp):
        if i < cp - 1 and (i == 0 or every_step_cat):
            fwd += 2 * ekv * (BF16 + BF16)  # torch.cat([key.flatten(), value.flatten()])
        if i > 0:  # merge: out (fp32 r/w; the first block read as bf16, the last written as bf16), block out, lse
            acc_read = BF16 if i == 1 else F32
            acc_write = BF16 if i == cp - 1 else F32
            fwd += e * (acc_read + BF16 + acc_write) + rows * (F32 + F32 + F32)
    bwd = 2 * ekv * (BF16 + BF16)  # contiguous again
    for i in range(cp):
        if i < cp - 1 and (i == 0 or every_step_cat):
            bwd += 2 * ekv * (BF16 + BF16)
        if i > 0:  # the further flash backward calls' D = rowsum(dO * O) and fp32 dQ accumulator passes
            bwd += rows * d * (3 * BF16 + 2 * F32) + F32 * rows
        if i == 0:  # grad_query = 0 + block dQ (fp32 written); grad_key/value blocks cat into the send buffer
            bwd += e * (BF16 + F32) + 2 * ekv * (BF16 + F32)
        else:  # grad_query += dQ; the received dK/dV (fp32) + the block's bf16 half, cat and sent on
            bwd += e * (F32 + BF16 + (BF16 if i == cp - 1 else F32))
            bwd += 2 * (ekv * F32 + (ekv // 2) * BF16 + ekv * F32)
    bwd += 2 * ekv * (F32 + BF16)  # the last dK/dV received, cast to bf16
    return fwd, bwd


def test_allgather_ring_bytes_match_the_statements_of_the_last_rank():
    cfg = _cfg()
    e, ekv, rows = 1 * 4 * 16 * 16, 1 * 2 * 16 * 16, 1 * 4 * 16
    p = ring_passes(cfg)
    assert (p.forward_bytes, p.backward_bytes) == _walk(4, e, ekv, rows, 16, every_step_cat=False)
    assert (p.forward_kernels, p.backward_kernels) == (2 + 1 + 3, 2 + 1 + 2 * 4 + 1 + 2 * 3)


def test_eager_allgather_builds_the_send_buffer_every_step():
    """The loop makes ``torch.cat([key.flatten(), value.flatten()])`` before each ``exchange_buffers`` call (every
    step but the last), which the all-gather rotater ignores after the first: eager runs every cat (2 kernels more
    a phase at cp 4), a trace drops the unused ones."""
    cfg = _cfg(execution="eager")
    e, ekv, rows = 1 * 4 * 16 * 16, 1 * 2 * 16 * 16, 1 * 4 * 16
    p = ring_passes(cfg)
    assert (p.forward_bytes, p.backward_bytes) == _walk(4, e, ekv, rows, 16, every_step_cat=True)
    assert (p.forward_kernels, p.backward_kernels) == (2 + 3 + 3, 2 + 3 + 2 * 4 + 1 + 2 * 3)
    traced = ring_passes(cfg.with_split(execution="inductor"))
    assert (traced.forward_bytes, traced.backward_bytes) == _walk(4, e, ekv, rows, 16, every_step_cat=False)


def test_alltoall_cats_every_step_and_repeated_kv_heads_move_the_query_heads():
    cfg = _cfg(cp_comm="torch-alltoall", kv_repeat=True)
    e = 1 * 4 * 16 * 16
    p = ring_passes(cfg)
    assert (p.forward_bytes, p.backward_bytes) == _walk(4, e, e, 64, 16, every_step_cat=True)


def test_no_passes_without_pytorch_context_parallel():
    assert ring_passes(_cfg(cp=1)).forward_bytes == 0
    assert ring_passes(_cfg(cp_comm="p2p")).backward_bytes == 0
    assert ring_pass_seconds(_cfg(cp=1), SELENE) == (0.0, 0.0)


def _fake(fwd: float, bwd: float) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=1000, weight_bytes=2000)


def test_compose_adds_the_passes_to_the_layer_and_full_recompute_runs_the_forward_again():
    cfg = _cfg()
    p = ring_passes(cfg)
    ring_f = SELENE.memory_time(p.forward_bytes, p.forward_kernels)
    ring_b = SELENE.memory_time(p.backward_bytes, p.backward_kernels)
    it = compose(cfg, _fake(1.0, 2.0), SELENE)
    assert it.layer["forward"] == pytest.approx(1.0 + ring_f, rel=1e-12)
    assert it.layer["backward"] == pytest.approx(2.0 + ring_b, rel=1e-12)
    assert it.layer["recompute"] == 0.0
    full = compose(cfg.with_split(recompute="full"), _fake(1.0, 2.0), SELENE)
    assert full.layer["recompute"] == pytest.approx(1.0 + ring_f, rel=1e-12)
    # Megatron-Core's p2p ring has none of PyTorch's passes, only Transformer Engine's own (.te_cp_passes)
    te = cfg.with_split(cp_comm="p2p")
    assert ring_passes(te).forward_bytes == 0
    assert compose(te, _fake(1.0, 2.0), SELENE).layer["forward"] == 1.0 + te_cp_pass_seconds(te, SELENE)[0]
