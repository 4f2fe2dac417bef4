"""What one fused kernel reads, writes and costs: its external inputs (each once), its outputs (values read
outside it, or program outputs), its time, and each member's share of that time."""
from __future__ import annotations

import math

from ..machines.hardware import Hardware
from ..ir.tensorinfo import TensorInfo
from ..walk.row import short_name
from .optime import OpTime, vector_dtype


#: Data ops that read only the elements they return (their first operand is a larger buffer).
_READS_RESULT = frozenset({"slice", "dynamic_slice", "real_dynamic_slice", "gather"})


def _fenced(r, j: int, p) -> int | None:
    """Where row ``r``'s operand ``j`` is a result of ``p``, an ``optimization_barrier`` (an identity on each of its
    operands: XLA aliases result m to operand m and emits no kernel), the index m of that operand; else None (or
    where the data flow kept no value keys)."""
    if short_name(p.op) != "optimization_barrier" or not r.values or not p.values:
        return None
    key = r.values[0][j] if j < len(r.values[0]) else None
    results = p.values[1]
    return results.index(key) if key is not None and key in results else None


def _scattered(r) -> int:
    """How many leading operands of row ``r`` a scatter may update in place (0: not a scatter). A scatter's
    operands are its buffers, the indices, then one update per buffer; XLA writes the updates into the
    buffer when the buffer is not read again (a donated KV cache: ``index_copy_``), as for
    ``dynamic_update_slice``: the buffer is neither read nor rewritten, only the updates are written."""
    if short_name(r.op) != "scatter" or len(r.operands) < 3 or len(r.operands) % 2 == 0:
        return 0
    return (len(r.operands) - 1) // 2


class KernelIO:
    """Inputs and outputs of kernels, from the rows' producers and the roles given by the grouping."""

    def __init__(self, rows, producers, times: list[OpTime], role: list[str], onchip=frozenset(),
                 masks: dict | None = None):
        """``onchip``: score shapes that a flash attention kernel never reads or writes through HBM
        (:func:`.attention_backward.find_attention_backward`); ``masks``: the walk's ``masks`` record (None: not recorded)."""
        self.rows, self.producers, self.times, self.role = rows, producers, times, role
        self.onchip, self.masks = onchip, masks
        self.consumers: list[list[int]] = [[] for _ in rows]
        for i, ps in enumerate(producers):
            for p in ps:
                if isinstance(p, int):
                    self.consumers[p].append(i)

    def storage(self, i: int) -> int:
        """The row whose buffer row i's result is (looking through reshapes and other no-kernel ops)."""
        while self.role[i] in ("free", "kernel") and self.times[i].bound == "free":
            srcs = [p for p in self.producers[i] if isinstance(p, int)]
            if len(srcs) != 1 or short_name(self.rows[i].op) == "constant":
                break
            i = srcs[0]
        return i

    def scattered(self, i: int) -> int:
        """How many leading operands row ``i`` scatters into in place (0: none, or a buffer made by a broadcast
        or a constant, such as the zeros a gradient is scattered into: that whole buffer is written)."""
        n = _scattered(self.rows[i])
        for p in self.producers[i][:n]:
            if isinstance(p, int) and (self.role[p] == "dup" or short_name(self.rows[p].op) == "constant"):
                return 0
        return n

    def readers(self, i: int) -> list[int]:
        """Rows reading row i's value, looking through free and duplicated consumers (-1: a program output);
        each free or duplicated consumer looked through once, however long the chain (no recursion)."""
        out, seen, stack = [], set(), [iter(self.consumers[i])]
        while stack:
            c = next(stack[-1], None)
            if c is None:
                stack.pop()
            elif self.role[c] not in ("free", "dup"):
                out.append(c)
            elif not self.consumers[c]:
                out.append(-1)
            elif c not in seen:
                seen.add(c)
                stack.append(iter(self.consumers[c]))
        return out

    def inputs(self, members: set, order: list[int]) -> list[TensorInfo]:
        """Each external input once (deduplicated by the producing value, looking through reshapes);
        duplicated and no-kernel producers are recomputed inside, so their operands are read instead."""
        seen: set = set()
        out: list[TensorInfo] = []

        def take(i: int, j: int, ti: TensorInfo, depth: int = 0) -> None:
            p = self.producers[i][j] if j < len(self.producers[i]) else None
            if isinstance(p, int):
                if p in members:
                    return
                fenced = _fenced(self.rows[i], j, self.rows[p])
                if fenced is not None and depth < 64:  # a barrier's result m is its operand m: read that one only
                    take(p, fenced, ti, depth + 1)
                    return
                if self.role[p] in ("dup", "free") and depth < 64 and short_name(self.rows[p].op) != "constant":
                    ops = self.rows[p].operands
                    sliced = short_name(self.rows[p].op) in _READS_RESULT
                    for jj, tj in enumerate(ops):
                        if sliced and jj == 0:
                            tj = self.rows[p].result  # the consumer reads the slice in place
                        take(p, jj, ti if self.role[p] == "free" and len(ops) == 1 else tj, depth + 1)
                    return
                key = ("row", self.storage(p))
            else:
                key = p if p is not None else ("anon", i, j)
            if key not in seen:
                seen.add(key)
                out.append(ti)

        for i in order:
            name = short_name(self.rows[i].op)
            for j, ti in enumerate(self.rows[i].operands):
                if j == 0 and name in _READS_RESULT:
                    ti = self.rows[i].result  # a slice reads what it returns, not its whole operand
                elif j == 0 and name == "dynamic_update_slice" or j < self.scattered(i):
                    continue  # written in place: the buffer is neither read nor rewritten
                take(i, j, ti)
        return out

    def outputs(self, members: set, order: list[int]) -> list:
        """Each value a member writes that is read outside the kernel (or is a program output), as
        ``(TensorInfo shown, bytes)``."""
        out, seen = [], set()
        for i in order:
            rd = self.readers(i)
            if rd and all(c in members for c in rd):
                continue
            key = self.storage(i)
            if key in seen:
                continue
            seen.add(key)
            res = self.rows[i].result
            if short_name(self.rows[i].op) == "dynamic_update_slice" and len(self.rows[i].operands) > 1:
                out.append((res, self.rows[i].operands[1].nbytes))  # only the update is written
            elif self.scattered(i):
                ops = self.rows[i].operands
                out.append((res if isinstance(res, TensorInfo) else res[0],
                            sum(t.nbytes for t in ops[self.scattered(i) + 1:])))  # only the updates
            elif isinstance(res, TensorInfo):
                out.append((res, res.nbytes))
            elif res:  # several results; none (a branch_max row) writes nothing
                out.append((res[0], sum(t.nbytes for t in res)))
        return out

    def measure(self, k, hw: Hardware) -> None:
        """Fill kernel ``k``'s bytes, times, FLOPs and peak."""
        self.measure_io(k)
        kernel_time(k, self.rows, self.producers, self.times, hw, self.masks)

    def measure_io(self, k) -> None:
        """Fill kernel ``k``'s inputs, outputs and bytes (no chip needed: :mod:`.program` keeps them)."""
        members = set(k.members)
        k.inputs = self.inputs(members, k.members)
        outs = self.outputs(members, k.members)
        if k.attention and self.onchip:
            from .attention_backward import trails
            k.inputs = [t for t in k.inputs if not trails(t, self.onchip)]
            outs = [(t, b) for t, b in outs if not trails(t, self.onchip)]
        k.outputs = [t for t, _ in outs]
        m = k.multiplicity
        k.bytes_read = sum(t.nbytes for t in k.inputs) * m
        k.bytes_written = sum(b for _, b in outs) * m


def kernel_time(k, rows, producers, times: list[OpTime], hw: Hardware, masks: dict | None = None) -> None:
    """Fill kernel ``k``'s times, FLOPs and peak on ``hw`` from its bytes (:meth:`KernelIO.measure_io`) and
    its members' unfused times."""
    m = k.multiplicity
    k.compute_s = math.fsum(times[i].compute_s for i in k.members)
    if k.attention:
        from .attention_compute import kernel_compute_s
        c = kernel_compute_s(rows, producers, times, k.members, hw, m, k.library, masks)
        k.compute_s, k.tensor_s = (k.compute_s, 0.0) if c is None else c
    k.memory_s = hw.memory_time(k.bytes_read + k.bytes_written, m)
    k.overhead_s = hw.kernel_overhead * m
    k.flops = sum(rows[i].gemm_flops + rows[i].conv_flops + rows[i].vector_flops for i in k.members)
    if k.has_dot:
        k.peak = times[k.head].peak
    elif k.flops:
        k.peak = hw.vector_peak(vector_dtype(rows[k.head]))
    # Never above the unfused members (bytes are a subset; the cap guards the float sums).
    unfused = math.fsum(times[i].kernel_s for i in k.members)
    if k.time_s > unfused:
        k.memory_s = min(k.memory_s, max(0.0, unfused - k.overhead_s))
        k.compute_s = min(k.compute_s, max(0.0, unfused - k.overhead_s))


def share_time(kernels, times: list[OpTime], n: int) -> list[float]:
    """Each row's share of its kernel's time, in proportion to the members' unfused times, so that a kernel
    spanning blocks (a residual add fused with the next block's norm) charges each block its part."""
    row_time = [0.0] * n
    for k in kernels:
        weights = [times[i].kernel_s for i in k.members]
        total = math.fsum(weights)
        if total > 0:
            for i, w in zip(k.members, weights):
                row_time[i] = k.time_s * (w / total)
        else:
            row_time[k.head] = k.time_s
    return row_time
