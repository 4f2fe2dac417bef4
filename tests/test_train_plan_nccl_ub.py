"""Megatron-Core's nccl_ub (:mod:`mhlo_cost.studies.plan.nccl_ub`): with FSDP's buffers registered with NCCL its
per-layer collectives run on the SMs Megatron-Core's ``distributed_data_parallel_config.py`` states (within an NVLink
domain 4 for an all-gather, 5 for a reduce-scatter; across nodes 16 / 16; one rank a node 1 / 4), checked against
the tax worked out here: each layer's compute beside its collectives of C seconds on n of the 132 SMs exposes
C n / 132. Collective seconds are the network model's own; what is checked is the share of them exposed."""
from __future__ import annotations

import pytest

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.nccl_ub import domain, ub_sms_of
from mhlo_cost.studies.plan.sharding import Collective

H100 = resolve_profile("dgx-h100")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)


def _fake(fwd: float, bwd: float, w: int) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=w, weight_bytes=2 * w)


def test_fsdp_in_one_node_with_nccl_ub_takes_4_sms_to_gather_and_5_to_scatter():
    """FSDP on the 8 GPUs of one H100 node, 2 micro-batches of 4 layers of 1 s forward / 1 s backward: each layer's
    all-gather A (forward), all-gather and reduce-scatter R (backward). NCCL's 16 channels expose 16/132 of
    2A + R; with nccl_ub (4 + 4) A + 5 R over 132, per layer and micro-batch."""
    w = 50_000_000
    cfg = ScaleConfig(**TINY, d=8, global_batch=16, zero=3)
    group = (tuple(range(8)),)
    a = estimate(H100.topology, "all_gather", 2 * w, group).time_s
    r = estimate(H100.topology, "reduce_scatter", 4 * w, group).time_s
    assert 0 < 2 * a + r < 0.1
    plain = compose(cfg, _fake(1.0, 1.0, w), H100)
    ub = compose(cfg.with_split(nccl_ub=True), _fake(1.0, 1.0, w), H100)
    assert plain.dp_exposed == pytest.approx(2 * 4 * (2 * a + r) * 16 / 132, rel=1e-9)
    assert ub.dp_exposed == pytest.approx(2 * 4 * (4 * a + 4 * a + 5 * r) / 132, rel=1e-9)
    assert ub.total == pytest.approx(2 * 4 * 2.0 + ub.dp_exposed, rel=1e-9)


def test_the_domain_is_the_tiers_the_group_crosses():
    """8 ranks of one node: NVL (4 / 5); 16 ranks on two nodes: NVL+IB (16 / 16, NCCL's channels: nothing
    changes); one rank on each of two nodes (tensor degree 8): IB (1 / 4)."""
    topo = H100.topology
    sms_of = ub_sms_of(ScaleConfig(**TINY, d=8, global_batch=8, zero=3, nccl_ub=True), topo, 132)
    one_node = Collective("parameters", "all_gather", 1 << 20, (tuple(range(8)),), "layer_forward")
    two_nodes = Collective("gradients", "reduce_scatter", 1 << 20, (tuple(range(16)),), "layer_backward")
    one_a_node = Collective("gradients", "reduce_scatter", 1 << 20, ((0, 8),), "layer_backward")
    assert (domain(topo, one_node), domain(topo, two_nodes), domain(topo, one_a_node)) == ("nvl", "nvl+ib", "ib")
    assert (sms_of(one_node), sms_of(two_nodes), sms_of(one_a_node)) == (4, 16, 4)
    assert sms_of(Collective("parameters", "all_gather", 1 << 20, ((0, 8),), "layer_forward")) == 1


def test_nccl_ub_changes_nothing_off_hopper_without_it_or_without_sharding():
    cfg = ScaleConfig(**TINY, d=8, global_batch=8, zero=3, nccl_ub=True)
    assert ub_sms_of(cfg, H100.topology, 108) is None  # the table is stated for Hopper's 132 SMs
    assert ub_sms_of(cfg.with_split(nccl_ub=False), H100.topology, 132) is None
    assert ub_sms_of(cfg, None, 132) is None
    assert "nccl_ub" in ScaleConfig(**TINY, d=8, global_batch=8, zero=1, nccl_ub=True).invalid()
    assert ScaleConfig(**TINY, d=8, global_batch=8, zero=2, nccl_ub=True).invalid() is None
    # accepted and ignored would be worse than refused: FSDP2 has no nccl_ub, the MoE plan does not price it
    assert "FSDP2" in ScaleConfig(**TINY, d=8, global_batch=8, zero=3, fsdp_version=2, nccl_ub=True).invalid()
