"""Where a span of ops' time goes (a block, the program): ``comm``, ``compute``, ``memory``, ``overhead`` or
``free``, from its sums (the block table's and the summary's ``bound`` columns, :mod:`.estimate`)."""
from __future__ import annotations

from .optime import overhead_bound


def span_bound(device_s: float, compute_bound_s: float, comm_s: float, fixed_cost_s: float,
               growing_s: float) -> str:
    """The bound of a span of ops (a block, the program): :func:`time_bound` of its (fused, if estimated) device
    time, ``overhead`` instead of ``memory`` where op by op the fixed costs (launch overhead, fill and drain) are
    more than the work that grows with the size: the op table's rule (:func:`.optime.overhead_bound`) on the
    span's sums."""
    b = time_bound(device_s, compute_bound_s, comm_s)
    return "overhead" if b == "memory" and overhead_bound(fixed_cost_s, growing_s) else b


def time_bound(device_s: float, compute_bound_s: float, comm_s: float) -> str:
    """Where most of a span's time goes: ``comm`` where communication outweighs the device's time, else
    ``compute`` where compute-bound kernels take half of that or more, else ``memory`` (``free``: no time)."""
    if comm_s > device_s and comm_s > 0:
        return "comm"
    if device_s > 0:
        return "compute" if compute_bound_s >= device_s / 2 else "memory"
    return "free"
