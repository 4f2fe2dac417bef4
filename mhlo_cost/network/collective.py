"""One entry point for the time of a collective on a topology, and the bridge from an op row to it."""
from __future__ import annotations

from functools import lru_cache

from .mesh import estimate_mesh
from .nodes import estimate_nodes
from .topology import CollectiveEstimate, MeshTopology, NetworkError, NodeTopology

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "collective_broadcast")


def estimate(topology, kind: str, nbytes: int, groups) -> CollectiveEstimate:
    """The fastest algorithm for ONE execution of ``kind`` on ``topology``.

    ``nbytes`` is S, the full (unsharded) buffer in bytes as :mod:`mhlo_cost.walk.collective` defines it
    (all_gather: its result; the others: their operand); ``groups`` the device ids of each replica group
    (collective_permute: its (source, target) pairs). Groups run at the same time.
    """
    return _estimate(topology, kind, int(nbytes), tuple(tuple(int(d) for d in g) for g in groups))


@lru_cache(maxsize=4096)
def _estimate(topology, kind: str, nbytes: int, groups: tuple) -> CollectiveEstimate:
    if kind not in KINDS:
        raise NetworkError(f"no network model for collective {kind!r}")
    if isinstance(topology, NodeTopology):
        return estimate_nodes(topology, kind, nbytes, groups)
    if isinstance(topology, MeshTopology):
        return estimate_mesh(topology, kind, nbytes, groups)
    raise NetworkError(f"not a topology: {type(topology).__name__}")


def full_bytes(row) -> int:
    """S of one execution of a collective row (its metrics are totals over its multiplicity)."""
    total = row.bytes_written if row.comm_kind == "all_gather" else row.bytes_read
    return total // max(row.multiplicity, 1)


def row_groups(row) -> tuple:
    """The row's device groups; rows without them (made by hand) get ``num_groups`` consecutive groups."""
    if row.replica_groups:
        return row.replica_groups
    n, g = row.group_size, max(row.num_groups, 1)
    if row.comm_kind == "collective_permute":  # a ring over each group, as the volume rule assumes
        return tuple((k * n + i, k * n + (i + 1) % n) for k in range(g) for i in range(n)) if n > 1 else ()
    return tuple(tuple(range(k * n, (k + 1) * n)) for k in range(g))


def row_estimate(topology, row) -> CollectiveEstimate:
    """:func:`estimate` for one execution of a collective op row."""
    return estimate(topology, row.comm_kind, full_bytes(row), row_groups(row))
