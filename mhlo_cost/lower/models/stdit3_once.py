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
    within it (one jit per block kind inside :func:`blocks_shared`: :func:`_jitted`), as it is outside."""
    return _jitted(run) if _BLOCKS_ONCE.get() else run


# (Below the lines above, which stay where they are: the lowered programs' locations may name this file's lines.)
#: The jitted blocks kept inside :func:`blocks_shared` (None outside it): what a block closes over -> its jit.
_SHARED = contextvars.ContextVar("stdit3_blocks_shared", default=None)


@contextmanager
def blocks_shared():
    """Within it (and within :func:`blocks_traced_once`), the lowerings of one sweep point at its several depths
    (2 and 3, and 4 for the check: :mod:`mhlo_cost.studies.sweep.point`) trace each kind of block once between
    them, not once each. A block closes over the configuration, the kernels, its kind and the token counts; it
    never reads the depth (only the forward's loop does), so the blocks of two depths are the same function of the
    same arguments, and one ``jax.jit(inline=True)`` object kept for both gives jax's trace cache (the traced jaxpr
    per function and argument types, ``_infer_params_cached`` in ``jax/_src/pjit.py``) the jaxpr the first traced:
    the same ops, under the same names, with the same locations (the caller's frames, as within one lowering).
    About a fifth of the lowering of depths 3 and 4 on this machine. ``tests/test_sweep_speed.py`` checks the text
    is byte for byte the one lowered without it."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _jitted(run):
    """``jax.jit(run, inline=True)``, the one kept for what ``run`` closes over within :func:`blocks_shared`
    (keyed with the configuration's depth set aside: :func:`_closure_key`); a fresh one outside it or where the
    closure has no exact key."""
    memo = _SHARED.get()
    key = None if memo is None else _closure_key(run)
    if key is None:
        return jax.jit(run, inline=True)
    if key not in memo:
        memo[key] = jax.jit(run, inline=True)
    return memo[key]


def _closure_key(run):
    """An exact, hashable key of what ``run`` computes: its code and each value it closes over (a configuration
    with ``depth`` at 0; the kernels field by field, a ``functools.partial`` as its function and arguments, any
    other function itself), or None where a value cannot be keyed so (then nothing is shared)."""
    from dataclasses import fields, is_dataclass, replace
    from functools import partial

    from .config import STDiT3Config

    def part(v):
        if isinstance(v, partial):
            return ("partial", v.func, tuple(map(part, v.args)), tuple(sorted((k, part(x)) for k, x in
                                                                             v.keywords.items())))
        if is_dataclass(v) and not isinstance(v, type):
            v = replace(v, depth=0) if isinstance(v, STDiT3Config) else v
            return (type(v), tuple((f.name, part(getattr(v, f.name))) for f in fields(v)))
        return v

    try:
        key = (run.__code__, tuple((n, part(c.cell_contents)) for n, c in zip(run.__code__.co_freevars,
                                                                            run.__closure__ or ())))
        hash(key)
    except (TypeError, ValueError):  # (an unhashable value, an empty cell)
        return None
    return key
