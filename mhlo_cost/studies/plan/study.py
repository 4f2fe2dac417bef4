"""``mhlo-cost train-plan`` as a study: from a configuration, a system profile and what is asked (one plan, or
``gpus`` for the sweep over splits) to the plan and its figures, answered as a Table (:mod:`mhlo_cost.views.plan`)
that the shared renderers write. The command maps its arguments onto these; each distinct layer is lowered once
and estimated as a :class:`~mhlo_cost.studies.study.Study` (:func:`~.costs.analyse_layer`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from .config import ScaleConfig


@dataclass(frozen=True)
class PlanOptions:
    """``config`` (the split included), ``hardware`` (a system profile), ``gpus`` (a sweep over every split of
    that many devices, None: the one plan), ``cache_dir`` (the cache root: each lowered layer's analysis kept
    there; None: nothing kept), ``space`` the values of the sweep's dimensions (:class:`~.search.Space`: micro-batch,
    recompute, interleaving, context-parallel degree, ZeRO stage, HSDP sharding group, expert-parallel degree,
    precision), ``scheduler`` / ``jobs`` where the sweep's layers are lowered (a Dask cluster, or a local pool of
    that many processes: :func:`~.search.prefetch`), ``clock`` the clock the step's dots run at: ``sustained``
    (the default: what a stream of products holds under the power limit, the profile's ``clock`` table,
    :mod:`mhlo_cost.machines.clock`; a profile without one is priced at its peak) or ``peak`` (the clock of the
    datasheet's peak, at which the profile's GEMM efficiency was fitted on short benchmark runs). Sustained is the
    default since the barrier and fp8-cache over-charges were removed: over the 54 published training rows it gave
    median 7.25% where peak gave 11.71% (2026-11-30); on the H200 layer measurements it is the worse of the two
    (11.1% against 7.0%): a step's clock lies between the two, docs/validation.md "The tensor cores' clock under the
    power limit".
    ``average``: the clock at which the step's own average board power is the limit (:mod:`.power_clock`; the
    sweep ranks its splits at the sustained clock).

    Checked when made (:mod:`mhlo_cost.studies.limits`; OptionError): the configuration valid (with a sweep: the
    model; the sweep makes the splits), its counts and the sweep's within their limits."""

    config: ScaleConfig
    hardware: object
    gpus: int | None = None
    cache_dir: str | os.PathLike | None = None
    space: object = None  # the sweep's dimensions (a .search.Space; None: its defaults)
    scheduler: str | None = None  # a Dask scheduler's address: the sweep's layers lowered on that cluster
    jobs: int | None = None  # local worker processes lowering the sweep's layers (None: the cores)
    clock: str = "sustained"  # the dots' clock: sustained (a product stream's, power-limited), peak (the datasheet's)
    # or average (the step's own, .power_clock)

    def __post_init__(self):
        from ...machines.clock import CLOCKS, sustained
        from ..limits import OptionError, check, count
        from .search import Space, split_count

        if self.clock not in CLOCKS:
            raise OptionError(f"--clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")
        if self.clock == "sustained" and self.hardware is not None:
            object.__setattr__(self, "hardware", sustained(self.hardware))
        cfg = self.config
        why = cfg.model_invalid() if self.gpus is not None else cfg.invalid()
        if why:
            raise OptionError(f"invalid training configuration: {why}")
        check("layers", cfg.layers, "--layers")
        check("positions", cfg.seq, "--seq")
        check("batch", cfg.global_batch, "--global-batch")
        check("batch", cfg.micro_batch, "--micro-batch")
        if self.gpus is None:
            check("devices", cfg.gpus, f"-t x -p x -d ({cfg.t} x {cfg.p} x {cfg.d})")
            return
        check("devices", self.gpus, "--sweep GPUS")
        if self.space is None:
            object.__setattr__(self, "space", Space())
        count(split_count(self.gpus, **vars(self.space)), "points",
              f"the sweep over the splits of {self.gpus:,} GPUs")


class PlanStudy:
    """The plan (or the sweep) of :class:`PlanOptions`, computed once, on first use; ``note(text)`` told of each
    cache entry not trusted or not kept."""

    def __init__(self, options: PlanOptions, note=None, progress=False):
        self.options = options
        self.note = note
        self.progress = progress  # the sweep's lowerings: run_tasks' progress (False, True or a callable)

    @cached_property
    def plan(self):
        """The :class:`~.result.Plan` of the configuration (ValueError where it is not a valid one)."""
        from .plan import plan

        o = self.options
        if o.clock == "average":
            from .power_clock import average_plan

            return average_plan(o.config, o.hardware, o.cache_dir, self.note)
        return plan(o.config, o.hardware, o.cache_dir, self.note)

    @cached_property
    def sweep(self):
        """(the ranked table of the valid splits, the skipped ones with their reason)."""
        from ..limits import OptionError
        from .search import sweep

        o = self.options
        from ...machines.clock import sustained

        hw = sustained(o.hardware) if o.clock == "average" and o.hardware is not None else o.hardware
        df, skipped = sweep(o.config, o.gpus, hw, o.cache_dir, self.note, scheduler=o.scheduler, jobs=o.jobs,
                            progress=self.progress, **vars(o.space))
        if not len(df):
            first = skipped["reason"].iloc[0] if len(skipped) else "none considered"
            raise OptionError(f"no split of {o.gpus:,} GPUs is a valid configuration of this model ({len(skipped)} "
                              f"skipped; the first: {first})")
        return df, skipped

    @cached_property
    def figures(self):
        """What the plan's views read (:class:`mhlo_cost.views.plan.PlanFigures`): plain values and frames."""
        from ...views.plan import PlanFigures
        from .plan import breakdown_frame, facts
        from .stages import components, stage_frame, stage_rows

        p = self.plan
        cfg = p.cfg
        cards = {k: getattr(cfg, k) for k in ("t", "p", "d", "layers", "hidden", "heads", "seq", "vocab",
                                                 "global_batch")}
        cards["gpus"] = cfg.gpus
        return PlanFigures(self.options.hardware.name, p.row(), p.iteration.counts, p.memory, breakdown_frame(p),
                           stage_rows(p), stage_frame(p), facts(p), components(cfg), cards)

    def view(self, request=None):
        """The answer as a :class:`~mhlo_cost.views.table.Table`: the sweep's ranked splits (``gpus``), or the
        plan's table (``request.by``: ``component``, default, or ``stage``: a row per pipeline stage), which the
        shared renderers write in every format (HTML: the plan's page)."""
        from ...views import plan as views

        if self.options.gpus:
            df, skipped = self.sweep
            return views.sweep_view(df, skipped, f"{self.options.gpus} GPUs of {self.options.hardware.name}: "
                                                 "splits ranked by iteration time among those that fit")
        by = getattr(request, "by", None) or "component"
        return views.plan_view(self.figures, by)
