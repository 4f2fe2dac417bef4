"""``mhlo-cost serve`` as a study: from :class:`ServeOptions` to the figures of one step, or of a sweep, as a
view (:mod:`mhlo_cost.views.serve`) that the shared renderers write (no study renders itself). The command maps
its arguments onto the options; every step is lowered once (on disk with a cache) and estimated as a
:class:`~mhlo_cost.studies.study.Study` (:func:`~.serve.step_study`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from ...files.console import silent
from ...lower.inference.steps import StepRequest


@dataclass(frozen=True)
class ServeOptions:
    """The step (``request``), the profile (``hardware``: a Hardware), ``tp``, ``launch`` (stream or
    cuda-graphs), a sweep (``batches``, ``contexts``, ``tps``: any given makes one) and the cache of lowerings
    and results (``cache``: kept at all; ``cache_dir``: the cache root, default
    :func:`mhlo_cost.files.cache.default_root`)."""

    request: StepRequest
    hardware: object
    tp: int = 1
    launch: str = "stream"
    batches: tuple | None = None
    contexts: tuple | None = None
    tps: tuple | None = None
    cache: bool = True
    cache_dir: str | os.PathLike | None = None

    @property
    def sweeping(self) -> bool:
        return bool(self.batches or self.contexts or self.tps)


class ServeStudy:
    """The figures of :class:`ServeOptions`, each computed once, on first use; ``stage(text)`` told each stage,
    ``note(text)`` each cache entry not trusted or not kept."""

    def __init__(self, options: ServeOptions, stage: Callable[[str], None] | None = None,
                 note: Callable[[str], None] | None = None):
        self.options = options
        self.stage = stage or silent
        self.note = note

    @cached_property
    def hardware(self):
        """The profile as the step's launch sees it (:func:`~.serve.launched`)."""
        from .serve import launched

        return launched(self.options.hardware, self.options.launch)

    @cached_property
    def cache(self):
        from ...files.cache import default_root
        from .grid import StepCache

        o = self.options
        return StepCache((o.cache_dir or default_root()) if o.cache else None, self.note)

    @cached_property
    def step(self):
        """The lowered step of one point (its layout: the KV cache's)."""
        self.stage("lowering the step")
        return self.cache.step(self.options.request)[0]

    @cached_property
    def figures(self):
        """One point's :class:`~.serve.Figures` (from the cache where it holds them)."""
        from .serve import figures

        o, hw, step = self.options, self.hardware, self.step
        self.stage(f"estimating on {hw.name}")
        fig = self.cache.figures(o.request, hw, o.tp)
        if fig is None:
            fig = figures(step, hw, o.tp, launch=o.launch)
            self.cache.put(o.request, hw, o.tp, fig)
        return fig

    @cached_property
    def points(self) -> list:
        """The sweep's figures: every batch x context x tp."""
        from .grid import sweep

        o = self.options
        return sweep(o.request, o.batches or [o.request.batch], o.contexts or [o.request.context], self.hardware,
                     tps=o.tps or [o.tp], cache=self.cache, stage=self.stage, launch=o.launch)

    def view(self, request=None):
        """The answer as a :class:`~mhlo_cost.views.table.Table` (``request``: none is needed, the options say
        it): the sweep's points (a frame), or the one point's figures (pairs in sections;
        :mod:`mhlo_cost.views.serve`). The command writes it through the shared renderers."""
        from ...views.serve import step_view, sweep_view

        req = self.options.request
        if self.options.sweeping:
            from .grid import table

            return sweep_view(self.points, table(self.points), f"{req.mode} of {self.model} on {self.hardware.name}")
        return step_view(self.figures, req.describe(), self.step.layout)

    @property
    def model(self) -> str:
        """The model in words (the request's description up to its shapes)."""
        return self.options.request.describe().split(":")[0]

    @property
    def plot_title(self) -> str:
        """The title of the sweep's picture (:func:`mhlo_cost.views.serve.sweep_plot`)."""
        return f"{self.model} {self.options.request.mode} on {self.hardware.name}"
