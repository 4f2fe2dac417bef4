"""Roofline latency: counted costs turned into time on a hardware profile, per op, per block, per run.

The rule, per op row (metrics are totals over the row's multiplicity, so the times are too):

* **dot / convolution**: compute = FLOPs / ``matrix_peak(dtype)`` where dtype is the *operands'* element
  type (the slowest of the two where they differ): a bf16 x bf16 -> f32 dot runs at the bf16 rate.
* **elementwise, transcendental, reduce, sort**: compute = max(FLOPs / ``vector_peak(dtype)``,
  transcendentals / ``transcendental_rate``), dtype the first floating-point operand's (the result's where
  there is none).
* **data movement** (broadcast, transpose, convert, slice, ...): no FLOPs, memory time only.
* memory = (bytes_read + bytes_written) / ``hbm_bandwidth``; time = max(compute, memory) plus the profile's
  ``kernel_overhead`` once per execution (multiplicity); bound = ``compute`` or ``memory``;
  utilisation = FLOPs / (time x peak of the unit that runs it).
* **no kernel** (:data:`NO_KERNEL`: ``constant``, ``reshape``, ``bitcast``, ``get_tuple_element``, tokens,
  sharding annotations and the sharding custom calls, and any data op that moves 0 bytes): a compiler
  emits no kernel for these (a reshape is a bitcast of a dense buffer, a constant lives in the executable),
  so they cost 0 s and no overhead; bound ``free``.
* **collectives**: ``comm_time = multiplicity x steps x hop_latency + comm_bytes / link_bandwidth``
  (:meth:`Hardware.comm_time`); bound ``comm``. Their HBM traffic is taken as hidden behind the link.
* **unknown ops**: 0 s, bound ``unknown``; counted (:attr:`Roofline.unknown_ops`) and flagged.

Every figure is a *lower bound* on a real run for the op as written (peak rates, one pass over HBM),
except that the unfused per-op sum charges every intermediate a round trip through HBM, which a compiler
avoids by fusing: :func:`fuse` gives that estimate.

Fusion (``--fuse elementwise``)
-------------------------------
:func:`fuse` groups rows into kernels the way XLA's GPU fusion passes roughly would, from the data flow
(:func:`analyze_dataflow` re-walks the module with a visitor that records, per row, the rows producing
its operands), in program order:

* a dot or convolution opens a kernel; elementwise consumers that do not widen its result's element
  type join it (epilogue: bias, activation, residual, scaling, slices of its output);
* an elementwise op (or a fusible data op: transpose, slice, concatenate, pad, narrowing convert, ...)
  joins the open kernel of its latest producer, else opens a kernel of its own;
* a reduce joins the open kernel of its producer unless that kernel has a GEMM (input fusion). A
  reduction over trailing dimensions of at most :data:`ROW_LIMIT` elements (softmax, LayerNorm, RMSNorm
  rows) leaves its kernel open, so that the consumers broadcasting the result back over the row fuse too
  (XLA's Triton softmax / normalization fusions); any other reduction closes its kernel;
* ``broadcast_in_dim``, ``iota`` and widening converts are duplicated into each consumer, which then
  reads their small operand rather than their result; no-kernel ops (reshape, constant) pass through;
* an op never joins a kernel one of its other operands depends on (that would be a cycle), and the
  members of a kernel share one multiplicity; collectives and unknown ops stay alone.

A kernel reads each external input once (deduplicated by the producing value, looking through reshapes)
and writes each value that an op outside it (or nobody: a program output) reads; its compute time is the
sum of its members'; it pays one kernel overhead per execution. The fused total is never above the
unfused one: a kernel's bytes are a subset of its members' (and its time is capped at their sum). A
kernel's time is shared among its members in proportion to their unfused times, so per-block fused
columns add up to the fused total.

What fusion does not model: flash attention (the score matrix still makes a round trip through HBM: a
lower bound for XLA as it is, not for a hand-fused kernel), GEMM efficiency below peak, and kernels
spanning loop iterations.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import pandas as pd

from .analysis import Analysis
from .hardware import Hardware, HardwareError, canonical_dtype
from .types import TensorInfo
from .visitors.base import Row, short_name
from .visitors.cost import CostVisitor
from .visitors.vector import KNOWN_CUSTOM_CALLS

#: Ops no compiler runs as a kernel: they cost 0 s (short names, any dialect).
NO_KERNEL = frozenset({
    "constant", "reshape", "bitcast", "bitcast_convert", "get_tuple_element", "tuple", "optimization_barrier",
    "after_all", "create_token", "partition_id", "replica_id", "get_dimension_size", "add_dependency",
    "sharding_constraint", "propagation_barrier", "sharding_group", "domain",
})
#: Data ops that a loop fusion absorbs (they move or cast elements of one index space).
FUSIBLE_DATA = frozenset({
    "convert", "transpose", "slice", "dynamic_slice", "concatenate", "pad", "reverse", "copy", "reduce_precision",
    "real_dynamic_slice", "broadcast_in_dim", "broadcast", "iota",
})
#: Data ops duplicated into each consumer when no kernel is open for them (cheap to recompute).
DUPLICATED = frozenset({"broadcast_in_dim", "broadcast", "iota"})
#: Longest row (elements) of a reduction over trailing dimensions that stays fused with its consumers.
ROW_LIMIT = 16384
FUSE_MODES = ("none", "elementwise")

BOUNDS = ("compute", "memory", "comm", "free", "unknown")


# ---------------------------------------------------------------------------------------------------------
# Per-op times
# ---------------------------------------------------------------------------------------------------------


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


def op_time(r: Row, hw: Hardware) -> OpTime:
    """The roofline of one row; see the module docstring."""
    kind = r.kind
    if kind == "collective":
        return OpTime(0.0, 0.0, hw.comm_time(r.comm_bytes, r.multiplicity * r.comm_steps), 0.0, 0, 0.0,
                      "comm", "link")
    if kind == "unknown":
        return OpTime(0.0, 0.0, 0.0, 0.0, 0, 0.0, "unknown", "none")
    if is_no_kernel(r):
        return OpTime(0.0, 0.0, 0.0, 0.0, 0, 0.0, "free", "none")
    memory = (r.bytes_read + r.bytes_written) / hw.hbm_bandwidth
    overhead = hw.kernel_overhead * r.multiplicity
    if kind in ("dot", "conv"):
        flops = r.gemm_flops + r.conv_flops + r.vector_flops
        peak = matrix_peak(r, hw)
        compute, unit = flops / peak, "matrix"
    else:
        flops = r.vector_flops
        if flops == 0 and r.transcendentals == 0:
            return OpTime(0.0, memory, 0.0, overhead, 0, 0.0, "memory", "memory")
        peak = hw.vector_peak(vector_dtype(r))
        compute, unit = flops / peak, "vector"
        trans = r.transcendentals / hw.transcendental_rate
        if trans > compute:
            compute, unit = trans, "transcendental"
            # Utilisation of the unit that binds: transcendentals over the special-function rate.
            flops, peak = r.transcendentals, hw.transcendental_rate
    bound = "compute" if compute >= memory else "memory"
    return OpTime(compute, memory, 0.0, overhead, flops, peak, bound, unit)


def _unit_peaks(rows, times) -> float:
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


# ---------------------------------------------------------------------------------------------------------
# Data flow: which rows produce each row's operands
# ---------------------------------------------------------------------------------------------------------


class _DataflowVisitor(CostVisitor):
    """:class:`CostVisitor` that also records, per row, the source of each operand: the producing row, a
    function argument (``("arg", id)``) or None (a loop-carried block argument, a call result it cannot
    follow). Rows replayed by calls, loops and branches get their sources remapped to the copies."""

    def __init__(self, module, entry=None):
        super().__init__(module, entry)
        self._def: dict[int, Row] = {}
        self._src: dict[int, tuple] = {}
        self._keep: list[Row] = []  # keeps every row alive so that id() stays unique
        self._arg_map: dict | None = None
        self._last_map: dict[int, Row] = {}

    def _source(self, v):
        h = hash(v)
        p = self._def.get(h)
        if p is not None:
            return p
        if h in self._args:
            return ("arg", h)
        return None

    def _record(self, op, row: Row) -> Row:
        self._src[id(row)] = tuple(self._source(v) for v in op.operands)
        for res in op.results:
            self._def[hash(res)] = row
        self._keep.append(row)
        return row

    def emit(self, op, kind, target="", weights=False):
        return self._record(op, super().emit(op, kind, target, weights))

    def emit_same_type(self, op, kind):
        return self._record(op, super().emit_same_type(op, kind))

    def emit_no_operands(self, op, kind):
        return self._record(op, super().emit_no_operands(op, kind))

    def replay(self, rows, k, scope="", note=""):
        if k == 0:
            return
        start = len(self._out)
        super().replay(rows, k, scope, note)
        new = self._out[start:]
        m = {id(o): n for o, n in zip(rows, new)}
        amap = self._arg_map
        for o, n in zip(rows, new):
            out = []
            for s in self._src.get(id(o), ()):
                if isinstance(s, Row):
                    s = m.get(id(s), s)
                elif isinstance(s, tuple) and amap is not None and s[1] in amap:
                    s = amap[s[1]]
                out.append(s)
            self._src[id(n)] = tuple(out)
        self._keep.extend(new)
        self._last_map = m

    def visit_call(self, op):
        from jaxlib.mlir import ir

        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        fn = self.functions.get(callee)
        saved = self._arg_map
        if fn is not None:
            args = fn.regions[0].blocks[0].arguments
            self._arg_map = {hash(a): self._source(v) for a, v in zip(args, op.operands)}
        self._last_map = {}
        try:
            super().visit_call(op)
        finally:
            self._arg_map = saved
        if fn is None:
            return
        ops = list(fn.regions[0].blocks[0].operations)
        if not ops:
            return
        ret = ops[-1].operation
        for res, rv in zip(op.results, ret.operands):
            p = self._def.get(hash(rv))
            q = self._last_map.get(id(p)) if p is not None else None
            if q is not None:
                self._def[hash(res)] = q

    def producers(self) -> list[tuple]:
        """Per final row: a source key per operand, the producing row's index, ``"argN"`` or None."""
        index = {id(r): i for i, r in enumerate(self.rows)}
        out = []
        for r in self.rows:
            keys = []
            for s in self._src.get(id(r), ()):
                if isinstance(s, Row):
                    keys.append(index.get(id(s)))
                elif isinstance(s, tuple):
                    keys.append(f"arg{s[1]}")
                else:
                    keys.append(None)
            out.append(tuple(keys))
        return out


@dataclass
class DataflowAnalysis(Analysis):
    """An :class:`Analysis` whose ``producers[i]`` names the source of each operand of row ``i``:
    the producing row's index (int), a function argument (``"argN"`` str), or None where unknown."""

    producers: list = field(default_factory=list)


def analyze_dataflow(source, entry: str | None = None) -> DataflowAnalysis:
    """:func:`mhlo_cost.analysis.analyze` that also records the data flow (for :func:`fuse`)."""
    from .analysis import walk

    found = {}
    loaded, visitor = walk(source, _DataflowVisitor, entry, after=lambda v: found.update(p=v.producers()))
    return DataflowAnalysis(visitor.rows, loaded.name, visitor.entry, visitor.warnings, producers=found["p"])


# ---------------------------------------------------------------------------------------------------------
# Fusion
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Kernel:
    """One fused kernel: its rows (indices, program order; ``members[0]`` is the head)."""

    members: list[int]
    multiplicity: int
    has_dot: bool = False
    closed: bool = False
    bytes_read: int = 0  # totals over multiplicity
    bytes_written: int = 0
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    flops: int = 0
    peak: float = 0.0
    inputs: list = field(default_factory=list)  # TensorInfo of each external input
    outputs: list = field(default_factory=list)  # TensorInfo of each written output

    @property
    def head(self) -> int:
        return self.members[0]

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def utilisation(self) -> float:
        t = self.time_s
        return self.flops / (t * self.peak) if t > 0 and self.peak > 0 else 0.0


@dataclass
class Fusion:
    """The kernels of a fused program and each row's share of the fused time."""

    kernels: list[Kernel]
    row_kernel: list[int | None]  # kernel id of each row (None: no kernel, duplicated, comm, unknown)
    row_time: list[float]  # each row's share of its kernel's time (in proportion to its unfused time)

    @property
    def time_s(self) -> float:
        return math.fsum(k.time_s for k in self.kernels)


def _fusible(r: Row) -> bool:
    if r.kind in ("elementwise", "transcendental"):
        return True
    return r.kind == "data" and short_name(r.op) in FUSIBLE_DATA


def _duplicated(r: Row) -> bool:
    """Broadcasts, iotas and widening converts: recomputed inside each consumer, which reads their
    (smaller) operand rather than their result."""
    name = short_name(r.op)
    if name in DUPLICATED:
        return True
    if name == "convert" and isinstance(r.result, TensorInfo) and r.operands:
        return r.result.nbytes > r.operands[0].nbytes
    return False


def _elem_bits(res) -> float:
    """Bits per element of a result (the widest of several)."""
    ts = [res] if isinstance(res, TensorInfo) else list(res)
    return max((8 * t.nbytes / t.nelems for t in ts if t.nelems), default=0.0)


def _row_reduction(r: Row) -> bool:
    """A reduction over the trailing dimensions of at most :data:`ROW_LIMIT` elements a row (softmax,
    LayerNorm, RMSNorm): one thread block holds a row, so the reduction's consumers that broadcast the
    result back over the row fuse with it (XLA's Triton softmax / normalization fusions)."""
    if not r.operands or not isinstance(r.result, TensorInfo) and not r.result:
        return False
    res = r.result if isinstance(r.result, TensorInfo) else r.result[0]
    shape = r.operands[0].shape
    out = res.shape
    if len(out) >= len(shape) or tuple(shape[:len(out)]) != tuple(out):
        return False
    row = 1
    for d in shape[len(out):]:
        row *= d
    return 1 < row <= ROW_LIMIT


def fuse(analysis, hw: Hardware, times: list[OpTime] | None = None, producers: list | None = None) -> Fusion:
    """Group rows into fused kernels (see the module docstring) and time them on ``hw``."""
    rows = analysis.rows
    if producers is None:
        producers = getattr(analysis, "producers", None)
    if producers is None or len(producers) != len(rows):
        raise ValueError("fuse() needs the data flow: analyse with roofline.analyze_dataflow()")
    if times is None:
        times = [op_time(r, hw) for r in rows]
    n = len(rows)
    row_kernel: list[int | None] = [None] * n
    # Per row: "kernel" (in a kernel), "free" (no kernel, outside any), "dup" (duplicated into consumers),
    # "alone" (its own time: collectives, unknown, sort, ...).
    role = ["alone"] * n
    kernels: list[Kernel] = []

    def candidates(i: int, out: set) -> set:
        """Kernels that produced row i's operands, looking through free/duplicated producers."""
        for p in producers[i]:
            if not isinstance(p, int):
                continue
            k = row_kernel[p]
            if k is not None:
                out.add(k)
            elif role[p] in ("free", "dup"):
                candidates(p, out)
        return out

    def deps_before(i: int, k: int, head: int) -> bool:
        """Whether row i can join kernel k without a cycle: none of its operands from outside k depends
        on a member of k. Rows before k's head cannot (program order is a topological order); later ones
        are searched back to the head, within a budget (over budget counts as a dependency)."""
        seen: set = set()
        # Operands reached through duplicated / no-kernel rows are recomputed inside k: look through them.
        stack = []
        inline = [p for p in producers[i] if isinstance(p, int)]
        while inline:
            p = inline.pop()
            if row_kernel[p] == k:
                continue
            if row_kernel[p] is None and role[p] in ("free", "dup"):
                inline.extend(q for q in producers[p] if isinstance(q, int))
            else:
                stack.append(p)
        budget = 4096
        while stack:
            p = stack.pop()
            if p < head or p in seen:
                continue
            if row_kernel[p] == k:
                return False
            seen.add(p)
            budget -= 1
            if budget < 0:
                return False
            stack.extend(q for q in producers[p] if isinstance(q, int))
        return True

    def open_kernel_of(i: int, no_dot: bool = False) -> int | None:
        """The open kernel row i may join: of its producers' kernels, the one with the latest member that
        shares its multiplicity and that it can join without a cycle."""
        mult = rows[i].multiplicity
        width = _elem_bits(rows[i].result)
        ks = [k for k in candidates(i, set()) if not kernels[k].closed and kernels[k].multiplicity == mult
              and not (kernels[k].has_dot and (no_dot or width > _elem_bits(rows[kernels[k].head].result)))]
        for k in sorted(ks, key=lambda k: -kernels[k].members[-1]):
            if deps_before(i, k, kernels[k].head):
                return k
        return None

    def new_kernel(i: int, **kw) -> None:
        row_kernel[i] = len(kernels)
        role[i] = "kernel"
        kernels.append(Kernel([i], rows[i].multiplicity, **kw))

    def join(i: int, k: int) -> None:
        row_kernel[i] = k
        role[i] = "kernel"
        kernels[k].members.append(i)

    for i, r in enumerate(rows):
        t = times[i]
        if r.kind in ("collective", "unknown"):
            continue
        if t.bound == "free":
            k = open_kernel_of(i)
            if k is not None:
                join(i, k)
            else:
                role[i] = "free"
            continue
        if r.kind in ("dot", "conv"):
            new_kernel(i, has_dot=True)
            continue
        if r.kind == "reduce":
            row_local = _row_reduction(r)
            k = open_kernel_of(i, no_dot=True)
            if k is not None:
                join(i, k)
                kernels[k].closed = not row_local
            else:
                new_kernel(i, closed=not row_local)
            continue
        if _duplicated(r):
            role[i] = "dup"
            continue
        if _fusible(r):
            k = open_kernel_of(i)
            if k is not None:
                join(i, k)
            else:
                new_kernel(i)
            continue
        new_kernel(i, closed=True)  # sort and other lone kernels

    # Consumers of each row, for the outputs.
    consumers: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(producers):
        for p in ps:
            if isinstance(p, int):
                consumers[p].append(i)

    def storage(i: int) -> int:
        """The row whose buffer row i's result is (looking through reshapes and other no-kernel ops)."""
        while role[i] in ("free", "kernel") and times[i].bound == "free":
            srcs = [p for p in producers[i] if isinstance(p, int)]
            if len(srcs) != 1 or short_name(rows[i].op) == "constant":
                break
            i = srcs[0]
        return i

    def readers(i: int) -> list[int]:
        """Rows reading row i's value, looking through free and duplicated consumers."""
        out = []
        for c in consumers[i]:
            if role[c] in ("free", "dup"):
                out.extend(readers(c) if consumers[c] else [-1])  # -1: a program output
            else:
                out.append(c)
        return out

    for kid, k in enumerate(kernels):
        members = set(k.members)
        seen_in: set = set()
        read = 0
        inputs = []

        def add_input(key, ti: TensorInfo) -> None:
            nonlocal read
            if key in seen_in:
                return
            seen_in.add(key)
            read += ti.nbytes
            inputs.append(ti)

        def take(i: int, j: int, ti: TensorInfo, depth: int = 0) -> None:
            """Operand j of row i (read as ti) as an input of the kernel, unless produced inside it."""
            p = producers[i][j] if j < len(producers[i]) else None
            if isinstance(p, int):
                if p in members:
                    return
                if role[p] == "dup" and depth < 64:
                    for jj, tj in enumerate(rows[p].operands):
                        take(p, jj, tj, depth + 1)
                    return
                if role[p] == "free" and depth < 64 and short_name(rows[p].op) != "constant":
                    for jj, tj in enumerate(rows[p].operands):
                        take(p, jj, ti if len(rows[p].operands) == 1 else tj, depth + 1)
                    return
                add_input(("row", storage(p)), ti)
            elif p is not None:
                add_input(p, ti)
            else:
                add_input(("anon", i, j), ti)

        for i in k.members:
            for j, ti in enumerate(rows[i].operands):
                take(i, j, ti)
        written = 0
        outputs = []
        seen_out: set = set()
        for i in k.members:
            rd = readers(i)
            if rd and all(c in members for c in rd):
                continue
            key = storage(i)
            if key in seen_out:
                continue
            seen_out.add(key)
            r = rows[i]
            res = r.result if isinstance(r.result, TensorInfo) else None
            nbytes = res.nbytes if res is not None else sum(t.nbytes for t in r.result)
            written += nbytes
            outputs.append(res if res is not None else r.result[0])
        m = k.multiplicity
        k.inputs, k.outputs = inputs, outputs
        k.bytes_read, k.bytes_written = read * m, written * m
        k.compute_s = math.fsum(times[i].compute_s for i in k.members)
        k.memory_s = (k.bytes_read + k.bytes_written) / hw.hbm_bandwidth
        k.overhead_s = hw.kernel_overhead * m
        k.flops = sum(rows[i].gemm_flops + rows[i].conv_flops + rows[i].vector_flops for i in k.members)
        head = rows[k.head]
        if k.has_dot:
            k.peak = times[k.head].peak
        elif k.flops:
            k.peak = hw.vector_peak(vector_dtype(head))
        # Never above the unfused members (bytes are a subset; the cap guards the float sums).
        unfused = math.fsum(times[i].kernel_s for i in k.members)
        if k.time_s > unfused:
            k.memory_s = min(k.memory_s, max(0.0, unfused - k.overhead_s))
            k.compute_s = min(k.compute_s, max(0.0, unfused - k.overhead_s))

    # A kernel's time is shared among its members in proportion to their unfused times, so that a kernel
    # that spans blocks (a residual add fused with the next block's norm) charges each block its part.
    row_time = [0.0] * n
    for k in kernels:
        weights = [times[i].kernel_s for i in k.members]
        total = math.fsum(weights)
        if total > 0:
            for i, w in zip(k.members, weights):
                row_time[i] = k.time_s * (w / total)
        else:
            row_time[k.head] = k.time_s
    return Fusion(kernels, row_kernel, row_time)


# ---------------------------------------------------------------------------------------------------------
# The estimate of a program
# ---------------------------------------------------------------------------------------------------------


class Roofline:
    """Per-op times of an analysis on one hardware profile, and the views built from them."""

    def __init__(self, analysis, hw: Hardware, fuse_mode: str = "none"):
        if fuse_mode not in FUSE_MODES:
            raise ValueError(f"unknown fuse mode {fuse_mode!r}: choose one of {', '.join(FUSE_MODES)}")
        self.analysis = analysis
        self.hw = hw
        self.times = [op_time(r, hw) for r in analysis.rows]
        self.fusion = fuse(analysis, hw, self.times) if fuse_mode == "elementwise" else None

    # -- totals -----------------------------------------------------------------------------------------
    @property
    def unknown_ops(self) -> int:
        return sum(r.multiplicity for r, t in zip(self.analysis.rows, self.times) if t.bound == "unknown")

    def totals(self) -> dict:
        ts = self.times
        kernel = math.fsum(t.kernel_s for t in ts)
        comm = math.fsum(t.comm_s for t in ts)
        out = {
            "est_compute_s": math.fsum(t.compute_s for t in ts),
            "est_memory_s": math.fsum(t.memory_s for t in ts),
            "est_overhead_s": math.fsum(t.overhead_s for t in ts),
            "comm_time_s": comm,
            "est_time_s": kernel + comm,
            "est_time_overlap_s": max(kernel, comm),
        }
        for b in ("compute", "memory"):
            out[f"{b}_bound_s"] = math.fsum(t.kernel_s for t in ts if t.bound == b)
            out[f"{b}_bound_ops"] = sum(r.multiplicity for r, t in zip(self.analysis.rows, ts) if t.bound == b)
        out["kernels"] = sum(r.multiplicity for r, t in zip(self.analysis.rows, ts) if t.overhead_s > 0)
        out["free_ops"] = sum(r.multiplicity for r, t in zip(self.analysis.rows, ts) if t.bound == "free")
        out["unknown_ops"] = self.unknown_ops
        if self.fusion is not None:
            f = self.fusion
            out["est_time_fused_s"] = f.time_s + comm
            out["est_time_fused_overlap_s"] = max(f.time_s, comm)
            out["fused_kernels"] = sum(k.multiplicity for k in f.kernels)
            out["fused_bytes"] = sum(k.bytes_read + k.bytes_written for k in f.kernels)
        return out

    @property
    def flops(self) -> int:
        return sum(r.gemm_flops + r.conv_flops + r.vector_flops for r in self.analysis.rows)

    @property
    def reference_peak(self) -> float:
        return _unit_peaks(self.analysis.rows, self.times) or self.hw.vector_peak("f32")

    def summary(self, steps: int = 1) -> dict:
        """Totals for one forward, and for ``steps`` of them (a run), with achieved utilisation:
        all FLOPs / (time x the matrix peak of the dtype that carries most GEMM FLOPs)."""
        tot = self.totals()
        peak = self.reference_peak
        flops = self.flops
        out = {"hardware": self.hw.name, "reference_peak_tflops": peak / 1e12, "flops": flops}
        out.update(tot)
        out["utilisation"] = flops / (tot["est_time_s"] * peak) if tot["est_time_s"] > 0 else 0.0
        if "est_time_fused_s" in tot:
            t = tot["est_time_fused_s"]
            out["utilisation_fused"] = flops / (t * peak) if t > 0 else 0.0
        out["steps"] = steps
        out["run_time_s"] = tot["est_time_s"] * steps
        if "est_time_fused_s" in tot:
            out["run_time_fused_s"] = tot["est_time_fused_s"] * steps
        out["run_flops"] = flops * steps
        return out

    def summary_frame(self, steps: int = 1, counts: dict | None = None) -> pd.DataFrame:
        """``metric, value``: the analysis counts (``counts``) followed by the estimate."""
        counts = dict(counts or {})
        items = list(counts.items()) + [(k, v) for k, v in self.summary(steps).items() if k not in counts]
        return pd.DataFrame({"metric": [k for k, _ in items], "value": pd.Series([v for _, v in items],
                                                                                 dtype=object)})

    # -- the disassembly table -----------------------------------------------------------------------
    def op_frame(self, top: int | None = None) -> pd.DataFrame:
        """One row per op occurrence, program order (``top``: the N slowest, slowest first)."""
        rows, ts = self.analysis.rows, self.times
        order = list(range(len(rows)))
        if top is not None:
            order = sorted(order, key=lambda i: (-ts[i].time_s, i))[:top]
        data = {
            "index": [rows[i].index for i in order],
            "operation": [_operation(rows[i]) for i in order],
            "kind": [rows[i].kind for i in order],
            "inputs": [" ".join(t.pretty for j, t in enumerate(rows[i].operands) if j not in rows[i].weights)
                       for i in order],
            "weights": [" ".join(rows[i].operands[j].pretty for j in rows[i].weights) for i in order],
            "output": [_pretty(rows[i].result) for i in order],
            "multiplicity": [rows[i].multiplicity for i in order],
            "gflops": [ts[i].flops / 1e9 if ts[i].unit != "transcendental" else
                       (rows[i].vector_flops / 1e9) for i in order],
            "latency_us": [ts[i].time_s * 1e6 for i in order],
            "utilisation": [ts[i].utilisation for i in order],
            "bound": [ts[i].bound for i in order],
        }
        df = pd.DataFrame(data)
        df["multiplicity"] = df["multiplicity"].astype("int64")
        df["index"] = df["index"].astype("int64")
        return df

    def kernel_frame(self, top: int | None = None) -> pd.DataFrame:
        """One row per fused kernel (``--fuse``), program order of their heads."""
        if self.fusion is None:
            raise ValueError("kernel_frame() needs fuse_mode='elementwise'")
        rows = self.analysis.rows
        ks = list(self.fusion.kernels)
        if top is not None:
            ks = sorted(ks, key=lambda k: (-k.time_s, k.head))[:top]
        weights = []
        for k in ks:
            w = []
            for i in k.members:
                w += [rows[i].operands[j].pretty for j in rows[i].weights]
            weights.append(" ".join(w))
        return pd.DataFrame({
            "index": pd.Series([rows[k.head].index for k in ks], dtype="int64"),
            "operation": [_operation(rows[k.head]) + (f" +{len(k.members) - 1}" if len(k.members) > 1 else "")
                          for k in ks],
            "ops": [" ".join(short_name(rows[i].op) for i in k.members) for k in ks],
            "inputs": [" ".join(t.pretty for t in k.inputs) for k in ks],
            "weights": weights,
            "output": [" ".join(t.pretty for t in k.outputs) for k in ks],
            "multiplicity": pd.Series([k.multiplicity for k in ks], dtype="int64"),
            "gflops": [k.flops / 1e9 for k in ks],
            "latency_us": [k.time_s * 1e6 for k in ks],
            "utilisation": [k.utilisation for k in ks],
            "bound": [k.bound for k in ks],
        })

    # -- blocks ---------------------------------------------------------------------------------------
    def block_extra(self) -> dict:
        """Per-row columns for :func:`mhlo_cost.blocks.block_table`."""
        ts = self.times
        extra = {
            "gemm_time_s": lambda r: ts[r.index].kernel_s if r.kind in ("dot", "conv") else 0.0,
            "vector_time_s": lambda r: ts[r.index].kernel_s if r.kind not in ("dot", "conv") else 0.0,
            "est_compute_s": lambda r: ts[r.index].compute_s,
            "est_memory_s": lambda r: ts[r.index].memory_s,
            "comm_time_s": lambda r: ts[r.index].comm_s,
            "est_time_s": lambda r: ts[r.index].time_s,
            "compute_bound_s": lambda r: ts[r.index].kernel_s if ts[r.index].bound == "compute" else 0.0,
        }
        if self.fusion is not None:
            ft = self.fusion.row_time
            ks, rk = self.fusion.kernels, self.fusion.row_kernel
            gemm = [rk[i] is not None and ks[rk[i]].has_dot for i in range(len(ts))]
            # Split by kernel: a GEMM kernel's epilogue counts as GEMM-kernel time.
            extra["gemm_time_fused_s"] = lambda r: ft[r.index] if gemm[r.index] else 0.0
            extra["vector_time_fused_s"] = lambda r: 0.0 if gemm[r.index] else ft[r.index]
            extra["est_time_fused_s"] = lambda r: ft[r.index] + ts[r.index].comm_s
            cb = [rk[i] is not None and ks[rk[i]].bound == "compute" for i in range(len(ts))]
            extra["compute_bound_fused_s"] = lambda r: ft[r.index] if cb[r.index] else 0.0
        return extra

    def block_frame(self, blocks, parts: bool = False) -> pd.DataFrame:
        """The block table with the estimate columns; ``est_time_overlap_s`` = max(compute side, comm)."""
        from .blocks import TOTAL, block_table

        df = block_table(self.analysis, blocks, parts=parts, extra=self.block_extra())
        side = df["est_time_s"] - df["comm_time_s"]
        overlap = [max(a, b) for a, b in zip(side, df["comm_time_s"])]
        is_total = df["block"] == TOTAL
        if is_total.any():
            overlap[int(is_total.values.nonzero()[0][-1])] = math.fsum(
                v for v, t in zip(overlap, is_total) if not t)
        df["est_time_overlap_s"] = pd.Series(overlap, dtype="float64")
        # The block's bound: where most of its (fused, if estimated) device time goes.
        t = df["est_time_fused_s"] - df["comm_time_s"] if self.fusion is not None else side
        c = df["compute_bound_fused_s"] if self.fusion is not None else df["compute_bound_s"]
        df["bound"] = ["comm" if cm > tt and cm > 0 else ("compute" if tt > 0 and cc >= tt / 2 else
                                                          ("memory" if tt > 0 else "free"))
                       for tt, cc, cm in zip(t, c, df["comm_time_s"])]
        return df


def _operation(r: Row) -> str:
    name = short_name(r.op)
    if r.target and name == "custom_call":
        name = f"custom_call({r.target})"
    return f"{r.scope}/{name}" if r.scope else name


def _pretty(res) -> str:
    if isinstance(res, TensorInfo):
        return res.pretty
    return " ".join(t.pretty for t in res)


def hardware_from_args(name: str | None, path: str | os.PathLike | None) -> Hardware | None:
    """The profile named ``name`` (in the user's TOML ``path`` first); the file's only profile where no
    name is given; None where neither is."""
    from .hardware import get_profile, load_profiles

    profiles = load_profiles(path) if path else None
    if name is None:
        if profiles is None:
            return None
        if len(profiles) != 1:
            raise HardwareError(f"{path}: holds {len(profiles)} profiles ({', '.join(profiles)}); "
                                "choose one with --hardware NAME")
        return next(iter(profiles.values()))
    return get_profile(name, profiles)


__all__ = [
    "BOUNDS", "DataflowAnalysis", "Fusion", "Kernel", "NO_KERNEL", "OpTime", "Roofline", "analyze_dataflow",
    "fuse", "hardware_from_args", "is_no_kernel", "op_time",
]
