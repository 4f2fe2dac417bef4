"""What pricing one program needs that no chip changes, computed once per program and reused on every profile.

A sweep point is priced on several chips (``dgx-a100``, ``dgx-h100``), and a program's report, its kernel table
and its block table each build a :class:`~.estimate.Roofline`; every one of them used to redo the same work: find
the attentions (:func:`.attention.find_attention`), group the rows into fused kernels (:class:`.fusion.Grouper`),
measure each kernel's inputs and outputs (:class:`.kernel_io.KernelIO`), and build the dependency graph of the
communication schedule (:func:`mhlo_cost.network.schedule_graph`). None of that reads a chip's rates: the grouping
reads a row's times only to see whether it is ``free`` (no kernel: :func:`.optime.is_no_kernel`, a property of
the op), and a profile's ``row_fusion`` flag, both part of the key here.

:class:`ProgramPricing` holds those results for one program (its rows and data flow), keyed by what they depend
on; :meth:`ProgramPricing.of` keeps it on the analysis (as the analysis keeps its summary), and a different row
list or data flow (a filtered part of the program, a rebuilt table) gets a fresh one. Each chip then only times
the kernels (:func:`.kernel_io.kernel_time`) and runs the schedule.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..machines.hardware import Hardware
from .band import masks_of
from .fusion import Fusion, Grouper, Kernel, grouping_inputs
from .kernel_io import kernel_time, share_time
from .optime import OpTime

#: The attribute of an analysis that holds its :class:`ProgramPricing` (dropped by the wire, as other memos).
MEMO = "_pricing_memo"


@dataclass(frozen=True)
class KernelShape:
    """One kernel as grouped and measured without a chip: members, multiplicity, flags, inputs and outputs."""

    members: tuple
    multiplicity: int
    has_dot: bool
    attention: bool
    closed: bool
    inputs: tuple
    outputs: tuple
    bytes_read: int
    bytes_written: int

    def kernel(self):
        """A fresh :class:`~.fusion.Kernel` with this shape (its times left for a chip to fill)."""
        return Kernel(list(self.members), self.multiplicity, has_dot=self.has_dot, attention=self.attention,
                      closed=self.closed, bytes_read=self.bytes_read, bytes_written=self.bytes_written,
                      inputs=list(self.inputs), outputs=list(self.outputs))


@dataclass(frozen=True)
class Grouping:
    """The kernels of one fused grouping of a program, and each row's kernel (None: none)."""

    shapes: tuple  # KernelShape per kernel
    row_kernel: tuple

    def kernels(self) -> list:
        return [s.kernel() for s in self.shapes]


class ProgramPricing:
    """The chip-independent parts of pricing the program of ``rows`` with data flow ``producers``, each made on
    first use and kept: the attentions found, the fused groupings (by attention mode, row fusion and which rows
    are free), the schedule's graph."""

    def __init__(self, rows, producers, liveness=None):
        self.rows, self.producers, self.liveness, self.n = rows, producers, liveness, len(rows)
        self._attention = None
        self._groupings: dict = {}
        self._graph = None
        self._is_comm = None
        self._memory: dict = {}

    @classmethod
    def of(cls, analysis) -> "ProgramPricing":
        """The one kept on ``analysis`` where it is of the same rows and data flow, else a fresh one, kept."""
        memo = analysis.__dict__.get(MEMO)
        if not (isinstance(memo, cls) and memo.matches(analysis)):
            memo = analysis.__dict__[MEMO] = cls(analysis.rows, analysis.producers, analysis.liveness)
        return memo

    def matches(self, analysis) -> bool:
        """Whether this was made for the rows, data flow and liveness record of ``analysis`` (the same
        objects, the rows not grown)."""
        return (analysis.rows is self.rows and analysis.producers is self.producers
                and analysis.liveness is self.liveness and len(self.rows) == self.n)

    def attention(self) -> tuple:
        """(every attention, forward then backward, as :func:`.attention.find_attention` and
        :func:`.attention_backward.find_attention_backward` find them; the score shapes a flash kernel keeps on chip)."""
        if self._attention is None:
            from .attention import find_attention
            from .attention_backward import find_attention_backward

            forward = find_attention(self.rows, self.producers)
            backward, onchip = find_attention_backward(self.rows, self.producers, forward)
            self._attention = (tuple(forward + backward), frozenset(onchip))
        return self._attention

    def grouping(self, times, attention: str, row_fusion: bool, phase: list | None = None) -> Grouping:
        """The compiled grouping (:func:`.program.fuse`) with ``attention`` (``fused``: each attention one
        kernel); ``times`` say only which rows are free; ``phase``: each row's phase, where no kernel spans two
        (None: one program)."""
        free = tuple(t.bound == "free" for t in times)
        key = (attention, bool(row_fusion), free, tuple(phase) if phase is not None else None)
        if key not in self._groupings:
            self._groupings[key] = self._group(times, attention, row_fusion, phase)
        return self._groupings[key]

    def _group(self, times, attention: str, row_fusion: bool, phase: list | None = None) -> Grouping:
        from .kernel_io import KernelIO

        rows, producers = self.rows, self.producers
        preset, onchip = {}, frozenset()
        if attention == "fused":
            found, onchip = self.attention()
            for g, att in enumerate(found):
                preset.update((i, g) for i in att.members)
        grouper = Grouper(rows, producers, times, preset, row_fusion, phase)
        for i in range(len(rows)):
            grouper.place(i)
        io = KernelIO(rows, producers, times, grouper.role, onchip)
        shapes = []
        for k in grouper.kernels:
            io.measure_io(k)
            shapes.append(KernelShape(tuple(k.members), k.multiplicity, k.has_dot, k.attention, k.closed,
                                      tuple(k.inputs), tuple(k.outputs), k.bytes_read, k.bytes_written))
        return Grouping(tuple(shapes), tuple(grouper.row_kernel))

    def is_comm(self) -> list:
        """Per row: whether it is a collective."""
        if self._is_comm is None:
            self._is_comm = [r.kind == "collective" for r in self.rows]
        return self._is_comm

    def graph(self):
        """The schedule's graph of the data flow (:func:`mhlo_cost.network.schedule_graph`)."""
        if self._graph is None:
            from ..network.schedule import schedule_graph

            self._graph = schedule_graph(self.producers)
        return self._graph

    def fused_memory(self, analysis, row_kernel: list):
        """The fused memory profile of ``analysis`` (this program) with rows grouped as ``row_kernel``
        (:func:`mhlo_cost.memory.profile.profile`): one per grouping, whatever the chip."""
        key = tuple(row_kernel)
        if not self.matches(analysis):
            raise ValueError("fused_memory() of another program than this pricing's")
        if key not in self._memory:
            from ..memory.profile import profile

            self._memory[key] = profile(analysis, row_kernel)
        return self._memory[key]


def fuse(analysis, hw: Hardware, times: list[OpTime] | None = None, producers: list | None = None,
         attention: str = "unfused", split_phases: bool = False) -> Fusion:
    """Group rows into fused kernels (see the module docstring) and time them on ``hw``. ``attention``:
    ``fused`` prices each attention found by :func:`.attention.find_attention` as one kernel. ``split_phases``:
    a training step as PyTorch autograd runs it (:func:`phases_of`): no kernel spans two of its phases. With the
    analysis's own data flow (no ``producers`` given) the grouping is the program's
    (:class:`ProgramPricing`: made once, whatever the chip)."""
    own = producers is None
    rows, producers, times = grouping_inputs(analysis, hw, times, producers, attention, "fuse()")
    shared = ProgramPricing.of(analysis) if own else ProgramPricing(rows, producers)
    phase = phases_of(analysis) if split_phases else None
    grouping = shared.grouping(times, attention, getattr(hw, "row_fusion", True), phase)
    kernels, masks = grouping.kernels(), masks_of(analysis)
    for k in kernels:
        kernel_time(k, rows, producers, times, hw, masks)
    return Fusion(kernels, list(grouping.row_kernel), share_time(kernels, times, len(rows)))


def phases_of(analysis) -> list | None:
    """Each row's phase (:mod:`mhlo_cost.analysis.collectors.phases`: forward, recompute, backward, optimizer) of
    a training step, where no fused kernel spans two (None: a program with no backward). PyTorch autograd (Megatron-LM,
    NeMo and Transformer Engine's modules, torchtitan eager) runs the forward's kernels, then the backward's:
    ``loss.backward()`` starts once the forward has returned; a recompute (Megatron's ``CheckpointFunction``,
    ``torch.utils.checkpoint``) runs the forward's kernels again inside the backward, before the layer's gradients;
    the optimizer's step runs after. XLA compiles a JAX step as one module and may fuse across them (``report``
    on a JAX program keeps that: ``split_phases`` is off by default)."""
    ph = getattr(analysis, "phases", None)
    if ph is None or not ph.training:
        return None
    return list(ph.phase)
