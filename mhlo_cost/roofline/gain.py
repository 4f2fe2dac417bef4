"""The compile gain (``--execution inductor``): eager time over Inductor time, per program and per block.

The same program, on the same profile, estimated twice: as PyTorch eager runs it (:func:`.eager.eager`, with the
SDPA backend and written attention the estimate was given) and as Inductor compiles it (the estimate's own
kernels). Each side's step is its kernels plus the
communication they cannot hide (:func:`mhlo_cost.network.exposed_comm` with that side's row times), so that the
program's gain is ``est_time_eager_overlap_s / est_time_fused_overlap_s`` (the summary's ``compile_gain``) and
a block's is the same ratio of its rows (the block table's ``compile_gain``; NaN where the Inductor time of a
block is zero, such as a block of views only).
"""
from __future__ import annotations

import math
from functools import cached_property

from ..network import exposed_comm

#: The figures the gain adds: the eager step (summary and block table) and the gain itself.
EAGER_STEP, GAIN = "est_time_eager_overlap_s", "compile_gain"


class CompileGain:
    """The eager side of a :class:`~.estimate.Roofline` whose execution is ``inductor``."""

    def __init__(self, roofline):
        self.rf = roofline

    @cached_property
    def eager(self):
        """The eager kernels of the program (:func:`.eager.eager` with the estimate's ``sdpa`` and ``written``)."""
        from .eager import eager

        rf = self.rf
        return eager(rf.analysis, rf.hw, rf.times, sdpa=rf.sdpa, written=rf.written)

    @cached_property
    def exposed(self) -> list[float]:
        """Each row's exposed communication under the eager kernels' times."""
        rf, rows = self.rf, self.rf.analysis.rows
        producers = rf.analysis.producers or [(None,)] * len(rows)
        return exposed_comm(producers, list(self.eager.row_time), [t.comm_s for t in rf.times],
                            [r.kind == "collective" for r in rows], rf.analysis.async_done).exposed

    @cached_property
    def row_step(self) -> list[float]:
        """Each row's share of the eager step: its share of its eager kernel and its exposed communication."""
        return [t + c for t, c in zip(self.eager.row_time, self.exposed)]

    def totals(self, inductor_step_s: float) -> dict:
        """The summary's eager step and compile gain, given the Inductor step."""
        step = self.eager.time_s + math.fsum(self.exposed)
        return {EAGER_STEP: step, GAIN: step / inductor_step_s if inductor_step_s > 0 else math.nan}

    def block_extra(self) -> dict:
        """The block table's eager step per row (:func:`mhlo_cost.analysis.blocks.block_table`'s ``extra``)."""
        step = self.row_step
        return {EAGER_STEP: lambda r: step[r.index]}


def add_gain_column(df) -> None:
    """The block table's ``compile_gain``: each row's eager step over its Inductor step (NaN where that is 0)."""
    den = df["est_time_fused_overlap_s"]
    df[GAIN] = (df[EAGER_STEP] / den.where(den > 0)).astype("float64")
