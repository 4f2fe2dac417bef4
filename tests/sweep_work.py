"""Work functions for sweeps in tests (tests/test_sweep_workers.py): module-level, so that a spawned pool
worker imports them by name. Each run appends the point's label to the file ``$SWEEP_WORK_LOG``; a point
whose parallel is ``kill-once`` kills its own worker process the first time (``$SWEEP_WORK_LOG.killed`` marks
it), ``kill-always`` every time, ``slow`` sleeps ``$SWEEP_WORK_SLEEP`` seconds."""
from __future__ import annotations

import os
import signal
import time

from mhlo_cost.studies.sweep.point import Result


def _log(task) -> str:
    path = os.environ["SWEEP_WORK_LOG"]
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{task.point.parallel}:{task.point.devices}\n")
    return path


def work(task):
    """The point's row is its device count (no lowering): what a test can check came back."""
    path = _log(task)
    kind = task.point.parallel
    if kind == "kill-always" or (kind == "kill-once" and not os.path.exists(path + ".killed")):
        open(path + ".killed", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "slow":
        time.sleep(float(os.environ.get("SWEEP_WORK_SLEEP", "1")))
    return Result(task.point, "ok", "", "0" * 64, [{"devices": task.point.devices}], 0.0)


def checked(task):
    """A point of a sweep whose first point of each program checks (``task.check``): its check ``failed`` where the
    point's shape is ``fail``, else ``passed``; unchecked, none. Logged as it ends: ``shape parallel check repeat``
    (a ``slow`` shape sleeps ``$SWEEP_WORK_SLEEP`` seconds first)."""
    if task.point.shape == "slow":
        time.sleep(float(os.environ.get("SWEEP_WORK_SLEEP", "1")))
    with open(os.environ["SWEEP_WORK_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{task.point.shape} {task.point.parallel} {task.check} {task.repeat}\n")
    outcome = ("failed" if task.point.shape == "fail" else "passed") if task.check else ""
    return Result(task.point, "ok", "", "0" * 64, [row(task.point.devices) for _ in task.hardware], 0.0, outcome)


def row(flops: int) -> dict:
    """A sweep row as the cache keeps it (its schema's fields), ``flops`` its FLOPs."""
    return {"gemm_flops": flops, "conv_flops": 0, "vector_flops": 0, "comm_bytes": 0, "flops": flops, "peak_bytes": 1,
            "hbm_bytes": 1, "fits": "yes", "est_time_s": 1.0, "bound": "compute", "accuracy_error": None, "steps": 1,
            "time_step_s": 1.0, "time_run_s": 1.0}


class _Marker:
    """Writes ``path`` when it is freed (a worker's interpreter torn down at its end frees it)."""

    def __init__(self, path: str):
        self.path, self.open = path, open  # (the builtins may be gone by the time it is freed)

    def __del__(self):
        with self.open(self.path, "w", encoding="utf-8") as f:
            f.write("torn down")


_KEPT: list = []


def leave_marker(path: str) -> int:
    """Keeps a :class:`_Marker` of ``path`` alive in this worker until its interpreter is torn down; its pid."""
    _KEPT.append(_Marker(path))
    return os.getpid()
