"""Each kind of STDiT3 block traced once per forward, for the sweep (:func:`blocks_traced_once`).

Kept out of :mod:`.stdit3` so that its source lines, which the lowered program's locations name, stay where the
stored golden inputs have them."""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import jax

#: Whether :func:`mhlo_cost.lower.models.stdit3.make_forward`'s blocks are traced once (:func:`blocks_traced_once`).
_BLOCKS_ONCE = contextvars.ContextVar("stdit3_blocks_traced_once", default=False)


@contextmanager
def blocks_traced_once():
    """Within it, a forward made by :func:`make_forward` (without ``remat``) traces its spatial block once and its
    temporal block once, each under ``jax.jit(inline=True)``, and replays that jaxpr for every further block of its
    kind. The program is op for op the same, each op under the same ``spatial_blocks.{i}/...`` scope name: jax
    keeps the traced jaxpr per function and argument types, and an inline call is copied into the caller's trace
    with the caller's name stack put before each op's own (``pjit_staging_rule`` -> ``pe.inline_jaxpr_into_trace``
    in ``jax/_src/pjit.py`` and ``jax/_src/interpreters/partial_eval.py``). What changes is the op's location:
    its frames are the call of the block, not the frames inside it (the caller's ``source_info``). About a third
    of the sweep's lowering time on this machine; the sweep, which reads op names and never frames, lowers so
    (:func:`mhlo_cost.studies.sweep.point.lower_text`); ``lower`` does not (its locations keep the stack)."""
    token = _BLOCKS_ONCE.set(True)
    try:
        yield
    finally:
        _BLOCKS_ONCE.reset(token)


def traced_once(run):
    """``run`` (a block without ``remat``) as :func:`blocks_traced_once` wants it: under ``jax.jit(inline=True)``
    within it, as it is outside."""
    return jax.jit(run, inline=True) if _BLOCKS_ONCE.get() else run
