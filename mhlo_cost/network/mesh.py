"""Collectives on a 2-D / 3-D mesh or torus of chips (:class:`MeshTopology`).

A transfer between two chips follows dimension-order routing (the first axis first, then the next;
the shorter way round an axis with wraparound) and loads every link on its path. All groups of a
collective run at once. A phase takes its latency terms plus the bytes of its busiest link over the
link's achievable bandwidth; the fastest algorithm is taken:

* **ring**: one ring over each group, in the group's own order or in a snake (boustrophedon) order
  over the rectangle the group fills, each run one way or half each way round (two rings), the best
  of these. Along a line without wraparound a ring still comes back over the same links, so it moves
  one link's bandwidth; round a torus axis, two rings move twice that.
* **dim-rings** (a group that fills a rectangle spanning two or more axes): the collective one axis
  at a time, every line of the rectangle along that axis at once: all_reduce = reduce-scatter along
  each axis in turn, then all-gather back in the reverse order; all_gather one axis after another
  (the data grows: the best axis order is taken), reduce_scatter the reverse.
* **direct** (all_to_all, collective_permute): every chip sends to every target at once, routed.

Latency: every ring step waits for its longest hop (hops x the link latency); a direct all_to_all
takes one step per peer.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

from .topology import CollectiveEstimate, MeshTopology, ring_steps, volume_factor


def _path(topo: MeshTopology, a: tuple, b: tuple) -> list[tuple]:
    """The directed links (coordinates, axis, +1/-1) from chip ``a`` to chip ``b``."""
    links, pos = [], list(a)
    for ax, (n, wrap) in enumerate(zip(topo.dims, topo.wraparound)):
        fwd = (b[ax] - pos[ax]) % n if wrap else b[ax] - pos[ax]
        if wrap:
            step = 1 if fwd <= n - fwd else -1
        else:
            step = 1 if fwd > 0 else -1
        while pos[ax] != b[ax]:
            links.append((tuple(pos), ax, step))
            pos[ax] = (pos[ax] + step) % n
    return links


class _Loads:
    def __init__(self, topo: MeshTopology):
        self.topo = topo
        self.load: dict = defaultdict(float)
        self.hops = 0  # the longest path of a transfer

    def send(self, a: tuple, b: tuple, nbytes: float) -> None:
        if nbytes <= 0 or a == b:
            return
        path = _path(self.topo, a, b)
        self.hops = max(self.hops, len(path))
        for link in path:
            self.load[link] += nbytes

    def time(self) -> float:
        return max(self.load.values(), default=0.0) / self.topo.link.effective


def _ring_loads(topo, orders: list[list[tuple]], vols: list[float], both_ways: bool) -> _Loads:
    loads = _Loads(topo)
    for order, vol in zip(orders, vols):
        n = len(order)
        for i in range(n):
            a, b = order[i], order[(i + 1) % n]
            if both_ways:
                loads.send(a, b, vol / 2)
                loads.send(b, a, vol / 2)
            else:
                loads.send(a, b, vol)
    return loads


def _best_ring(topo, orders, vols, steps: int) -> float:
    """The faster of one-way and two-way rings over ``orders``: latency + busiest link."""
    best = None
    for both in (True, False):
        loads = _ring_loads(topo, orders, vols, both)
        t = steps * loads.hops * topo.link.latency + loads.time()
        best = t if best is None else min(best, t)
    return best


def _extent(coords: list[tuple]) -> list[list[int]] | None:
    """The sorted coordinates of each axis where ``coords`` fill a rectangle exactly; None otherwise."""
    axes = [sorted({c[ax] for c in coords}) for ax in range(len(coords[0]))]
    size = 1
    for vals in axes:
        size *= len(vals)
    return axes if size == len(coords) == len(set(coords)) else None


def _snake(axes: list[list[int]]) -> list[tuple]:
    """Boustrophedon order over a rectangle: the last axis fastest, every other line reversed."""
    out = [()]
    for vals in axes:
        nxt = []
        for i, prefix in enumerate(out):
            nxt.extend(prefix + (v,) for v in (vals if i % 2 == 0 else vals[::-1]))
        out = nxt
    return out


def _flat_ring(topo, kind, nbytes, coords) -> float:
    steps = max(ring_steps(kind, len(c)) for c in coords)
    vols = [volume_factor(kind, len(c)) * nbytes for c in coords]
    best = _best_ring(topo, coords, vols, steps)
    extents = [_extent(c) for c in coords]
    if all(e is not None for e in extents):
        best = min(best, _best_ring(topo, [_snake(e) for e in extents], vols, steps))
    return best


def _dim_rings(topo, kind, nbytes, coords) -> float | None:
    """Axis by axis over rectangles; None where a group is no rectangle or spans one axis only."""
    extents = [_extent(c) for c in coords]
    if any(e is None for e in extents):
        return None
    spans = {tuple(ax for ax, vals in enumerate(e) if len(vals) > 1) for e in extents}
    if len(spans) != 1 or len(next(iter(spans))) < 2:
        return None
    span = next(iter(spans))
    best = None
    for order in itertools.permutations(span):
        t, size = 0.0, 1
        n = len(coords[0])
        for ax in order:  # all_gather / all_reduce's second half: the data grows by each line's size
            k = len(extents[0][ax])
            size *= k
            t += _axis_phase(topo, extents, ax, (k - 1) / k * nbytes * size / n)
        if kind == "all_reduce":
            t *= 2  # reduce-scatter in the reverse order moves the same bytes
        best = t if best is None else min(best, t)
    return best


def _axis_phase(topo, extents, ax: int, vol: float) -> float:
    """Rings along axis ``ax`` on every line of every rectangle, at once, each moving ``vol``."""
    orders = []
    for e in extents:
        others = [vals if i != ax else [None] for i, vals in enumerate(e)]
        for fixed in itertools.product(*others):
            orders.append([tuple(v if i == ax else fixed[i] for i in range(len(e))) for v in e[ax]])
    k = len(orders[0])
    return _best_ring(topo, orders, [vol] * len(orders), k - 1)


def _direct(topo, kind, nbytes, groups) -> float:
    loads = _Loads(topo)
    if kind == "collective_permute":
        for src, dst in groups:
            loads.send(topo.coords(src), topo.coords(dst), nbytes)
        return loads.hops * topo.link.latency + loads.time()
    steps = 0
    for g in groups:
        cs = [topo.coords(d) for d in g]
        for a in cs:
            for b in cs:
                loads.send(a, b, nbytes / len(cs))
        steps = max(steps, len(cs) - 1)
    return steps * topo.link.latency + loads.time()


def _tier(topo: MeshTopology, groups) -> str:
    spanned = set()
    for g in groups:
        cs = [topo.coords(d) for d in g]
        spanned |= {ax for ax in range(len(topo.dims)) if len({c[ax] for c in cs}) > 1}
    if not spanned:
        return "local"
    return f"{topo.link.name}:" + "+".join(topo.axes[ax] for ax in sorted(spanned))


def estimate_mesh(topo: MeshTopology, kind: str, nbytes: int, groups: tuple) -> CollectiveEstimate:
    """The fastest algorithm for one execution of ``kind`` over ``groups`` of device ids, S = ``nbytes``."""
    groups = tuple(tuple(g) for g in groups)
    if nbytes <= 0 or not groups or all(len(set(g)) < 2 for g in groups):
        return CollectiveEstimate(0.0, "none", "local", (("none", 0.0),))
    tier = _tier(topo, groups)
    base = topo.base_latency
    if kind in ("all_to_all", "collective_permute"):
        t = base + _direct(topo, kind, nbytes, groups)
        return CollectiveEstimate(t, "direct", tier, (("direct", t),))
    coords = [[topo.coords(d) for d in g] for g in groups if len(g) > 1]
    cands = [("ring", base + _flat_ring(topo, kind, nbytes, coords))]
    if kind in ("all_reduce", "all_gather", "reduce_scatter"):
        t = _dim_rings(topo, kind, nbytes, coords)
        if t is not None:
            cands.append(("dim-rings", base + t))
    cands.sort(key=lambda c: c[1])
    return CollectiveEstimate(cands[0][1], cands[0][0], tier, tuple(cands))


def mesh_traffic(topo: MeshTopology, kind: str, nbytes: int, groups) -> tuple[int, float]:
    """``(hops, busiest link bytes)`` of one execution of ``kind`` moved the simplest way: a one-way ring in
    each group's own order (all_reduce, all_gather, reduce_scatter), every chip straight to every peer
    (all_to_all: S / n to each) or each pair once (collective_permute: S); routed as :func:`estimate_mesh`
    routes. ``hops``: the longest path a transfer takes; the bytes: the most any one directed link carries."""
    loads = _Loads(topo)
    groups = tuple(tuple(g) for g in groups)
    if kind == "collective_permute":
        for src, dst in groups:
            loads.send(topo.coords(src), topo.coords(dst), nbytes)
    elif kind == "all_to_all":
        for g in groups:
            cs = [topo.coords(d) for d in g]
            for a in cs:
                for b in cs:
                    loads.send(a, b, nbytes / len(cs))
    else:
        for g in groups:
            cs = [topo.coords(d) for d in g]
            vol = volume_factor(kind, len(cs)) * nbytes
            for i, a in enumerate(cs):
                loads.send(a, cs[(i + 1) % len(cs)], vol)
    return loads.hops, max(loads.load.values(), default=0.0)
