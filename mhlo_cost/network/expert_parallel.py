"""Expert parallelism: the all_to_all dispatch and combine of a mixture-of-experts layer split over devices.

With expert parallelism of degree ``e``, each of ``e`` devices holds ``E / e`` of a layer's experts and its
own share of the tokens. The layer sends every token copy (a token routed to one of its ``k`` experts) to
the device that holds that expert (dispatch) and the expert's output back (combine): two ``all_to_all`` per
layer, each over ``S = copies x hidden x bytes`` (the device's own token copies: the full buffer of the
collective, ``tokens x k`` for a dropless router, ``E x capacity`` rows with a capacity factor, padding
included, as a capacity-based dispatch sends them). Under the even spread of the dropless routing
(:mod:`mhlo_cost.lower.frontends.moe`) a copy stays on its own device one time in ``e``: each device sends
``(e - 1) / e x S`` each way, the all_to_all volume of the ring convention
(:func:`mhlo_cost.walk.ring.ring_volume`). The time of each all_to_all is priced by the topology like
any other collective (:func:`mhlo_cost.network.collective.estimate`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .collective import estimate
from .topology import NetworkError


@dataclass(frozen=True)
class ExpertParallelComm:
    """The all_to_all traffic of the expert layers of one forward, per device."""

    degree: int  # e: devices the experts are split over
    full_bytes: int  # S of one all_to_all (dispatch or combine), bytes
    bytes_per_device: int  # bytes one device sends in one all_to_all
    layers: int  # expert layers (two all_to_all each)

    @property
    def collectives(self) -> int:
        return 2 * self.layers

    @property
    def total_bytes_per_device(self) -> int:
        """Bytes one device sends over the whole forward: dispatch and combine of every layer."""
        return self.collectives * self.bytes_per_device


def all_to_all_bytes(copies: int, hidden: int, dtype_bytes: int, degree: int) -> int:
    """Bytes one device sends in one dispatch (or combine) of ``copies`` token copies of ``hidden`` elements
    of ``dtype_bytes`` bytes over ``degree`` devices: ``copies x hidden x bytes x (e - 1) / e``, rounded up
    (for a dropless router ``copies = tokens x k``)."""
    for name, v in (("copies", copies), ("hidden", hidden), ("dtype_bytes", dtype_bytes), ("degree", degree)):
        least = 1 if name == "degree" else 0
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            raise NetworkError(f"expert parallelism: {name} must be an integer of at least {least}, got {v!r}")
    full = copies * hidden * dtype_bytes
    return -(-(degree - 1) * full // degree)


def expert_parallel(copies: int, hidden: int, dtype_bytes: int, degree: int, layers: int = 1) -> ExpertParallelComm:
    """The :class:`ExpertParallelComm` of ``layers`` expert layers, ``copies`` token copies per device each."""
    per_device = all_to_all_bytes(copies, hidden, dtype_bytes, degree)
    return ExpertParallelComm(degree, copies * hidden * dtype_bytes, per_device, layers)


def estimate_expert_parallel(topology, comm: ExpertParallelComm, first_device: int = 0) -> float:
    """Seconds of every dispatch and combine of ``comm`` on ``topology``, one after the other (a layer's
    experts wait for its dispatch; the next layer waits for the combine), the expert-parallel group being
    devices ``first_device .. first_device + degree - 1``."""
    group = (tuple(range(first_device, first_device + comm.degree)),)
    one = estimate(topology, "all_to_all", comm.full_bytes, group)
    return comm.collectives * one.time_s
