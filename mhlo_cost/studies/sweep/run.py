"""Running a sweep's points: on this machine (a process pool) or on a Dask distributed cluster.

The default is the standard library's process pool (``spawn``: a fresh interpreter per worker, never a
fork of a process that has jax loaded), one worker per core: a point is a few seconds of pure Python with
no data to move, so a pool needs no scheduler, starts in a second and adds no dependency. ``--scheduler
tcp://HOST:8786`` sends the same :func:`~mhlo_cost.studies.sweep.point.compute` calls to an existing Dask cluster
(``dask.distributed``, the optional extra ``sweep``); nothing else changes. The cache is read and written
here, by the process that runs the sweep, so remote workers need no shared disk.

A point whose worker is lost (a pool process killed, or out of memory: the pool breaks, and every point it
was running is lost with it) is run again, alone in a fresh worker, up to :data:`RETRIES` more times; then
it is ``failed``, with why. Points running beside it are run again alone, so they are not charged with its
loss. On Dask the scheduler itself runs a task whose worker died on another worker (its
``distributed.scheduler.allowed-failures``, default 3, then ``KilledWorker``: the point's failure); a
cluster with no worker left for ``worker_timeout`` seconds (:data:`WORKER_TIMEOUT`) is a
:class:`SweepError`, never a wait for ever.
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable

from .cache import Cache
from .point import Result, Task, compute

#: How many more times a point whose local worker process was lost is run (alone, in a fresh worker).
RETRIES = 2
#: How long (seconds) a Dask sweep waits with no worker in the cluster before it stops with an error.
WORKER_TIMEOUT = 60.0
#: How often (seconds) a Dask sweep with nothing finished looks at the cluster's workers.
POLL_S = 1.0


@dataclass
class Stats:
    total: int = 0
    computed: int = 0
    cached: int = 0
    failed: int = 0
    running: int = 0
    seconds: float = 0.0


class Progress:
    """One line on stderr per finished point: done / total, cached, failed, running, ETA; ``enabled`` may be a
    callable ``(done, total, text, detail)`` instead, that shows them (the command line's bar)."""

    def __init__(self, stats: Stats, enabled=True, out=None):
        self.stats, self.enabled, self.out = stats, enabled, out or sys.stderr
        self.t0 = time.perf_counter()

    def update(self, label: str = "") -> None:
        if not self.enabled:
            return
        s = self.stats
        done = s.computed + s.cached + s.failed
        spent = time.perf_counter() - self.t0
        fresh = s.computed + s.failed
        left = s.total - done
        eta = f"{spent / fresh * left:.0f}s" if fresh and left else ("0s" if not left else "?")
        if callable(self.enabled):
            self.enabled(done, s.total, "sweep", f"points, {s.cached} cached, {s.failed} failed, {s.running} running, "
                                                 f"ETA {eta}{': ' + label if label else ''}")
            return
        print(f"mhlo-cost: sweep {done}/{s.total} points ({s.cached} cached, {s.failed} failed, {s.running} running)"
              f", ETA {eta}{': ' + label if label else ''}", file=self.out, flush=True)


def run_tasks(tasks: list[Task], cache: Cache, *, scheduler: str | None = None, jobs: int | None = None,
              progress=True, work: Callable[[Task], Result] = compute, worker_timeout: float = WORKER_TIMEOUT,
              after: list[int | None] | None = None, settle=None, pools=None) -> tuple[list[Result], Stats]:
    """The results of ``tasks`` in their order: cached ones read, the others computed by ``work`` (a
    module-level function, sent to the workers) (``scheduler``: on that Dask cluster, ``worker_timeout``:
    the longest it may have no worker; else a pool of ``jobs`` processes, 1: in this process). ``after``: per
    task, the index of the task it waits for (None: none); ``settle(tasks, results)`` (the results so far, None
    where not yet run) gives the tasks again, revised from the results of those waited for, and a task that
    waited runs as ``settle`` gives it once its own has finished. On a local pool of more than one process it
    starts then, beside the others still running (:func:`_released`: no worker idles while a first stage ends);
    in this process or on Dask the tasks waited for run first, as one stage, then the others (one pool for both
    stages: its workers start once). ``pools``: that local pool already started (:func:`early_pools`), closed here."""
    t0 = time.perf_counter()
    tasks = list(tasks)  # (revised here as the points they wait for finish: the caller's list stays as given)
    stats = Stats(total=len(tasks))
    bar = Progress(stats, progress)
    results: list[Result | None] = [None] * len(tasks)
    todo = []
    for i, t in enumerate(tasks):
        hit = cache.get(t)
        if hit is not None:
            results[i] = hit
            stats.cached += 1
        else:
            todo.append(i)
    if stats.cached:
        bar.update("from the cache")

    def finished(i: int, r: Result, running: int) -> None:
        results[i] = r
        stats.running = running
        if r.status == "ok":
            stats.computed += 1
            cache.put(tasks[i], r)
        else:
            stats.failed += 1
        bar.update(f"{r.point.label()} {r.status} in {r.seconds:.1f}s")

    pools = _Pools(max(1, min(jobs or os.cpu_count() or 1, len(todo)))) if pools is None or scheduler else pools

    def run(stage: list) -> None:
        if scheduler:
            _run_dask(tasks, stage, scheduler, finished, work, worker_timeout)
        else:
            _run_local(tasks, stage, pools, finished, work)

    try:
        if after is not None and not scheduler and pools.jobs > 1:
            fresh, done = _released(tasks, todo, results, after, settle, finished)
            _run_local(tasks, fresh, pools, done, work)
        else:
            _run_staged(tasks, todo, results, after, settle, run)
    finally:
        pools.close()
    stats.seconds = time.perf_counter() - t0
    return results, stats


def _run_staged(tasks: list, todo: list, results: list, after, settle, run) -> None:
    """The points waited for (``after``) run first (``run(stage)``), then the others, as ``settle`` revises them
    (``tasks`` revised in place: what the caller's ``finished`` reads)."""
    stages = [todo] if after is None else [[i for i in todo if after[i] is None],
                                           [i for i in todo if after[i] is not None]]
    for n, stage in enumerate(stages):
        if n and stage and settle is not None:
            tasks[:] = settle(tasks, results)
        if stage:
            run(stage)


class _Pools:
    """The process pool of a sweep's stages (``jobs`` workers; 1: none, the points run in this process): started
    once, so its workers' imports are paid once, and started again where it breaks."""

    def __init__(self, jobs: int):
        self.jobs, self.pool, self.warming = jobs, None, []

    def get(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        if any(f.done() and isinstance(f.exception(), BrokenProcessPool) for f in self.warming):
            self.close(wait=False)  # (a worker lost while it started: a fresh pool, as where a point's is lost)
        self.warming = [f for f in self.warming if not f.done()] if self.pool is not None else []
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_worker_started)
        return self.pool

    def close(self, wait: bool = True) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)
            self.pool = None

    def start(self) -> "_Pools":
        """Its ``jobs`` workers started now, each importing what a point needs (:func:`~.point.warm`), so that
        their start-up runs beside the caller's own (a pool of the standard library starts a worker per call
        submitted while none is idle, up to its size)."""
        from .point import warm

        if self.jobs > 1:
            pool = self.get()
            self.warming = [pool.submit(warm) for _ in range(self.jobs)]
        return self


def _worker_started() -> None:
    """A local worker's start: it will end without the interpreter's teardown (:func:`_worker_exit`)."""
    import atexit

    atexit.register(_worker_exit)


def _worker_exit() -> None:
    """A local worker's end, once the pool has sent it its last call (``shutdown``): its streams flushed, then
    ``os._exit(0)``. A spawned worker ends with ``sys.exit``, its interpreter torn down object by object (jax, the
    lowerings and analyses its points left: measured, 1.4 s of its own time on the loaded 2-core machine, 0.06-0.09 s
    so), and the sweep's ``shutdown(wait=True)`` waits for that after the last point. Nothing is lost: every result
    was written to the pool's pipe before the worker read its next call (``concurrent.futures.process``), the
    multiprocessing finalizers ran before ``sys.exit`` (``BaseProcess._bootstrap``), and no one reads a pool
    worker's exit status (the pool watches its sentinel). Every local pool of :func:`run_tasks` ends so: the
    sweep's and ``train-plan --sweep -j N``'s (:mod:`mhlo_cost.studies.plan.search` prices its layer costs
    through :func:`run_tasks`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def early_pools(points: int, jobs: int | None, scheduler: str | None, cache: Cache) -> "_Pools | None":
    """The local pool of a sweep of ``points`` points, started before the sweep resolves its points (its own
    start-up: jax imported to build each point's configuration, the cache read), where it will surely run them:
    on this machine, more than one worker, a cache that holds no point's rows (none kept, or none yet: every valid
    point is computed). Its workers' start (a fresh interpreter each, jax and the models imported: about a second
    each) then runs beside the sweep's own, not after it. Else None (the pool starts once a point is to run)."""
    n = max(1, min(jobs or os.cpu_count() or 1, points))
    if scheduler or n < 2 or not cache.holds_no_rows():
        return None
    return _Pools(n).start()


def _released(tasks: list, todo: list, results: list, after: list, settle, finished) -> tuple:
    """(the points to run, in a deque that grows as they are released, and ``finished`` telling it): a point that
    waits for another (``after``) is put in the deque, as ``settle`` revises it from the results so far, as soon as
    the one it waits for has finished (or at once, where that one was read from the cache). Each point is revised
    from the result of the one it waits for alone, as the staged run revises it (:func:`run_tasks`). The points
    released wait in :func:`_longest_first` order; the order they run in changes no row (each is its own)."""
    waiting: dict = {}
    fresh = deque()
    weight: dict = {}  # released point -> the seconds of the point it waited for

    def release(ks: list, seconds: float) -> None:  # (revised alone: a point still waiting stays as it is)
        if settle is not None:
            revised = settle(tasks, results)
            for k in ks:
                tasks[k] = revised[k]
        weight.update((k, seconds) for k in ks)
        _longest_first(fresh, ks, weight)

    for i in todo:
        j = after[i]
        (fresh if j is None else waiting.setdefault(j, [])).append(i)
    for j in [j for j in waiting if results[j] is not None]:  # waiting for a point read from the cache
        release(waiting.pop(j), float(getattr(results[j], "seconds", 0.0) or 0.0))

    def done(i: int, r: Result, running: int) -> None:
        finished(i, r, running)
        if i in waiting:
            release(waiting.pop(i), float(r.seconds or 0.0))

    return fresh, done


def _longest_first(fresh: deque, ks: list, weight: dict) -> None:
    """``ks`` put into ``fresh`` (in place: the pool draws from it): the points that wait for none first, as they
    were, then the released ones, the longest first, a point's length guessed as the seconds its program's first
    point took (the points of one program differ only in shape; the first's check makes it longer, alike for
    every program). Graham's longest-processing-time rule (R. L. Graham, "Bounds on multiprocessing timing
    anomalies", SIAM J. Appl. Math. 17(2), 1969): the long points start while short ones are left to fill the
    last worker's idle end, not last, with the other workers idle (the published STDiT3 table: its ring program's
    points, the longest, were released last and ran alone at the end). Ties keep the order of release."""
    order = list(fresh) + list(ks)
    order.sort(key=lambda k: -weight.get(k, math.inf))  # (a stable sort: the unweighted ones first, as they were)
    fresh.clear()
    fresh.extend(order)


def _run_local(tasks, todo, pools: _Pools, finished, work) -> None:
    if pools.jobs == 1:
        for i in todo:
            finished(i, work(tasks[i]), 0)
        return
    fresh, suspects, lost = todo if isinstance(todo, deque) else deque(todo), deque(), Counter()
    while fresh or suspects:
        try:
            gone = _drain(pools.get(), tasks, fresh, suspects, pools.jobs, finished, work)
        except BaseException:  # interrupted: drop what has not started (what finished is cached already)
            pools.close(wait=False)
            raise
        if gone:  # the pool broke: a fresh one for what is left
            pools.close()
        for i in gone:
            lost[i] += 1
            if lost[i] > RETRIES:
                finished(i, Result(tasks[i].point, "failed", f"its worker process was lost {lost[i]} times (killed, "
                                                             "or out of memory)"), 0)
            else:
                suspects.append(i)


def _drain(pool, tasks, fresh: deque, suspects: deque, jobs: int, finished, work) -> list[int]:
    """Run points on ``pool`` until none is left (``[]``) or the pool breaks: then the points it was running
    (lost with it). ``jobs`` points run at once; a suspect (a point lost before) only alone."""
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    running: dict = {}

    def submit() -> None:
        if suspects:
            if not running:
                i = suspects.popleft()
                running[pool.submit(work, tasks[i])] = i
            return
        while fresh and len(running) < jobs:
            i = fresh.popleft()
            running[pool.submit(work, tasks[i])] = i

    submit()
    while running:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        gone = []
        for f in done:
            i = running.pop(f)
            if isinstance(f.exception(), BrokenProcessPool):
                gone.append(i)
            else:
                finished(i, _outcome(f, tasks[i]), len(running))
        if gone:
            return gone + list(running.values())
        submit()
    return []


def _run_dask(tasks, todo, scheduler, finished, work, worker_timeout: float) -> None:
    try:
        from distributed import Client, wait
    except ImportError:
        raise SweepError("--scheduler needs dask.distributed: pip install 'mhlo-cost[sweep]'") from None
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError, ValueError) as e:  # (ValueError: an address that is not one)
        raise SweepError(f"cannot reach the Dask scheduler {scheduler}: {e}") from None
    try:
        futures = {client.submit(work, tasks[i], pure=False): i for i in todo}
        watch = _Workers(client, scheduler, worker_timeout)
        pending = set(futures)
        while pending:
            try:
                wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            except Exception:  # noqa: BLE001 - (a timeout, a cancelled future): the statuses below say
                pass
            done = {f for f in pending if f.status != "pending"}
            if not done:
                watch.check(len(pending))
            pending -= done
            for f in done:
                finished(futures[f], _outcome(f, tasks[futures[f]]), min(watch.threads, len(pending)))
    finally:
        client.close()


class _Workers:
    """The cluster's workers, looked at while nothing finishes: none for ``timeout`` seconds is an error."""

    def __init__(self, client, scheduler: str, timeout: float):
        self.client, self.scheduler, self.timeout = client, scheduler, timeout
        self.since: float | None = None
        self.threads = max(1, self._threads())

    def _threads(self) -> int:
        try:
            return sum(self.client.nthreads().values())
        except Exception:  # noqa: BLE001 - a scheduler that does not answer has no worker for us
            return 0

    def check(self, left: int) -> None:
        threads = self._threads()
        if threads:
            self.threads, self.since = threads, None
            return
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        if now - self.since >= self.timeout:
            raise SweepError(f"the Dask cluster at {self.scheduler} has had no worker for {self.timeout:g} s: "
                             f"{left} point(s) not run (the points that ran are cached: run the sweep again "
                             "once the cluster has workers; --worker-timeout S waits longer)")


def _outcome(future, task: Task) -> Result:
    """The future's result; a worker that died (or an error outside ``compute``) is the point's failure."""
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - the point fails, the sweep goes on
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return Result(task.point, "failed", f"{type(e).__name__}: {first}")


class SweepError(RuntimeError):
    """The sweep cannot run (no Dask, no scheduler, no worker left); one line."""
