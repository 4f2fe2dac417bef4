"""The host's time per framework call in the eager execution model (:mod:`.eager`): what a kernel cannot run ahead
of when the host is slower than the device.

Every framework op costs the host :func:`dispatch_overhead` (Python, the dispatcher, the launch call). A
convolution that PyTorch hands to cuDNN costs it far more: cuDNN's descriptors, its engine-plan cache lookup and
its execution call. PyTorch measured ``conv(input)`` for a tiny ``nn.Conv2d`` (100 x 1 x 100 x 100 input, a 1 x 1
kernel: no device time to speak of) at 51.95 us a call with ``torch.utils.benchmark`` through the cuDNN v8 API
(pytorch/pytorch PR #51390; callgrind: 136k instructions a call, 125k through the v7 API), the API PyTorch uses by
default since 2.0 (PR #89022): :data:`CUDNN_CONV_S`.

Which convolutions are cuDNN calls (``_select_conv_backend`` in aten/src/ATen/native/Convolution.cpp): every one
on a CUDA tensor except a depthwise one (groups = input channels), which runs PyTorch's own
``conv_depthwise2d`` kernel (``ConvBackend::CudaDepthwise2d``, an ordinary op's dispatch) unless it is half
precision with the shapes ``use_cudnn_depthwise`` lists or channels-last; those exceptions are not modelled (a
depthwise convolution is never taken as a cuDNN call). A depthwise convolution is read off torch's weight layout
(``[out, in / groups, kh, kw]``, which torchax keeps): a 2-D kernel whose second dimension is 1 with more than one
output channel and a window larger than one tap.
"""
from __future__ import annotations

from ..machines.hardware import Hardware

#: ESTIMATE: host time per framework op in PyTorch eager (Python, the dispatcher, the launch call): about
#: 5-10 us on a current server CPU (PyTorch's operator-overhead benchmarks); a profile may set
#: ``dispatch_overhead_us`` instead (:attr:`~mhlo_cost.machines.hardware.Hardware.dispatch_overhead`, seconds).
DISPATCH_S = 8e-6
#: Host time of one ``nn.Conv2d`` call that runs cuDNN (pytorch/pytorch PR #51390: 51.95 us, cuDNN v8 API).
CUDNN_CONV_S = 51.95e-6


def dispatch_overhead(hw: Hardware) -> float:
    """Seconds of host time per framework op: the profile's ``dispatch_overhead_us`` where it has one."""
    v = getattr(hw, "dispatch_overhead", None)
    return DISPATCH_S if v is None else float(v)


def depthwise(r) -> bool:
    """Whether convolution row ``r`` is depthwise in torch's weight layout (``[C, 1, kh, kw]``, a window of more
    than one tap)."""
    if len(r.operands) < 2 or not hasattr(r.operands[1], "shape"):
        return False
    w = tuple(r.operands[1].shape)
    return len(w) == 4 and w[1] == 1 and w[0] > 1 and w[2] * w[3] > 1


def cudnn_call(rows, k) -> bool:
    """Whether eager kernel ``k`` is a convolution PyTorch runs through cuDNN (any but a depthwise one)."""
    return any(rows[i].kind == "conv" and not depthwise(rows[i]) for i in k.members)


def host_times(kernels, calls, rows, per_call: float) -> None:
    """Each kernel's host time: its call's dispatch and that of the view calls just before it (a cuDNN
    convolution's call: :data:`CUDNN_CONV_S`, or the dispatch where that is longer); an attention's (a call of
    its own, SDPA) its own dispatch. ``calls``: (kernel id or -1 for a call of views only, executions)."""
    pending = 0
    for k, m in calls:
        pending += m
        if k >= 0:
            kernels[k].host_s = per_call * pending
            if cudnn_call(rows, kernels[k]):
                kernels[k].host_s += (max(CUDNN_CONV_S, per_call) - per_call) * m
            pending = 0
    for k in kernels:
        if k.backend:  # an SDPA call's kernel (or one of its math kernels): a call of its own
            k.host_s = per_call * k.multiplicity
