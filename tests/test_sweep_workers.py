"""Sweeps survive their workers: a local pool process killed mid-sweep loses only the points it ran, and they
run again (alone, in a fresh worker) up to RETRIES more times, then fail with why; a Dask cluster whose
workers are all closed mid-run ends with SweepError once it has had no worker for --worker-timeout seconds,
not a wait for ever. The points compute nothing (tests/sweep_work.py): what is checked is who ran, how often,
and what came back."""
from __future__ import annotations

import threading

import pytest

from mhlo_cost.studies.sweep.cache import Cache
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import Task
from mhlo_cost.studies.sweep.run import RETRIES, SweepError, run_tasks
from sweep_work import work


def tasks(kinds: list[str]) -> list[Task]:
    return [Task(Point("gpt", "s", kind, n + 1, "bf16"), {}, ["h100"]) for n, kind in enumerate(kinds)]


def runs(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "runs.log"
    monkeypatch.setenv("SWEEP_WORK_LOG", str(path))  # read by the spawned workers (they inherit it)
    return path


def test_a_killed_pool_worker_is_retried_and_its_neighbours_are_not_lost(log):
    kinds = ["ok"] * 5 + ["kill-once"] + ["ok"] * 6
    results, stats = run_tasks(tasks(kinds), Cache(None), jobs=2, progress=False, work=work)
    assert [r.status for r in results] == ["ok"] * 12  # was: 11 of 12 failed, exit 0
    assert [r.rows for r in results] == [[{"devices": n + 1}] for n in range(12)]
    assert (stats.computed, stats.failed) == (12, 0)
    ran = runs(log)
    assert ran.count("kill-once:6") == 2  # killed once, run again once
    # each other point ran once, or twice where it was running beside the killed one (at most jobs - 1 of them)
    twice = [p for p in set(ran) if p != "kill-once:6" and ran.count(p) > 1]
    assert all(ran.count(p) <= 2 for p in twice) and len(twice) <= 1
    assert len(set(ran)) == 12


def test_a_point_that_always_kills_its_worker_fails_after_the_retries(log):
    kinds = ["ok", "kill-always", "ok", "ok"]
    results, stats = run_tasks(tasks(kinds), Cache(None), jobs=2, progress=False, work=work)
    assert [r.status for r in results] == ["ok", "failed", "ok", "ok"]
    assert results[1].reason == f"its worker process was lost {RETRIES + 1} times (killed, or out of memory)"
    assert runs(log).count("kill-always:2") == RETRIES + 1  # the first run and RETRIES more, each alone
    assert (stats.computed, stats.failed) == (3, 1)


def test_a_dask_cluster_left_without_workers_is_an_error(log, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("SWEEP_WORK_SLEEP", "0.5")
    outcome: dict = {}
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        def close_workers(done, total, text, detail):  # the progress callback: after the first point, no worker
            if done == 1:
                cluster.scale(0)

        def sweep():
            try:
                run_tasks(tasks(["slow"] * 4), Cache(None), scheduler=cluster.scheduler_address,
                          progress=close_workers, work=work, worker_timeout=2)
            except SweepError as e:
                outcome["error"] = str(e)

        runner = threading.Thread(target=sweep, daemon=True)
        runner.start()
        runner.join(300)  # a guard against the old wait for ever, not a speed target
        assert not runner.is_alive(), "the sweep still waits for workers"
    error = outcome["error"]
    assert error.startswith(f"the Dask cluster at {cluster.scheduler_address} has had no worker for 2 s: ")
    assert "point(s) not run" in error and "--worker-timeout" in error


def test_worker_timeout_option(capsys):
    from mhlo_cost.cli import build_parser, main
    from mhlo_cost.studies.sweep.run import WORKER_TIMEOUT

    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]
    helps = {a.dest: a.help for a in sweep._actions}
    assert f"(default {WORKER_TIMEOUT:g}: " in helps["worker_timeout"]  # the help says the default the sweep uses
    for bad in ("0", "-1", "nan", "inf", "soon"):
        assert main(["sweep", "--model", "gpt", "--no-cache", "--worker-timeout", bad]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "positive number of seconds" in err[0]


def test_a_local_worker_ends_without_its_interpreters_teardown(tmp_path):
    """The sweep's pool workers end with ``os._exit`` once shut down (``run._worker_started``): an object a worker
    keeps is never freed (a plain spawned worker, the control, frees it as its interpreter is torn down), and the
    worker has answered every call first."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from mhlo_cost.studies.sweep.run import _worker_started
    from sweep_work import leave_marker

    ctx = multiprocessing.get_context("spawn")
    for init, name in ((None, "plain"), (_worker_started, "fast")):
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=init) as pool:
            assert pool.submit(leave_marker, str(tmp_path / name)).result() > 0
    assert (tmp_path / "plain").read_text() == "torn down"
    assert not (tmp_path / "fast").exists()
