"""One door for a :class:`~mhlo_cost.frontends.api.LowerRequest`: its forward (the frontends) or, with
``req.train`` set, its training step (:mod:`mhlo_cost.training`). It stands above both, so that neither
imports the other's way up: the frontends know nothing of training, and training uses the frontends.
"""
from __future__ import annotations

from typing import Callable

from .frontends import Lowered
from .frontends.api import LowerRequest, run_request
from .frontends.api import lower_request as lower_forward
from .training import lower_request_step


def lower_request(req: LowerRequest, stage: Callable[[str], None] | None = None) -> Lowered:
    """Lower what ``req`` names: the training step where ``req.train`` is set, else the forward
    (:func:`mhlo_cost.frontends.api.lower_request`). FrontendError (one sentence) for what cannot be."""
    if req.train is None:
        return lower_forward(req, stage)
    return run_request(req, stage, _lower_step)


def _lower_step(req: LowerRequest, stage: Callable[[str], None]) -> Lowered:
    stage("tracing and lowering the training step")
    return lower_request_step(req)


__all__ = ["lower_request"]
