"""A training plan's result, :class:`Plan`: the configuration, its iteration and its memory per GPU. Apart from
:mod:`.plan`, which makes it, so that :mod:`.moe_plan` (which :mod:`.plan` hands a MoE configuration to) makes one
without importing back the module that imports it."""
from __future__ import annotations

from dataclasses import dataclass

from .compose import Iteration
from .config import ScaleConfig
from .costs import LayerCost
from .memory import CATEGORIES


@dataclass(frozen=True)
class Plan:
    cfg: ScaleConfig
    iteration: Iteration
    memory: dict
    cost: LayerCost | None = None  # the per-device layer's analysis
    head: LayerCost | None = None  # the last stage's head's
    moe: object = None  # a MoE model's costs and per-stage memory (:class:`.moe_plan.MoECosts`)
    kept: LayerCost | None = None  # a partial recompute's layer without recompute (:mod:`.partial_recompute`)

    def row(self, every: bool = False) -> dict:
        r = self.iteration.row(every)
        r.update({f"mem_{k}": self.memory[k] for k in (*CATEGORIES, "total")})
        r["fits"] = self.memory.get("fits", True)
        return r
