"""CPython's cyclic garbage collector paused over one phase of the work: :func:`paused`, the one pause.

A phase that makes many objects and keeps them (the walk's rows, an analysis decoded, a framework's first import, a
sweep point's analyses) and frees nothing cyclic gains nothing from the collector: it runs after every few hundred
allocations, now and then over every tracked object (CPython's generational collector, ``gc`` module and
``InternalDocs/garbage_collector.md``), rescanning a growing heap for no garbage, while what has no cycle is freed by
its reference count as ever. The phases differ only in how the pause ends (:func:`paused`'s keywords); the reasons
are each caller's (:func:`mhlo_cost.analysis.walk`, :func:`mhlo_cost.studies.sweep.point.compute`,
:mod:`mhlo_cost.lower.frontends._imports`, ...).
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused(*, collect: int | None = None, settle: bool = False, freeze: bool = False):
    """The body run with the cyclic collector paused. On the way out, whether the body raised or not, in this order:
    ``collect``, the generation then collected (``gc.collect``; None: no collection); ``settle``, every tracked
    object moved to the oldest generation (:func:`settle_heap`); ``freeze``, every tracked object moved to the permanent
    generation (``gc.freeze``: CPython's advice for objects made once and kept); then the collector's previous state
    restored: enabled again where it was enabled on the way in, left paused where a caller had paused it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collect is not None:
            gc.collect(collect)
        if settle:
            settle_heap()
        if freeze:
            gc.freeze()
        if was:
            gc.enable()


def settle_heap() -> None:
    """Every tracked object moved to the oldest generation at once (``gc.freeze`` then ``gc.unfreeze``): objects
    made while the collector was paused and kept, which would otherwise all wait in the youngest generation and be
    traversed by the first collection after the pause; they are still collected, with everything else, by a full
    collection."""
    gc.freeze()
    gc.unfreeze()
