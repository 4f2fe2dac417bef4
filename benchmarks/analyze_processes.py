"""The measured processes of ``benchmarks/bench_analyze.py``: its two comparisons run as fresh processes, and the
checkouts and environments they run in.

* :func:`whole_processes`: ``mhlo-cost report FILE -q`` against XLA's cost analysis of the same text, each a whole
  process (the interpreter's start and every import included), alternating, the medians of ``runs``;
* :func:`in_processes`: each way of analysing FILE timed in a process of its own after a warm-up (the Python API,
  the reader's worker, XLA's cost analysis in process), alternating processes, the medians of the medians;
* :func:`trees`, :func:`compiled`, :data:`NEUTRAL`: the checkouts measured (this one and ``--before``'s), each
  compiled to bytecode first, as an installed package is, and the folder the processes run in.

The CPU time of mhlo-cost's process includes its reader child's, which ends after it: this process is made the
reaper of its orphans (Linux's ``PR_SET_CHILD_SUBREAPER``) and waits for them.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


#: XLA's cost analysis of an MLIR file, in a process of its own (what Lowered.cost_analysis() runs).
XLA_PROCESS = """
import sys
import jax
from jax._src.lib import _jax
text = open(sys.argv[1]).read()
backend = jax.devices("cpu")[0].client
comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False)
print(int(_jax.hlo_module_cost_analysis(backend, comp.as_hlo_module())["flops"]))
"""


#: The folder the measured processes run in: not a checkout (``python -m``/``-c`` put it first on sys.path,
#: so a checkout there would be measured instead of the one PYTHONPATH names: ``--before`` would not be).
NEUTRAL = tempfile.gettempdir()


def _envs(before: str | None) -> dict:
    """name -> the environment of a process running this checkout's mhlo-cost (and ``before``'s)."""
    import os

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    here = str(Path(__file__).resolve().parent.parent)
    envs = {"": dict(env, PYTHONPATH=os.pathsep.join([here, env.get("PYTHONPATH", "")]))}
    if before:
        envs[" (before)"] = dict(env, PYTHONPATH=os.pathsep.join([str(Path(before).resolve()), env.get("PYTHONPATH", "")]))
    return envs


def whole_processes(path: Path, runs: int, before: str | None = None) -> None:
    """``mhlo-cost report FILE -q`` (this checkout's, and ``before``'s) and XLA's cost analysis of FILE, each a
    whole process, alternating; prints the medians and their ratios."""
    envs = _envs(before)
    cmds = {f"mhlo-cost report{tag}": ([sys.executable, "-m", "mhlo_cost", "report", str(path), "-q"], env)
            for tag, env in envs.items()}
    cmds["xla cost analysis"] = ([sys.executable, "-c", XLA_PROCESS, str(path)], envs[""])
    import resource

    compiled(trees(before))
    reaps = _subreaper()
    own = _children()  # (the reader's child of an earlier load here: never waited for)
    times: dict = {k: [] for k in cmds}
    cpu: dict = {k: [] for k in cmds}
    before_load = _load()
    for _ in range(runs):
        for name, (cmd, env) in cmds.items():
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=NEUTRAL)
            times[name].append(time.perf_counter() - t0)
            if reaps:
                _reap(own)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
    med = {k: statistics.median(v) for k, v in times.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"load average (1/5/15 min) before {before_load}, after {_load()}")
    for k, v in times.items():
        print(f"process: {k:<18} median {med[k]:6.3f} s wall, {mcpu[k]:6.3f} s CPU, of {runs} "
              f"({', '.join(f'{t:.2f}' for t in v)})")
    xla = "xla cost analysis"
    for mine in (k for k in cmds if k != xla):
        print(f"ratio {mine}/xla (whole processes) {med[mine] / med[xla]:6.2f} wall, {mcpu[mine] / mcpu[xla]:6.2f} "
              f"CPU   (target <= 0.25)")


def _load() -> str:
    """The load average now (1, 5, 15 minutes): the whole-process figures are wall times on a shared machine."""
    import os

    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def trees(before: str | None) -> list[str]:
    """The checkouts measured: this one, and ``before``."""
    here = str(Path(__file__).resolve().parent.parent)
    return [here] + ([str(Path(before).resolve())] if before else [])


def compiled(trees: list[str]) -> None:
    """Each checkout's package compiled to bytecode first, as ``pip install`` leaves it (a checkout run from
    source under PYTHONDONTWRITEBYTECODE would otherwise compile every module in every run)."""
    import compileall

    for tree in trees:
        compileall.compile_dir(str(Path(tree) / "mhlo_cost"), quiet=1)


def _subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux), so that the CPU of mhlo-cost's
    reader child, which the process does not wait for at its exit, is counted in RUSAGE_CHILDREN."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    """This process's children now (Linux's ``/proc/PID/task/TID/children``, every thread's)."""
    import glob
    import os

    found: set[int] = set()
    for name in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with open(name) as f:
            found.update(int(pid) for pid in f.read().split())
    return found


def _reap(own: set[int]) -> None:
    """Wait for every orphan handed to this process (the reader's child ending after its parent, which has been
    reaped: the orphan is this process's child by then), not for ``own``, its own children that live on (the
    reader's child a load in this process started: ``os.waitpid(-1, 0)`` waited for it for ever)."""
    import os

    for pid in _children() - own:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


#: One process: warm up, then time ``repeat`` runs of one way to analyse FILE; prints the median seconds.
IN_PROCESS = """
import statistics, sys, time
path, how, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
if how == "xla":
    import jax
    from jax._src.lib import _jax
    backend = jax.devices("cpu")[0].client
    def run():
        text = open(path).read()
        comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False)
        return _jax.hlo_module_cost_analysis(backend, comp.as_hlo_module())["flops"]
else:
    from mhlo_cost.analysis import analyze
    from mhlo_cost.ir.guard import prestart
    prestart(walk=True)
    if how == "worker":
        from mhlo_cost.analysis.isolated import analyze_isolated as analyze
    def run():
        return analyze(path).summary
run()
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
print(statistics.median(times))
"""


def in_processes(path: Path, rounds: int, repeat: int, before: str | None = None) -> None:
    """The analysis in process (API and worker; ``before``'s API), and XLA's, alternating processes; prints
    the medians of the per-process medians and their ratios to XLA's."""
    envs = _envs(before)
    ways = {"xla in process": ("xla", envs[""]), "mhlo-cost analyze()": ("api", envs[""])}
    ways["mhlo-cost worker"] = ("worker", envs[""])  # the walk in the reader's child, the rows back
    if before:
        ways["mhlo-cost analyze() (before)"] = ("api", envs[" (before)"])
    times: dict = {k: [] for k in ways}
    for _ in range(rounds):
        for name, (how, env) in ways.items():
            out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(path), how, str(repeat)], check=True,
                                 capture_output=True, env=env, text=True, cwd=NEUTRAL).stdout
            times[name].append(float(out.split()[-1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"in process: {k:<28} median {med[k]:6.3f} s  ({', '.join(f'{t:.2f}' for t in v)})")
    for k in ways:
        if k != "xla in process":
            print(f"ratio {k}/xla (in process) {med[k] / med['xla in process']:6.2f}   (target <= 2)")
