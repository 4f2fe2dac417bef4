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
    :func:`mhlo_cost.files.cache.default_root`).

    Checked when made (:mod:`mhlo_cost.studies.limits`; ValueError): counts in range, each list's values once
    (in the order given), a sweep's list replacing the single value it sweeps (``batches`` and a ``request``
    batch other than 1 do not go together, nor ``tps`` and a ``tp`` other than 1). What needs the model's
    configuration (layers; ``tp`` dividing the heads) is checked by :meth:`ServeStudy.check`, before lowering."""

    request: StepRequest
    hardware: object
    tp: int = 1
    launch: str = "stream"
    batches: tuple | None = None
    contexts: tuple | None = None
    tps: tuple | None = None
    cache: bool = True
    cache_dir: str | os.PathLike | None = None
    execution: str = "compiled"  # or eager: plain transformers generate (.eager)
    ep: int = 1  # devices the routed experts are split over (.expert)
    moe_imbalance: float = 1.0
    jobs: int = 1  # processes a sweep runs in (2: its planned steps lowered in a second one, .warm)

    def __post_init__(self):
        from ..limits import OptionError, check, check_list, count
        from .serve import LAUNCHES

        req = self.request
        check("batch", req.batch, "--batch")
        check("positions", req.tokens, "--tokens")  # (first: a prefill's cache is its prompt by default)
        check("positions", req.context, "--context")
        check("devices", self.tp, "--tp")
        if self.launch not in LAUNCHES:
            raise OptionError(f"--launch must be one of {', '.join(LAUNCHES)}, got {self.launch!r}")
        points = 1
        for name, limit, single, default in (("batches", "batch", "batch", req.batch),
                                             ("contexts", "positions", "context", None),
                                             ("tps", "devices", "tp", self.tp)):
            values = getattr(self, name)
            if values is None:
                continue
            if default not in (None, 1):
                raise OptionError(f"--{name} sweeps the {single}: give --{name} or --{single} ({default}), not both")
            values = check_list(limit, values, f"--{name}")
            object.__setattr__(self, name, values)
            points *= len(values)
        count(points, "points", "the sweep")
        self._check_split()
        short = [c for c in self.contexts or () if c < req.tokens] if req.mode == "prefill" else []
        if short:
            raise OptionError(f"--contexts: a prefill of {req.tokens} tokens does not fit a cache of {short[0]} "
                              "positions")

    def _check_split(self) -> None:
        """The execution (:func:`.eager.check`) and the expert split's own bounds (what needs the model is
        checked once it is lowered: :func:`.expert.check`)."""
        from math import isfinite

        from ..limits import OptionError, check
        from .eager import check as check_execution

        check("devices", self.ep, "--ep")
        if not (isfinite(self.moe_imbalance) and self.moe_imbalance >= 1):
            raise OptionError(f"--moe-imbalance must be a finite number >= 1 (1: balanced), got {self.moe_imbalance!r}")
        if self.moe_imbalance != 1 and self.ep == 1:
            raise OptionError("--moe-imbalance is the busiest expert-parallel device's load: it goes with --ep N")
        tps = self.tps or (self.tp,)
        try:
            check_execution(self.execution, hf=bool(self.request.hf), tp=max(tps), ep=self.ep, launch=self.launch,
                            precision=self.request.precision)
        except ValueError as e:
            raise OptionError(str(e)) from None
        if self.execution == "eager" and self.request.cache != "dynamic":
            raise OptionError("--execution eager prices the step plain generate runs, with transformers' "
                              "DynamicCache: the request's cache must be 'dynamic' (StepRequest(cache='dynamic'))")
        if self.ep > 1 and any(self.ep % tp for tp in tps):
            raise OptionError(f"--tp must divide --ep {self.ep}: each of the ep / tp attention groups is tp devices")

    @property
    def split(self):
        """The :class:`~.expert.ExpertSplit` (None without ``--ep``)."""
        from .expert import ExpertSplit

        return ExpertSplit(self.ep, self.moe_imbalance) if self.ep > 1 else None

    @property
    def sweeping(self) -> bool:
        return bool(self.batches or self.contexts or self.tps)


class StepCacheStudy:
    """What the serve studies share (:class:`ServeStudy`, :class:`~.simstudy.SimStudy`): ``options`` (a
    ``hardware``, a ``launch``, ``cache`` and ``cache_dir``), ``stage(text)`` told each stage, ``note(text)``
    each cache entry not trusted or not kept; the profile as the launch sees it and the cache of lowerings."""

    def __init__(self, options, stage: Callable[[str], None] | None = None,
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


class ServeStudy(StepCacheStudy):
    """The figures of :class:`ServeOptions`, each computed once, on first use (see :class:`StepCacheStudy`)."""

    @cached_property
    def step(self):
        """The lowered step of one point (its layout: the KV cache's), once :meth:`check` passes."""
        self.check()
        self.stage("lowering the step")
        return self.cache.step(self.options.request)[0]

    @cached_property
    def figures(self):
        """One point's :class:`~.serve.Figures` (from the cache where it holds them)."""
        from .grid import pricing
        from .serve import figures

        o, hw, step = self.options, self.hardware, self.step
        self.stage(f"estimating on {hw.name}")
        how = pricing(o.execution, o.split)
        fig = self.cache.figures(o.request, hw, o.tp, how)
        if fig is None:
            fig = figures(step, hw, o.tp, launch=o.launch, execution=o.execution, split=o.split)
            self.cache.put(o.request, hw, o.tp, fig, how)
        return fig

    @cached_property
    def points(self) -> list:
        """The sweep's figures: every batch x context x tp, once :meth:`check` passes."""
        from .grid import sweep

        o = self.options
        if o.jobs == 1:
            self.check()
        return sweep(o.request, o.batches or [o.request.batch], o.contexts or [o.request.context], self.hardware,
                     tps=o.tps or [o.tp], cache=self.cache, stage=self.stage, launch=o.launch, note=self.note,
                     execution=o.execution, split=o.split, jobs=o.jobs, check=None if o.jobs == 1 else self.check)

    def check(self) -> None:
        """What needs the model's configuration (read, never built), before anything is lowered (:attr:`step`
        and :attr:`points` run it first): its layers within the limit, and every tensor-parallel degree dividing
        its heads and key/value heads. OptionError (FrontendError where the configuration cannot be read)."""
        from ..limits import OptionError, check

        facts = self.options.request.facts()
        check("layers", facts.layers, "the model's layer count")
        for tp in self.options.tps or (self.options.tp,):
            for n, what in ((facts.heads, "attention heads"), (facts.kv_heads, "key/value heads")):
                if n % tp:
                    raise OptionError(f"tensor parallel degree {tp} does not divide the model's {n} {what}: "
                                      "its heads (and their KV cache) are split tp ways")

    def view(self, request=None):
        """The answer as a :class:`~mhlo_cost.views.table.Table` (``request``: none is needed, the options say
        it): the sweep's points (a frame), or the one point's figures (pairs in sections;
        :mod:`mhlo_cost.views.serve`). The command writes it through the shared renderers."""
        from ...views.serve import step_view, sweep_view

        req = self.options.request
        if self.options.sweeping:
            from .grid import table

            return sweep_view(self.points, table(self.points), f"{req.mode} of {self.model} on {self.hardware.name}")
        return step_view(self.figures, req.describe(), self.step.layout, self.step.lowered.info.get("moe"))

    @property
    def model(self) -> str:
        """The model in words (the request's description up to its shapes)."""
        return self.options.request.describe().split(":")[0]

    @property
    def plot_title(self) -> str:
        """The title of the sweep's picture (:func:`mhlo_cost.views.serve.sweep_plot`)."""
        return f"{self.model} {self.options.request.mode} on {self.hardware.name}"
