"""Is the cost of ``mhlo-cost report`` linear in the program's size (issue 41, item 4)?

Writes StableHLO programs of about 10^4, 10^5 and 10^6 ops (``--sizes``): a chain of layers of ten ops each, every
layer in its own named scope (``layers.<i>/mlp``): a matmul, an elementwise chain, a transcendental, a reduction
with its body, a broadcast and a constant, with the shapes of a small transformer's MLP. Then, for each, the
whole process ``mhlo-cost report FILE -q`` (the reader's child included: this process reaps it, Linux), the median
of ``--runs``; prints the ops the walk counted, wall and CPU seconds, microseconds per op, and the peak resident
memory of the processes (the largest of the command's and its reader child's). A one-layer program is measured
first: its time (the interpreter's start, the imports, the reader child's start) is the fixed cost, and the time
per op is printed both whole and above that fixed cost. Target: time per op constant within 1.5x from the
smallest size to the largest, and the largest within the machine's memory.

    python benchmarks/bench_scaling.py [--sizes 1e4,1e5,1e6] [--runs 3] [--keep DIR]
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

#: Ops of one layer (the reduction's body is not counted: it is part of the reduce row).
LAYER_OPS = 10
_T = "tensor<8x256xf32>"


def layer(i: int) -> str:
    """The ten ops of layer ``i``: input ``%x{i}``, output ``%x{i+1}``."""
    s = f'"layers.{i}/mlp/'
    return (
        f"    %a{i} = stablehlo.dot_general %x{i}, %w, contracting_dims = [1] x [0] : ({_T}, tensor<256x256xf32>) "
        f"-> {_T} loc({s}dot_general\")\n"
        f"    %b{i} = stablehlo.add %a{i}, %x{i} : {_T} loc({s}add\")\n"
        f"    %c{i} = stablehlo.exponential %b{i} : {_T} loc({s}exp\")\n"
        f"    %z{i} = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc({s}constant\")\n"
        f"    %r{i} = stablehlo.reduce(%c{i} init: %z{i}) applies stablehlo.add across dimensions = [1] : "
        f"({_T}, tensor<f32>) -> tensor<8xf32> loc({s}reduce_sum\")\n"
        f"    %e{i} = stablehlo.broadcast_in_dim %r{i}, dims = [0] : (tensor<8xf32>) -> {_T} loc({s}broadcast\")\n"
        f"    %d{i} = stablehlo.divide %c{i}, %e{i} : {_T} loc({s}div\")\n"
        f"    %t{i} = stablehlo.tanh %d{i} : {_T} loc({s}tanh\")\n"
        f"    %m{i} = stablehlo.multiply %t{i}, %x{i} : {_T} loc({s}mul\")\n"
        f"    %x{i + 1} = stablehlo.subtract %m{i}, %a{i} : {_T} loc({s}sub\")\n"
    )


def write_program(path: Path, ops: int) -> int:
    """A program of ``ops`` ops (rounded up to whole layers, plus the return) written to ``path``; its layers."""
    layers = max(1, -(-ops // LAYER_OPS))
    with open(path, "w") as f:
        f.write(f"module @scaling {{\n  func.func public @main(%x0: {_T}, %w: tensor<256x256xf32>) -> {_T} {{\n")
        for i in range(layers):
            f.write(layer(i))
        f.write(f"    return %x{layers} : {_T}\n  }}\n}}\n")
    return layers


def measure(path: Path, runs: int) -> tuple[list, list, int, str]:
    """(wall seconds, CPU seconds, peak RSS in bytes, stdout) of ``runs`` whole-process reports of ``path``."""
    here = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    walls, cpus, peak, out = [], [], 0, ""
    for _ in range(runs):
        # Each run in a fresh process of its own that reports its children's peak RSS: RUSAGE_CHILDREN's
        # ru_maxrss is the largest of all children ever waited for, so one process per run keeps sizes apart.
        t0 = time.perf_counter()
        got = subprocess.run([sys.executable, "-c", ONE_RUN, str(path)], check=True, capture_output=True, env=env,
                             text=True, cwd=tempfile.gettempdir())
        walls.append(time.perf_counter() - t0)
        out, line = got.stdout.rsplit("\n", 2)[0], got.stdout.rsplit("\n", 2)[1]
        cpu, rss = line.split()
        cpus.append(float(cpu))
        peak = max(peak, int(rss) * 1024)
    return walls, cpus, peak, out


#: One run: ``mhlo-cost report FILE -q`` as a child, its reader child reaped here; the last line says the CPU
#: seconds of both and the largest peak RSS (KiB) among them.
ONE_RUN = """
import ctypes, os, resource, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the reader child is ours
out = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", sys.argv[1], "-q"], check=True,
                     capture_output=True, text=True).stdout
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(out)
print(u.ru_utime + u.ru_stime, u.ru_maxrss)
"""


def load() -> str:
    """The load average (1, 5, 15 minutes) now: wall times on a shared machine mean little without it."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6", help="program sizes in ops, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="whole-process runs of each size (median)")
    ap.add_argument("--keep", help="a folder to write the programs to (kept), instead of a temporary one")
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        write_program(folder / "scaling_fixed.mlir", 1)
        walls, cpus, peak, _ = measure(folder / "scaling_fixed.mlir", args.runs)
        fixed_wall, fixed_cpu = statistics.median(walls), statistics.median(cpus)
        print(f"fixed cost (one layer, {LAYER_OPS} ops): median {fixed_wall:.2f} s wall, {fixed_cpu:.2f} s CPU, "
              f"peak RSS {peak / 2**20:.1f} MiB, load {load()}", flush=True)
        for n in sizes:
            path = folder / f"scaling_{n}.mlir"
            layers = write_program(path, n)
            walls, cpus, peak, out = measure(path, args.runs)
            ops = layers * LAYER_OPS
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            rows.append((ops, wall, cpu, peak, path.stat().st_size))
            print(f"{ops:>9,} ops ({path.stat().st_size / 1e6:7.1f} MB of text): median {wall:7.2f} s wall, "
                  f"{cpu:7.2f} s CPU ({', '.join(f'{t:.2f}' for t in walls)}), {1e6 * wall / ops:6.1f} us/op wall, "
                  f"{1e6 * cpu / ops:6.1f} us/op CPU ({1e6 * (cpu - fixed_cpu) / ops:6.1f} above the fixed cost), "
                  f"peak RSS {peak / 2**20:8.1f} MiB, load {load()}", flush=True)
            if args.keep is None:
                path.unlink()
    for label, fixed in (("whole", 0.0), ("above the fixed cost", fixed_cpu)):
        per_op = [(cpu - fixed) / ops for ops, _, cpu, _, _ in rows]
        print(f"CPU time per op ({label}): largest / smallest size {per_op[-1] / per_op[0]:.2f}, spread (max / min "
              f"over sizes) {max(per_op) / min(per_op):.2f}   (target <= 1.5)")


if __name__ == "__main__":
    main()
