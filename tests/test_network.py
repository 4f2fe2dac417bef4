"""The network model on closed forms: one node, two nodes (ring, hierarchical, tree), NICs shared by GPUs,
a 4 x 4 mesh along a row and across it, and published nccl-tests bus bandwidths of the shipped systems.

Every expected time is written out here from the algorithm's definition (bytes on the busiest link over
its bandwidth, plus latency terms) with the figures typed in the test, never computed by the code under test.
"""
from __future__ import annotations

import pytest

from mhlo_cost.network import Link, MeshTopology, NodeTopology, estimate, resolve_profile

S = 1 << 30  # 1 GiB
US = 1e-6
NV = Link("nvlink", 450e9, 0.8, 0.5 * US)
IB = Link("ib", 50e9, 0.9, 4 * US)
BASE = 7 * US
NODE8 = NodeTopology(8, NV, IB, 8, True, BASE)  # rail-optimised: one NIC per device
NODE8_4NIC = NodeTopology(8, NV, IB, 4, True, BASE)  # two devices per NIC
BW_NV, BW_IB = 450e9 * 0.8, 50e9 * 0.9


def approx(x):
    return pytest.approx(x, rel=1e-12)


def group(*ids):
    return (tuple(ids),)


# -- one node ------------------------------------------------------------------------------------------------


def test_all_reduce_in_one_node_is_two_7_8ths_of_s_over_nvlink():
    e = estimate(NODE8, "all_reduce", S, group(*range(8)))
    assert e.algorithm == "ring" and e.tier == "nvlink"
    assert e.time_s == approx(BASE + 2 * 7 * NV.latency + 2 * 7 / 8 * S / BW_NV)
    assert [a for a, _ in e.candidates] == ["ring"]  # no tree or hierarchy inside one node


def test_all_gather_reduce_scatter_and_permute_in_one_node():
    ag = estimate(NODE8, "all_gather", S, group(*range(8)))
    rs = estimate(NODE8, "reduce_scatter", S, group(*range(8)))
    assert ag.time_s == rs.time_s == approx(BASE + 7 * NV.latency + 7 / 8 * S / BW_NV)
    pairs = tuple((i, (i + 1) % 8) for i in range(8))
    p = estimate(NODE8, "collective_permute", S, pairs)
    assert (p.algorithm, p.tier) == ("direct", "nvlink")
    assert p.time_s == approx(BASE + NV.latency + S / BW_NV)


def test_all_to_all_in_one_node_and_across_two():
    one = estimate(NODE8, "all_to_all", S, group(*range(8)))
    assert one.time_s == approx(BASE + 7 * NV.latency + 7 / 8 * S / BW_NV)
    two = estimate(NODE8, "all_to_all", S, group(*range(16)))
    # each device: 7 peers in its node (7/16 S over NVLink), 8 in the other (8/16 S through its own NIC)
    assert two.tier == "nvlink+ib"
    assert two.time_s == approx(BASE + 7 * NV.latency + 8 * IB.latency + max(7 / 16 * S / BW_NV, 8 / 16 * S / BW_IB))


def test_groups_of_one_and_empty_buffers_cost_nothing():
    assert estimate(NODE8, "all_reduce", S, ((0,), (1,))).time_s == 0.0
    assert estimate(NODE8, "all_reduce", 0, group(0, 1)).algorithm == "none"


# -- two nodes -------------------------------------------------------------------------------------------------


def test_hierarchical_all_reduce_is_the_sum_of_its_three_phases():
    e = estimate(NODE8, "all_reduce", S, group(*range(16)))
    assert e.tier == "nvlink+ib"
    reduce_scatter = 7 / 8 * S / BW_NV + 7 * NV.latency  # in each node, over NVLink
    across = 2 * (2 - 1) / 2 * (S / 8) / BW_IB + 2 * IB.latency  # S/8 per rail, each GPU on its own NIC
    all_gather = reduce_scatter
    assert e.time_of("hierarchical") == approx(BASE + reduce_scatter + across + all_gather)


def test_hierarchical_with_two_gpus_per_nic_doubles_the_network_phase():
    e = estimate(NODE8_4NIC, "all_reduce", S, group(*range(16)))
    phase = 7 / 8 * S / BW_NV + 7 * NV.latency
    across = 2 * (S / 8) * 1 / 2 / BW_IB * 2 + 2 * IB.latency
    assert e.time_of("hierarchical") == approx(BASE + 2 * phase + across)


def test_hierarchical_all_gather_goes_across_nodes_then_inside():
    e = estimate(NODE8, "all_gather", S, group(*range(16)))
    across = (2 - 1) / 2 * (S / 8) / BW_IB + IB.latency  # each rail gathers S/16 pieces into S/8
    inside = 7 / 8 * S / BW_NV + 7 * NV.latency  # then S/8 pieces into S in the node
    assert e.time_of("hierarchical") == approx(BASE + across + inside)
    assert estimate(NODE8, "reduce_scatter", S, group(*range(16))).time_of("hierarchical") == approx(BASE + across + inside)


def test_a_3d_torus_axis_of_two_has_one_link_each_way():
    cube = MeshTopology((2, 2, 2), L, (), (True, True, True), BASE)
    assert cube.wraparound == (False, False, False) and cube.axes == ("z", "y", "x")
    e = estimate(cube, "all_reduce", S, group(*range(8)))
    assert e.tier == "mesh:z+y+x"
    # axis by axis: all-gather back from S/8 to S/4 to S/2 to S (each phase half the data one way), twice
    assert e.time_of("dim-rings") == approx(BASE + 2 * 3 * L.latency + 2 * (S / 8 + S / 4 + S / 2) / BW_L)
    # a Gray-code ring over the cube's 8 corners, both ways round: two links per chip
    assert e.time_of("ring") == approx(BASE + 14 * L.latency + 2 * 7 / 8 * S / (2 * BW_L))


def test_flat_ring_across_two_nodes_leaves_each_node_through_all_its_nics():
    e = estimate(NODE8, "all_reduce", S, group(*range(16)))
    vol = 2 * 15 / 16 * S  # what each device sends in the ring
    network = vol / 8 / BW_IB  # each node sends vol in all, spread over its 8 NICs (one channel each)
    nvlink = 7 / 8 * vol / BW_NV  # 7 of each node's 8 ring hops per channel stay in the node
    latency = 28 * NV.latency + 2 * IB.latency  # 2 (n-1) steps, 2 (nodes-1) of them across
    assert e.time_of("ring") == approx(BASE + latency + max(network, nvlink))
    four = estimate(NODE8_4NIC, "all_reduce", S, group(*range(16)))
    assert four.time_of("ring") == approx(BASE + latency + max(vol / 4 / BW_IB, nvlink))


def test_tree_wins_for_small_messages_across_nodes_and_is_its_latency():
    small = estimate(NODE8, "all_reduce", 1024, group(*range(16)))
    assert small.algorithm == "tree"
    tree_latency = 2 * (7 * NV.latency + 1 * IB.latency)
    tree_bytes = max(2 * 7 / 8 * 1024 / BW_NV, 1024 / 8 / BW_IB)  # chain: S up and S down; tree: S per node
    assert small.time_s == approx(BASE + tree_latency + tree_bytes)
    assert small.time_of("ring") > small.time_s


def test_groups_sharing_a_nic_share_its_bandwidth():
    pairs = tuple((i, i + 8) for i in range(8))  # 8 groups of 2, each across the two nodes
    own = estimate(NODE8, "all_reduce", S, pairs)
    shared = estimate(NODE8_4NIC, "all_reduce", S, pairs)
    assert own.tier == shared.tier == "ib"
    assert own.time_of("ring") == approx(BASE + 2 * IB.latency + S / BW_IB)  # 2 (2-1)/2 S through its NIC
    assert shared.time_of("ring") == approx(BASE + 2 * IB.latency + 2 * S / BW_IB)


def test_placement_moves_a_group_across_nodes():
    swapped = NodeTopology(8, NV, IB, 8, True, BASE, placement=(0, 8, 2, 3, 4, 5, 6, 7, 1, 9, 10, 11, 12, 13, 14, 15))
    assert estimate(NODE8, "all_gather", S, group(0, 1)).tier == "nvlink"
    assert estimate(swapped, "all_gather", S, group(0, 1)).tier == "ib"


def test_switchless_node_routes_over_its_ring():
    ring = NodeTopology(4, NV, None, 0, False, BASE)
    # 0 -> 2 is two hops at half the device bandwidth each way
    e = estimate(ring, "collective_permute", S, ((0, 2),))
    assert e.time_s == approx(BASE + NV.latency + S / (BW_NV / 2))


# -- a 4 x 4 mesh --------------------------------------------------------------------------------------------------

L = Link("mesh", 100e9, 0.9, 1 * US)
BW_L = 100e9 * 0.9
MESH = MeshTopology((4, 4), L, ("y", "x"), (False, False), BASE)
TORUS = MeshTopology((4, 4), L, ("y", "x"), (True, True), BASE)


def test_all_gather_along_one_row():
    e = estimate(MESH, "all_gather", S, group(0, 1, 2, 3))
    assert (e.algorithm, e.tier) == ("ring", "mesh:x")
    # a ring on a line comes back over the same links: one link's bandwidth; every step waits for the
    # longest hop, the way back from the end of the row (3 links)
    assert e.time_s == approx(BASE + 3 * 3 * L.latency + 3 / 4 * S / BW_L)
    col = estimate(MESH, "all_gather", S, group(0, 4, 8, 12))
    assert col.tier == "mesh:y" and col.time_s == approx(e.time_s)
    # round a torus axis the two directions are two rings: twice the bandwidth, one hop a step
    t = estimate(TORUS, "all_gather", S, group(0, 1, 2, 3))
    assert t.time_s == approx(BASE + 3 * L.latency + 3 / 4 * S / (2 * BW_L))


def test_all_gather_across_the_whole_mesh_axis_by_axis():
    e = estimate(MESH, "all_gather", S, group(*range(16)))
    assert (e.algorithm, e.tier) == ("dim-rings", "mesh:y+x")
    # first along rows: S/16 pieces into S/4 (3/4 of S/4 per chip), then along columns: 3/4 of S
    assert e.time_s == approx(BASE + 9 * L.latency + 3 / 4 * S / 4 / BW_L + 9 * L.latency + 3 / 4 * S / BW_L)
    # a snake ring over all 16 moves the same bytes in 15 steps, each waiting for the 3 hops back up
    assert e.time_of("ring") == approx(BASE + 15 * 3 * L.latency + 15 / 16 * S / BW_L)
    ratio = (e.time_s - BASE) / (estimate(MESH, "all_gather", S, group(0, 1, 2, 3)).time_s - BASE)
    assert ratio == pytest.approx((3 / 16 + 12 / 16) / (3 / 4), rel=1e-3)  # 1.25 x the row (latency aside)


def test_all_to_all_on_the_mesh_is_bound_by_its_bisection():
    e = estimate(MESH, "all_to_all", S, group(*range(16)))
    # x-then-y routing: in each row, the 2 chips left of the middle send S/16 to each of the 8 on the right,
    # all through the one link of that row across the middle: 16 x S/16 = S
    assert e.time_s == approx(BASE + 15 * L.latency + S / BW_L)


def test_concurrent_groups_on_disjoint_rows_do_not_contend():
    rows = tuple(tuple(range(4 * r, 4 * r + 4)) for r in range(4))
    assert estimate(MESH, "all_gather", S, rows).time_s == approx(estimate(MESH, "all_gather", S, rows[:1]).time_s)


def test_a_device_outside_the_mesh_is_one_clear_error():
    from mhlo_cost.network import NetworkError

    with pytest.raises(NetworkError, match="outside the system"):
        estimate(MESH, "all_reduce", S, group(0, 16))


# -- published nccl-tests bus bandwidth ---------------------------------------------------------------------------

BIG = 8 << 30  # nccl-tests peak figures are read at 2-16 GB messages


def busbw(profile: str, n: int, algorithm: str | None = None) -> float:
    """nccl-tests' bus bandwidth of the model's all_reduce: 2(n-1)/n x S / time (doc/PERFORMANCE.md)."""
    e = estimate(resolve_profile(profile).topology, "all_reduce", BIG, group(*range(n)))
    t = e.time_of(algorithm) if algorithm else e.time_s
    return 2 * (n - 1) / n * BIG / t / 1e9


def test_dgx_h100_all_reduce_bus_bandwidth_matches_published_nccl_tests():
    """Published DGX H100 all_reduce bus bandwidths, large messages, NCCL's ring:

    * one node, 8 GPUs: 365-370 GB/s with NCCL_ALGO=RING at 2-4 GB (8 x H100 SXM, NVIDIA/nccl issue 1455);
      NVIDIA's maintainer: "NCCL can get an effective NVLink bandwidth of 370GB/s, which you can observe as
      BusBw ... when running with NCCL_ALGO=RING" (NVIDIA/nccl-tests issue 212). NCCL's default there is NVLink
      SHARP (476-480 GB/s, nccl-tests issues 212 and 290), which the model does not have: it is 1.3 x faster.
    * two nodes, 16 GPUs, 8 x 400 Gb/s NDR: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" with
      NCCL_ALGO=RING (NVIDIA/nccl-tests issue 290): 368-384 GB/s over the 8 NICs.
    * four nodes, 32 H100 SXM5 on 3.2 Tb/s InfiniBand (8 x 400 Gb/s), NCCL 2.24 default: 330.93 GB/s
      (Voltage Park / Georgia Tech cluster benchmark, aigatech/vpbenchmarking). The model picks the ring there,
      as NCCL does on 3+ nodes for large messages (its tree is net-bound: 2 S through the busiest node).
    """
    one = busbw("dgx-h100", 8)
    assert abs(one / 367.5 - 1) < 0.2, one
    two_ring = busbw("dgx-h100", 16, "ring")
    assert abs(two_ring / 376 - 1) < 0.2, two_ring
    assert busbw("dgx-h100", 16) >= two_ring  # the chosen algorithm is never slower than the ring
    four = busbw("dgx-h100", 32)
    assert four == busbw("dgx-h100", 32, "ring") and abs(four / 330.93 - 1) < 0.2, four


def test_dgx_a100_all_reduce_bus_bandwidth_matches_published_nccl_tests():
    """DGX A100 with 8 x 200 Gb/s HDR: "we measure 192 GB/s AllReduce BusBW" across nodes (NVIDIA's
    maintainer, NVIDIA/nccl issue 812); one node of 8 A100 on NVSwitch: 230.8 GB/s at 1 GB (p4d.24xlarge,
    NVIDIA/nccl issue 527)."""
    assert abs(busbw("dgx-a100", 8) / 230.8 - 1) < 0.2
    assert abs(busbw("dgx-a100", 32) / 192 - 1) < 0.2  # the ring, the model's choice on 4 nodes


def test_fewer_nics_than_gpus_drops_the_cross_node_bus_bandwidth():
    """p4de: 4 NICs of 100 Gb/s for 8 GPUs: the cross-node ring gets a quarter of dgx-a100's NIC bandwidth
    per node (4 x 100 against 8 x 200 Gb/s), while one node is the same A100 NVSwitch node."""
    assert busbw("p4de", 8) == pytest.approx(busbw("dgx-a100", 8))
    assert busbw("p4de", 32, "ring") == pytest.approx(busbw("dgx-a100", 32, "ring") / 4, rel=1e-3)
