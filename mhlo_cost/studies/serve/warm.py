"""A fitted serve sweep's steps lowered in a second process while this one walks, fits and prices them (``jobs`` 2).

Of a fitted sweep's time, about a third is the lowerings themselves (torch through torchax to JAX: about 0.45 CPU s
each past the first, eighteen for the 7B grid of twelve points), the rest the imports and, per lowering, the walk,
the fit's comparisons and the pricing (docs/serve.md). The second process (spawned: it imports the frameworks
itself, beside this process's own imports) works out which steps the sweep will lower
(:func:`.fitted.planned`: the grid's nodes and check point at depths 3 and 4, the corner at 5 too, then the
points left, a program's first at 5 too) and lowers them one after the other into the sweep's disk cache (the
serve cache, :class:`~.grid.StepCache`, each entry written whole or not at all), saying after each that it is
there. This process runs the sweep as it would alone, except that before it lowers a planned step it waits until
the second process has kept it, and then reads it from the cache (:class:`Warmed`): the walk of one step, the
fit and the pricing of the grid's points run while the next steps are lowered.

Every step a fit or a repetition check compares is lowered in the second process, from one call stack (a
lowering's locations hold the Python stack that made it; the fits compare them), as the steps of a sweep in one
process are. A step the plan does not hold (a point lowered at full depth where a check fails) is lowered here
as before. Where the second process is lost (killed, out of memory), the steps it has not kept are lowered here:
a fit then mixing the two processes' steps finds their locations differ and says so, and its points are lowered
at full depth (the figures the same, the time not). The figures are those of the sweep in one process (the
cache's entries are what a second sweep of the same points reads anyway).
"""
from __future__ import annotations

import queue as _queue

#: Seconds between looks at whether the second process still runs while waiting for it.
POLL_S = 0.5


def _lower_all(cache_class, base, points: list, root, said, thresholds: tuple | None = None) -> None:
    """The second process: the plan of ``base``'s sweep of ``points`` sent to ``said`` (a queue), then each of its
    steps lowered into the cache at ``root`` (``cache_class``: :class:`~.grid.StepCache`), its index and
    whether it lowered sent after it. ``thresholds``: the cyclic collector's of the process that started it
    (``gc.get_threshold``; a spawned interpreter starts at CPython's own), set first, so that the command line's
    deferred full collections (:func:`mhlo_cost.cli.cmd_serve.deferred_full_collections`) hold in both processes."""
    if thresholds is not None:
        import gc

        gc.set_threshold(*thresholds)
    from ...lower.frontends import FrontendError
    from ...lower.frontends.api import LowerFailed
    from ...lower.frontends.torchax_once import layers_traced_once
    from .fitted import planned

    try:
        plan = planned(base, points)
    except FrontendError:  # (this process says why, as it would alone)
        plan = []
    said.put(("plan", plan))
    cache = cache_class(root, note=lambda text: said.put(("note", text)))  # (told through the sweep's note)
    for i, req in enumerate(plan):
        try:
            with layers_traced_once():  # (as fitted._lowered lowers: the grid's own cache key)
                cache.step(req)
            said.put(("kept", i))
        except (FrontendError, LowerFailed):  # (this process lowers it again and says why)
            said.put(("failed", i))


class Warmer:
    """The second process (``process``) and what it has said (``said``, a queue): its plan, the steps kept."""

    def __init__(self, process, said, note=None):
        self.process, self.said = process, said
        self.note = note or (lambda text: None)  # the sweep's: what the second process's cache has to say
        self.noted: set = set()
        self.plan: dict | None = None  # request -> its index in the plan
        self.over: set = set()  # indices kept (or failed)
        self.lost = False

    def wait(self, req) -> None:
        """Return once the second process has kept (or failed to lower) ``req``, at once where it does not plan to
        lower it or is lost."""
        while self.plan is None and self._hear():
            pass
        i = (self.plan or {}).get(req)
        while i is not None and i not in self.over and self._hear():
            pass

    def _hear(self) -> bool:
        """Read one message of the second process; False where it has ended (or been lost) with nothing left to say."""
        while not self.lost:
            try:
                what = self.said.get(timeout=POLL_S)
            except _queue.Empty:
                if not self.process.is_alive():
                    try:
                        what = self.said.get(timeout=POLL_S)
                    except _queue.Empty:
                        self.lost = True
                        break
                else:
                    continue
            if what[0] == "plan":
                self.plan = {req: i for i, req in enumerate(what[1])}
            elif what[0] == "note":
                if what[1] not in self.noted:
                    self.noted.add(what[1])
                    self.note(what[1])
            else:
                self.over.add(what[1])
            return True
        return False

    def stop(self) -> None:
        """End the second process (its work done, or not wanted any more) and wait for it."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join()


class Warmed:
    """A :class:`~.grid.StepCache` whose :meth:`step` waits for the second process's lowering of a planned step first
    (:meth:`Warmer.wait`), then reads it; everything else is the cache's."""

    def __init__(self, cache, warmer: Warmer):
        self.cache, self.warmer = cache, warmer

    def step(self, req):
        self.warmer.wait(req)
        return self.cache.step(req)

    def __getattr__(self, name):
        return getattr(self.cache, name)


def start(cache_class, base, points: list, root, note=None) -> Warmer:
    """The second process started on ``base``'s fitted sweep of ``points`` ((batch, context) pairs) with its cache
    at ``root`` (``cache_class``: :class:`~.grid.StepCache`, passed in: this module does not import the grid's);
    ``note(text)``: told, once each, what its cache says (an entry not trusted or not kept), as the sweep's own."""
    import gc
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    said = ctx.Queue()
    process = ctx.Process(target=_lower_all, args=(cache_class, base, list(points), root, said, gc.get_threshold()),
                          daemon=True)
    process.start()
    return Warmer(process, said, note)
