"""Section (d) of the fault campaign: sweeps that lose their workers (issue 43: "sweeps survive their workers").

A local pool (``-j 2``, 12 points of the small STDiT3) with one worker process SIGKILLed once a point is done; a
Dask cluster (a scheduler and two workers without nannies, as separate processes) whose workers are all killed.
What should happen: the lost worker's points retried (a bounded number of times) and every point ok, or an
exit code saying that some did not run; a cluster with no worker left an error within a stated time.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import fault_kit as fk

REPO = Path(__file__).resolve().parent.parent
POINTS = ["sweep", "--model", "stdit3", "--small", "--dtype", "bf16", "f32", "f16", "--strategies", "none:1",
          "ulysses:2", "megatron:2", "ring:2", "--hardware", "h100", "--no-cache", "--format", "csv"]
#: how long a sweep whose cluster lost every worker is given to say so
DASK_PATIENCE = 180.0


def children(pid: int) -> list:
    """(pid, command line) of the processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append((int(entry.name), cmd))
    return found


def _statuses(out: bytes) -> dict:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(out.decode("utf-8", "replace"))))
    counts: dict = {}
    for r in rows:
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    return counts


def local_pool(lab) -> str:
    """Kill one of the pool's workers once the first point is done (the progress line says 1/12)."""
    import re

    run = lab.start([*POINTS, "-j", "2", "--progress"])
    t0, done = time.monotonic(), False
    while not done and time.monotonic() - t0 < 600 and run.poll() is None:
        time.sleep(0.2)
        done = bool(re.search(r"\b([1-9]\d*)/12\b", run.err.read_text(errors="replace") if run.err.exists() else ""))
    workers = [p for p, cmd in children(run.pid) if "spawn_main" in cmd]
    if not done or not workers:
        return f"no worker to kill after the first point (exit {run.finish(600).rc})"
    os.kill(workers[0], signal.SIGKILL)
    o = run.finish(600)
    return (f"exit {o.rc}, rows by status {_statuses(o.stdout)}, last line: {o.last_line()[:160]} "
            f"(want: the lost points retried and all ok, or an exit code that says some did not run)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dask(args: list, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **fk.BASE_ENV)
    with open(log, "wb") as f:
        return subprocess.Popen([sys.executable, "-c", args[0], *args[1:]], stdout=f, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def dask_cluster(lab) -> str:
    """A scheduler and two workers; the sweep sent there; both workers killed once it runs."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return "skipped: dask.distributed is not installed"
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    logs = lab.root / "dask"
    logs.mkdir(exist_ok=True)
    sched = _dask(["from distributed.cli.dask_scheduler import main; main()", "--host", "127.0.0.1", "--port",
                   str(port), "--dashboard-address", ":0"], logs / "scheduler")
    workers = [_dask(["from distributed.cli.dask_worker import main; main()", addr, "--no-nanny", "--nthreads", "1",
                      "--dashboard-address", ":0"], logs / f"worker{i}") for i in (1, 2)]
    try:
        time.sleep(8.0)  # the scheduler up, the workers registered
        run = lab.start([*POINTS, "--scheduler", addr])
        time.sleep(6.0)
        for w in workers:
            os.killpg(w.pid, signal.SIGKILL)
        t0 = time.monotonic()
        ended = run.wait(DASK_PATIENCE)
        o = run.finish(1.0)
        if not ended:
            return (f"still running {DASK_PATIENCE:.0f} s after its last worker was killed (killed by us); "
                    f"want: an error within a stated timeout")
        return (f"ended {time.monotonic() - t0:.0f} s after the workers were killed: exit {o.rc}, rows by status "
                f"{_statuses(o.stdout)}, last line: {o.last_line()[:160]}")
    finally:
        for p in [sched, *workers]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def section(lab, say) -> None:
    say("\n(d) sweeps that lose their workers (12 points of the small STDiT3)")
    say(f"  local pool, one worker killed: {local_pool(lab)}")
    say(f"  Dask cluster, every worker killed: {dask_cluster(lab)}")
