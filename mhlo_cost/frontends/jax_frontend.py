"""The JAX frontend: the bundled pure-JAX models, lowered with ``jax.jit(...).lower`` from shapes alone.

Parameters and inputs are ``jax.ShapeDtypeStruct`` trees, so nothing is allocated whatever the size.
"""
from __future__ import annotations

from . import FrontendError, Lowered

MODELS = ("stdit3", "gpt")


def lower_jax(model: str, cfg=None):
    """The ``jax.stages.Lowered`` of ``model`` (``stdit3`` or ``gpt``) for ``cfg`` (None: the default)."""
    if model == "stdit3":
        from ..models import stdit3
        from ..models.config import STDiT3Config

        return stdit3.lower(cfg if cfg is not None else STDiT3Config())
    if model == "gpt":
        from ..models import gpt

        return gpt.lower(cfg if cfg is not None else gpt.GPTConfig())
    raise FrontendError(f"the jax frontend has no model {model!r} (known: {', '.join(MODELS)})")


def lower(model: str, cfg=None, *, locations: bool = True) -> Lowered:
    """StableHLO text of ``model``; with ``locations`` the ops carry their ``jit(name)/scope/...`` names."""
    low = lower_jax(model, cfg)
    return Lowered(text=low.as_text(debug_info=locations), info={"frontend": "jax", "model": model})
