"""Grids without re-lowering (issue 41 part 3): a serve sweep's time from an empty cache with every point lowered
(the old path) and with the op tables fitted from a few lowerings (the new one), and a byte comparison of the
two tables. Each run is a fresh process with its own empty cache folder. Prints figures; no target is asserted.

    python benchmarks/bench_grid.py                       # Llama-2-7B decode, batch {1,8,32,128} x context {2k,8k,32k}
    python benchmarks/bench_grid.py --model gpt           # the bundled gpt (small: quick)
    python benchmarks/bench_grid.py --breakdown --only fit  # the fitted path alone, each stage's time printed
    python benchmarks/bench_grid.py --sweep               # also time `mhlo-cost sweep --spec benchmarks/sweep_stdit3.toml`
    python benchmarks/bench_grid.py --only sweep --before 7fe3784  # the sweep alone, now and before one-layer pricing
    python benchmarks/bench_grid.py --only fit --before 792ab51  # and the same with the code of a git revision
    python benchmarks/bench_grid.py --only fit --jobs 2   # the steps lowered in a second process (serve -j 2)

Each time is wall-clock, with the CPU seconds (user + sys) of the run's processes beside it (the machine's load
says how far apart they are).

A run holds the command line's collector thresholds (full collections deferred: mhlo_cost/cli/cmd_serve.py
``deferred_full_collections``) and ends as the command line does (its cyclic garbage collector frozen: the
interpreter's exit does not traverse the frameworks' objects again, about 2.5 CPU seconds here). The table of each
path is written as CSV and compared byte for byte; the fitted path prices its points from one layer
(mhlo_cost/studies/serve/onelayer.py) where its program's check at depth 5 holds, so the comparison with ``lower``
(every point lowered at full depth and priced whole) is the one against the full path.

The issue's targets: the 7B serve grid under 20 s from an empty cache, the STDiT3 published-table sweep under 10 s
(each sweep point lowered at depths 2 and 3 and priced at full depth by repeating its priced layer,
studies/layerprice.py; the first point of each strategy lowered at depth 4 too, to check the repetition:
studies/sweep/point.py; the other points of a strategy start on the pool as soon as its check has ended, beside the
checks still running: studies/sweep/run.py). The sweep's line gives its wall and CPU seconds (the sweep's process
and its workers) and the load average, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import io
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(model: str, batches: str, contexts: str, fit: str, out: str, breakdown: bool = False,
          jobs: int = 1) -> None:
    """One sweep in this (fresh) process, its table written to ``out`` as CSV; ``breakdown``: each stage printed
    to stderr with the seconds since the process started (imports included)."""
    start = time.perf_counter() - _since_start()
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.grid import StepCache, sweep, table

    base = (StepRequest(hf="LlamaForCausalLM", config="llama") if model == "llama" else StepRequest(model="gpt"))
    notes = []

    def stage(text: str) -> None:
        print(f"  {time.perf_counter() - start:7.2f} s  (CPU {time.process_time():6.2f} s)  {text}", file=sys.stderr,
              flush=True)

    if breakdown:
        stage(f"{fit}: imports done")
    try:  # (the command line's collector thresholds over the run; a revision before them: CPython's)
        from mhlo_cost.cli.cmd_serve import deferred_full_collections
    except ImportError:
        from contextlib import nullcontext as deferred_full_collections
    with tempfile.TemporaryDirectory() as cache, deferred_full_collections():
        figs = sweep(base, [int(b) for b in batches.split(",")], [int(c) for c in contexts.split(",")],
                     hardware_from_args("h100", None), cache=StepCache(cache), fit=fit == "fit", note=notes.append,
                     stage=stage if breakdown else None, **({"jobs": jobs} if jobs != 1 else {}))
    if breakdown:
        stage(f"{fit}: done")
    with open(out, "w", encoding="utf-8") as f:
        f.write(table(figs).to_csv(index=False))
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    import gc

    gc.freeze()  # (as the command line does at its end, mhlo_cost/cli/__init__.py: no cyclic collection at exit)


def _since_start() -> float:
    """Seconds since this process started (its interpreter's start and imports included), where the platform
    says (Linux), else 0."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            up = float(f.read().split()[0])
        return max(up - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def timed(cmd: list[str], code: str | None = None) -> float:
    """Seconds ``cmd`` took, with the package of ``code`` (default: this checkout) first on the path; the CPU
    seconds of its processes (user + sys, those waited for) are added to :data:`CPU` under the command."""
    env = dict(os.environ, PYTHONPATH=(code or ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               XDG_STATE_HOME=tempfile.mkdtemp())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[" ".join(cmd)] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall


#: CPU seconds (user + sys) of each command :func:`timed` ran.
CPU: dict = {}


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes), where the platform says."""
    try:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load unknown"


def time_sweep(out: str, code: str | None = None) -> str:
    """Run the STDiT3 published-table sweep (empty cache) into ``out``; its line of figures (wall, CPU, load)."""
    spec = os.path.join(HERE, "sweep_stdit3.toml")
    before = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "mhlo_cost", "sweep", "--spec", spec, "--cache-dir", tempfile.mkdtemp(), "-q",
           "-o", out]
    t = timed(cmd, code=code)
    return f"{t:.1f} s wall, {CPU[' '.join(cmd)]:.1f} s CPU, load {before:.1f} -> {os.getloadavg()[0]:.1f}"


def extract(rev: str) -> str:
    """A temporary folder holding the tree of git revision ``rev`` of this checkout."""
    into = tempfile.mkdtemp()
    blob = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def before_after(a, work: str, times: dict, tables: dict) -> None:
    """``--before REF``: each path timed again with the code of REF, and its table compared byte for byte."""
    old = extract(a.before)
    for mode in list(times):
        out = os.path.join(work, f"{mode}-before.csv")
        t = timed([sys.executable, __file__, "--model", a.model, "--batches", a.batches, "--contexts", a.contexts,
                   "--child", mode, out], code=old)
        with open(out, "rb") as f:
            same = f.read() == tables[mode]
        print(f"{mode}: before ({a.before}) {t:.1f} s, now {times[mode]:.1f} s ({t / times[mode]:.2f}x); "
              f"table byte-identical to before: {same}")
    if a.sweep:
        outs = [os.path.join(work, f"sweep{x}.csv") for x in ("", "-before")]
        figures = time_sweep(outs[1], code=old)
        with open(outs[0], "rb") as f0, open(outs[1], "rb") as f1:
            same = f0.read() == f1.read()
        print(f"STDiT3 sweep: before ({a.before}) {figures}; table byte-identical to before: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("llama", "gpt"), default="llama")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="2048,8192,32768")
    ap.add_argument("--sweep", action="store_true", help="also time the STDiT3 published-table sweep")
    ap.add_argument("--breakdown", action="store_true",
                    help="print each stage of both runs (lowerings, evaluations) with its time since the start")
    ap.add_argument("--only", choices=("lower", "fit", "sweep"), help="time one path only (no comparison; sweep: "
                    "the STDiT3 sweep alone)")
    ap.add_argument("--before", metavar="REF", help="also time each run with the code of git revision REF "
                    "(792ab51: before issue 41's shared pricing) and compare the tables byte for byte")
    ap.add_argument("--jobs", type=int, default=1, help="processes of each run (serve -j; 2: the steps lowered "
                    "in a second process); --before runs the revision's code with one")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.model, a.batches, a.contexts, *a.child, breakdown=a.breakdown, jobs=a.jobs)
        return
    print(f"{load()} before the runs; {os.cpu_count()} cores; --jobs {a.jobs}")
    work = tempfile.mkdtemp()
    times, tables = {}, {}
    if a.only == "sweep":
        a.sweep = True
    for mode in () if a.only == "sweep" else (a.only,) if a.only else ("lower", "fit"):
        out = os.path.join(work, f"{mode}.csv")
        times[mode] = timed([sys.executable, __file__, "--model", a.model, "--batches", a.batches, "--contexts",
                             a.contexts, "--child", mode, out, "--jobs", str(a.jobs)]
                            + (["--breakdown"] if a.breakdown else []))
        with open(out, "rb") as f:
            tables[mode] = f.read()
    points = len(a.batches.split(",")) * len(a.contexts.split(","))
    if a.only == "sweep":
        pass
    elif a.only:
        print(f"serve grid, {a.model}, {points} points, empty cache: {a.only} {times[a.only]:.1f} s")
    else:
        print(f"serve grid, {a.model}, {points} points, empty cache: every point lowered {times['lower']:.1f} s, "
              f"fitted {times['fit']:.1f} s ({times['lower'] / times['fit']:.2f}x); target < 20 s (7B)")
        print(f"tables byte-identical: {tables['lower'] == tables['fit']}")
    if a.sweep:
        figures = time_sweep(os.path.join(work, "sweep.csv"))
        print(f"STDiT3 published-table sweep (24 points), empty cache: {figures} (each point priced from one layer "
              "of its lowerings at depths 2 and 3); target < 10 s")
    if a.before:
        before_after(a, work, times, tables)
    for cmd, cpu in CPU.items():
        print(f"CPU {cpu:.1f} s (user + sys): {cmd.replace(sys.executable, 'python')}")
    print(f"{load()} after the runs")


if __name__ == "__main__":
    main()
