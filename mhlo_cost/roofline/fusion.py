"""Fusion (``--fuse elementwise``): rows grouped into kernels as a fusing compiler would.

:func:`.program.fuse` groups rows into kernels the way XLA's GPU fusion passes roughly would, from the data flow
(:func:`~mhlo_cost.analysis.analyze` with ``AnalysisOptions(dataflow=True)`` records, per row, the rows
producing its operands), in program order:

* a dot or convolution opens a kernel, except that a dot whose operand comes from an open kernel without a dot
  or reduction that dequantises (holds, or reads through a duplicated row, a ``convert`` from an integer
  of 2..8 bits or a float of <= 8 bits) and whose results nothing but this dot reads, joins that kernel
  as its head (prologue fusion: Marlin / AWQ / Machete unpack, subtract the zeros and scale the weight in
  registers, so the GEMM reads the packed weight, scales and zeros; the bf16 weight never reaches memory);
  elementwise consumers that do not widen its result's element
  type join it (epilogue: bias, activation, residual, scaling, slices of its output);
* an elementwise op (or a fusible data op: transpose, slice, concatenate, pad, narrowing convert, ...)
  joins the open kernel of its latest producer, else opens a kernel of its own;
* a reduce joins the open kernel of its producer unless that kernel has a GEMM (input fusion). A
  reduction over trailing dimensions of at most :data:`ROW_LIMIT` elements (softmax, LayerNorm, RMSNorm
  rows) leaves its kernel open, so that the consumers broadcasting the result back over the row fuse too
  (XLA's Triton softmax / normalization fusions); any other reduction closes its kernel, and so does every
  reduction on a profile with ``row_fusion = false`` (XLA:CPU: a pass over the input per reduction);
* ``broadcast_in_dim``, ``iota`` and widening converts are duplicated into each consumer, which then
  reads their small operand rather than their result; no-kernel ops (reshape, constant) pass through;
  an ``optimization_barrier`` (JAX's remat fence) joins no kernel: XLA emits no kernel for it and its results alias
  its operands (it only orders the program), so a kernel that took it in would be charged a read of every operand
  it fences (the saved activations of a whole layer, where remat puts one before the backward);
* an op never joins a kernel one of its other operands depends on (that would be a cycle), and the
  members of a kernel share one multiplicity; collectives and unknown ops stay alone;
* with each row's phase given (``phase``: a training step as PyTorch autograd runs it, :func:`.program.phases_of`)
  an op joins no kernel of another phase, and a GEMM takes in no prologue of another phase. A kernel's phase is its
  latest member's: a flash backward kernel (:mod:`.attention_backward`) placed whole may hold recompute rows.

A kernel reads each external input once (deduplicated by the producing value, looking through reshapes)
and writes each value that an op outside it (or nobody: a program output) reads; its compute time is the
sum of its members'; it pays one kernel overhead per execution. The fused total is never above the
unfused one: a kernel's bytes are a subset of its members' (and its time is capped at their sum). A
kernel's time is shared among its members in proportion to their unfused times, so per-block fused
columns add up to the fused total.

With ``attention="fused"`` the rows of each attention found by :mod:`.attention` (dot -> softmax -> dot)
are placed in one kernel first: the scores never leave the chip (flash attention).

The code: :class:`Grouper` places the rows; :class:`~.kernel_io.KernelIO` measures each kernel's inputs,
outputs and time. What fusion does not model: kernels spanning loop iterations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..machines.hardware import Hardware
from ..ir.tensorinfo import TensorInfo
from ..walk.row import Row, short_name
from .optime import op_time
from .prologue import prologue_kernels

#: Data ops that a loop fusion absorbs (they move or cast elements of one index space).
FUSIBLE_DATA = frozenset({
    "convert", "transpose", "slice", "dynamic_slice", "concatenate", "pad", "reverse", "copy", "reduce_precision",
    "real_dynamic_slice", "broadcast_in_dim", "broadcast", "iota",
    "dynamic_update_slice",  # in place: the producer writes straight into the buffer (a loop's stacked residuals)
})
#: Data ops duplicated into each consumer when no kernel is open for them (cheap to recompute; a slice's
#: consumer reads the slice in place: the layer of a loop's stacked residuals, read by the layer's GEMM).
DUPLICATED = frozenset({"broadcast_in_dim", "broadcast", "iota", "dynamic_slice", "slice"})
#: Longest row (elements) of a reduction over trailing dimensions that stays fused with its consumers.
ROW_LIMIT = 1 << 62  # any row length: one thread block loops over a long row (Liger, Apex, quack)
FUSE_MODES = ("none", "elementwise")
ATTENTION_MODES = ("fused", "unfused")


@dataclass
class Kernel:
    """One fused kernel: its rows (indices, program order; ``members[0]`` is the head)."""

    members: list[int]
    multiplicity: int
    has_dot: bool = False
    attention: bool = False  # a fused attention kernel (:mod:`.attention`)
    library: str = ""  # the attention library it runs as ("": the profile's default)
    closed: bool = False
    bytes_read: int = 0  # totals over multiplicity
    bytes_written: int = 0
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    flops: int = 0
    peak: float = 0.0
    tensor_s: float = 0.0  # a fused attention's products at the tensor cores' full issue rate (.attention_compute)
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


class Grouper:
    """The grouping pass of :func:`.program.fuse`: walks the rows in program order and gives each a role and
    (where it runs in one) a kernel. ``preset`` maps rows to a group id decided beforehand (attention:
    :mod:`.attention`); the rows of one group share one kernel."""

    def __init__(self, rows, producers, times, preset: dict | None = None, row_fusion: bool = True,
                 phase: list | None = None):
        self.rows, self.producers, self.times = rows, producers, times
        self.row_fusion = row_fusion
        self.phase = phase  # each row's phase of a training step run phase by phase (None: one program)
        n = len(rows)
        self.row_kernel: list[int | None] = [None] * n
        # Per row: "kernel" (in a kernel), "free" (no kernel, outside any), "dup" (duplicated into
        # consumers), "alone" (its own time: collectives, unknown, ...).
        self.role = ["alone"] * n
        self.kernels: list[Kernel] = []
        self.preset = preset or {}
        self.preset_kernel: dict = {}
        self._consumers: list | None = None

    # -- where a row may go ---------------------------------------------------------------------------
    def candidates(self, i: int, out: set) -> set:
        """Kernels that produced row i's operands, looking through free/duplicated producers (each once,
        however long the chain: no recursion)."""
        todo, seen = [i], set()
        while todo:
            for p in self.producers[todo.pop()]:
                if not isinstance(p, int):
                    continue
                k = self.row_kernel[p]
                if k is not None:
                    out.add(k)
                elif p not in seen and self.role[p] in ("free", "dup"):
                    seen.add(p)
                    todo.append(p)
        return out

    def _outside_operands(self, i: int, k: int) -> list[int]:
        """Row i's producers outside kernel k, looking through duplicated / no-kernel rows (recomputed
        inside k)."""
        stack, inline = [], [p for p in self.producers[i] if isinstance(p, int)]
        while inline:
            p = inline.pop()
            if self.row_kernel[p] == k:
                continue
            if self.row_kernel[p] is None and self.role[p] in ("free", "dup"):
                inline.extend(q for q in self.producers[p] if isinstance(q, int))
            else:
                stack.append(p)
        return stack

    def acyclic(self, i: int, k: int) -> bool:
        """Whether row i can join kernel k without a cycle: none of its operands from outside k depends
        on a member of k. Rows before k's first member cannot (program order is a topological order); later
        ones are searched back to it, within a budget (over budget counts as a dependency)."""
        head = _first(self.kernels[k])
        stack, seen, budget = self._outside_operands(i, k), set(), 4096
        while stack:
            p = stack.pop()
            if p < head or p in seen:
                continue
            if self.row_kernel[p] == k:
                return False
            seen.add(p)
            budget -= 1
            if budget < 0:
                return False
            stack.extend(q for q in self.producers[p] if isinstance(q, int))
        return True

    def same_phase(self, i: int, k: int) -> bool:
        """Whether row i runs in the phase of kernel k (always, without phases): the phase of its latest member (a
        flash backward kernel, which remakes the forward's scores, may hold recompute rows; it runs in the
        backward)."""
        return self.phase is None or self.phase[self.kernels[k].members[-1]] == self.phase[i]

    def open_kernel_of(self, i: int, no_dot: bool = False) -> int | None:
        """The open kernel row i may join: of its producers' kernels, the one with the latest member that
        shares its multiplicity and its phase, does not widen a GEMM's result, and that it can join without a
        cycle."""
        mult = self.rows[i].multiplicity
        width = _elem_bits(self.rows[i].result)
        ks = []
        for k in self.candidates(i, set()):
            kern = self.kernels[k]
            if kern.closed or kern.multiplicity != mult or not self.same_phase(i, k):
                continue
            if kern.has_dot and (no_dot or width > _elem_bits(self.rows[kern.head].result)):
                continue
            ks.append(k)
        for k in sorted(ks, key=lambda k: -self.kernels[k].members[-1]):
            if self.acyclic(i, k):
                return k
        return None

    # -- placing a row --------------------------------------------------------------------------------
    def new_kernel(self, i: int, **kw) -> int:
        self.row_kernel[i] = len(self.kernels)
        self.role[i] = "kernel"
        self.kernels.append(Kernel([i], self.rows[i].multiplicity, **kw))
        return len(self.kernels) - 1

    def join(self, i: int, k: int) -> None:
        self.row_kernel[i] = k
        self.role[i] = "kernel"
        self.kernels[k].members.append(i)

    def join_or_open(self, i: int, no_dot: bool = False, closed: bool = False) -> None:
        k = self.open_kernel_of(i, no_dot=no_dot)
        if k is None:
            k = self.new_kernel(i)
        else:
            self.join(i, k)
        if closed:
            self.kernels[k].closed = True

    def join_prologue(self, i: int, ks: list[int]) -> None:
        """Dot i takes in the dequantising kernels ``ks`` (sorted): they become one kernel, the first of them,
        with the dot as its head (its GEMM gives the peak and the epilogue's width); the others are dropped
        and the kernels after them renumbered."""
        first = self.kernels[ks[0]]
        first.members = [i] + sorted(m for k in ks for m in self.kernels[k].members)
        first.has_dot = True
        for m in first.members:
            self.row_kernel[m] = ks[0]
        self.role[i] = "kernel"
        for k in reversed(ks[1:]):
            self.drop_kernel(k)

    def drop_kernel(self, k: int) -> None:
        """Remove kernel k (its rows already given to another), renumbering the kernels after it."""
        del self.kernels[k]
        for later in self.kernels[k:]:
            for m in later.members:
                self.row_kernel[m] -= 1
        self.preset_kernel = {g: (j - 1 if j > k else j) for g, j in self.preset_kernel.items()}

    def consumers(self) -> list:
        """Per row, the rows reading its result (made on first use)."""
        if self._consumers is None:
            self._consumers = [[] for _ in self.rows]
            for c, ps in enumerate(self.producers):
                for p in ps:
                    if isinstance(p, int):
                        self._consumers[p].append(c)
        return self._consumers

    def place_preset(self, i: int) -> None:
        g = self.preset[i]
        if g in self.preset_kernel:
            self.join(i, self.preset_kernel[g])
        else:
            self.preset_kernel[g] = self.new_kernel(i, has_dot=True, attention=True)

    def place(self, i: int) -> None:
        """Give row i its role and kernel (the rules of the module docstring)."""
        r, t = self.rows[i], self.times[i]
        if r.kind in ("collective", "unknown"):
            return
        if short_name(r.op) == "optimization_barrier":
            self.role[i] = "free"  # (an ordering fence of no kernel: never a member that would read its operands)
        elif i in self.preset:
            self.place_preset(i)
        elif t.bound == "free":
            k = self.open_kernel_of(i)
            if k is not None:
                self.join(i, k)
            else:
                self.role[i] = "free"
        elif r.kind in ("dot", "conv"):
            ks = prologue_kernels(self, i) if r.kind == "dot" else []
            if ks:
                self.join_prologue(i, ks)
            else:
                self.new_kernel(i, has_dot=True)
        elif r.kind == "reduce":
            # Row-local reductions (softmax, norms) leave their kernel open for the broadcast-back consumers.
            self.join_or_open(i, no_dot=True, closed=not (self.row_fusion and _row_reduction(r)))
        elif _duplicated(r):
            self.role[i] = "dup"
        elif _fusible(r):
            self.join_or_open(i)
        else:
            self.new_kernel(i, closed=True)  # sort and other lone kernels


def _first(kern: Kernel) -> int:
    """A kernel's earliest member: its head, or the member after a prologue-fused dot (members[1:] are in
    program order)."""
    m = kern.members
    return min(m[0], m[1]) if len(m) > 1 else m[0]


def data_flow(analysis, producers: list | None, who: str) -> list:
    """``producers``, else the analysis's own: per row, the rows producing its operands (ValueError naming
    ``who`` where the analysis recorded none)."""
    if producers is None:
        producers = analysis.producers
    if producers is None or len(producers) != len(analysis.rows):
        raise ValueError(f"{who} needs the data flow: analyse with AnalysisOptions(dataflow=True)")
    return producers


def grouping_inputs(analysis, hw: Hardware, times, producers, attention: str, who: str) -> tuple:
    """(rows, producers, times) of a grouping pass (:func:`.program.fuse`, :func:`.inductor.inductor`): the data flow
    (ValueError naming ``who`` without one), ``attention`` checked, each row's time on ``hw`` where not given."""
    rows = analysis.rows
    producers = data_flow(analysis, producers, who)
    if attention not in ATTENTION_MODES:
        raise ValueError(f"unknown attention mode {attention!r}: choose one of {', '.join(ATTENTION_MODES)}")
    if times is None:
        times = [op_time(r, hw) for r in rows]
    return rows, producers, times
