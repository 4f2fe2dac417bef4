"""The frameworks' first import (torch with a model library, torchax) with the cyclic garbage collector paused.

Importing torch and a transformers model class makes about half a million objects that live as long as the
process (modules, functions, classes, operator tables) and almost no cyclic garbage: the full collections
CPython runs meanwhile found 0 to 1,180 unreachable objects each on the 7B serve grid
(``benchmarks/bench_grid.py``). Each full collection traverses the whole heap made so far, and the heap grows
with every module, so nine of them cost 1.8 of the 2.5-3.0 CPU seconds the collector spent in that run
(measured with ``gc.callbacks``, load 3-5 on 2 cores). Paused, the objects are traversed once, at the first
collection after the import. They are then moved to the permanent generation (``gc.freeze``, CPython's own
advice for objects made at start-up and kept), so that the young collections after the import do not traverse
them either; a later ``gc.unfreeze`` (the walk settles its rows so: :mod:`mhlo_cost.walk.liveness`) puts them
back in the oldest generation, where they would have been by then. The collector's state is restored on exit
(an import run with it paused stays so).

The pause is the same reasoning as the walk's (:func:`mhlo_cost.analysis.walk`): a phase that allocates and frees
nothing cyclic gains nothing from the collector rescanning its growing heap.
"""
from __future__ import annotations

import gc

from ...files import collector


def collector_paused():
    """A context in which to run the body (a first import of a framework) with the cyclic collector paused, then
    freeze what it made (module docstring); where the collector was already paused, nothing changes (no freeze)."""
    return collector.paused(freeze=gc.isenabled())
