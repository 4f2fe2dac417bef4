"""The published STDiT3 strategy table in one sweep: four video shapes x {1 device; 8 devices Ulysses; 16
devices Megatron, 2D, Ulysses, Ring} on DGX A100 and DGX H100 systems, bf16, 30 sampling steps, fused
elementwise estimate. Runs it twice from an empty cache, with the local executor (a process per core)
and on a 2-worker dask.distributed LocalCluster, and prints each wall time and points per second, whether
the two tables are byte-identical, and the table. With ``--before REF`` it also runs the local sweep with the
code of git revision REF (extracted to a temporary folder; the issue 41 baseline: ``--before 792ab51``, the code
before the chip-independent pricing was shared) and prints both times and whether the tables are byte-identical.

    python benchmarks/sweep_stdit3.py [--jobs N] [--depth N] [--out DIR] [--before REF] [--no-dask]
"""
from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
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


ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], code: Path | None = None) -> float:
    """Seconds ``cmd`` took, run with the package of ``code`` (default: this checkout) first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code or ROOT), os.environ.get("PYTHONPATH", "")]),
               XDG_STATE_HOME=tempfile.mkdtemp())
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - t0


def extract(rev: str, into: Path) -> Path:
    """The tree of git revision ``rev`` of this checkout, written under ``into``."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, help="local worker processes (default: the cores)")
    ap.add_argument("--depth", type=int, help="blocks (default 28, the published model)")
    ap.add_argument("--out", default=None, help="keep the tables here (default: a temporary folder)")
    ap.add_argument("--before", metavar="REF", help="also run the local sweep with the code of git revision REF "
                    "(792ab51: before issue 41's shared pricing) and compare its table byte for byte")
    ap.add_argument("--no-dask", action="store_true", help="skip the LocalCluster run")
    a = ap.parse_args()
    exe = [sys.executable, "-m", "mhlo_cost"]
    points = len(SHAPES) * len(STRATEGIES)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        local = sweep_args(str(out / "local.csv"), os.path.join(tmp, "cache-local"), a.depth)
        jobs = ["--jobs", str(a.jobs)] if a.jobs else []
        t_local = timed(exe + local + jobs)
        t_before = None
        if a.before:
            old = extract(a.before, Path(tmp) / "before")
            before = sweep_args(str(out / "before.csv"), os.path.join(tmp, "cache-before"), a.depth)
            t_before = timed(exe + before + jobs, code=old)
        t_dask = None
        if not a.no_dask:
            from distributed import LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
                dask = sweep_args(str(out / "dask.csv"), os.path.join(tmp, "cache-dask"), a.depth)
                t_dask = timed(exe + dask + ["--scheduler", cluster.scheduler_address])
        same = a.no_dask or (out / "local.csv").read_bytes() == (out / "dask.csv").read_bytes()
        same_before = not a.before or (out / "local.csv").read_bytes() == (out / "before.csv").read_bytes()
        md_args = sweep_args("-", os.path.join(tmp, "cache-local"), a.depth) + ["--format", "markdown"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        md = subprocess.run(exe + md_args, check=True, capture_output=True, text=True, env=env).stdout  # cached
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{points} points (lowered and analysed once each) x {len(HARDWARE)} systems, {os.cpu_count()} cores "
          f"(load average at the end {load}: other work on the machine slows both runs)")
    print(f"local executor:          {t_local:7.1f} s  {points / t_local:.3f} points/s  (target: under 10 s)")
    if t_before is not None:
        print(f"local, before ({a.before}):  {t_before:7.1f} s  {points / t_before:.3f} points/s  "
              f"({t_before / t_local:.2f}x)")
        print(f"table byte-identical to before: {'yes' if same_before else 'NO'}")
    if t_dask is not None:
        print(f"LocalCluster, 2 workers: {t_dask:7.1f} s  {points / t_dask:.3f} points/s")
        print(f"tables byte-identical: {'yes' if same else 'NO'}")
    print()
    print(md, end="")
    return 0 if same and same_before else 1


if __name__ == "__main__":
    sys.exit(main())
