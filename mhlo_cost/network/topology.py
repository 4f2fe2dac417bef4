"""Where devices sit and which links join them: nodes joined by a network, or a mesh / torus of chips.

Two kinds of topology, each a frozen dataclass (their algorithms are in :mod:`.nodes` and :mod:`.mesh`):

* :class:`NodeTopology`: ``devices_per_node`` devices per node on an intra-node link (NVLink through
  NVSwitch: any device reaches any other at its full per-device bandwidth; or no switch: the node's
  devices are wired in a ring), nodes joined by a network of ``nics_per_node`` NICs per node. Device
  ``i`` (after placement) is local device ``i % devices_per_node`` of node ``i // devices_per_node``;
  local device ``l`` uses NIC ``l * nics_per_node // devices_per_node`` (rail-optimised: one NIC per GPU
  when there are as many NICs as GPUs, two GPUs per NIC with half as many);
* :class:`MeshTopology`: chips at the points of a 2-D or 3-D grid, each joined to its neighbours along
  every axis by one link per direction (``wraparound`` closes an axis into a ring: a torus); device
  ``i`` (after placement) sits at the row-major coordinates of ``i`` (the last axis fastest, as JAX
  numbers a mesh).

``placement`` maps logical device ids (the ids in the IR's replica groups) to physical slots: slot =
``placement[id]``; absent, slot = id (consecutive ids per node, as JAX and torch number devices).

Bandwidths are bytes/s in ONE direction at line rate; ``efficiency`` is the achievable fraction (the
protocol overhead of the collective library); latencies are seconds per algorithm step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..machines.hardware import HardwareError

__all__ = ["CollectiveEstimate", "Link", "MeshTopology", "NetworkError", "NodeTopology", "volume_factor"]


class NetworkError(HardwareError):
    """A system profile is malformed, or a collective's devices do not fit its topology. One line."""


@dataclass(frozen=True)
class Link:
    """One tier of links."""

    name: str  # the tier's name in reports: nvlink, ib, efa, mesh, ...
    bandwidth: float  # bytes/s, one direction, line rate (per device intra-node, per NIC, per mesh link)
    efficiency: float = 1.0  # achievable fraction of the line rate
    latency: float = 0.0  # seconds per algorithm step over this tier

    @property
    def effective(self) -> float:
        """Achievable bandwidth, bytes/s in one direction."""
        return self.bandwidth * self.efficiency


@dataclass(frozen=True)
class CollectiveEstimate:
    """The time of one execution of a collective, the algorithm that gives it and the tiers it crosses."""

    time_s: float
    algorithm: str  # ring, tree, hierarchical, direct, dim-rings, none
    tier: str  # nvlink, ib, nvlink+ib, mesh:x, mesh:y+x, local
    candidates: tuple = ()  # (algorithm, time_s) of every algorithm considered, fastest first

    def time_of(self, algorithm: str) -> float:
        for name, t in self.candidates:
            if name == algorithm:
                return t
        raise KeyError(f"algorithm {algorithm!r} was not considered (considered: "
                       f"{', '.join(n for n, _ in self.candidates) or 'none'})")


def volume_factor(kind: str, n: int) -> float:
    """Bytes one device sends in a ring over n devices, per byte of the full buffer S (nccl-tests' bus
    bandwidth factor): all_reduce 2(n-1)/n, all_gather / reduce_scatter / all_to_all (n-1)/n,
    collective_broadcast 1 (pipelined), collective_permute 1."""
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if kind in ("collective_broadcast", "collective_permute"):
        return 1.0
    raise NetworkError(f"no network model for collective {kind!r}")


def ring_steps(kind: str, n: int) -> int:
    """Sequential steps of a ring over n devices (the latency term)."""
    if n <= 1:
        return 0
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


def _placed(placement: tuple, device: int, limit: int | None) -> int:
    if device < 0:
        raise NetworkError(f"device id {device} is negative")
    if placement:
        if device >= len(placement):
            raise NetworkError(f"device {device} has no place: the system's placement lists {len(placement)}")
        device = placement[device]
    if limit is not None and device >= limit:
        raise NetworkError(f"device {device} is outside the system ({limit} devices)")
    return device


@dataclass(frozen=True)
class NodeTopology:
    """Nodes of ``devices_per_node`` devices on ``intra``, joined by ``nics_per_node`` NICs of ``inter``."""

    devices_per_node: int
    intra: Link
    inter: Link | None = None  # None: a single node (a collective spanning nodes is an error)
    nics_per_node: int = 0
    switch: bool = True
    base_latency: float = 0.0  # seconds per collective call
    placement: tuple = ()

    def place(self, device: int) -> tuple[int, int]:
        """(node, local index) of a logical device id."""
        s = _placed(self.placement, device, None if self.inter is not None else self.devices_per_node)
        return divmod(s, self.devices_per_node)

    def nic(self, local: int) -> int:
        return local * self.nics_per_node // self.devices_per_node


@dataclass(frozen=True)
class MeshTopology:
    """Chips on a grid of ``dims`` joined to their neighbours by ``link`` (one per direction per axis)."""

    dims: tuple
    link: Link
    axes: tuple = ()
    wraparound: tuple = ()
    base_latency: float = 0.0
    placement: tuple = ()
    size: int = field(init=False)

    def __post_init__(self) -> None:
        n = 1
        for d in self.dims:
            n *= d
        object.__setattr__(self, "size", n)
        if not self.axes:
            object.__setattr__(self, "axes", ("z", "y", "x")[-len(self.dims):])
        wrap = self.wraparound or (False,) * len(self.dims)
        # An axis of 1 or 2 chips has one neighbour each way, wraparound or not.
        object.__setattr__(self, "wraparound", tuple(bool(w) and d > 2 for w, d in zip(wrap, self.dims)))

    def coords(self, device: int) -> tuple:
        """Row-major coordinates (last axis fastest) of a logical device id."""
        s = _placed(self.placement, device, self.size)
        out = []
        for d in reversed(self.dims):
            s, c = divmod(s, d)
            out.append(c)
        return tuple(reversed(out))
