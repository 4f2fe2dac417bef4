"""Collectives on nodes joined by a network (:class:`NodeTopology`): the algorithms NCCL chooses between.

Every algorithm is written as the transfers it makes (source device, target device, bytes), counted
on the resources they cross: a device's NVLink port out and in (through a switch), or the link
between two neighbours of a switchless node (wired as a ring, half the device's bandwidth each way),
and a NIC out of one node and into the other. The time of a phase is its latency terms plus the
bytes of its busiest resource over that resource's achievable bandwidth; phases of one algorithm run
one after the other; the fastest algorithm is taken. All groups of a collective run at once, so groups
sharing a NIC share its bandwidth.

* **ring**: the flat ring, as ``c`` channels in parallel (``c`` = the group's devices per node): in
  channel ``j`` each node's devices are rotated by ``j``, so each channel leaves a node through a
  different device and hence through that device's NIC (rail), and each channel runs in both
  directions. Per device: 2(n-1)/n S (all_reduce) over its links; per node: that much through its NICs.
  Latency: 2(n-1) steps, 2(m-1) of them across nodes (m nodes), as NCCL counts them.
* **tree** (all_reduce across nodes): a chain through each node's devices (per channel, rotated as for
  the ring) and a double binary tree between the nodes (two in-order binary trees, each with half the
  data, one the mirror of the other, as NCCL builds them), reduce up and broadcast down pipelined: 2(p-1)/p S per device over NVLink,
  the tree edges of each node through its NICs. Latency: 2 ((p-1) intra steps + ceil(log2 m) network
  steps): it wins for small, latency-bound sizes.
* **hierarchical** (across nodes, the same p devices in every node): all_reduce = reduce-scatter in
  the node, all-reduce of S/p across nodes between the devices of the same local rank (rails), all-gather
  in the node; all_gather = across nodes then in the node; reduce_scatter = in the node then across.
  Three (two) phases, one after the other.
* **direct** (all_to_all, collective_permute): every device sends to every target at once.
"""
from __future__ import annotations

import math
from collections import defaultdict

from .topology import CollectiveEstimate, NodeTopology, ring_steps, volume_factor


class _Loads:
    """Bytes on each resource of a phase."""

    def __init__(self, topo: NodeTopology):
        self.topo = topo
        self.load: dict = defaultdict(float)

    def send(self, a: tuple, b: tuple, nbytes: float) -> None:
        """``nbytes`` from placed device ``a`` = (node, local) to ``b``."""
        if nbytes <= 0 or a == b:
            return
        topo, load = self.topo, self.load
        if a[0] != b[0]:
            load[("nic-out", a[0], topo.nic(a[1]))] += nbytes
            load[("nic-in", b[0], topo.nic(b[1]))] += nbytes
        elif topo.switch:
            load[("out", a)] += nbytes
            load[("in", b)] += nbytes
        else:  # a ring of the node's devices, the shorter way round
            k = topo.devices_per_node
            fwd = (b[1] - a[1]) % k
            step = 1 if fwd <= k - fwd else -1
            pos = a[1]
            while pos != b[1]:
                load[("hop", a[0], pos, step)] += nbytes
                pos = (pos + step) % k

    def time(self) -> float:
        topo, worst = self.topo, 0.0
        for key, nbytes in self.load.items():
            if key[0] in ("nic-out", "nic-in"):
                bw = topo.inter.effective
            elif key[0] == "hop":
                bw = topo.intra.effective / 2
            else:
                bw = topo.intra.effective
            worst = max(worst, nbytes / bw)
        return worst


def _by_node(topo: NodeTopology, group) -> list[list[tuple]]:
    """The group's placed devices, per node (nodes in first-seen order, devices in group order)."""
    nodes: dict = {}
    for d in group:
        node, local = topo.place(d)
        nodes.setdefault(node, []).append((node, local))
    return list(nodes.values())


def _ring(loads: _Loads, order: list, nbytes: float) -> None:
    """A ring over ``order`` moving ``nbytes`` per device, half each way round."""
    n = len(order)
    for i in range(n):
        loads.send(order[i], order[(i + 1) % n], nbytes / 2)
        loads.send(order[(i + 1) % n], order[i], nbytes / 2)


def _lat(topo: NodeTopology, intra_steps: float, inter_steps: float) -> float:
    net = topo.inter.latency if topo.inter is not None else 0.0
    return intra_steps * topo.intra.latency + inter_steps * net


def _flat_ring(topo, kind, nbytes, parts) -> float:
    loads, lat = _Loads(topo), 0.0
    for nodes in parts:
        n = sum(len(devs) for devs in nodes)
        m = len(nodes)
        vol = volume_factor(kind, n) * nbytes
        c = max(len(devs) for devs in nodes) if m > 1 else 1
        for j in range(c):
            order = [dev for devs in nodes for dev in devs[j % len(devs):] + devs[:j % len(devs)]]
            _ring(loads, order, vol / c)
        total = ring_steps(kind, n)
        inter = (2 * (m - 1) if kind == "all_reduce" else m - 1) if m > 1 else 0
        lat = max(lat, _lat(topo, total - inter, inter))
    return lat + loads.time()


def _binary_tree_edges(m: int) -> list[tuple[int, int]]:
    """(child, parent) node ranks of a double binary tree over m nodes: an in-order (balanced search)
    tree over the ranks and its mirror, so that a node inside one tree is mostly a leaf of the other."""
    first: list[tuple[int, int]] = []

    def build(lo: int, hi: int, parent: int | None) -> None:
        if lo > hi:
            return
        mid = (lo + hi + 1) // 2
        if parent is not None:
            first.append((mid, parent))
        build(lo, mid - 1, mid)
        build(mid + 1, hi, mid)

    build(0, m - 1, None)
    return first + [(m - 1 - a, m - 1 - b) for a, b in first]


def _tree(topo, nbytes, parts) -> float | None:
    if all(len(nodes) < 2 for nodes in parts):
        return None
    loads, lat = _Loads(topo), 0.0
    for nodes in parts:
        m, c = len(nodes), max(len(devs) for devs in nodes)
        for j in range(c):
            chains = [devs[j % len(devs):] + devs[:j % len(devs)] for devs in nodes]
            for chain in chains:  # reduce towards the head, broadcast back
                for a, b in zip(chain[1:], chain[:-1]):
                    loads.send(a, b, nbytes / c)
                    loads.send(b, a, nbytes / c)
            for child, parent in _binary_tree_edges(m):  # each tree carries half the data
                loads.send(chains[child][0], chains[parent][0], nbytes / (2 * c))
                loads.send(chains[parent][0], chains[child][0], nbytes / (2 * c))
        p = max(len(devs) for devs in nodes)
        lat = max(lat, 2 * _lat(topo, p - 1, math.ceil(math.log2(m)) if m > 1 else 0))
    return lat + loads.time()


def _hierarchical(topo, kind, nbytes, parts) -> float | None:
    """Phases in the node and across nodes; None where some group is in one node or uneven."""
    if any(len(nodes) < 2 or len({len(d) for d in nodes}) != 1 or len(nodes[0]) < 2 for nodes in parts):
        return None
    intra, inter = _Loads(topo), _Loads(topo)
    lat_intra = lat_inter = 0.0
    for nodes in parts:
        m, p = len(nodes), len(nodes[0])
        first = "all_reduce" if kind == "all_reduce" else "all_gather"
        for devs in nodes:  # reduce-scatter (or all-gather) of S among the p devices of each node
            _ring(intra, devs, volume_factor("reduce_scatter", p) * nbytes)
        for rank in range(p):  # the same local rank of every node: a rail
            _ring(inter, [devs[rank] for devs in nodes], volume_factor(first, m) * nbytes / p)
        lat_intra = max(lat_intra, _lat(topo, p - 1, 0))
        lat_inter = max(lat_inter, _lat(topo, 0, ring_steps(first, m)))
    phases = 2 if kind == "all_reduce" else 1
    return phases * (lat_intra + intra.time()) + lat_inter + inter.time()


def _direct(topo, kind, nbytes, groups) -> float:
    loads, lat = _Loads(topo), 0.0
    if kind == "collective_permute":
        for src, dst in groups:
            a, b = topo.place(src), topo.place(dst)
            loads.send(a, b, nbytes)
            lat = max(lat, _lat(topo, 0, 1) if a[0] != b[0] else _lat(topo, 1, 0))
        return lat + loads.time()
    for group in groups:
        placed = [topo.place(d) for d in group]
        share = nbytes / len(placed)
        for a in placed:
            for b in placed:
                loads.send(a, b, share)
        local = max(sum(1 for b in placed if b[0] == a[0]) for a in placed)
        lat = max(lat, _lat(topo, local - 1, len(placed) - local))
    return lat + loads.time()


def _tier(topo: NodeTopology, kind: str, groups) -> str:
    """The tiers the groups cross: the intra-node link, the network, or both (``nvlink+ib``)."""
    intra = inter = False
    for g in groups:
        nodes = [topo.place(d)[0] for d in g]
        if kind == "collective_permute":
            intra |= nodes[0] == nodes[1]
            inter |= nodes[0] != nodes[1]
        else:
            inter |= len(set(nodes)) > 1
            intra |= len(nodes) > len(set(nodes))
    names = ([topo.intra.name] if intra else []) + ([topo.inter.name] if inter and topo.inter else [])
    return "+".join(names) or "local"


def estimate_nodes(topo: NodeTopology, kind: str, nbytes: int, groups: tuple) -> CollectiveEstimate:
    """The fastest algorithm for one execution of ``kind`` over ``groups`` of device ids, S = ``nbytes``."""
    groups = tuple(tuple(g) for g in groups)
    if nbytes <= 0 or not groups or all(len(set(g)) < 2 for g in groups):
        return CollectiveEstimate(0.0, "none", "local", (("none", 0.0),))
    tier = _tier(topo, kind, groups)
    base = topo.base_latency
    if kind in ("all_to_all", "collective_permute"):
        t = base + _direct(topo, kind, nbytes, groups)
        return CollectiveEstimate(t, "direct", tier, (("direct", t),))
    parts = [_by_node(topo, g) for g in groups if len(g) > 1]
    cands = [("ring", base + _flat_ring(topo, kind, nbytes, parts))]
    if kind == "all_reduce":
        t = _tree(topo, nbytes, parts)
        if t is not None:
            cands.append(("tree", base + t))
    if kind in ("all_reduce", "all_gather", "reduce_scatter"):
        t = _hierarchical(topo, kind, nbytes, parts)
        if t is not None:
            cands.append(("hierarchical", base + t))
    cands.sort(key=lambda c: c[1])  # stable: ring, tree, hierarchical among equals
    return CollectiveEstimate(cands[0][1], cands[0][0], tier, tuple(cands))

