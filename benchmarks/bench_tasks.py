"""What does the task graph cost on top of a plain report? A 12-layer GPT training step (``mhlo-cost lower
--model gpt --layers 12 --train``) on a profile, as the command line runs it (whole processes, the
interpreter's start and every import included), alternating, the median of ``--processes`` runs each:

* plain: ``mhlo-cost report FILE --hardware H --execution E -q`` (the summary);
* tasks: ``mhlo-cost report FILE --hardware H --execution E --by critical-path -q`` (the graph, the critical
  path, the 2-stream schedule and the training step's scenarios).

It prints both times and the ratio tasks / plain, in wall-clock time and in CPU time (the process and its
reader child: on a shared machine the wall clock counts the neighbours' work too); the target: at most 2. Then the figures the task view
prints (serial, critical path, 2-stream, each scenario), for each execution model.

    python benchmarks/bench_tasks.py [--layers 12] [--hardware h100] [--processes 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXECUTIONS = ("unfused", "compiled", "eager")


def run(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(wall-clock seconds, CPU seconds of the process and its children, its standard output)."""
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hardware", default="h100")
    ap.add_argument("--processes", type=int, default=3)
    args = ap.parse_args()
    exe = [sys.executable, "-m", "mhlo_cost"]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_STATE_HOME=tmp)
        step = Path(tmp) / "gpt_train.mlir"
        run(exe + ["lower", "--model", "gpt", "--layers", str(args.layers), "--train", "-o", str(step), "-q"], env)
        for execution in EXECUTIONS:
            base = exe + ["report", str(step), "--hardware", args.hardware, "--execution", execution, "-q"]
            plain, tasks, text = [], [], ""
            for _ in range(args.processes):
                plain.append(run(base, env)[:2])
                *t, text = run(base + ["--by", "critical-path"], env)
                tasks.append(t)
            for what, k in (("wall", 0), ("CPU", 1)):
                p, q = statistics.median(x[k] for x in plain), statistics.median(x[k] for x in tasks)
                print(f"{execution} ({what}): plain report {p:.2f} s, with the task graph {q:.2f} s, ratio "
                      f"{q / p:.2f} (target <= 2)")
            for line in text.splitlines():
                if line.startswith(("serial", "critical path", "2-stream", "scenario", "execution")):
                    print("   ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
