"""The host's time per framework call in the eager execution model (:mod:`.eager`): what a kernel cannot run ahead
of when the host is slower than the device.

Every framework op costs the host :func:`dispatch_overhead` (Python, the dispatcher, the launch call). A
convolution that PyTorch hands to cuDNN costs it its own call time instead (51.95 us, pytorch PR #51390), and a
depthwise one runs PyTorch's own kernel at the ordinary dispatch: :mod:`.conv_calls` says which and what, for eager
and Inductor's extern calls alike.
"""
from __future__ import annotations

from ..machines.hardware import Hardware
from .conv_calls import call_host_s

#: ESTIMATE: host time per framework op in PyTorch eager (Python, the dispatcher, the launch call): about
#: 5-10 us on a current server CPU (PyTorch's operator-overhead benchmarks); a profile may set
#: ``dispatch_overhead_us`` instead (:attr:`~mhlo_cost.machines.hardware.Hardware.dispatch_overhead`, seconds).
DISPATCH_S = 8e-6


def dispatch_overhead(hw: Hardware) -> float:
    """Seconds of host time per framework op: the profile's ``dispatch_overhead_us`` where it has one."""
    v = getattr(hw, "dispatch_overhead", None)
    return DISPATCH_S if v is None else float(v)


def host_times(kernels, calls, rows, per_call: float) -> None:
    """Each kernel's host time: its call's dispatch and that of the view calls just before it (a cuDNN
    convolution's call: its own call time instead of the dispatch, :func:`.conv_calls.call_host_s`); an
    attention's (a call of its own, SDPA) its own dispatch. ``calls``: (kernel id or -1 for a call of views only,
    executions)."""
    pending = 0
    for k, m in calls:
        pending += m
        if k >= 0:
            own = call_host_s(rows, kernels[k].members, per_call)
            kernels[k].host_s = per_call * pending if own == per_call else per_call * (pending - m) + own * m
            pending = 0
    for k in kernels:
        if k.backend:  # an SDPA call's kernel (or one of its math kernels): a call of its own
            k.host_s = per_call * k.multiplicity
