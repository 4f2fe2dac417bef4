"""How PyTorch runs a convolution call, in both of its execution models (``--execution eager``: ``F.conv2d``;
``--execution inductor``: Inductor calls the same ATen op as an extern kernel, ``extern_kernels.convolution``).

**Which backend** (``aten/src/ATen/native/Convolution.cpp``, ``_select_conv_backend``): a depthwise convolution
(``ConvParams::is_depthwise``: a 4- or 5-d CUDA input, ``groups == input.size(1) > 1``, the output channels a
multiple of it) goes to cuDNN only where ``use_cudnn_depthwise`` says so: a channels-last input, or a half-precision
one whose shapes pass its ``kernel_cond`` and ``check_cudnn_depthwise_workload_with_filter`` (filters of 1, 3 or 5
taps only, by stride, channels and width). Those exceptions are not modelled: a depthwise convolution runs ATen's
own ``conv_depthwise2d`` kernel (``aten/src/ATen/native/cuda/DepthwiseConv2d.cu``, ``ConvBackend::CudaDepthwise2d``:
one thread per output element on the CUDA cores, no tensor cores and so no TF32; ConvNeXt's 7 x 7 ones in any
precision). Every other CUDA convolution goes to cuDNN (:func:`cudnn_convolution`).

**The host time of a cuDNN call** (:data:`CUDNN_CONV_HOST_S`, an ESTIMATE from one 2021 measurement):
``cudnn_convolution`` builds its parameter key and descriptors, finds or builds the execution plan, builds the
variant pack, takes its workspace from the caching allocator and calls ``cudnnBackendExecute``: far more host work
than an elementwise op's launch. PyTorch PR #51390 (the cuDNN v8 API's first step, 2021) timed
``nn.Conv2d(1, 1, 1)`` on a ``100 x 1 x 100 x 100`` CUDA input at 51.95 us a call over 1,000,000 calls
(``torch.utils.benchmark``; a kernel of that size runs for a few us, so the figure is the host's), and Callgrind at
135.9 thousand instructions a call (v8) against 124.7 thousand for the v7 API: the host work is the convolution
path's, not the v8 API's alone. The figure is likely high for today's torch: in that PR the execution plan was
still built on every call (plans are cached since PR #59656), and it holds ``nn.Module.__call__``'s Python, which
Inductor's extern call does not pay. No later published figure was found. The figure holds the call's own dispatch, so a cuDNN convolution's call costs it *instead of* the
per-op dispatch (:func:`.eager.dispatch_overhead`). A depthwise call (ATen's kernel) costs the dispatch.

Not modelled: Inductor's layout optimisation (torch >= 2.1, ``graph.py`` ``decide_layout_opt``) makes a conv graph
channels-last, which sends its depthwise convolutions to cuDNN (``use_cudnn_depthwise``); the backward
convolutions of a depthwise one (ATen's ``conv_depthwise2d_backward``, one call) and transposed convolutions are
told apart by shapes only (a row carries no group count), so they may be taken as cuDNN calls; a half-precision
depthwise convolution is priced at the matrix rate.

The convolution's operands are read as PyTorch lays them out (``NCHW`` input, ``OIHW`` weight: torchax and
torch-xla lower a torch convolution so); a program lowered from JAX has no torch call to describe.
"""
from __future__ import annotations

#: ESTIMATE: host seconds of one cuDNN convolution call, its dispatch included (PyTorch PR #51390: 51.95 us a call of
#: ``nn.Conv2d`` over 1,000,000 calls in 2021, likely high for today's torch; module docstring).
CUDNN_CONV_HOST_S = 51.95e-6


def depthwise(r) -> bool:
    """Whether convolution row ``r`` is depthwise as ``ConvParams::is_depthwise`` asks (a 1-d convolution being
    expanded to 2-d first, ``Convolution.cpp``'s "Expand 1d -> 2d"): a 3-, 4- or 5-d input
    ``(N, C, ...)`` and a weight ``(O, C / groups, ...)`` of one input channel per group, ``C > 1``, ``O`` a
    multiple of ``C``."""
    if r.kind != "conv" or len(r.operands) < 2:
        return False
    x, w = r.operands[0].shape, r.operands[1].shape
    if len(x) not in (3, 4, 5) or len(w) != len(x):  # (a 1-d one is viewed 4-d before the choice: view4d)
        return False
    return x[1] > 1 and w[1] == 1 and w[0] % x[1] == 0


def cudnn_convolution(r) -> bool:
    """Whether PyTorch runs convolution row ``r`` through cuDNN (module docstring): every convolution but a
    depthwise one (ATen's ``conv_depthwise2d``)."""
    return r.kind == "conv" and not depthwise(r)


def call_host_s(rows, members, per_call: float) -> float:
    """Host seconds of one execution of the framework call whose kernel holds rows ``members``: a cuDNN
    convolution's :data:`CUDNN_CONV_HOST_S` (at least ``per_call``), else ``per_call``."""
    if any(cudnn_convolution(rows[i]) for i in members):
        return max(per_call, CUDNN_CONV_HOST_S)
    return per_call
