"""What running Inductor's kernels costs beside their device time, and what Inductor does by torch release.

**The host's launch of each kernel** (no CUDA graphs: ``torch.compile``'s default mode). Inductor's output is a
Python wrapper (``torch/_inductor/codegen/wrapper.py``) whose ``call()`` runs the graph's kernels one line each:

* a Triton kernel is ``kernel.run(*args, grid=..., stream=...)``: ``CachingAutotuner.run``
  (``triton_heuristics.py``; ``triton_ops/autotune.py`` in torch 2.0) calls the launcher it built with ``exec``,
  which calls Triton's generated C binder (``bin.c_wrapper`` in Triton 2.0, ``CompiledKernel.run`` later):
  ``PyArg_ParseTuple``, for each tensor argument its ``data_ptr()`` through Python and ``cuPointerGetAttribute``,
  then ``cuLaunchKernel``. tritonbench's launch-latency study (meta-pytorch/tritonbench PR #1017, 2026, GB200)
  timed that whole path at 6.8 us for a kernel of no arguments and 9.1 us for one of 19
  (:data:`TRITON_LAUNCH_S`, :data:`TRITON_ARG_S`); of which ``cuLaunchKernel`` itself is 3.0 us;
* an extern kernel (a cuBLAS GEMM, a cuDNN convolution, an SDPA call) is an ATen op called from that Python
  (``extern_kernels.mm(a, b, out=buf)``, ``extern_kernels.convolution(...)``): the same Python-to-dispatcher
  path an eager op takes, so its host time is the eager model's per-op dispatch
  (:func:`.eager_host.dispatch_overhead`); a cuDNN convolution's is its call's (:mod:`.conv_calls`: the plan,
  variant pack and ``cudnnBackendExecute`` of every call, 51.95 us in PyTorch PR #51390, an ESTIMATE), as in eager.

A kernel cannot start before the host has launched it (:attr:`.inductor.InductorKernel.host_s`). The per-call
cost of the graph (Dynamo's guards, AOTAutograd's wrapper, the call itself: 33-44 us in the same study) is not
priced. With CUDA graphs (``mode="reduce-overhead"``) the host launches one graph per step and each replayed kernel
pays :data:`GRAPH_GAP_S` and at most :data:`GRAPH_FILL_S` of fixed memory time.

**By torch release** (:func:`sdpa_rewrite`): Inductor rewrites attention written out (``q @ k^T``, softmax,
``@ v``) into one ``scaled_dot_product_attention`` call only from torch 2.1: the pattern matcher
``torch/_inductor/fx_passes/fuse_attention.py`` is not in the 2.0 release (its ``fx_passes`` folder came after the
2.0 branch; pytorch issue #100452, May 2023, reports the new pass on the main branch). Under torch 2.0.x written
attention runs as its kernels: two extern batched GEMMs with a Triton softmax between them.
"""
from __future__ import annotations

import re

from ..machines.hardware import Hardware
from .conv_calls import call_host_s

#: Host time of one Triton kernel's launch from Inductor's wrapper with no arguments: ``CachingAutotuner.run``
#: through the launcher and Triton's binder to ``cuLaunchKernel`` (tritonbench PR #1017: 6.8 us, GB200).
TRITON_LAUNCH_S = 6.8e-6
#: The launch time each argument adds (the same study: 9.1 us with 19 arguments, 6.8 us with none).
TRITON_ARG_S = (9.1e-6 - 6.8e-6) / 19
#: ESTIMATE: the gap between back-to-back kernels replayed from a CUDA graph (no host launch): about 1 us.
GRAPH_GAP_S = 1e-6
#: ESTIMATE: the most fixed device time (grid start, first HBM round trip, drain) a kernel replayed back to back
#: from a CUDA graph pays beside its bytes: about 2 us, the order of a small kernel's whole duration in a graph
#: (NVIDIA, "Getting Started with CUDA Graphs", 2019: a ~2.9 us kernel replayed at ~3.4 us per kernel on V100).
#: The profile's ``half_size_mb`` fill (5.8 us on A100) is read off kernels timed one at a time between CUDA
#: events after an L2 flush (``triton.testing.do_bench``): it holds the event and launch latency a replay does
#: not pay, so it would act as a per-kernel floor of every tiny kernel of a decode step.
GRAPH_FILL_S = 2e-6
#: The first torch release whose Inductor rewrites written-out attention into an SDPA call (module docstring).
SDPA_REWRITE_FROM = (2, 1)


def parse_torch(version: str | None) -> tuple[int, int] | None:
    """``"2.0.1"`` -> ``(2, 0)``; None for None (a current torch). A version that is not ``major.minor[...]``
    is refused (ValueError)."""
    if version is None:
        return None
    m = re.fullmatch(r"(\d+)\.(\d+)(\.\d+)?([+.a-z0-9]*)", str(version).strip())
    if m is None:
        raise ValueError(f"torch version {version!r} is not major.minor[.patch]")
    return int(m.group(1)), int(m.group(2))


def sdpa_rewrite(version: str | None) -> bool:
    """Whether Inductor of torch ``version`` (None: a current release) rewrites written-out attention into one
    SDPA call (from :data:`SDPA_REWRITE_FROM`)."""
    v = parse_torch(version)
    return v is None or v >= SDPA_REWRITE_FROM


def triton_args(k) -> int:
    """The arguments of a Triton kernel's launch: a pointer per tensor it reads or writes and its ``xnumel``
    (and ``rnumel`` for a reduction). A one-element input (a scalar constant of the IR) is a literal of the
    kernel's code, not an argument."""
    tensors = sum(getattr(t, "nelems", 2) > 1 for t in k.inputs) + len(k.outputs)
    return tensors + (1 if getattr(k, "rnumel", 1) <= 1 else 2)


def host_launch_s(k, hw: Hardware, rows=None) -> float:
    """Host seconds to launch kernel ``k`` once from Inductor's wrapper (module docstring): an extern kernel
    as an eager op's dispatch (a cuDNN convolution as its call, :func:`.conv_calls.call_host_s`, where ``rows``
    are given), a Triton kernel :data:`TRITON_LAUNCH_S` plus :data:`TRITON_ARG_S` per argument."""
    if k.extern:
        from .eager_host import dispatch_overhead

        return dispatch_overhead(hw) if rows is None else call_host_s(rows, k.members, dispatch_overhead(hw))
    return TRITON_LAUNCH_S + TRITON_ARG_S * triton_args(k)


def launch(k, hw: Hardware, cudagraphs: bool, rows=None) -> None:
    """A kernel's launch costs: the profile's gap between kernels and the host's launch (:func:`host_launch_s`),
    or (CUDA graphs) the graph's gap, no host launch and a fixed memory time of at most :data:`GRAPH_FILL_S`
    (:func:`graph_memory_s`)."""
    if cudagraphs:
        k.overhead_s = min(hw.kernel_overhead, GRAPH_GAP_S) * k.multiplicity
        k.host_s = 0.0
        k.memory_s = graph_memory_s(k, hw)
    else:
        k.host_s = host_launch_s(k, hw, rows) * k.multiplicity


def graph_memory_s(k, hw: Hardware) -> float:
    """Kernel ``k``'s memory time replayed from a CUDA graph: its bytes streamed as
    :meth:`~mhlo_cost.machines.profile.Hardware.memory_time` streams them, with each execution's fixed fill and
    drain (:meth:`~mhlo_cost.machines.profile.Hardware.memory_fixed`) at most :data:`GRAPH_FILL_S`; never above
    the memory time measured outside a graph."""
    m, nbytes = k.multiplicity, k.bytes_read + k.bytes_written
    if k.memory_s <= 0 or nbytes <= 0:
        return k.memory_s
    fixed = hw.memory_fixed(m)
    stream = hw.memory_time(nbytes, m) - fixed
    return min(k.memory_s, stream + min(fixed, GRAPH_FILL_S * m))
