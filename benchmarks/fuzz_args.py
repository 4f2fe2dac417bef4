"""The argument fuzz of issue 43: seeded argument vectors for ``serve``, ``train-plan``, ``lower`` and ``sweep``
(a ``[training]`` spec), each classified: ok, refused (exit 2, one ``mhlo-cost: error:`` line), accepted-and-ignored
(exit 0 where the argument cannot have been honoured), exit 70, traceback, native crash, timeout, bad stderr.

    python benchmarks/fuzz_args.py [--cases 5000] [--seed 43] [--commands serve,train-plan,lower,sweep]
                                   [--timeout 60] [--no-hf] [--spawn] [--list N]

The generators are ``tests/arg_fuzz.py`` and ``tests/fuzz_specs.py``. Each case runs in a forked child of this
process, which imported jax, pandas, torch and the commands once (``--spawn``: a fresh interpreter per case);
each command shares one cache, so accepted cases are cheap. The same argument vector is run once (a case that
repeats one is counted with the first one's class). It prints counts per command and class, the first failing
argument vector of each (command, class) (``--list N``: N of them), the failures by mutation (the distinct
list), failing combinations no single mutation explains, refusals that show internals; then the time.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import arg_fuzz as af  # noqa: E402
import fault_kit as fk  # noqa: E402


def report(results: list, listing: int) -> None:
    counts: dict = defaultdict(Counter)
    failing: dict = defaultdict(list)
    for case, cls, o in results:
        counts[case.command][cls] += 1
        if cls in fk.FAILING and len(failing[(case.command, cls)]) < max(1, listing):
            failing[(case.command, cls)].append((case, o))
    cols = [c for c in fk.CLASSES if any(counts[cmd][c] for cmd in counts)]
    print(f"{'command':<11}" + "".join(f"{c:>22}" for c in cols) + f"{'total':>8}")
    for cmd in af.COMMANDS:
        if cmd in counts:
            print(f"{cmd:<11}" + "".join(f"{counts[cmd][c]:>22}" for c in cols) + f"{sum(counts[cmd].values()):>8}")
    slow(results)
    for (cmd, cls), items in sorted(failing.items()):
        print(f"\n{cmd}: {cls} ({counts[cmd][cls]} case(s)); first:")
        for case, o in items:
            print(f"  {case.shown()}")
            print(f"    mutations: {'; '.join(case.what)}")
            print(f"    exit {o.rc}: {o.message()[:240]}")


INTERNAL = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|got multiple values for keyword|has no attribute")


def by_mutation(results: list) -> None:
    """The distinct failures: per (command, class), the single mutations that give it (count, a vector, the
    message); then failing combinations that no single mutation explains; then refusals whose message shows
    the internals (a Python exception's name)."""
    single: dict = defaultdict(list)
    alone: set = set()
    for case, cls, o in results:
        if len(case.what) == 1:
            single[(case.command, cls, case.what[0])].append((case, o))
            alone.add((case.command, cls, case.what[0]))
    print("\nfailures by mutation (cases with one mutation):")
    for (cmd, cls, what), items in sorted(single.items()):
        if cls in fk.FAILING:
            case, o = items[0]
            print(f"  {cmd} | {cls} | {what} | {len(items)} case(s)\n      {case.shown()[:260]}\n      exit {o.rc}: "
                  f"{o.message()[:260]}")
    print("\nfailing combinations that no single mutation explains:")
    shown = set()
    for case, cls, o in results:
        if (cls in fk.FAILING and len(case.what) > 1 and not any((case.command, cls, w) in alone for w in case.what)
                and (case.command, cls, case.what) not in shown):
            shown.add((case.command, cls, case.what))
            print(f"  {case.command} | {cls} | {'; '.join(case.what)}\n      {case.shown()[:260]}\n      exit {o.rc}: "
                  f"{o.message()[:260]}")
    print("\nrefusals whose message shows the internals:")
    for (cmd, cls, what), items in sorted(single.items()):
        if cls == "refused" and INTERNAL.search(items[0][1].message()):
            print(f"  {cmd} | {what} | {len(items)} case(s): {items[0][1].message()[:260]}")


def save(results: list, path: Path) -> None:
    import json

    with open(path, "w", encoding="utf-8") as f:
        for case, cls, o in results:
            f.write(json.dumps({"command": case.command, "argv": case.argv, "files": case.files, "expect": case.expect,
                                "what": case.what, "class": cls, "rc": o.rc, "message": o.message(),
                                "seconds": round(o.seconds, 3)}) + "\n")


def slow(results: list) -> None:
    """Seconds spent per command and class (each distinct vector once), and the slowest refusal of each command:
    a refusal that takes seconds did work before it validated its arguments."""
    spent: dict = defaultdict(float)
    slowest: dict = {}
    done = set()
    for case, cls, o in results:
        if id(o) in done:
            continue
        done.add(id(o))
        spent[(case.command, cls)] += o.seconds
        if cls == "refused" and o.seconds > slowest.get(case.command, (0.0, None))[0]:
            slowest[case.command] = (o.seconds, case, o)
    print("\nseconds run: " + ", ".join(f"{cmd} {cls} {t:.0f}" for (cmd, cls), t in sorted(spent.items())))
    for cmd, (t, case, o) in sorted(slowest.items()):
        print(f"slowest refusal of {cmd}: {t:.1f} s: {case.shown()[:200]}\n    {o.last_line()[:200]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--commands", default=",".join(af.COMMANDS))
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--no-hf", action="store_true", help="no --hf cases (torch and transformers stay unloaded)")
    ap.add_argument("--spawn", action="store_true", help="a fresh interpreter per case instead of a fork")
    ap.add_argument("--list", type=int, default=1, help="failing vectors shown per (command, class)")
    ap.add_argument("--save", type=Path, help="every case and its class as JSON lines")
    args = ap.parse_args()
    commands = tuple(c for c in args.commands.split(",") if c)
    if set(commands) - set(af.COMMANDS):
        ap.error(f"commands are {', '.join(af.COMMANDS)}")
    t0 = time.monotonic()
    hf = not args.no_hf and bool({"serve", "train-plan"} & set(commands))
    if not args.spawn:
        fk.preimport(hf=hf)
    cases = af.generate(args.seed, args.cases, commands, hf=hf)
    root = Path(tempfile.mkdtemp(prefix="fuzz-args-"))
    runner = af.Runner(root, args.timeout, fork=not args.spawn)
    seen: dict = {}
    results = []
    try:
        for i, case in enumerate(cases, 1):
            key = (case.argv, case.files)
            if key not in seen:
                seen[key] = runner.run(case)
            results.append((case, *seen[key]))
            if i % 250 == 0:
                print(f"... {i} cases, {len(seen)} run, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{len(cases)} cases (seed {args.seed}; {len(seen)} distinct argument vectors run), "
          f"{'spawned' if args.spawn else 'forked'} runs, limit {args.timeout:.0f} s each")
    report(results, args.list)
    by_mutation(results)
    if args.save:
        save(results, args.save)
    print(f"\nelapsed {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
