"""What fits a device at a step's layout: the largest batch, the longest context and what bounds it (memory or the
model's positions). Used by one step's figures (:mod:`.serve`) and by its expert-parallel split (:mod:`.expert`)."""
from __future__ import annotations


def max_batch(layout, weight_bytes: int, act_per_seq: int, capacity: int, tp: int = 1) -> int:
    """The largest batch whose weights, cache and activations fit ``capacity`` per device at the context."""
    per_seq = -(-layout.at(batch=1).nbytes // tp) + act_per_seq
    room = capacity - -(-weight_bytes // tp)
    return max(room // per_seq, 0) if per_seq > 0 else 0


def max_context(layout, weight_bytes: int, activations: int, capacity: int, tp: int = 1) -> int | None:
    """The largest context at the layout's batch that fits (None: the cache stops growing: sliding windows)."""
    if layout.bounded:
        return None

    def fits(c):
        return -(-weight_bytes // tp) + -(-layout.at(context=c).nbytes // tp) + activations <= capacity

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def context_limit(by_memory: int | None, positions: int | None) -> tuple[int | None, str]:
    """The longest context and what bounds it: the memory's bound (None: the cache stops growing) or the
    model's positions (None: it declares none), the smaller; ``none`` where neither bounds it."""
    if positions is not None and (by_memory is None or positions < by_memory):
        return positions, "positions"
    return by_memory, "memory" if by_memory is not None else "none"
