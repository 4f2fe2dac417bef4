"""One door for a :class:`~mhlo_cost.lower.frontends.api.LowerRequest`: its forward (the frontends) or, with
``req.train`` set, its training step (:mod:`mhlo_cost.lower.training`). It stands above both, so that neither
imports the other's way up: the frontends know nothing of training, and training uses the frontends.
"""
from __future__ import annotations

from typing import Callable

import os

from .frontends import FrontendError, Lowered
from .frontends.api import LowerFailed, LowerRequest, failure_message, run_request
from .frontends.api import lower_request as lower_forward
from .frontends.bundled import check_deployed
from .training import lower_request_step


def lower_request(req: LowerRequest, stage: Callable[[str], None] | None = None) -> Lowered:
    """Lower what ``req`` names: the training step where ``req.train`` is set, else the forward
    (:func:`mhlo_cost.lower.frontends.api.lower_request`). FrontendError (one sentence) for what cannot be."""
    if req.deployed:
        check_deployed(req.model or "", req.frontend or "torchax", "sharded" if hasattr(req.config, "plan") else "none",
                       req.train is not None)
    if req.train is None:
        return lower_forward(req, stage)
    if req.amp:
        raise FrontendError("--amp lowers the forward under autocast; it does not go with a training step yet")
    return run_request(req, stage, _lower_step)


def _lower_step(req: LowerRequest, stage: Callable[[str], None]) -> Lowered:
    stage("building the model and tracing and lowering its training step" if req.model is None
          else "tracing and lowering the training step")
    try:
        return lower_request_step(req)
    except (FrontendError, LowerFailed):
        raise
    except Exception as e:  # the model's code, or the frameworks tracing or differentiating it
        if req.model is not None or os.environ.get("MHLO_COST_DEBUG"):  # (bundled models: our own bug)
            raise
        raise LowerFailed(failure_message(req, e)) from e


__all__ = ["lower_request"]
