"""The first stage's word embedding as Megatron-Core runs it (:mod:`mhlo_cost.studies.plan.embedding_pass`): the bytes
worked out here from PyTorch's dense embedding backward (``at::zeros({num_weights, dim})`` in the gradient's dtype,
the rows' gradients summed in) and Megatron-Core's DDP hook (``main_grad.add_(grad)``: bf16 + fp32 read, fp32
written), each micro-batch, on the first stage only."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.embedding_pass import embedding_bytes, embedding_comm_seconds, word_embedding_seconds
from plan_stubs import stub_cost

H100 = resolve_profile("dgx-h100")


def _cfg(**kw) -> ScaleConfig:
    """V 1000, h 64, b 2 x s 32: 64 looked-up rows; Megatron-Core's DDP."""
    base = dict(layers=4, hidden=64, heads=4, seq=32, vocab=1000, micro_batch=2, global_batch=8, d=1,
                dp_overlap=True, ddp="megatron")
    return ScaleConfig(**(base | kw))


def test_untied_embedding_bytes():
    b = embedding_bytes(_cfg())
    rows = 2 * 32 * 64  # b x s x h looked up
    table = 1000 * 64
    assert b["forward"] == (rows * 2 + rows * 2, 1)  # gathered rows read, output written (bf16)
    # zeros (2) + main_grad.add_: grad (2) and main_grad (4) read, main_grad (4) written; the rows' grads read and
    # summed into the zeroed gradient
    assert b["backward"] == (table * (2 + 2 + 4 + 4) + rows * (2 + 2), 4)


def test_tensor_parallel_context_parallel_and_tied():
    rows = 2 * (32 // 2) * 64  # s/cp
    table = 1000 // 2 * 64  # V/t
    assert embedding_bytes(_cfg(t=2, cp=2))["backward"] == (table * 12 + rows * 4, 4)
    # tied on one stage: Megatron marks the shared weight zero_out_wgrad, so the hook's add still runs
    # (megatron/core/distributed/distributed_data_parallel.py: `not param.grad_added_to_main_grad or
    # getattr(param, 'zero_out_wgrad', False)`)
    assert embedding_bytes(_cfg(tied_embedding=True))["backward"] == (1000 * 64 * 12 + 2 * 32 * 64 * 4, 4)
    # with a pipeline the first stage's copy is the embedding's alone: its hook adds it
    assert embedding_bytes(_cfg(tied_embedding=True, p=2))["backward"] == (1000 * 64 * 12 + 2 * 32 * 64 * 4, 4)


def test_only_megatron_core_ddp():
    cfg = _cfg(ddp="")
    assert embedding_bytes(cfg) == {"forward": (0, 0), "backward": (0, 0)}
    assert word_embedding_seconds(cfg, H100) == (0.0, 0.0)


def test_tensor_group_collectives():
    topo = H100.topology
    assert embedding_comm_seconds(_cfg(), topo) == (0.0, 0.0)
    f, b = embedding_comm_seconds(_cfg(t=2), topo)  # all_reduce forward, identity backward
    assert f > 0 and b == 0.0
    f, b = embedding_comm_seconds(_cfg(t=2, sp=True), topo)  # reduce_scatter forward, all_gather backward
    assert f > 0 and b > 0


def _cost() -> LayerCost:
    return stub_cost(forward=1e-3, backward=2e-3)


def test_first_stage_only():
    cfg = _cfg(p=2)
    ef, eb = word_embedding_seconds(cfg, H100)
    assert ef > 0 and eb > 0
    with_it = compose(cfg, _cost(), H100).stages
    without = compose(cfg.with_split(ddp=""), _cost(), H100).stages
    assert with_it[0]["f_s"] - without[0]["f_s"] == pytest.approx(ef)
    assert with_it[0]["b_s"] - without[0]["b_s"] == pytest.approx(eb)
    assert with_it[1]["f_s"] == without[1]["f_s"] and with_it[1]["b_s"] == without[1]["b_s"]


def test_grad_buffer_zeroed_once_an_iteration():
    """Megatron-Core's ``zero_grad_buffer`` writes the whole fp32 buffer of the stage's weights (4 layers of 1000 and
    the untied embedding and LM head, 2 x 1000 x 64), one kernel, into the step's seconds; not without its DDP."""
    from mhlo_cost.studies.plan.dp_overlap import grad_buffer_zero_seconds

    cfg = _cfg()
    elems = 4 * 1000 + 2 * 1000 * 64
    assert grad_buffer_zero_seconds(cfg, H100, elems) == H100.memory_time(elems * 4, kernels=1)
    with_it = compose(cfg, _cost(), H100)
    without = compose(cfg.with_split(ddp=""), _cost(), H100)
    assert with_it.optimizer - without.optimizer == pytest.approx(H100.memory_time(elems * 4, kernels=1))
