"""The study: what one program costs, composed once from typed options (the application layer).

A :class:`Study` goes from :class:`StudyOptions` to the analysis, the blocks, a training step's phases, the
memory estimate, the roofline estimate (with the network of a system profile) and the summary figures, each
computed on first use and kept. ``mhlo-cost report``, ``blocks`` and ``plot`` map their arguments onto the
options and ask a study; a sweep row (:func:`mhlo_cost.views.sweep_row.sweep_row`) is read from a study; the HTML
page is drawn from one; ``serve`` (:class:`mhlo_cost.studies.serve.study.ServeStudy`) and ``train-plan``
(:class:`mhlo_cost.studies.plan.study.PlanStudy`) estimate each lowered step or layer as a study; and it is the
Python API::

    >>> import mhlo_cost
    >>> s = mhlo_cost.Study("examples/gpt_small.mlir", hardware="h100")  # or Study(StudyOptions(...))
    >>> s.analysis.summary["gemm_flops"], s.roofline.summary()["est_time_s"]  # doctest: +SKIP

Nothing here prints or reads the command line: ``stage`` (a callable, the progress line) hears what is being
done, and warnings stay on the objects they belong to (``analysis.warnings``, ``blocks.warnings``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable


@dataclass(frozen=True)
class StudyOptions:
    """What a study is asked: the program (``source``: a path, MLIR text or bytes; ``name`` for bytes), how it
    is walked (``entry``, ``conv_padding``, ``training``: True where the IR holds a backward, ``"always"``
    whatever it holds), the estimate (``hardware``: a profile's name or a Hardware; ``hardware_file``;
    ``execution`` or the older ``fuse``; ``attention``; ``sdpa``; ``steps``), and the blocks (``blocks``,
    ``block_pattern``, ``norms_per_block``). ``dataflow``: the walk records operand producers (None: where
the estimate or the memory estimate needs them). ``isolate``: parsed and walked in the reader's child process
    (:mod:`mhlo_cost.ir.guard`; None: where the guard is enabled)."""

    source: object
    name: str | None = None
    entry: str | None = None
    conv_padding: str = "xla"
    training: bool | str = False
    hardware: object = None
    hardware_file: str | os.PathLike | None = None
    execution: str | None = None
    fuse: str = "none"
    attention: str | None = None
    sdpa: str | None = None
    steps: int | None = None
    blocks: str = "auto"
    block_pattern: str | None = None
    norms_per_block: int | None = None
    isolate: bool | None = False
    dataflow: bool | None = None


def phases_of(analysis):
    """A training step's phases (None for an analysis that does not record them: a declared part of
    :class:`~mhlo_cost.analysis.Analysis`)."""
    return analysis.phases


class Study:
    """The figures of one program under :class:`StudyOptions`, each computed once, on first use."""

    def __init__(self, options, *, stage: Callable[[str], None] | None = None,
                 meanwhile: Callable[[], None] | None = None, check: Callable[[], None] | None = None, **fields):
        """``options``: a :class:`StudyOptions`, or the source with the other ``fields`` as keywords
        (``Study("model.mlir", hardware="h100")``). ``stage(text)``: told each stage; ``meanwhile()``: run
        while the reader's child walks; ``check()``: run before the bindings are imported in this process."""
        if not isinstance(options, StudyOptions):
            options = StudyOptions(options, **fields)
        elif fields:
            options = replace(options, **fields)
        self.options = options
        self.stage = stage or (lambda text: None)  # told each stage (the progress line)
        self._meanwhile, self._check = meanwhile, check

    @classmethod
    def of(cls, analysis, **fields) -> "Study":
        """The study of an analysis already made (``fields``: the other options: the profile, the execution)."""
        study = cls(StudyOptions(analysis.source, **fields))
        study.__dict__["analysis"] = analysis
        return study

    def on(self, hardware) -> "Study":
        """The same program's study on another profile (the analysis shared, not walked again)."""
        other = Study(replace(self.options, hardware=hardware), stage=self.stage)
        if "analysis" in self.__dict__:
            other.__dict__["analysis"] = self.analysis
        return other

    # -- options ---------------------------------------------------------------------------------------------

    @property
    def execution(self) -> str:
        """The execution model: ``execution``, else the one ``fuse`` maps onto (none: unfused, elementwise:
        compiled)."""
        from ..machines.execution import execution_of

        return execution_of(self.options.fuse, self.options.execution)

    @property
    def dataflow(self) -> bool:
        """Whether the walk records operand producers: any estimate, or a fused / eager memory estimate."""
        if self.options.dataflow is not None:
            return self.options.dataflow
        return self.hardware is not None or self.execution != "unfused"

    @cached_property
    def hardware(self):
        """The profile (None where none is named); a Hardware given in the options is itself."""
        o = self.options
        if o.hardware is None and o.hardware_file is None:
            return None  # no profile: the roofline (and pandas) stay unloaded
        if not isinstance(o.hardware, (str, type(None))):
            return o.hardware
        from ..roofline import hardware_from_args

        return hardware_from_args(o.hardware, o.hardware_file)

    def walk_options(self):
        from ..analysis.isolated import WalkOptions

        o = self.options
        record = ("training" if o.training == "always" else "training-if-backward" if o.training
                  else "dataflow" if self.dataflow else "counts")
        return WalkOptions(entry=o.entry, conv_padding=o.conv_padding, record=record,
                           dataflow_if_forward=self.dataflow, records=("masks",) if self.dataflow else ())

    # -- the pipeline ----------------------------------------------------------------------------------------

    @cached_property
    def analysis(self):
        """The walk's analysis, in the reader's child where ``isolate`` says so (this process then imports
        no jaxlib), else here."""
        from ..ir.guard import enabled
        from ..analysis.isolated import analyze_isolated, walk_loaded

        o, options = self.options, self.walk_options()
        if o.isolate or (o.isolate is None and enabled()):
            analysis = analyze_isolated(o.source, options, name=o.name, meanwhile=self._meanwhile)
            self.stage("counting")
            return analysis
        if self._check is not None:
            self._check()
        from ..ir.loader import load

        loaded = load(o.source, name=o.name)
        self.stage("counting")
        return walk_loaded(loaded, options)

    def answer(self, render: str):
        """The reader's child's whole answer to ``render`` (:func:`mhlo_cost.studies.compose.spec`; the study
        isolated), or None where the analysis came back instead (kept: :attr:`analysis`)."""
        from ..analysis.isolated import Rendered, analyze_isolated

        o = self.options
        got = analyze_isolated(o.source, replace(self.walk_options(), render=render), name=o.name,
                               meanwhile=self._meanwhile)
        self.stage("counting")
        if isinstance(got, Rendered):
            return bytes(got)
        self.__dict__["analysis"] = got
        return None

    @property
    def phases(self):
        """A training step's phases, None for a program that is not one."""
        phases = phases_of(self.analysis)
        return phases if phases is not None and phases.training else None

    @cached_property
    def blocks(self):
        """The blocks by the options; a training step's optimizer its own block."""
        from ..analysis.collectors import assign_blocks

        o = self.options
        blocks = assign_blocks(self.analysis, method=o.blocks, pattern=o.block_pattern,
                               norms_per_block=o.norms_per_block)
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
        return Roofline(self.analysis, hw, attention=self.options.attention, execution=self.execution,
                        sdpa=self.options.sdpa or "flash")

    @cached_property
    def fused_memory(self):
        """The memory estimate of the execution model where it is not ``unfused``, None otherwise."""
        ex, analysis, rf = self.execution, self.analysis, self.roofline
        if ex == "unfused" or analysis.liveness is None:
            return None
        from ..roofline.memory import eager_profile, fused_profile

        if ex == "eager":
            return eager_profile(analysis, rf.fusion if rf is not None else None, sdpa=self.options.sdpa or "flash")
        if rf is not None:
            return fused_profile(analysis, rf.fusion)
        # as the estimate fuses with --fuse elementwise: attention as one kernel unless --attention unfused
        return fused_profile(analysis, attention=self.options.attention or "fused")

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

        rf, memory = self.roofline, self.memory if memory else None
        if rf is None:
            df = block_table(self.analysis, self.blocks, parts=parts, memory=memory)
        else:
            df = rf.block_frame(self.blocks, parts=parts, memory=memory)
        if self.phases is not None:
            from ..analysis.blocks import add_phase_columns

            df = add_phase_columns(df, self.analysis, self.blocks, self.phases, parts=parts)
        return df

    def summary(self, keep: list[int] | None = None, part=None) -> list[tuple[str, object]]:
        """The summary pairs (:func:`mhlo_cost.views.figures.summary_pairs`); ``keep``: the positions of a filtered
        part of the program (``part``: its analysis), whose parameters are those first read there."""
        from ..views.figures import summary_pairs

        analysis = self.analysis
        part = analysis if part is None else part
        params = None
        if keep is not None and analysis.liveness is not None:
            rows = analysis.memory.param_rows
            params = sum(rows.get(i, 0) for i in keep)
        blocks = self.blocks if part.liveness is not None else None
        fused = self.fused_memory if keep is None else None
        return summary_pairs(part, roofline=self.roofline, fused=fused, hw=self.hardware, blocks=blocks,
                             steps=self.options.steps or 1, filtered=keep is not None, params=params)
