"""``mhlo-cost train-plan``'s answers as views: one plan's figures (:class:`PlanFigures`: plain values and frames,
made by :class:`mhlo_cost.studies.plan.study.PlanStudy`) as a :class:`~.table.Table` per question (``by``:
``component``, the busiest device's breakdown; ``stage``, a row per pipeline stage), and a sweep's ranked splits;
the shared renderers (:mod:`.render`) write them in every format, the HTML page (:mod:`.html.plan`) included.

JSON of a plan: ``tool``, ``version``, ``config`` (the plan's row), ``counts``, ``memory``, then ``rows`` (the
table asked for), then ``stages`` (every stage's seconds and bytes, unrounded) and, where the rows are the
stages, ``breakdown``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from .table import Table


@dataclass(frozen=True)
class PlanFigures:
    """One plan on a system, as the views read it: ``system`` (its name), ``config`` (the plan's row: the split,
    the times, MFU, memory by category), ``counts`` (the iteration's exact counts), ``memory`` (bytes per GPU of
    the first stage), ``breakdown`` (the busiest device's components: a frame), ``stages`` (one dict per stage)
    and ``stage_frame`` (the same, rounded), ``facts`` (the lines under the table), ``components`` (the stage
    keys that add up to the iteration), ``cards`` (the page's header: label, gpus, t, p, d and the model)."""

    system: str
    config: dict
    counts: dict
    memory: dict
    breakdown: object
    stages: list
    stage_frame: object
    facts: list
    components: tuple
    cards: dict = field(default_factory=dict)


def _meta(fig: PlanFigures) -> dict:
    from .. import __version__

    return {"tool": "mhlo-cost", "version": __version__, "config": fig.config, "counts": fig.counts,
            "memory": fig.memory}


def plan_view(fig: PlanFigures, by: str = "component") -> Table:
    """The plan's table: the busiest device's breakdown (``component``) or a row per pipeline stage (``stage``);
    its facts under it; its page (HTML) the stage bars and both tables."""
    if by == "stage":
        title = f"one iteration per pipeline stage on {fig.system} (each row: every device of the stage)"
        frame, after = fig.stage_frame, {"stages": fig.stages, "breakdown": _records(fig.breakdown)}
    else:
        title = f"one iteration per GPU on {fig.system}"
        frame, after = fig.breakdown, {"stages": fig.stages}
    return Table(title, frame=frame, notes=list(fig.facts), meta=_meta(fig), after=after,
                 page=partial(_page, fig))


def _records(df) -> list[dict]:
    from .text import rows_json

    return rows_json(df)


def _page(fig: PlanFigures, unit: str | None) -> str:
    from .html.plan import plan_page

    return plan_page(fig)


def sweep_view(df, skipped, title: str) -> Table:
    """The splits ranked by iteration time among those that fit (``df``), the ``skipped`` ones (a frame: config,
    reason) after them: in text a table of their own, in JSON ``skipped``."""
    from .. import __version__

    table = Table(title, frame=df, meta={"tool": "mhlo-cost", "version": __version__},
                  after={"skipped": _records(skipped)})
    if len(skipped):
        table.appendix.append((f"{len(skipped)} split(s) skipped:", Table(None, frame=skipped)))
    return table
