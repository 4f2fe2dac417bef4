"""The roofline of one op: counted costs turned into time on a hardware profile.

The rule, per op row (metrics are totals over the row's multiplicity, so the times are too):

* **dot / convolution**: compute = FLOPs / (``matrix_peak(dtype)`` x efficiency(M, N, K, dtype)) where dtype
  is the *operands'* element type (the slowest of the two where they differ: a bf16 x bf16 -> f32 dot runs
  at the bf16 rate) and the efficiency is the profile's GEMM model (:mod:`mhlo_cost.machines.gemm`: large-shape
  fraction or calibrated curve, times wave quantization; 1 where the profile has none).
* **elementwise, transcendental, reduce, sort**: compute = max(FLOPs / ``vector_peak(dtype)``,
  transcendentals / ``transcendental_rate``), dtype the first floating-point operand's (the result's where
  there is none).
* **data movement** (broadcast, transpose, convert, slice, ...): no FLOPs, memory time only.
* memory = (bytes_read + bytes_written) at the bandwidth a kernel of that size reaches
  (:meth:`Hardware.memory_time`: ``hbm_bandwidth``, or the profile's measured memory model); time = max(compute, memory) plus the profile's
  ``kernel_overhead`` once per execution (multiplicity); bound = ``compute`` or ``memory``;
  utilisation = FLOPs / (time x peak of the unit that runs it).
* **no kernel** (:data:`NO_KERNEL`: ``constant``, ``reshape``, ``bitcast``, ``get_tuple_element``, tokens,
  sharding annotations and the sharding custom calls, and any data op that moves 0 bytes): a compiler
  emits no kernel for these (a reshape is a bitcast of a dense buffer, a constant lives in the executable),
  so they cost 0 s and no overhead; bound ``free``.
* **collectives**: on a chip profile, ``comm_time = multiplicity x steps x hop_latency + comm_bytes /
  link_bandwidth`` (:meth:`Hardware.comm_time`, a flat ring); on a system profile (``dgx-h100``, a mesh),
  multiplicity x the time of the fastest algorithm on its link tiers (:mod:`mhlo_cost.network`); bound
  ``comm``. Their HBM traffic is taken as hidden behind the link.
* **unknown ops**: 0 s, bound ``unknown``; counted (:attr:`Roofline.unknown_ops`) and flagged.

Every figure is a *lower bound* on a real run for the op as written (peak rates, one pass over HBM),
except that the unfused per-op sum charges every intermediate a round trip through HBM, which a compiler
avoids by fusing: :mod:`mhlo_cost.roofline.fusion` gives that estimate.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..machines.clock import clock_factor
from ..machines.hardware import Hardware, HardwareError, canonical_dtype
from ..network import row_estimate
from ..ir.tensorinfo import TensorInfo
from ..walk.row import Row, short_name
from ..walk.opsets import KNOWN_CUSTOM_CALLS

#: Ops no compiler runs as a kernel: they cost 0 s (short names, any dialect).
NO_KERNEL = frozenset({
    "constant", "reshape", "bitcast", "bitcast_convert", "get_tuple_element", "tuple", "optimization_barrier",
    "after_all", "create_token", "partition_id", "replica_id", "get_dimension_size", "add_dependency",
    "sharding_constraint", "propagation_barrier", "sharding_group", "domain",
})
BOUNDS = ("compute", "memory", "comm", "free", "unknown")

@dataclass(frozen=True, slots=True)
class OpTime:
    """The roofline of one row (totals over its multiplicity), in seconds."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    flops: int
    peak: float  # FLOP/s of the unit that runs the op (0 where none)
    bound: str  # compute, memory, comm, free, unknown
    unit: str  # matrix, vector, transcendental, memory, link, none
    # The part of memory_s that does not grow with the bytes (each kernel's fill and drain under the profile's
    # measured memory model, :meth:`Hardware.memory_fixed`): a fixed cost, like the launch overhead.
    fixed_s: float = 0.0

    @property
    def fixed_cost_s(self) -> float:
        """The costs that do not grow with the op's size: launch overhead, each kernel's fill and drain."""
        return self.overhead_s + self.fixed_s

    @property
    def growing_s(self) -> float:
        """The work that grows with the op's size: compute, or the memory time past the fill and drain."""
        return max(self.compute_s, self.memory_s - self.fixed_s)

    @property
    def overhead_bound(self) -> bool:
        """The fixed costs (launch overhead, fill and drain) outweigh the work that grows with the op's size."""
        return overhead_bound(self.fixed_cost_s, self.growing_s)

    @property
    def time_s(self) -> float:
        """max(compute, memory) + overhead, or the collective's comm time."""
        return max(self.compute_s, self.memory_s) + self.overhead_s + self.comm_s

    @property
    def kernel_s(self) -> float:
        """The time on the device's compute side (everything but communication)."""
        return max(self.compute_s, self.memory_s) + self.overhead_s

    @property
    def utilisation(self) -> float:
        t = self.time_s
        return self.flops / (t * self.peak) if t > 0 and self.peak > 0 else 0.0


def overhead_bound(fixed_cost_s: float, growing_s: float) -> bool:
    """The one rule for ``bound = overhead``, of an op or of a block (sums over its ops): the fixed costs
    (:attr:`OpTime.fixed_cost_s`) are more than the work that grows with the size (:attr:`OpTime.growing_s`)."""
    return fixed_cost_s > growing_s


def is_no_kernel(r: Row) -> bool:
    name = short_name(r.op)
    if name in NO_KERNEL:
        return True
    if name == "custom_call" and r.target in KNOWN_CUSTOM_CALLS:
        return True
    return r.kind == "data" and r.bytes_read + r.bytes_written == 0


def _dtype_ok(d: str) -> str | None:
    try:
        canonical_dtype(d)
        return d
    except HardwareError:
        return None


def vector_dtype(r: Row) -> str:
    """The element type a vector op computes in: its first floating-point operand's, else its result's."""
    for t in r.operands:
        if t.dtype.startswith(("f", "bf", "complex")) and _dtype_ok(t.dtype):
            return t.dtype
    res = r.result if isinstance(r.result, TensorInfo) else (r.result[0] if r.result else None)
    if res is not None and _dtype_ok(res.dtype):
        return res.dtype
    return "f32"


def matrix_peak(r: Row, hw: Hardware) -> float:
    """Peak of the matrix unit for a dot / convolution: the slowest rate of its two operands' dtypes."""
    dts = [t.dtype for t in r.operands[:2] if _dtype_ok(t.dtype)] or [vector_dtype(r)]
    return min(hw.matrix_peak(d) for d in dts)


def gemm_dims(r: Row) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of one execution of a dot: the result read as [batch..., M, N] (a rank-1 result is
    [M], N = 1) and K = FLOPs / (2 x result elements)."""
    res = r.result if isinstance(r.result, TensorInfo) else r.result[0]
    shape = tuple(res.shape)
    m, n = (shape[-2], shape[-1]) if len(shape) >= 2 else ((shape[0], 1) if shape else (1, 1))
    batch = 1
    for d in shape[:-2]:
        batch *= d
    elems = batch * m * n
    k = (r.gemm_flops // max(r.multiplicity, 1)) // (2 * elems) if elems else 0
    return batch, m, n, k


def matrix_key(r: Row, hw: Hardware) -> str:
    """The dtype key a dot's matrix rate is read at: its two operands' slowest on ``hw`` (:func:`matrix_peak`)."""
    dts = [t.dtype for t in r.operands[:2] if _dtype_ok(t.dtype)] or [vector_dtype(r)]
    return canonical_dtype(min(dts, key=hw.matrix_peak))


def gemm_efficiency(r: Row, hw: Hardware) -> float:
    """The fraction of the matrix peak a dot reaches on ``hw`` (:mod:`mhlo_cost.machines.gemm`; 1 without a model).
    Convolutions get the large-shape efficiency (no wave quantization), and so do f32 dots priced on the
    vector unit (:func:`on_vector_unit`). On a profile marked sustained (a training step, a long prefill:
    :func:`mhlo_cost.machines.clock.sustained`) it is multiplied by the dtype's clock under the power limit over the
    clock of the peak (:mod:`mhlo_cost.machines.clock`)."""
    model = getattr(hw, "gemm", None)
    if model is None:
        return 1.0
    key = matrix_key(r, hw)
    clock = clock_factor(hw, key)  # 1 unless the profile is marked sustained (machines/clock.py)
    if r.kind != "dot" or not r.gemm_flops:
        return model.base(r.conv_flops // max(r.multiplicity, 1), key) * clock
    batch, m, n, k = gemm_dims(r)
    return model.efficiency_of(batch, m, n, k, key, tiled=not on_vector_unit(key, hw)) * clock


def on_vector_unit(key: str, hw: Hardware) -> bool:
    """True for an f32 dot that ``hw`` prices at its vector (CUDA-core) f32 rate: no f32 matrix rate and
    no TF32 in use; such a SIMT dot has no tensor-core tile (see :mod:`mhlo_cost.machines.gemm`)."""
    if key != "f32" or "f32" in hw.matrix_flops:
        return False
    return not (getattr(hw, "f32_matmul", "f32") == "tf32" and "tf32" in hw.matrix_flops)


def op_time(r: Row, hw: Hardware) -> OpTime:
    """The roofline of one row; see the module docstring."""
    kind = r.kind
    if kind == "collective":
        topology = getattr(hw, "topology", None)
        comm = (r.multiplicity * row_estimate(topology, r).time_s if topology is not None
                else hw.comm_time(r.comm_bytes, r.multiplicity * r.comm_steps))
        return OpTime(0.0, 0.0, comm, 0.0, 0, 0.0, "comm", "link")
    if kind == "unknown":
        return OpTime(0.0, 0.0, 0.0, 0.0, 0, 0.0, "unknown", "none")
    if is_no_kernel(r):
        return OpTime(0.0, 0.0, 0.0, 0.0, 0, 0.0, "free", "none")
    memory = hw.memory_time(r.bytes_read + r.bytes_written, r.multiplicity)
    fixed = hw.memory_fixed(r.multiplicity) if memory > 0 else 0.0
    overhead = hw.kernel_overhead * r.multiplicity
    if kind in ("dot", "conv"):
        flops = r.gemm_flops + r.conv_flops + r.vector_flops
        peak = matrix_peak(r, hw)
        compute, unit = flops / (peak * gemm_efficiency(r, hw)), "matrix"
    else:
        flops = r.vector_flops
        if flops == 0 and r.transcendentals == 0:
            return OpTime(0.0, memory, 0.0, overhead, 0, 0.0, "memory", "memory", fixed)
        peak = hw.vector_peak(vector_dtype(r))
        compute, unit = flops / peak, "vector"
        trans = r.transcendentals / hw.transcendental_rate
        if trans > compute:
            compute, unit = trans, "transcendental"
            # Utilisation of the unit that binds: transcendentals over the special-function rate.
            flops, peak = r.transcendentals, hw.transcendental_rate
    bound = "compute" if compute >= memory else "memory"
    return OpTime(compute, memory, 0.0, overhead, flops, peak, bound, unit, fixed)


def unit_peaks(rows, times) -> float:
    """The reference peak for a whole program's utilisation: the matrix peak of the dtype that carries the
    most GEMM/conv FLOPs (the vector f32 peak for a program without any)."""
    best, peak = -1, 0.0
    acc: dict[float, int] = {}
    for r, t in zip(rows, times):
        if r.kind in ("dot", "conv") and t.peak:
            acc[t.peak] = acc.get(t.peak, 0) + t.flops
    for p, f in acc.items():
        if f > best:
            best, peak = f, p
    return peak

