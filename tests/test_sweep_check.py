"""The check of a sweep's repetition (a deep STDiT3 point priced from one layer, :mod:`mhlo_cost.studies.layerprice`)
gates every point of its program: the first point of each program runs first and checks the repetition at the check
depth; the other points repeat unchecked only where that check passed. A failed check (here forced) sends every point
of the program the full path, whose rows are those of the point lowered at full depth; a first point read from the
cache counts as checked only where its entry says the check ran and held."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.sweep import _first_of_program, _settle, make_grid, run_sweep
from mhlo_cost.studies.sweep import point as sweep_point
from mhlo_cost.studies.sweep.cache import Cache
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import Result, Task

OPTIONS = {"small": True, "depth": 6, "batch": 2}
HW = ["dgx-a100", "dgx-h100"]


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in b:  # floats bit for bit (repr round-trips a double), ints exact
        assert type(a[k]) is type(b[k]) and repr(a[k]) == repr(b[k]), k


def _spy(monkeypatch, holds: bool) -> tuple[list, list]:
    """(each point's task and (sha, rows, outcome) as computed, the tasks whose check ran), the check forced to
    ``holds``."""
    computed, checked = [], []
    real = sweep_point.point_rows

    def rows(task):
        got = real(task)
        computed.append((task, got))
        return got

    monkeypatch.setattr(sweep_point, "point_rows", rows)
    monkeypatch.setattr(sweep_point, "_check_holds", lambda task, *a: checked.append(task) or holds)
    return computed, checked


def test_a_failed_check_sends_every_point_of_its_program_the_full_path(monkeypatch):
    grid = make_grid({"model": "stdit3", "shape": ["default", "8_64_64", "4_128_128"], "strategies": ["ulysses:2"],
                      "hardware": HW, "steps": 30, "fuse": "elementwise", "options": OPTIONS})
    computed, checked = _spy(monkeypatch, holds=False)
    study = []
    real_study = sweep_point.point_study
    monkeypatch.setattr(sweep_point, "point_study", lambda task: study.append(task.point) or real_study(task))
    from mhlo_cost.studies import layerprice  # a repetition that is wrong: rows of it must never come through

    monkeypatch.setattr(layerprice, "repeated_rows", lambda repeat, priced: [{"flops": -1} for _ in priced])
    table, stats = run_sweep(grid, jobs=1, progress=False)
    assert stats.computed == 3 and stats.failed == 0
    # the first point checked (and failed) before any other ran; the others never repeat a layer, never check
    assert [t.point.shape for t in checked] == ["default"]
    assert [(t.point.shape, t.check, t.repeat, out[2]) for t, out in computed] == [
        ("default", True, True, "failed"), ("8_64_64", False, False, ""), ("4_128_128", False, False, "")]
    assert study == [t.point for t, _ in computed]  # every point took the full path
    # its rows are those of the point lowered and priced at full depth (no rebuild of any kind)
    monkeypatch.setattr(sweep_point, "_rebuilt_depth", lambda task: None)
    for task, (_, rows, _) in computed:
        full = real_study(Task(task.point, OPTIONS, HW, 30, "elementwise"))[1]
        want = [sweep_point.sweep_row(full.on(hw).figures) for hw in task.profiles()]
        for a, b in zip(rows, want, strict=True):
            _same(a, b)
    assert list(table["time_step_s"]) == [r["time_step_s"] for _, (_, rows, _) in computed for r in rows]


def test_a_passed_check_lets_the_others_repeat_unchecked(monkeypatch):
    grid = make_grid({"model": "stdit3", "shape": ["default", "8_64_64"], "strategies": ["ulysses:2"],
                      "hardware": HW, "steps": 30, "fuse": "elementwise", "options": OPTIONS})
    computed, checked = _spy(monkeypatch, holds=True)
    run_sweep(grid, jobs=1, progress=False)
    assert [(t.point.shape, t.check, t.repeat, out[2]) for t, out in computed] == [
        ("default", True, True, "passed"), ("8_64_64", False, True, "")]
    assert len(checked) == 1


def test_a_checked_point_stays_checked_after_a_sweep_that_repeats_it_unchecked(monkeypatch, tmp_path):
    """A point checked in one sweep, then computed again unchecked in another (a profile not kept, the point not the
    first of its program there), is read as checked by a third: its IR key is that of its lowerings at depths 2 and
    3 whether its check ran or not, and rows made again unchecked keep the check kept for them."""
    computed, checked = _spy(monkeypatch, holds=True)

    def sweep(shapes, hardware):
        grid = make_grid({"model": "stdit3", "shape": shapes, "strategies": ["ulysses:2"], "hardware": hardware,
                          "steps": 30, "fuse": "elementwise", "options": OPTIONS})
        return run_sweep(grid, jobs=1, progress=False, cache_dir=tmp_path)[1]

    # (all from one line: a lowering's locations hold the stack; h100: a profile not kept)
    runs = [sweep(shapes, hw) for shapes, hw in ((["default"], HW), (["8_64_64", "default"], [HW[0], "h100"]),
                                                 (["default"], HW))]
    assert [t.point.shape for t in checked] == ["default", "8_64_64"]
    assert [(t.point.shape, t.check, out[2]) for t, out in computed] == [
        ("default", True, "passed"), ("8_64_64", True, "passed"), ("default", False, "")]
    assert computed[0][1][0] == computed[2][1][0]  # one IR key, checked or not
    # the third: default first of its program again, read with its check (before: computed again)
    assert [(r.computed, r.cached) for r in runs] == [(1, 0), (2, 0), (0, 1)]


@pytest.mark.parametrize("outcome,check,repeat", [("passed", False, True), ("failed", False, False),
                                                   ("", True, True)])
def test_settle_takes_the_first_points_outcome(outcome, check, repeat):
    """Passed: the others unchecked; failed: never from one layer; no outcome (the first failed, or was not priced
    from one layer): each checks its own. Another program and a point read already stay as they are."""
    pts = [Point("stdit3", s, p, 2, "bf16") for p in ("ulysses", "megatron") for s in ("a", "b", "c")]
    first = _first_of_program(pts)
    tasks = [Task(p, OPTIONS, HW, check=f) for p, f in zip(pts, first)]
    cached = Result(pts[2], "ok")
    results = [Result(pts[0], "ok", check=outcome), None, cached, Result(pts[3], "ok", check="passed"), None, None]
    got = _settle(tasks, results)
    assert [(t.check, t.repeat) for t in got] == [(True, True), (check, repeat), (False, True), (True, True),
                                                   (False, True), (False, True)]


def _row(flops: int) -> dict:
    return {"gemm_flops": flops, "conv_flops": 0, "vector_flops": 0, "comm_bytes": 0, "flops": flops, "peak_bytes": 1,
            "hbm_bytes": 1, "fits": "yes", "est_time_s": 1.0, "bound": "compute", "accuracy_error": None, "steps": 1,
            "time_step_s": 1.0, "time_run_s": 1.0}


def test_a_cached_first_point_counts_as_checked_only_with_its_check(tmp_path):
    point = Point("stdit3", "default", "ulysses", 2, "bf16")
    first, other = Task(point, OPTIONS, HW, 30, "elementwise"), Task(point, OPTIONS, HW, 30, "elementwise", check=False)
    cache = Cache(tmp_path)
    rows = [_row(1), _row(2)]
    cache.put(other, Result(point, "ok", "", "0" * 64, rows))  # computed unchecked (a later point's way)
    assert cache.get(other).rows == rows and cache.get(other).check == ""
    assert cache.get(first) is None  # no check kept: the first point is computed again, with its check
    cache.put(first, Result(point, "ok", "", "0" * 64, rows, check="failed"))
    assert cache.get(first).check == "failed"
    cache.put(first, Result(point, "ok", "", "0" * 64, rows, check="passed"))
    assert cache.get(first).check == "passed" and cache.get(other).check == ""
    cache.put(other, Result(point, "ok", "", "0" * 64, rows))  # the same rows made again unchecked: still checked
    assert cache.get(first).check == "passed" and cache.get(other).check == ""
    shallow = Task(point, dict(OPTIONS, depth=3), HW, 30, "elementwise")  # not priced from one layer: no check
    cache.put(shallow, Result(point, "ok", "", "1" * 64, rows))
    assert cache.get(shallow).rows == rows
