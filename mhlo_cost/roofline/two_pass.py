"""Two-pass row kernels of the eager execution model: an eager call that reduces each row and then reads the row
again (torch's LayerNorm / RMSNorm forward: statistics, then the row normalised) reads it twice; the second read
comes from L2 where the row's lines survived the traffic of the other rows in flight between its two reads, from HBM
where they did not (:func:`second_pass_bytes`, used by :func:`mhlo_cost.roofline.eager.eager` for each kernel it
measures)."""
from __future__ import annotations

import math

from ..machines.hardware import Hardware
from ..walk.row import short_name

#: torch's CUDA layer_norm / rms_norm forward (pytorch/pytorch aten/src/ATen/native/cuda/layer_norm_kernel.cu at
#: bad757be, ``vectorized_layer_norm_kernel_impl``; the fused ``_fused_rms_norm`` runs the same kernel with its
#: ``rms_norm`` template flag, ``RmsNormKernelImpl``): one block per row (``blocks(M)``) of ``num_threads()`` =
#: C10_WARP_SIZE x 4 = 128 threads (aten/src/ATen/native/cuda/thread_constants.h); ``compute_stats`` reads the row
#: for its statistics, then a second loop reads it again to write the output.
ROW_KERNEL_THREADS = 128
#: Resident threads per SM (compute capabilities 8.0 and 9.0: the CUDA C++ Programming Guide's table of limits).
MAX_THREADS_PER_SM = 2048


def reread_bytes(rows: int, row_bytes: int, sms: int, l2_bytes: int) -> int:
    """HBM bytes of the second read of ``rows`` rows of ``row_bytes`` each by a kernel of one 128-thread block per
    row on ``sms`` SMs with an L2 of ``l2_bytes`` (0 where the chip gives no L2, or no rows).

    Between a row's two reads every other row in flight (``sms`` x 2048 / 128 of them at most) is read or written
    as far: that reuse distance is the rows in flight times ``row_bytes``, ``D``. ESTIMATE: the L2's replacement
    policy is not documented; taken as random replacement: ``D`` bytes of new lines spread over the sets of a
    ``W``-way cache of ``C`` bytes make ``W D / C`` misses in a line's set, each evicting it with probability
    ``1 / W``, so it survives with probability (1 - 1/W)^(W D / C), about exp(-D / C), with no parameter beyond the
    datasheet's L2 size (an LRU cache would keep every line while D < C and none beyond). ``C`` is the whole L2:
    each of its two partitions caches the data of the SMs of its own GPCs (NVIDIA A100 Tensor Core GPU
    Architecture whitepaper, "L2 Cache"; the same for GH100), so half the rows in flight meet half the cache, the
    same ratio. The second read misses on ``rows x row_bytes x (1 - exp(-D / C))`` bytes (the survival a float,
    the bytes rounded up to an int)."""
    if sms <= 0 or l2_bytes <= 0 or rows <= 0 or row_bytes <= 0:
        return 0
    in_flight = min(rows, sms * (MAX_THREADS_PER_SM // ROW_KERNEL_THREADS)) * row_bytes
    data = rows * row_bytes
    return data - math.floor(data * math.exp(-in_flight / l2_bytes))


def _inside(start: int, step, members: set) -> set:
    """Members reached from ``start`` (excluded) by ``step(i)`` (producers or consumers), inside ``members``."""
    seen, todo = set(), [start]
    while todo:
        for j in step(todo.pop()):
            if isinstance(j, int) and j in members and j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


def row_kernel(rows, producers, role, k) -> tuple[int, int] | None:
    """(rows, bytes a row) of an eager call that reads its rows twice: a call (not a GEMM or an attention) whose
    first reduction reads a kernel input (directly or through the call's own ops) that an op after the reduction
    reads again (a norm: the statistics, then the row normalised). The row: those inputs' elements over the
    reduction's outputs, at their dtype. None for any other kernel (a mean, whose divide reads only its sum)."""
    reds = [i for i in k.members if short_name(rows[i].op) == "reduce"]
    if k.attention or k.has_dot or not reds or not hasattr(rows[reds[0]].result, "nelems"):
        return None
    members, first = set(k.members), reds[0]
    consumers: dict = {i: [] for i in members}
    for i in members:
        for p in producers[i]:
            if isinstance(p, int) and p in members:
                consumers[p].append(i)
    before = _inside(first, lambda i: producers[i], members) | {first}
    after = _inside(first, lambda i: consumers[i], members) - before
    width = rows[first].operands[0].nelems

    def external(i):  # (producer, operand) of member i's inputs from outside the call (a broadcast: no row)
        return [(p, t) for p, t in zip(producers[i], rows[i].operands)
                if not (isinstance(p, int) and (p in members or role[p] == "dup"))
                and getattr(t, "nelems", 0) == width]
    # the call's values read after the reduction besides the reductions themselves (a mean divides its sum: one
    # pass), and the ops they are made from
    again = {p for i in after for p in producers[i]
             if isinstance(p, int) and p in before and short_name(rows[p].op) != "reduce"}
    src = set()
    for a in again:
        src |= {a} | (_inside(a, lambda i: producers[i], members) & before)
    read_after = {p for i in after for p, _ in external(i)}
    taken: dict = {}
    for i in sorted(before):
        for p, t in external(i):
            if i in src or p in read_after:
                taken.setdefault(p, t.nbytes)
    nrows, total = rows[first].result.nelems, sum(taken.values())
    return (nrows, total // nrows) if total and nrows else None


def second_pass_bytes(rows, producers, role, k, hw: Hardware) -> int:
    """The HBM bytes an eager call that reads its rows twice (:func:`row_kernel`) adds to its kernel
    (:func:`reread_bytes`), over its multiplicity. 0 for any other kernel or a chip without ``memory.l2_mib``."""
    l2 = hw.memory.l2_bytes if hw.memory is not None else 0
    sms = hw.gemm.compute_units if hw.gemm is not None else 0
    row = row_kernel(rows, producers, role, k) if l2 and sms else None
    return reread_bytes(row[0], row[1], sms, l2) * k.multiplicity if row else 0


def resident_fraction(nrows: int, sms: int) -> float:
    """The share of the chip's block slots a grid of ``nrows`` 128-thread blocks (one a row) fills: ``nrows`` over
    ``sms`` x 2048 / 128, at most 1 (1 where the chip's SMs are not known). Such a kernel keeps one vector load a
    thread in flight (``compute_stats`` and the output loop: one ``aligned_vector`` of 4 elements a step), so the
    bytes in flight on the chip, and with them the HBM bandwidth it draws, scale with the blocks resident: a grid
    smaller than one wave of them (the 1024 rows of a GPT-3 LayerNorm on 132 SMs: 1024 of 2112 slots) streams at
    that share of the rate a full one reaches."""
    slots = sms * (MAX_THREADS_PER_SM // ROW_KERNEL_THREADS)
    return 1.0 if slots <= 0 or nrows <= 0 else min(1.0, nrows / slots)


def row_occupancy(rows, producers, role, k, hw: Hardware) -> float:
    """:func:`resident_fraction` of an eager call that reads its rows twice (:func:`row_kernel`); 1 for any other
    kernel or a chip whose SMs the profile does not give."""
    sms = hw.gemm.compute_units if hw.gemm is not None else 0
    row = row_kernel(rows, producers, role, k) if sms else None
    return resident_fraction(row[0], sms) if row else 1.0
