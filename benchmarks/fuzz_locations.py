"""Fuzz campaign for location strings (issue 24): programs whose location names and file names hold MLIR
hex escapes (bytes past ASCII, cut-off UTF-8, control bytes) in name, file, fused and callsite locations,
as text, gzip and bytecode, and bytecode with a byte of a location string flipped (tests/fuzz_locations.py).

Each input runs as its own process, ``report FILE -q`` or ``report FILE -q --by op --format csv`` (which
reads every op's file:line too), classed as benchmarks/fuzz_campaign.py does: clean, traceback, native crash
(SIGABRT, SIGSEGV), hang, exit 70, other. It prints the counts; the inputs that broke a promise go to --keep.

    python benchmarks/fuzz_locations.py [--mutants 200] [--seed 24] [--cmd "python -m mhlo_cost"]
"""
from __future__ import annotations

import argparse
import random
import shlex
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_campaign import classify  # noqa: E402  (this folder: the same classes as the seed-mutant campaign)
from fuzz_locations import KINDS, mutant  # noqa: E402

VIEWS = (["-q"], ["-q", "--by", "op", "--format", "csv"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--cmd", default=f"{shlex.quote(sys.executable)} -m mhlo_cost")
    ap.add_argument("--keep", type=Path, help="folder for the inputs that broke a promise")
    args = ap.parse_args()

    cmd = shlex.split(args.cmd)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        jobs = []
        for i in range(args.mutants):
            kind = KINDS[i % len(KINDS)]
            suffix, data = mutant(rng, kind)
            p = Path(d) / f"loc{i:05d}{suffix}"
            p.write_bytes(data)
            jobs.append((p, kind, VIEWS[(i // len(KINDS)) % len(VIEWS)]))
        with ThreadPoolExecutor(args.jobs) as ex:
            results = list(ex.map(lambda j: classify(cmd, j[0], args.timeout, j[2]), jobs))
        bad = [(j, r) for j, r in zip(jobs, results) if r[0] != "clean"]
        if args.keep and bad:
            args.keep.mkdir(parents=True, exist_ok=True)
            for (p, _, _), _ in bad:
                (args.keep / p.name).write_bytes(p.read_bytes())
    counts = Counter(c for c, _ in results)
    exits = Counter(detail for c, detail in results if c == "clean")
    print(f"command: {' '.join(cmd)}")
    print(f"inputs run: {args.mutants} (kinds {', '.join(KINDS)}; seed {args.seed}) in {time.perf_counter() - t0:.0f} s")
    for c in ("traceback", "native crash", "hang", "exit 70", "other"):
        print(f"{c:14s} {counts.get(c, 0)}")
    print(f"{'clean':14s} {counts.get('clean', 0)} ({', '.join(f'{k}: {v}' for k, v in sorted(exits.items()))})")
    by_kind = Counter(j[1] for j, _ in bad)
    if by_kind:
        print("broken, by kind: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_kind.items())))
    for (p, kind, view), (c, detail) in bad[:10]:
        print(f"  {c}: {p.name} ({kind}, report {' '.join(view)}): {detail}")


if __name__ == "__main__":
    main()
