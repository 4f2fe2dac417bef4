"""``mhlo-cost train-plan`` as a study: from a configuration, a system profile and what is asked (one plan, or
``gpus`` for the sweep over splits) to the plan and the text of each format. The command maps its arguments
onto these; each distinct layer is lowered once and estimated as a :class:`~mhlo_cost.studies.study.Study`
(:func:`~.costs.analyse_layer`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from .config import ScaleConfig


@dataclass(frozen=True)
class PlanOptions:
    """``config`` (the split included), ``hardware`` (a system profile), ``gpus`` (a sweep over every split of
    that many devices, None: the one plan), ``cache_dir`` (the cache root: each lowered layer's analysis kept
    there; None: nothing kept).

    Checked when made (:mod:`mhlo_cost.studies.limits`; OptionError): the configuration valid (with a sweep: the
    model; the sweep makes the splits), its counts and the sweep's within their limits."""

    config: ScaleConfig
    hardware: object
    gpus: int | None = None
    cache_dir: str | os.PathLike | None = None

    def __post_init__(self):
        from ..limits import OptionError, check, count
        from .plan import split_count

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
        count(split_count(self.gpus), "points", f"the sweep over the splits of {self.gpus:,} GPUs")


class PlanStudy:
    """The plan (or the sweep) of :class:`PlanOptions`, computed once, on first use; ``note(text)`` told of each
    cache entry not trusted or not kept."""

    def __init__(self, options: PlanOptions, note=None):
        self.options = options
        self.note = note

    @cached_property
    def plan(self):
        """The :class:`~.plan.Plan` of the configuration (ValueError where it is not a valid one)."""
        from .plan import plan

        return plan(self.options.config, self.options.hardware, self.options.cache_dir, self.note)

    @cached_property
    def sweep(self):
        """(the ranked table of the valid splits, the skipped ones with their reason)."""
        from ..limits import OptionError
        from .plan import sweep

        o = self.options
        df, skipped = sweep(o.config, o.gpus, o.hardware, o.cache_dir, self.note)
        if not len(df):
            first = skipped["reason"].iloc[0] if len(skipped) else "none considered"
            raise OptionError(f"no split of {o.gpus:,} GPUs is a valid configuration of this model ({len(skipped)} "
                              f"skipped; the first: {first})")
        return df, skipped

    def render(self, fmt: str, by: str = "component") -> str:
        """The sweep's table, or the plan's (``by``: component, or stage: a row per pipeline stage) in ``fmt``
        (table, csv, json, markdown, html: a page with the stage bars and both tables)."""
        return self._sweep_text(fmt) if self.options.gpus else self._plan_text(fmt, by)

    def _sweep_text(self, fmt: str) -> str:
        from ...views.render import render_frame as render

        df, skipped = self.sweep
        name = self.options.hardware.name
        out = render(df, fmt, "raw", title=f"{self.options.gpus} GPUs of {name}: splits ranked by "
                     f"iteration time among those that fit", wide=True)
        if fmt == "table" and len(skipped):
            out += f"\n{len(skipped)} split(s) skipped:\n" + render(skipped, "table", "raw", wide=True)
        return out

    def _plan_text(self, fmt: str, by: str) -> str:
        from ...views.render import render_frame as render
        from .plan import breakdown_frame, facts
        from .stages import stage_frame, stage_rows

        p, name = self.plan, self.options.hardware.name
        if fmt == "json":
            import json

            payload = {"config": p.row(), "counts": p.iteration.counts, "memory": p.memory,
                       "breakdown": breakdown_frame(p).to_dict(orient="records"), "stages": stage_rows(p)}
            return json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n"
        if fmt == "html":
            from ...views.html.plan import plan_page

            from .stages import COMPONENTS

            return plan_page(p, name, breakdown_frame(p), facts(p), (stage_rows(p), stage_frame(p), COMPONENTS))
        if by == "stage":
            out = render(stage_frame(p), fmt, "raw", title=f"one iteration per pipeline stage on {name} "
                         f"(each row: every device of the stage)", wide=True)
        else:
            out = render(breakdown_frame(p), fmt, "raw", title=f"one iteration per GPU on {name}")
        if fmt == "table":
            out += "\n".join(facts(p)) + "\n"
        return out
