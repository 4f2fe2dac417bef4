"""A sweep on a local pool starts the other points of a program as soon as that program's first point (the one that
checks the repetition, tests/test_sweep_check.py) has finished, beside the first points still running, instead of
after every first point: no worker idles while a stage ends. Each point is revised from its own program's check
alone, as the staged run revises it, so the table is the staged run's byte for byte."""
from __future__ import annotations

from mhlo_cost.studies.sweep import _after, _first_of_program, _settle, make_grid, run_sweep
from mhlo_cost.studies.sweep.cache import Cache
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import Result, Task
from mhlo_cost.studies.sweep.run import run_tasks
from sweep_work import checked, row

OPTIONS = {"small": True, "depth": 6, "batch": 2}
HW = ["dgx-a100", "dgx-h100"]


def _tasks(points: list) -> tuple[list, list]:
    first = _first_of_program(points)
    return [Task(p, OPTIONS, HW, check=f) for p, f in zip(points, first)], _after(points, first)


def test_after_names_the_first_point_of_each_program():
    pts = [Point("stdit3", s, p, 2, "bf16") for p in ("ulysses", "megatron") for s in ("a", "b")]
    pts.append(Point("stdit3", "c", "ulysses", 2, "bf16"))
    assert _after(pts, _first_of_program(pts)) == [None, 0, None, 2, 0]


def test_the_pool_table_is_the_staged_table_byte_for_byte(tmp_path):
    """Real points (one program, two shapes, each priced from one layer, the first point checked): two workers, the
    other point released as the check ends, against one process, staged."""
    grid = make_grid({"model": "stdit3", "shape": ["default", "8_64_64"], "strategies": ["ulysses:2"],
                      "hardware": HW, "steps": 30, "fuse": "elementwise", "options": OPTIONS})
    staged, s1 = run_sweep(grid, jobs=1, progress=False)
    pooled, s2 = run_sweep(grid, jobs=2, progress=False)
    assert (s1.computed, s2.computed, s1.failed, s2.failed) == (2, 2, 0, 0)
    assert (tmp_path / "a.csv").write_text(staged.to_csv(index=False)) > 0
    (tmp_path / "b.csv").write_text(pooled.to_csv(index=False))
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert list(staged["status"]) == ["ok"] * 4


def test_a_failed_check_sends_its_program_the_full_path_and_the_others_do_not_wait(tmp_path, monkeypatch):
    """Program ``megatron``'s first point is slow and checks; ``ulysses``' first fails its check: its other points
    run unchecked and never from one layer, released (and run) while the slow check still runs; ``megatron``'s
    others repeat unchecked once their check has passed."""
    log = tmp_path / "runs.log"
    monkeypatch.setenv("SWEEP_WORK_LOG", str(log))
    monkeypatch.setenv("SWEEP_WORK_SLEEP", "4")
    pts = [Point("stdit3", s, "megatron", 2, "bf16") for s in ("slow", "b", "c")]
    pts += [Point("stdit3", s, "ulysses", 2, "bf16") for s in ("fail", "d", "e")]
    tasks, after = _tasks(pts)
    results, stats = run_tasks(tasks, Cache(None), jobs=2, progress=False, work=checked, after=after,
                               settle=_settle)
    assert (stats.computed, stats.failed) == (6, 0)
    assert [r.check for r in results] == ["passed", "", "", "failed", "", ""]
    ran = log.read_text().splitlines()
    assert sorted(ran) == sorted(["slow megatron True True", "b megatron False True", "c megatron False True",
                                  "fail ulysses True True", "d ulysses False False", "e ulysses False False"])
    # ulysses' others ended before megatron's slow first point (staged, they would have waited for it)
    assert ran.index("e ulysses False False") < ran.index("slow megatron True True")
    assert [(t.check, t.repeat) for t in tasks] == [(True, True), (False, True), (False, True)] * 2  # as given


def test_a_cached_first_point_releases_its_program_at_once(tmp_path, monkeypatch):
    log = tmp_path / "runs.log"
    monkeypatch.setenv("SWEEP_WORK_LOG", str(log))
    pts = [Point("stdit3", s, "ulysses", 2, "bf16") for s in ("4_64_64", "8_64_64")]  # (shapes: the cache's keys)
    pts += [Point("stdit3", s, "megatron", 2, "bf16") for s in ("4_128_128", "8_128_128")]
    tasks, after = _tasks(pts)
    cache = Cache(tmp_path / "cache")
    cache.put(tasks[0], Result(pts[0], "ok", "", "0" * 64, [row(2), row(2)], 0.0, "failed"))
    results, stats = run_tasks(tasks, cache, jobs=2, progress=False, work=checked, after=after, settle=_settle)
    assert (stats.cached, stats.computed) == (1, 3)
    assert sorted(log.read_text().splitlines()) == ["4_128_128 megatron True True", "8_128_128 megatron False True",
                                                    "8_64_64 ulysses False False"]


def test_released_points_wait_longest_first():
    """Graham's LPT rule on what is released: the points that wait for none stay first, in their order; a released
    point is placed by the seconds its program's first point took, the longest first, ties in release order."""
    from mhlo_cost.studies.sweep.run import _released

    pts = [Point("stdit3", s, p, 2, "bf16") for p in ("ulysses", "megatron", "ring") for s in ("a", "b", "c")]
    tasks, after = _tasks(pts)  # first points 0, 3, 6; the others wait for them
    results: list = [None] * len(pts)
    fresh, done = _released(tasks, list(range(len(pts))), results, after, None, lambda i, r, n: None)
    assert list(fresh) == [0, 3, 6]
    fresh.popleft()  # point 0 runs; 3 and 6 wait for a worker
    done(0, Result(pts[0], "ok", seconds=0.5), 1)
    assert list(fresh) == [3, 6, 1, 2]
    fresh.popleft(), fresh.popleft()
    done(6, Result(pts[6], "ok", seconds=1.5), 1)  # the ring program's, longer: its points go ahead of ulysses'
    assert list(fresh) == [7, 8, 1, 2]
    done(3, Result(pts[3], "ok", seconds=0.5), 0)  # as long as ulysses': after it, in the order of release
    assert list(fresh) == [7, 8, 1, 2, 4, 5]
