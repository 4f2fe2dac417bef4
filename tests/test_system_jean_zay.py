"""System ``jean-zay-a100``, BLOOM-176B's nodes: 8 A100 80GB on NVLink and 4 Omni-Path links of 100 Gb/s per node (the
BLOOM README's hardware list; Omni-Path's port rate), against dgx-a100, which priced BLOOM's rows before: the same
node, a quarter of its network."""
from __future__ import annotations

import pytest

from mhlo_cost.network import estimate, resolve_profile


def test_jean_zay_is_a_dgx_a100_node_with_four_100_gbps_links():
    jz, dgx = resolve_profile("jean-zay-a100"), resolve_profile("dgx-a100")
    assert jz.chip == dgx.chip == "a100-sxm-80gb"
    a, b = jz.topology, dgx.topology
    assert (a.devices_per_node, a.intra, a.switch) == (b.devices_per_node, b.intra, b.switch)
    assert a.nics_per_node * a.inter.bandwidth == 4 * 100e9 / 8  # bytes/s per node: 4 x 100 Gb/s
    assert b.nics_per_node * b.inter.bandwidth == 4 * (a.nics_per_node * a.inter.bandwidth)


def test_a_ring_all_reduce_across_nodes_shares_four_links_among_eight_gpus():
    topo = resolve_profile("jean-zay-a100").topology
    groups = tuple(tuple(range(k, 64, 8)) for k in range(8))  # every GPU of 8 nodes, 8 rings across the nodes at once
    size = 1 << 30
    per_gpu = 4 * 100e9 / 8 / 8 * 0.96  # bytes/s: 4 x 100 Gb/s per node over its 8 GPUs, at NCCL's credit
    ring = 2 * 7 / 8 * size / per_gpu  # a ring all_reduce's bytes per GPU over its share of the links
    assert estimate(topo, "all_reduce", size, groups).time_s == pytest.approx(ring, rel=0.01)  # (+ latencies)
