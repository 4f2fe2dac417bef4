"""What the views read of one program: :class:`Figures` (the walk's analysis and, each made once on first use
from the estimators below, its blocks, a training step's phases, the estimate on a profile, the memory
estimate of the execution model, the block table), and its summary, once: the ``(metric, value)`` pairs that
every format renders (table, CSV, JSON, Markdown, the HTML page; the headline is made from them in
:mod:`mhlo_cost.views.headline`). No pandas at import (``report``'s default view starts faster for it).

A view is a function of figures, never of the study that made them (:mod:`mhlo_cost.studies.study` makes a
:class:`Figures` from its options; the views only read it). With an estimate of a fused execution (``--fuse``),
the figures of that execution come first in the summary: each ``*_fused*`` figure stands just before the
unfused one it replaces (``est_time_fused_s`` before ``est_time_s``, ``peak_bytes_fused`` before ``peak_bytes``).
"""
from __future__ import annotations

from functools import cached_property
from typing import Callable

from ..files.console import silent


class Figures:
    """The figures of the walked ``analysis``: on ``hardware`` (a Hardware, or None: counts only) under the
    ``execution`` model (with ``attention``, ``sdpa``), a run of ``steps`` forwards, blocks found by ``blocks``
    (``block_pattern``, ``norms_per_block``); ``stage(text)`` hears the stages (the progress line)."""

    def __init__(self, analysis, *, hardware=None, execution: str = "unfused", attention: str | None = None,
                 sdpa: str | None = None, steps: int | None = None, blocks: str = "auto", cudagraphs: bool = False,
                 block_pattern: str | None = None, norms_per_block: int | None = None,
                 stage: Callable[[str], None] | None = None, split_phases: bool = False):
        self.analysis, self.hardware, self.execution = analysis, hardware, execution
        self.split_phases = split_phases  # compiled: no fused kernel spans two phases (roofline.program.phases_of)
        self.attention, self.sdpa, self.steps = attention, sdpa, steps
        self.cudagraphs = cudagraphs
        self.block_method, self.block_pattern, self.norms_per_block = blocks, block_pattern, norms_per_block
        self.stage = stage or silent

    @property
    def phases(self):
        """A training step's phases, None for a program that is not one."""
        phases = self.analysis.phases
        return phases if phases is not None and phases.training else None

    @cached_property
    def blocks(self):
        """The blocks as asked; a training step's optimizer its own block."""
        from ..analysis.collectors import assign_blocks

        blocks = assign_blocks(self.analysis, method=self.block_method, pattern=self.block_pattern,
                               norms_per_block=self.norms_per_block)
        if self.phases is not None:
            from ..analysis.blocks import training_blocks

            blocks = training_blocks(blocks, self.phases)
        return blocks

    @cached_property
    def roofline(self):
        """The estimate on the profile (None without one)."""
        hw = self.hardware
        if hw is None:
            return None
        from ..roofline import Roofline

        self.stage(f"estimating on {hw.name}")
        return Roofline(self.analysis, hw, attention=self.attention, execution=self.execution,
                        sdpa=self.sdpa or "auto", cudagraphs=self.cudagraphs, split_phases=self.split_phases)

    @cached_property
    def fused_memory(self):
        """The memory estimate of the execution model where it is not ``unfused``, None otherwise."""
        ex, analysis, rf = self.execution, self.analysis, self.roofline
        if ex == "unfused" or analysis.liveness is None:
            return None
        from ..roofline.memory import eager_profile, fused_profile

        if ex == "eager":
            return eager_profile(analysis, rf.fusion if rf is not None else None, sdpa=self.sdpa or "auto")
        if rf is not None:
            return fused_profile(analysis, rf.fusion)
        # as the estimate fuses with --fuse elementwise: attention as one kernel unless --attention unfused
        return fused_profile(analysis, attention=self.attention or "fused")

    @property
    def memory(self) -> list | None:
        """(column suffix, profile) pairs: the unfused memory profile and the fused one (None without liveness)."""
        if self.analysis.liveness is None:
            return None
        from ..roofline.memory import profiles

        return profiles(self.analysis, self.fused_memory)

    def block_frame(self, parts: bool = False, memory: bool = True):
        """The block table: counts, the estimate's columns, memory (unless not ``memory``), a training step's
        phase columns."""
        from ..analysis.blocks import block_table

        rf, profiles = self.roofline, self.memory if memory else None
        if rf is None:
            df = block_table(self.analysis, self.blocks, parts=parts, memory=profiles)
        else:
            df = rf.block_frame(self.blocks, parts=parts, memory=profiles)
        if self.phases is not None:
            from ..analysis.blocks import add_phase_columns

            df = add_phase_columns(df, self.analysis, self.blocks, self.phases, parts=parts)
        return df

    def summary(self, keep: list[int] | None = None, part=None) -> list[tuple[str, object]]:
        """The summary pairs (:func:`summary_pairs`); ``keep``: the positions of a filtered part of the program
        (``part``: its analysis), whose parameters are those first read there."""
        analysis = self.analysis
        part = analysis if part is None else part
        params = None
        if keep is not None and analysis.liveness is not None:
            rows = analysis.memory.param_rows
            params = sum(rows.get(i, 0) for i in keep)
        blocks = self.blocks if part.liveness is not None else None
        fused = self.fused_memory if keep is None else None
        return summary_pairs(part, roofline=self.roofline, fused=fused, hw=self.hardware, blocks=blocks,
                             steps=self.steps or 1, filtered=keep is not None, params=params)


def summary_pairs(analysis, *, roofline=None, fused=None, hw=None, blocks=None, steps: int = 1,
                  filtered: bool = False, params: int | None = None) -> list[tuple[str, object]]:
    """The summary of ``analysis``: its counts (with ``macs`` and ``params``), the estimate of ``roofline``
    (not for a ``filtered`` part of the program), where the memory peaks are (``fused``: the fused memory
    profile; ``blocks``: for the peak's block; ``hw``: whether it fits). ``params`` overrides the count (the
    parameters first read in a filtered part)."""
    counts = dict(analysis.summary)
    if params is not None:
        counts["params"] = params
    pairs = list(counts.items())
    if roofline is not None and not filtered:
        pairs += [(k, v) for k, v in roofline.summary(steps).items() if k not in counts]
        from ..machines.accuracy import statement

        pairs.append(("accuracy", statement(roofline.hw.name, "model", roofline.execution)))
    if analysis.liveness is not None:
        from ..roofline.memory import summary_lines

        pairs += summary_lines(analysis, blocks, fused, hw)
    return chosen_first(pairs)


def chosen_first(pairs: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Each ``*_fused*`` pair (or ``*_eager*``: an execution model's, :func:`memory_suffixes`) moved just before
    the unfused pair it replaces, where there is one."""
    from ..machines.execution import memory_suffixes

    names = {m for m, _ in pairs}
    fused = {}
    for m, v in pairs:
        for sfx in memory_suffixes():
            if sfx in m and m.replace(sfx, "", 1) in names:
                fused[m.replace(sfx, "", 1)] = (m, v)
                break
    moved = {m for m, _ in fused.values()}
    out = []
    for m, v in pairs:
        if m in moved:
            continue
        if m in fused:
            out.append(fused[m])
        out.append((m, v))
    return out
