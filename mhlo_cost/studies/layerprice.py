"""A deep program's figures on a chip from one priced layer: the program at depths 2 and 3 (``shallow``, ``deep``)
is walked and priced, and the figures at full depth are those of the program whose rows are ``deep``'s with its
repeated layers' rows (layer 2 of each segment, :func:`~mhlo_cost.studies.layerfit_sharded.find_segments`) copied
once per further layer, priced by repeating layer 2's priced rows and kernels. Nothing is rebuilt row by row
(:mod:`mhlo_cost.studies.layerfit`, :mod:`mhlo_cost.studies.layerfit_sharded` build the full-depth analysis; here
only the lists pricing reads are made).

Why the repetition is the full-depth pricing, figure by figure:

* a row's roofline (:func:`mhlo_cost.roofline.optime.op_time`) reads the row alone, and every copy of a layer's row
  is the same row (same op, types, counts: :func:`~mhlo_cost.studies.layerfit._sig`), so each copy's time is the
  same float; a kernel's time reads its members and their inputs, so a copy of layer 2's kernel costs what it
  does (a kernel is a copy when it is headed in a copy of layer 2: the grouping of a middle layer is the same in
  every middle layer, its neighbours being a layer before and one after). Two kinds of kernel are not a layer's
  alone: one that runs past its layer's end (a layer's last add fused with the next layer's norm: in a middle
  layer it is layer 1's kernel at that place, which runs into layer 2; only the last layer's is layer 2's,
  :meth:`Repeat.kernels`), and one headed before the layers with members in every layer (the conditioning's
  projection fused with each layer's add: made again at full depth, :func:`_spanning`);
* every time total of the estimate is a ``math.fsum`` (:meth:`mhlo_cost.roofline.estimate.Roofline.totals`,
  :class:`mhlo_cost.roofline.fusion.Fusion`), the correctly rounded sum of its terms whatever their order, so a
  total over the repeated terms is bit for bit the total over the program's own;
* exposed communication is a schedule that runs in time (:func:`mhlo_cost.network.schedule.exposed_comm`): the
  rows' start times grow along the program, and a difference of two times rounds differently at another
  magnitude, so it is not repeated from one layer: the schedule runs over the full-depth rows (their times
  repeated, their data flow mapped as the rebuild maps it, :class:`~mhlo_cost.studies.layerfit_sharded._Plan`);
* the counts (exact ints) and the memory peaks grow by a constant per layer: a layer adds its rows' counts, its
  weights (arguments, live throughout) and, at the peak (inside a layer, after the ones before it), the same
  values live per layer before it; each is ``deep + (L - 2) (deep - shallow)`` at ``L`` layers per segment. The
  caller checks the repetition against a lowering at a depth not used to make it
  (:func:`mhlo_cost.studies.sweep.point._repeated_rows`: the row at depth 4 equal to the depth-4 lowering's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .gridfit import FitFailed

@dataclass
class _Memory:
    peak_bytes: int


class _Program:
    """The full-depth program as pricing reads it: rows (copies of ``deep``'s row objects), data flow (row
    positions at full depth), the counts and the unfused memory peak (extrapolated)."""

    def __init__(self, rows, producers, summary: dict, peak: int, async_done: dict):
        self.rows, self.producers, self.liveness, self.async_done = rows, producers, None, async_done
        self._summary, self.memory = summary, _Memory(peak)
        self.source = None

    @property
    def summary(self) -> dict:
        return dict(self._summary)


class Repeat:
    """Where the rows of ``deep`` (the program at depth ``base + 1``) go at ``depth``: :attr:`order`, per row at
    full depth, (its position in ``deep``, its layer: None for a row that is not a copy); :attr:`layers`: the
    copies of each segment's layer 2 at full depth (``L - 1``, ``L`` the layers per segment)."""

    def __init__(self, shallow, deep, depth: int, base: int = 2, segs: list | None = None):
        """``segs``: the layers' segments of ``deep`` over ``shallow`` where known (:meth:`at`), else found."""
        from .layerfit import _sig, check_plain
        from .layerfit_sharded import _order, _Plan, find_segments

        if depth <= base + 1:
            raise FitFailed(f"depth {depth} is not above the deep lowering's {base + 1}")
        check_plain(shallow, deep)
        if segs is None:
            segs = find_segments([_sig(r) for r in shallow.rows], [_sig(r) for r in deep.rows])
        self.base = base
        self.shallow, self.deep, self.plan = shallow, deep, _Plan(segs, depth - (base - 1))
        self.order = list(_order(self.plan, len(deep.rows)))
        self.layers = self.plan.depth - 1
        self.in_layer2 = [False] * len(deep.rows)
        for q, m in segs:
            for p in range(q + m, q + 2 * m):
                self.in_layer2[p] = True

    def at(self, depth: int) -> "Repeat":
        """The same repetition to ``depth`` (its layers' segments found once: a point checked at one depth and
        priced at another)."""
        return Repeat(self.shallow, self.deep, depth, self.base, segs=self.plan.segs)

    def grown(self, a: int, b: int) -> int:
        """``b`` (at depth ``base + 1``) grown from ``a`` (at ``base``) by a constant per layer, to full depth."""
        return b + (self.layers - 1) * (b - a)

    def producers(self) -> list:
        """The data flow at full depth: each row's operand sources (row positions; arguments and unknowns as
        they are), as :func:`~mhlo_cost.studies.layerfit_sharded.repeat_sharded` maps them."""
        plan, prods, n = self.plan, self.deep.producers, len(self.deep.rows)
        new = [plan.new(p) for p in range(n)]
        at = [None] * n  # in a segment's layer 1 or 2: (its layer 1's start at full depth, m, layer, offset)
        for q, m in plan.segs:
            for p in range(q, q + 2 * m):
                at[p] = (new[q], m, 1 + (p - q) // m, (p - q) % m)
        first, last = plan.segs[0][0], plan.depth

        def read(x, k, row):  # plan.read of a row position, as a table lookup
            if type(x) is not int or not 0 <= x < n or at[x] is None:
                return new[x] if type(x) is int and 0 <= x < n else (plan.read(x, k, row, None) if type(x) is int
                                                                       else x)
            q0, m, j, off = at[x]
            if k is not None:
                return q0 + (j + k - 3) * m + off
            if j == 2 and at[row] is None and row >= first and row >= x - (j - 1) * m - off + 2 * m:
                return q0 + (last - 1) * m + off
            return new[x]

        return [tuple(read(x, k, p) for x in prods[p]) for p, k in self.order]

    def program(self, flow: bool = True):
        """The full-depth program pricing reads (made once, shared by every chip); ``flow`` False: without its data
        flow (a program without collectives, whose exposed communication is none whatever the flow)."""
        sh, dp = self.shallow, self.deep
        s1, s2 = sh.summary, dp.summary
        summary = {k: self.grown(s1[k], v) if type(v) is int and type(s1.get(k)) is int else v
                   for k, v in s2.items()}
        peak = self.grown(sh.memory.peak_bytes, dp.memory.peak_bytes)
        rows = [dp.rows[p] for p, _ in self.order]
        return _Program(rows, self.producers() if flow else [], summary, peak, dict(dp.async_done or {}))

    def copies(self) -> dict:
        """Position in ``deep`` -> its rows' positions at full depth (one, or one per copy of a layer 2's row)."""
        if "_copies" not in self.__dict__:  # (made once: every chip's pricing asks)
            out: dict = {}
            for new, (p, _) in enumerate(self.order):
                out.setdefault(p, []).append(new)
            self._copies = out
        return self._copies

    def shallow_pos(self, p: int) -> int:
        """The position in ``shallow`` of ``deep``'s row ``p`` (one not in a layer 2)."""
        return p - sum(m for q, m in self.plan.segs if q + 2 * m <= p)

    def kernels(self, fusion) -> list:
        """The kernels at full depth of ``deep``'s ``fusion``: ``deep``'s own first (in their order: a row's kernel
        index stays its kernel's), then one per further copy of each layer 2's kernel: the kernel itself, or where it
        runs past its layer's end (a layer's last add fused with the next rows' norm) layer 1's kernel at the same
        place (which runs into layer 2: a middle layer's runs into the next layer, only the last one's past it)."""
        swap = self.crossing(fusion)
        again = [fusion.kernels[swap.get(j, j)] for j, k in enumerate(fusion.kernels) if self.in_layer2[k.head]]
        return list(fusion.kernels) + again * (self.layers - 1)

    def crossing(self, fusion) -> dict:
        """{kernel of a layer 2 that runs past its layer's end: layer 1's kernel at the same place}."""
        memo = self.__dict__.setdefault("_crossing", {})
        if id(fusion) not in memo:
            at = {k.head: j for j, k in enumerate(fusion.kernels)}
            out = {}
            for j, k in enumerate(fusion.kernels):
                if not self.in_layer2[k.head]:
                    continue
                (q, m), _, _ = self.plan.seg_of(k.head)
                if k.members[-1] >= q + 2 * m:
                    twin = at.get(k.head - m)
                    if twin is None or fusion.kernels[twin].members[-1] >= q + 2 * m:
                        raise FitFailed("a kernel runs past the end of layer 2 but not past layer 1's")
                    out[j] = twin
            memo[id(fusion)] = (fusion, out)
        return memo[id(fusion)][1]

    def sources(self, fusion) -> list:
        """Per row at full depth, the row of ``deep`` whose kernel and share of its time it has: its own, but for
        a copy of a layer 2's row in a kernel that runs past the layer's end in any layer but the last: layer 1's
        row at the same place (:meth:`kernels`)."""
        swap, rk, last = self.crossing(fusion), fusion.row_kernel, self.plan.depth
        out = []
        for p, k in self.order:
            j = rk[p]
            if j in swap and self.in_layer2[p] and (k or 2) < last:
                (q, m), _, _ = self.plan.seg_of(p)
                if rk[p - m] != swap[j]:
                    raise FitFailed("a row of layer 1 is not in the kernel of its twin in layer 2")
                p -= m
            out.append(p)
        return out


def repeated_figures(repeat: Repeat, program, study, shallow_study):
    """The figures (as :func:`mhlo_cost.views.sweep_row.sweep_row` reads them) at full depth of ``study`` (the
    deep program's study on a chip), with ``shallow_study`` (the shallow one's, same chip: its fused memory peak)
    and ``program`` (:meth:`Repeat.program`)."""
    from ..roofline.estimate import Roofline

    fig = study.figures
    rf = fig.roofline
    order = repeat.order
    times = [rf.times[p] for p, _ in order]
    fusion = None
    if rf.fusion is not None:
        f = rf.fusion
        src = repeat.sources(f)
        fusion = _RepeatedFusion(repeat.kernels(f), [f.row_kernel[p] for p in src], [f.row_time[p] for p in src])
        _spanning(repeat, fusion, f, shallow_study.figures.roofline.fusion, times, program, rf.hw)
    full = Roofline.priced(program, rf.hw, times, fusion, execution=rf.execution, attention=rf.attention)
    fused_peak = None
    if fusion is not None:
        fused_peak = repeat.grown(shallow_study.figures.fused_memory.peak_bytes, fig.fused_memory.peak_bytes)
    return _Figures(program, rf.hw, full, fig.steps, fused_peak)


def _spanning(repeat: Repeat, fusion, deep, shallow, times: list, program, hw) -> None:
    """Each kernel of ``deep`` (the deep program's fusion) headed outside the layers with members in a layer 2
    and whose other members are ``shallow``'s kernel of the same head (the conditioning's projection fused with an
    add in every layer; not one that joins a layer 1's last rows to the next layer's first) made again at full
    depth in ``fusion``: its members every copy of theirs, its compute and unfused times the ``fsum`` of theirs,
    its bytes (what it reads and writes grows by the same per layer) grown from ``shallow``'s kernel of the same
    head, its memory time and its members' shares of its time as :func:`mhlo_cost.roofline.kernel_io.kernel_time` and
    :func:`~mhlo_cost.roofline.kernel_io.share_time` make them."""
    from dataclasses import replace

    copies, in2 = None, repeat.in_layer2
    head2 = {k.head: k for k in shallow.kernels}
    for j, k in enumerate(deep.kernels):
        if in2[k.head] or not any(in2[i] for i in k.members):
            continue
        k2 = head2.get(repeat.shallow_pos(k.head))
        if k2 is None or [repeat.shallow_pos(i) for i in k.members if not in2[i]] != k2.members:
            continue  # (one at the edge of a layer 2: a layer's last add fused with the next one's norm)
        if k.attention:
            raise FitFailed("an attention kernel spans the layers")
        copies = copies or repeat.copies()
        members = sorted(n for i in k.members for n in copies[i])
        m = k.multiplicity
        new = replace(k, members=members, bytes_read=repeat.grown(k2.bytes_read, k.bytes_read),
                      bytes_written=repeat.grown(k2.bytes_written, k.bytes_written),
                      flops=sum(program.rows[i].gemm_flops + program.rows[i].conv_flops + program.rows[i].vector_flops
                                for i in members), compute_s=math.fsum(times[i].compute_s for i in members),
                      memory_s=0.0, overhead_s=hw.kernel_overhead * m, inputs=[], outputs=[])
        new.memory_s = hw.memory_time(new.bytes_read + new.bytes_written, m)
        unfused = math.fsum(times[i].kernel_s for i in members)
        if new.time_s > unfused:
            new.memory_s = min(new.memory_s, max(0.0, unfused - new.overhead_s))
            new.compute_s = min(new.compute_s, max(0.0, unfused - new.overhead_s))
        fusion.kernels[j] = new
        weights = [times[i].kernel_s for i in members]
        total = math.fsum(weights)
        for i, w in zip(members, weights):
            fusion.row_time[i] = new.time_s * (w / total) if total > 0 else 0.0
        if total <= 0:
            fusion.row_time[members[0]] = new.time_s


def repeated_rows(repeat: Repeat, priced: list) -> list:
    """The sweep rows (:func:`mhlo_cost.views.sweep_row.sweep_row`) at full depth, one per ``(shallow, deep)`` pair
    of ``priced``: the studies of the shallow and deep programs on one profile (each priced once however many
    depths are asked of it)."""
    from ..views.sweep_row import sweep_row

    # (a program without a collective exposes none, whatever its data flow: not mapped to full depth, as serve's)
    program = repeat.program(any(r.kind == "collective" for r in repeat.deep.rows))
    return [sweep_row(repeated_figures(repeat, program, deep, shallow)) for shallow, deep in priced]


class _RepeatedFusion:
    """A fusion at full depth as the estimate's totals read it: the kernels (:meth:`Repeat.kernels`), each row's
    kernel (the index of ``deep``'s kernel it is a copy of: the same bound and flags) and share of its time."""

    def __init__(self, kernels, row_kernel, row_time):
        self.kernels, self.row_kernel, self.row_time = kernels, row_kernel, row_time

    @property
    def time_s(self) -> float:
        return math.fsum(k.time_s for k in self.kernels)


@dataclass
class _FusedMemory:
    peak_bytes: int


class _Figures:
    """What :func:`mhlo_cost.views.sweep_row.sweep_row` reads of a program's figures on one chip."""

    def __init__(self, analysis, hardware, roofline, steps, fused_peak):
        self.analysis, self.hardware, self.roofline, self.steps = analysis, hardware, roofline, steps
        self.fused_memory = None if fused_peak is None else _FusedMemory(fused_peak)
