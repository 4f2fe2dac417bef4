"""A larger fuzz campaign than the test suite's: mutants of the seed programs through `mhlo-cost report`.

Each mutant runs as its own process (so that a native crash or a hang is seen, not suffered) and is
classed by what came back: clean (exit 0/1/2 with the promised stderr), Python traceback, native crash
(killed by a signal: SIGSEGV, SIGABRT), hang (past --timeout), exit 70 (internal error), or another
broken promise. It prints the counts; the mutants that broke a promise are kept in --keep.

    python benchmarks/fuzz_campaign.py [--mutants 500] [--jobs 2] [--cmd "mhlo-cost"]

``--cmd`` runs another build (``--cmd /path/to/old/venv/bin/mhlo-cost``: the figures before a change).
Figures before and after issue 12 are in its note.
"""
from __future__ import annotations

import argparse
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_mutations import KINDS, mutate, seeds, stderr_ok, suffix  # noqa: E402


def classify(cmd: list[str], path: Path, timeout: float, view: list[str] | tuple = ("-q",)) -> tuple[str, str]:
    """(class, detail) of one run of ``cmd report path VIEW...``."""
    try:
        r = subprocess.run(cmd + ["report", str(path), *view], capture_output=True, text=True, timeout=timeout,
                           errors="replace")
    except subprocess.TimeoutExpired:
        return "hang", f"past {timeout:.0f} s"
    if "Traceback (most recent call last)" in r.stderr:
        return "traceback", r.stderr.strip().splitlines()[-1][:200]
    if r.returncode < 0 or r.returncode in (134, 139):
        return "native crash", f"exit {r.returncode}: {' '.join(r.stderr.split())[-100:]}"
    if r.returncode == 70:
        return "exit 70", r.stderr.strip()[-200:]
    problem = stderr_ok(r.returncode, r.stderr)
    if problem:
        return "other", problem
    return "clean", f"exit {r.returncode}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--cmd", default=f"{shlex.quote(sys.executable)} -m mhlo_cost")
    ap.add_argument("--keep", type=Path, help="folder for the mutants that broke a promise")
    args = ap.parse_args()

    cmd = shlex.split(args.cmd)
    pool = seeds()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        jobs = []
        for i in range(args.mutants):
            name, data = pool[rng.randrange(len(pool))]
            kind = rng.choice(KINDS)
            p = Path(d) / f"m{i:05d}{suffix(name)}"
            p.write_bytes(mutate(data, kind, rng))
            jobs.append((p, name, kind))
        with ThreadPoolExecutor(args.jobs) as ex:
            results = list(ex.map(lambda j: classify(cmd, j[0], args.timeout), jobs))
        counts = Counter(c for c, _ in results)
        bad = [(j, r) for j, r in zip(jobs, results) if r[0] != "clean"]
        if args.keep and bad:
            args.keep.mkdir(parents=True, exist_ok=True)
            for (p, _, _), _ in bad:
                (args.keep / p.name).write_bytes(p.read_bytes())
    print(f"command: {' '.join(cmd)}")
    print(f"mutants run: {args.mutants} ({len(pool)} seed files: text, bytecode, gzip; seed {args.seed}) "
          f"in {time.perf_counter() - t0:.0f} s")
    for c in ("traceback", "native crash", "hang", "exit 70", "other"):
        print(f"{c:14s} {counts.get(c, 0)}")
    print(f"{'clean':14s} {counts.get('clean', 0)}")
    for (p, name, kind), (c, detail) in bad[:20]:
        print(f"  {c}: {p.name} from {name} ({kind}): {detail}")


if __name__ == "__main__":
    main()
