"""Fusion (``--fuse elementwise``): rows grouped into kernels as a fusing compiler would.

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
from dataclasses import dataclass, field

from ..hardware import Hardware
from ..types import TensorInfo
from ..visitors.base import Row, short_name
from .optime import OpTime, op_time, vector_dtype

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

