"""A serve grid's points of batch 1 swept in a second process while this one sweeps the others (``jobs`` 2).

A batch of 1 is its own program (the IR drops unit dimensions): :mod:`.fitted` lowers and rebuilds its points
apart from the grid fit of the larger batches, sharing nothing with it but the model's configuration. So the two
parts run at once, one per core: the second process (spawned: it imports the frameworks itself, which the
parts then do side by side) runs :func:`~.grid.sweep` on the batch-1 points alone, into the same disk cache, and
sends back their figures and notes; every lowering of a part is made from one call stack in one process (a
lowering's locations hold the Python stack, which the fits compare), so each part is what it is swept alone.
The figures are the same as in one process; the notes are this process's, then the second's not said already.
Where the second process is lost (killed, out of memory), its points are swept here after the others.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Aside:
    """The batch-1 part of a sweep running in a second process: its pool, its future, what it sweeps."""

    pool: object
    future: object
    contexts: list

    def gather(self, found: dict, tps, note) -> list:
        """Put the part's figures into ``found`` ((batch, context, tp) -> Figures) and tell ``note`` its notes
        (those not said already); the (batch, context) points left to sweep here where the process was lost."""
        from concurrent.futures.process import BrokenProcessPool

        try:
            figs, notes = self.future.result()
        except BrokenProcessPool:
            self.pool.shutdown(wait=True)
            return [(1, c) for c in self.contexts]
        except BaseException:  # interrupted while waiting (or the part failed): end it, do not wait for it
            self.stop()
            raise
        self.pool.shutdown(wait=True)
        it = iter(figs)
        for c in self.contexts:
            for tp in tps:
                found[1, c, tp] = next(it)
        for text in notes:
            note(text)
        return []

    def stop(self) -> None:
        """End the second process now (this one failed or was interrupted: its part is not wanted)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in list((getattr(self.pool, "_processes", None) or {}).values()):  # (no public kill before 3.14)
            p.terminate()


def start(part, base, todo: list, hw, tps, root, launch: str, split) -> Aside | None:
    """The batch-1 points of ``todo`` ((batch, context) pairs) of a compiled, fitted sweep of ``base`` started in a
    second process (cache root ``root``), or None where ``todo`` has no batch-1 point or nothing else. ``part`` (a
    module-level function, :func:`.grid.batch_one_part`) sweeps them there: ``part(base, contexts, hw, tps, root,
    launch, split)`` -> (figures, notes said); ``hw`` pickles itself
    (:meth:`~mhlo_cost.machines.profile.Hardware.__reduce__`)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    contexts = [c for b, c in todo if b == 1]
    if not contexts or len(contexts) == len(todo):
        return None
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    future = pool.submit(part, base, contexts, hw, list(tps), root, launch, split)
    return Aside(pool, future, contexts)
