"""The per-device volume of a collective under the ring algorithm, in the nccl-tests bus-bandwidth convention
(S: the bytes of the full, unsharded buffer): all_reduce 2(n-1)/n S, all_gather, reduce_scatter and all_to_all
(n-1)/n S, collective_permute S; whole bytes, rounded up."""
from __future__ import annotations


def ring_volume(kind: str, full_bytes: int, n: int) -> tuple[int, int]:
    """(bytes per device, ring steps) of one collective over a group of n devices."""
    if n <= 1:
        return 0, 0
    if kind == "all_reduce":
        return -(-2 * (n - 1) * full_bytes // n), 2 * (n - 1)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return -(-(n - 1) * full_bytes // n), n - 1
    if kind == "collective_permute":
        return full_bytes, 1
    if kind == "collective_broadcast":
        return full_bytes, n - 1
    raise ValueError(f"no ring volume rule for {kind}")
