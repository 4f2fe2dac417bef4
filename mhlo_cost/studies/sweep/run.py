"""Running a sweep's points: on this machine (a process pool) or on a Dask distributed cluster.

The default is the standard library's process pool (``spawn``: a fresh interpreter per worker, never a
fork of a process that has jax loaded), one worker per core: a point is a few seconds of pure Python with
no data to move, so a pool needs no scheduler, starts in a second and adds no dependency. ``--scheduler
tcp://HOST:8786`` sends the same :func:`~mhlo_cost.studies.sweep.point.compute` calls to an existing Dask cluster
(``dask.distributed``, the optional extra ``sweep``); nothing else changes. The cache is read and written
here, by the process that runs the sweep, so remote workers need no shared disk.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from .cache import Cache
from .point import Result, Task, compute


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
              progress=True) -> tuple[list[Result], Stats]:
    """The results of ``tasks`` in their order: cached ones read, the others computed (``scheduler``: on
    that Dask cluster; else a pool of ``jobs`` processes, 1: in this process)."""
    t0 = time.perf_counter()
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

    if todo:
        if scheduler:
            _run_dask(tasks, todo, scheduler, stats, finished)
        else:
            _run_local(tasks, todo, jobs, stats, finished)
    stats.seconds = time.perf_counter() - t0
    return results, stats


def _run_local(tasks, todo, jobs, stats, finished) -> None:
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
    if jobs == 1:
        for i in todo:
            finished(i, compute(tasks[i]), 0)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(compute, tasks[i]): i for i in todo}
        left = len(todo)
        for f in as_completed(futures):
            left -= 1
            finished(futures[f], _outcome(f, tasks[futures[f]]), min(jobs, left))
    except BaseException:  # interrupted: drop what has not started (what finished is cached already)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _run_dask(tasks, todo, scheduler, stats, finished) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise SweepError("--scheduler needs dask.distributed: pip install 'mhlo-cost[sweep]'") from None
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError, ValueError) as e:  # (ValueError: an address that is not one)
        raise SweepError(f"cannot reach the Dask scheduler {scheduler}: {e}") from None
    try:
        futures = {client.submit(compute, tasks[i], pure=False): i for i in todo}
        workers = max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()))
        left = len(todo)
        for f in as_completed(futures):
            left -= 1
            finished(futures[f], _outcome(f, tasks[futures[f]]), min(workers, left))
    finally:
        client.close()


def _outcome(future, task: Task) -> Result:
    """The future's result; a worker that died (or an error outside ``compute``) is the point's failure."""
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - the point fails, the sweep goes on
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return Result(task.point, "failed", f"{type(e).__name__}: {first}")


class SweepError(RuntimeError):
    """The sweep cannot run (no Dask, no scheduler); one line."""
