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
done, and warnings stay on the objects they belong to (``analysis.warnings``, ``blocks.warnings``). What a study
hands the views is its :class:`~mhlo_cost.views.figures.Figures`, never itself.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable

from ..files.console import silent


@dataclass(frozen=True)
class StudyOptions:
    """What a study is asked: the program (``source``: a path, MLIR text or bytes; ``name`` for bytes), how it
    is walked (``entry``, ``conv_padding``, ``training``: True where the IR holds a backward, ``"always"``
    whatever it holds), the estimate (``hardware``: a profile's name or a Hardware; ``hardware_file``;
    ``execution`` or the older ``fuse``; ``attention``; ``sdpa``; ``steps``), and the blocks (``blocks``,
    ``block_pattern``, ``norms_per_block``). ``dataflow``: the walk records operand producers (None: where
the estimate or the memory estimate needs them). ``isolate``: parsed and walked in the reader's child process
    (:mod:`mhlo_cost.ir.guard`; None: where the guard is enabled). ``shapes``: ((symbol, value), ...), the point
    a symbolic program (jax.export with symbolic dimensions) is refined at before the walk
    (:mod:`mhlo_cost.ir.refine`); a static program refuses them."""

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
    cudagraphs: bool = False  # --execution inductor: replayed from a CUDA graph (mode="reduce-overhead")
    split_phases: bool = False  # compiled: a training step run phase by phase, as PyTorch autograd runs it
    steps: int | None = None
    blocks: str = "auto"
    block_pattern: str | None = None
    norms_per_block: int | None = None
    isolate: bool | None = False
    dataflow: bool | None = None
    shapes: tuple = ()  # ((symbol, value), ...): the point a symbolic program is refined at (--shapes)
    # MLIR text this process lowered itself (a sweep's point: in a pool's worker, a Dask worker, or the sweep's own
    # process under -j 1): parsed here, not in the reader's child, unless MHLO_COST_ISOLATE=1 is set explicitly
    # (:func:`mhlo_cost.ir.guard.forced`). No child starts and no bytecode is made; given up: the guard's limits on
    # the parse (its CPU time, wall clock and memory) and its containment of a reader's crash. Safe because the text
    # was printed by this process's own jaxlib from the module it just lowered, and the lowering itself (jax
    # tracing and jaxlib building that module, in this process) was never guarded: the guard is for files from
    # elsewhere.
    parse_here: bool = False

    def __post_init__(self):
        """Block options that mean nothing under the block method (:class:`~mhlo_cost.studies.limits.OptionError`):
        ``block_pattern`` names blocks in scope paths (methods auto, scope, stages); ``norms_per_block`` counts
        normalisations (methods auto and rms), and a pattern makes auto look at scopes alone."""
        from ..analysis.collectors import METHODS
        from .limits import OptionError, whole

        shapes = self.shapes.items() if isinstance(self.shapes, dict) else self.shapes or ()
        object.__setattr__(self, "shapes", tuple((str(n), int(v)) for n, v in shapes))  # (JSON gives lists)
        b = self.blocks
        if b not in METHODS:
            raise OptionError(f"--blocks must be one of {', '.join(METHODS)}, got {b!r}")
        if self.block_pattern is not None and b in ("rms", "repeat"):
            raise OptionError(f"--block-pattern names blocks in scope paths: it goes with --blocks auto, scope or "
                              f"stages, not {b}")
        if self.norms_per_block is not None:
            whole(self.norms_per_block, "--norms-per-block")
            if b not in ("auto", "rms"):
                raise OptionError(f"--norms-per-block counts the normalisations the rms method cuts at: it goes with "
                                  f"--blocks auto or rms, not {b}")
            if self.block_pattern is not None:
                raise OptionError("--norms-per-block does not go with --block-pattern (a pattern finds blocks by "
                                  "scope alone)")
        if self.steps is not None:
            whole(self.steps, "--steps")


class Study:
    """The figures of one program under :class:`StudyOptions`: the walk made once, on first use, and its
    :class:`~mhlo_cost.views.figures.Figures` (blocks, phases, the estimate, the memory estimate), which the
    views read; :meth:`view` answers a :class:`~mhlo_cost.views.table.ViewRequest` with a Table."""

    def __init__(self, options, *, stage: Callable[[str], None] | None = None,
                 meanwhile: Callable[[], None] | None = None, **fields):
        """``options``: a :class:`StudyOptions`, or the source with the other ``fields`` as keywords
        (``Study("model.mlir", hardware="h100")``). ``stage(text)``: told each stage; ``meanwhile()``: run
        while the reader's child walks."""
        if not isinstance(options, StudyOptions):
            options = StudyOptions(options, **fields)
        elif fields:
            options = replace(options, **fields)
        self.options = options
        self.stage = stage or silent  # told each stage (the progress line)
        self._meanwhile = meanwhile

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
        """The execution model (:func:`mhlo_cost.machines.execution.execution_of` of the options)."""
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
        records = ("masks", "layouts") if self.dataflow else ()  # layouts: the eager model's copies (issue 35)
        return WalkOptions(entry=o.entry, conv_padding=o.conv_padding, record=record,
                           dataflow_if_forward=self.dataflow, records=records, shapes=tuple(o.shapes))

    # -- the walk --------------------------------------------------------------------------------------------

    def isolated(self) -> bool:
        """Whether the program is parsed and walked in the reader's child process."""
        from ..ir.guard import enabled

        o = self.options
        return bool(o.isolate or (o.isolate is None and enabled()))

    @cached_property
    def analysis(self):
        """The walk's analysis, in the reader's child where ``isolate`` says so (this process then imports
        no jaxlib), else here (the installed jaxlib checked first: :func:`mhlo_cost.ir.loader.require_jax`)."""
        from ..analysis.isolated import analyze_isolated, walk_loaded

        o, options = self.options, self.walk_options()
        if self.isolated():
            analysis = analyze_isolated(o.source, options, name=o.name, meanwhile=self._meanwhile)
            self.stage("counting")
            return analysis
        from ..ir.guard import forced
        from ..ir.loader import load, require_jax

        require_jax()
        loaded = load(o.source, name=o.name, isolate=False if o.parse_here and not forced() else None)
        self.stage("counting")
        return walk_loaded(loaded, options)

    def answer(self, render: str):
        """The reader's child's whole answer to ``render`` (:func:`mhlo_cost.studies.compose.wire`; the study
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

    # -- the figures, and the views of them ------------------------------------------------------------------

    @cached_property
    def figures(self):
        """What the views read: :class:`~mhlo_cost.views.figures.Figures` of the analysis under the options."""
        from ..views.figures import Figures

        o = self.options
        return Figures(self.analysis, hardware=self.hardware, execution=self.execution, attention=o.attention,
                       sdpa=o.sdpa, cudagraphs=o.cudagraphs, steps=o.steps, blocks=o.blocks,
                       block_pattern=o.block_pattern, norms_per_block=o.norms_per_block, stage=self.stage,
                       split_phases=o.split_phases)

    def view(self, request=None):
        """The :class:`~mhlo_cost.views.table.Table` that answers ``request`` (a
        :class:`~mhlo_cost.views.table.ViewRequest`; default: the summary), by :func:`mhlo_cost.views.by.view`."""
        from ..views.by import view
        from ..views.table import ViewRequest

        return view(self.figures, request if request is not None else ViewRequest())

    @property
    def phases(self):
        """A training step's phases, None for a program that is not one."""
        return self.figures.phases

    @property
    def blocks(self):
        """The blocks by the options; a training step's optimizer its own block."""
        return self.figures.blocks

    @property
    def roofline(self):
        """The estimate on the profile (None without one)."""
        return self.figures.roofline

    @property
    def fused_memory(self):
        """The memory estimate of the execution model where it is not ``unfused``, None otherwise."""
        return self.figures.fused_memory

    @property
    def memory(self) -> list | None:
        """(column suffix, profile) pairs: the unfused memory profile and the fused one (None without liveness)."""
        return self.figures.memory

    def block_frame(self, parts: bool = False, memory: bool = True):
        """The block table (:meth:`mhlo_cost.views.figures.Figures.block_frame`)."""
        return self.figures.block_frame(parts, memory)

    def summary(self, keep: list[int] | None = None, part=None) -> list[tuple[str, object]]:
        """The summary pairs (:meth:`mhlo_cost.views.figures.Figures.summary`)."""
        return self.figures.summary(keep, part)
