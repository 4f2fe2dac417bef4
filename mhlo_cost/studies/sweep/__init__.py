"""``mhlo-cost sweep``: many (model, shape, strategy, devices, dtype) points x hardware profiles in one tidy
table. :mod:`.grid` builds the points (and says which are skipped, why); :mod:`.point` lowers and analyses
one point in a worker; :mod:`.cache` keeps results on disk; :mod:`.run` runs the points here or on a Dask
cluster; :mod:`.table` makes and writes the table."""
from __future__ import annotations

from .grid import Grid, GridError, Point, make_grid, skip_reason
from .run import RETRIES, WORKER_TIMEOUT, Stats, SweepError, run_tasks
from .spec import read_spec

__all__ = ["Grid", "GridError", "Point", "RETRIES", "Stats", "SweepError", "WORKER_TIMEOUT", "make_grid", "read_spec",
           "run_sweep", "skip_reason"]


def run_sweep(grid: Grid, hardware_toml: str | None = None, *, cache_dir=None, scheduler: str | None = None,
              jobs: int | None = None, progress: bool = True, note=None, worker_timeout: float = WORKER_TIMEOUT):
    """(table, stats) of ``grid`` (``hardware_toml``: the text of a user's profile file, searched first;
    ``cache_dir``: the cache root, None: nothing kept; ``note(text)``: told of each cache entry not trusted or
    not kept; ``worker_timeout``: see :func:`~.run.run_tasks`)."""
    from .cache import Cache
    from .point import Task
    from .grid import EXECUTION_OF_FUSE
    from .run import early_pools
    from .table import frame, make_rows

    cache = Cache(cache_dir, note)
    pools = early_pools(len(grid.points), jobs, scheduler, cache)  # (its workers start beside what follows)
    try:
        skipped = {p: r for p in grid.points if (r := skip_reason(p, grid.options)) is not None}
        valid = [p for p in grid.points if p not in skipped]
        first = _first_of_program(valid)
        tasks = [Task(p, grid.options, grid.hardware, grid.steps, grid.fuse, grid.conv_padding, hardware_toml,
                      check=f) for p, f in zip(valid, first)]
    except BaseException:
        if pools is not None:
            pools.close(wait=False)
        raise
    results, stats = run_tasks(tasks, cache, scheduler=scheduler, jobs=jobs, progress=progress, pools=pools,
                               worker_timeout=worker_timeout, after=_after(valid, first), settle=_settle)
    rows = make_rows(grid.points, dict(zip(valid, results)), skipped, grid.hardware)
    execution = EXECUTION_OF_FUSE.get(grid.fuse, grid.fuse)
    for row in rows:
        row["execution"] = execution
    return frame(rows, grid.fuse != "none"), stats


def _settle(tasks: list, results: list) -> list:
    """The tasks after the first point of each program has run (``results``: theirs, None for the others): the
    others of a program whose check passed repeat its layer unchecked (``check=False``); those of a program whose
    check failed are never priced from one layer (``repeat=False``: :func:`~.point.point_study`'s path); those of
    a program whose first point has no outcome (it failed, or was not priced from one layer) check their own."""
    from dataclasses import replace

    outcome = {_program(t.point): r.check for t, r in zip(tasks, results) if r is not None and t.check}
    out = []
    for t, r in zip(tasks, results):
        if r is None and not t.check:
            got = outcome.get(_program(t.point), "")
            t = replace(t, check=got == "", repeat=got != "failed")
        out.append(t)
    return out


def _program(p) -> tuple:
    """A point's program: its model, strategy, dtype and precision (the points of one program differ only in
    shape)."""
    return p.model, p.parallel, p.devices, p.dtype, p.precision, p.source


def _first_of_program(points: list) -> list:
    """Per point, whether it is the first of its program (its model, strategy, dtype and precision: the points
    of one program differ only in shape): a point priced from one layer checks the repetition against a deeper
    lowering there (:func:`~.point._repeated_rows`), the layers of one program repeating alike at every shape: it
    runs first, and the others of its program repeat unchecked only where its check passed (:func:`_settle`)."""
    seen: set = set()
    out = []
    for p in points:
        key = _program(p)
        out.append(key not in seen)
        seen.add(key)
    return out


def _after(points: list, first: list) -> list:
    """Per point, the index of the first point of its program (:func:`_first_of_program`), which it waits for
    (:func:`_settle` revises it from that one's check); None for a first point."""
    at: dict = {}
    for i, (p, f) in enumerate(zip(points, first)):
        if f:
            at[_program(p)] = i
    return [None if f else at[_program(p)] for p, f in zip(points, first)]
