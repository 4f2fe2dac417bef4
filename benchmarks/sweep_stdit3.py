"""The published STDiT3 strategy table in one sweep: four video shapes x {1 device; 8 devices Ulysses; 16
devices Megatron, 2D, Ulysses, Ring} on DGX A100 and DGX H100 systems, bf16, 30 sampling steps, fused
elementwise estimate. Runs it twice from an empty cache, with the local executor (a process per core)
and on a 2-worker dask.distributed LocalCluster, and prints each wall time and points per second, whether
the two tables are byte-identical, and the table.

    python benchmarks/sweep_stdit3.py [--jobs N] [--depth N] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = ["204_640_360", "408_640_360", "51_1280_720", "102_1280_720"]
STRATEGIES = ["none:1", "ulysses:8", "megatron:16", "2d:16", "ulysses:16", "ring:16"]
HARDWARE = ["dgx-a100", "dgx-h100"]


def sweep_args(out: str, cache: str, depth: int | None) -> list[str]:
    args = ["sweep", "--model", "stdit3", "--shape", *SHAPES, "--strategies", *STRATEGIES, "--hardware", *HARDWARE,
            "--dtype", "bf16", "--steps", "30", "--fuse", "elementwise", "--cache-dir", cache, "-o", out, "-q"]
    return args + (["--depth", str(depth)] if depth else [])


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, help="local worker processes (default: the cores)")
    ap.add_argument("--depth", type=int, help="blocks (default 28, the published model)")
    ap.add_argument("--out", default=None, help="keep the tables here (default: a temporary folder)")
    a = ap.parse_args()
    exe = [sys.executable, "-m", "mhlo_cost"]
    points = len(SHAPES) * len(STRATEGIES)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        local = sweep_args(str(out / "local.csv"), os.path.join(tmp, "cache-local"), a.depth)
        t_local = timed(exe + local + (["--jobs", str(a.jobs)] if a.jobs else []))
        from distributed import LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            dask = sweep_args(str(out / "dask.csv"), os.path.join(tmp, "cache-dask"), a.depth)
            t_dask = timed(exe + dask + ["--scheduler", cluster.scheduler_address])
        same = (out / "local.csv").read_bytes() == (out / "dask.csv").read_bytes()
        md_args = sweep_args("-", os.path.join(tmp, "cache-local"), a.depth) + ["--format", "markdown"]
        md = subprocess.run(exe + md_args, check=True, capture_output=True, text=True).stdout  # from the cache
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{points} points (lowered and analysed once each) x {len(HARDWARE)} systems, {os.cpu_count()} cores "
          f"(load average at the end {load}: other work on the machine slows both runs)")
    print(f"local executor:          {t_local:7.1f} s  {points / t_local:.3f} points/s")
    print(f"LocalCluster, 2 workers: {t_dask:7.1f} s  {points / t_dask:.3f} points/s")
    print(f"tables byte-identical: {'yes' if same else 'NO'}")
    print()
    print(md, end="")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
