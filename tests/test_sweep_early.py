"""A sweep whose every point is to be computed (a cache that holds no point's rows) starts its local workers before
it resolves its points (building each point's configuration imports jax in the sweep's own process: about a
second), so that the workers' own start-up runs beside it; a sweep that may read its points from the cache starts
them only once a point is to run, as before (a sweep read whole from the cache starts none). The table is the one
process's, byte for byte (tests/test_sweep_released.py)."""
from __future__ import annotations

from mhlo_cost.studies import sweep
from mhlo_cost.studies.sweep import make_grid, run_sweep
from mhlo_cost.studies.sweep import run as sweep_run
from mhlo_cost.studies.sweep.cache import Cache

OPTIONS = {"small": True, "depth": 6, "batch": 2}


def test_an_empty_cache_starts_the_workers_first_and_a_full_one_none(tmp_path, monkeypatch):
    events = []
    start, skip = sweep_run._Pools.start, sweep.skip_reason
    monkeypatch.setattr(sweep_run._Pools, "start", lambda self: (events.append(("start", self.jobs)), start(self))[1])
    monkeypatch.setattr(sweep, "skip_reason", lambda p, o: (events.append("resolve"), skip(p, o))[1])
    grid = make_grid({"model": "stdit3", "shape": ["default", "8_64_64"], "strategies": ["ulysses:2"],
                      "hardware": ["dgx-h100"], "steps": 30, "fuse": "elementwise", "options": OPTIONS})
    cache = tmp_path / "cache"
    assert Cache(None).holds_no_rows() and Cache(cache).holds_no_rows()
    first, stats = run_sweep(grid, cache_dir=cache, jobs=2, progress=False)
    assert (stats.computed, stats.failed) == (2, 0)
    assert events == [("start", 2), "resolve", "resolve"]  # the workers started before the first point resolved
    assert not Cache(cache).holds_no_rows()
    events.clear()
    again, stats = run_sweep(grid, cache_dir=cache, jobs=2, progress=False)
    assert (stats.computed, stats.cached) == (0, 2)
    assert events == ["resolve", "resolve"]  # (read from the cache: no worker started)
    assert again.to_csv(index=False) == first.to_csv(index=False)


def test_one_worker_or_a_cluster_starts_no_early_pool():
    assert sweep_run.early_pools(24, 1, None, Cache(None)) is None
    assert sweep_run.early_pools(1, 4, None, Cache(None)) is None
    assert sweep_run.early_pools(24, 2, "tcp://nowhere:8786", Cache(None)) is None


def test_the_parent_builds_every_points_configuration_without_jax():
    """The sweep's parent builds the points' configurations (skip reasons, cache keys) and lowers none: it imports no
    jax (a second of CPU beside the workers' start), the sharded configuration being the one lowering reads."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from mhlo_cost.studies.sweep.grid import Point, build_config, skip_reason\n"
            "from mhlo_cost.studies.sweep.cache import _lowered\n"
            "from mhlo_cost.studies.sweep.point import Task\n"
            "p = Point('stdit3', '204_640_360', 'ulysses', 8, 'bf16')\n"
            "cfg, plan = build_config(p, {})\n"
            "assert skip_reason(p, {}) is None and 'ulysses' in plan and cfg.plan.devices == 8, plan\n"
            "assert skip_reason(Point('stdit3', 'default', 'megatron', 7, 'bf16'), {})\n"
            "_lowered(Task(p, {}, ['h100']))\n"
            "print('jax' in sys.modules, type(cfg).__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "mhlo_cost.lower.models.sharded_config"]
    from mhlo_cost.lower.models import parallel, sharded_config

    assert parallel.ShardedConfig is sharded_config.ShardedConfig  # (what jax_frontend's isinstance reads)
