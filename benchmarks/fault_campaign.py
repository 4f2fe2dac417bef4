"""The fault campaign of issue 43: kills during writes, racing cache writers, damaged cache entries, the -o rule,
lost sweep workers. It prints counts (a benchmark, not a test: ``tests/fault_cases.py`` is the small subset CI runs).

    python benchmarks/fault_campaign.py [--kills 1000] [--pairs 100] [--seed 43] [--commands report,serve,...]
                                        [--sections points,kills,races,damage,rule,workers] [--spawn]

(a) kills: ``--kills`` runs spread over the commands (``report``, ``blocks``, ``lower``, ``serve``, ``train-plan``,
``sweep``; ``serve-plot``, ``plot``, ``baseline``, ``rules``, ``calibrate`` on request), each writing over an
earlier output of its own (the other of two variants, so old and new differ) and SIGKILLed at a moment drawn
uniformly over its run time (measured first); the file must then be the old or the new one, byte for byte. Before
that, "points" kills each command just after each write operation in the output's folder in turn (deterministic).
(b) races: ``--pairs`` pairs per cache (sweep, serve, train-plan: each ``--cache-dir``) started together on one
empty cache, each answer compared with a cold single-process one, then a third run reading what they left; and,
deterministically, a first writer stopped after each of its cache writes in turn while a second runs to its end. (c)
damage: every kind of damaged entry planted in every entry (``*.entry``) of each schema folder of a warmed cache.
(e) the -o rule: a user's file, a symlink to one, (lower) a user's gzip or ``module`` text. (d) workers: a local
pool worker killed mid-sweep; a Dask cluster whose workers are all killed.

Runs are forked children of this process, which imported jax and the commands once (``--spawn``: a fresh
interpreter per run, as a user runs it). Every figure is a count; the elapsed time is printed at the end.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fault_checks as fc  # noqa: E402
import fault_kit as fk  # noqa: E402
import fault_setups as fs  # noqa: E402

SECTIONS = ("points", "kills", "races", "damage", "rule", "workers")
CACHE_COMMANDS = tuple(fs.CACHES)


def say(text: str = "") -> None:
    print(text, flush=True)


def table(title: str, rows: dict, columns: list) -> None:
    """``rows``: name -> Counter; one line each, the columns in order (others summed at the end)."""
    say(title)
    width = max([len(r) for r in rows] + [8])
    say("  " + "".join(f"{c:>{max(len(c), 6) + 2}}" for c in [" " * width, *columns]).lstrip())
    for name, counts in rows.items():
        cells = [f"{counts.get(c, 0):>{max(len(c), 6) + 2}}" for c in columns]
        rest = {k: v for k, v in counts.items() if k not in columns}
        say(f"  {name:<{width}}" + "".join(cells) + (f"   {dict(rest)}" if rest else ""))


def section_points(lab: fc.Lab, commands: list) -> None:
    say("\n(a0) kill just after each write operation in the output's folder (k-th open for writing, rename, ...)")
    for cmd in commands:
        seen = fc.write_points(lab, cmd)
        say(f"  {cmd:<11} " + "; ".join(f"k={k}: {s}" + (f" +{x}" if x else "") for k, s, x in seen))


def section_kills(lab: fc.Lab, commands: list, kills: int, rng: random.Random) -> dict:
    say(f"\n(a) {kills} kills at uniform random moments, each over the other variant's output")
    rows = {}
    for i, cmd in enumerate(commands):
        n = kills // len(commands) + (i < kills % len(commands))
        t0 = time.monotonic()
        rows[cmd] = fc.kill_series(lab, cmd, n, rng)
        rows[cmd]["seconds"] = round(time.monotonic() - t0)
    table("  states of the output after the kill (torn/empty/missing: the promise broken)", rows,
          ["killed", "old", "new", "empty", "torn", "missing", "refused-after-kill", "leftover files", "seconds"])
    return rows


def section_races(lab: fc.Lab, commands: list, pairs: int) -> dict:
    say(f"\n(b) {pairs} pairs of racing writers per cache on one empty cache (even: same key; odd: A and B), "
        "then a reader")
    rows = {}
    for cmd in commands:
        answers = fc.cold(lab, cmd)
        again = fc.cold(lab, cmd)
        if again != answers:
            say(f"  {cmd}: the cold answers differ between two cold runs: comparisons are void")
        counts = Counter()
        t0 = time.monotonic()
        for i in range(pairs):
            for c in fc.race_pair(lab, cmd, i, answers):
                counts[c] += 1
        counts["seconds"] = round(time.monotonic() - t0)
        rows[cmd] = counts
    table("  answers (right / wrong answer / failures; 'after': the reader of what the pair left)", rows,
          ["right", "wrong answer", "exit 70", "traceback", "refused", "after: right", "after: wrong answer",
           "seconds"])
    for line in lab.notes:
        say(f"  {line}")
    lab.notes.clear()
    section_interleaved(lab, commands)
    return rows


def section_interleaved(lab: fc.Lab, commands: list) -> None:
    say("  interleaved: the first writer stopped just after its k-th cache write, a second run to its end, the "
        "first resumed, then a reader (classes of the three)")
    for cmd in commands:
        answers = fc.cold(lab, cmd)
        seen = []
        for k in range(1, 13):
            got = fc.interleaved(lab, cmd, k, answers)
            if got is None:
                break
            seen.append(f"k={k}: {'/'.join(got)}")
        say(f"    {cmd:<11} " + "; ".join(seen))
    for line in lab.notes:
        say(f"    {line}")
    lab.notes.clear()


def section_damage(lab: fc.Lab, commands: list) -> dict:
    say("\n(c) damaged cache entries planted in a warmed cache, the command run again (variant A)")
    results, notes = {}, []
    for cmd in commands:
        answers = fc.cold(lab, cmd)
        cache = fc.DamagedCache(lab, cmd)
        for cat in cache.files:
            results[f"{cmd}/{cat}"] = got = {}
            for kind in fs.DAMAGES:
                got[kind] = c = cache.check(cat, kind, answers[0])
                if c != "recomputed" and not c.startswith("n/a"):
                    notes.append(f"{cmd} {kind} in {cat} ({len(cache.files[cat][0])} entries): {c}: "
                                 f"exit {cache.last.rc} "
                                 f"{cache.last.last_line()[:160]}")
        o = fc.cache_is_a_file(lab, cmd)
        results[f"{cmd}/cache-is-a-file"] = {"cache path is a file": fk.classify(o)}
        if fk.classify(o) != "refused":
            notes.append(f"{cmd} cache path is a file: exit {o.rc} {o.last_line()[:160]}")
    rows = {name: Counter(c.split(":")[0] for c in got.values()) for name, got in results.items()}
    table(f"  per schema folder ({len(fs.DAMAGES)} kinds of damage each)", rows,
          ["recomputed", "trusted (wrong answer)", "dropped without a note", "refused", "exit 70", "traceback",
           "n/a"])
    say("  per kind:")
    for name, got in results.items():
        say(f"    {name}: " + ", ".join(f"{k} {c}" for k, c in got.items()))
    say("  what went wrong:")
    for line in notes:
        say(f"    {line}")
    return results


def section_rule(lab: fc.Lab, commands: list) -> dict:
    say("\n(e) the -o rule: a file mhlo-cost did not write, without --force (must be refused, the file intact)")
    rows = {}
    for cmd in commands:
        hows = ["file", "symlink"] + (["gzip", "module-text"] if cmd == "lower" else [])
        for how in hows:
            o, intact = fc.foreign_output(lab, cmd, how)
            verdict = "refused, intact" if fk.classify(o) == "refused" and intact else (
                f"{fk.classify(o)}, {'intact' if intact else 'REPLACED'}")
            rows[f"{cmd}/{how}"] = verdict
            say(f"  {cmd:<11} {how:<12} {verdict:<22} exit {o.rc} {o.last_line()[:110]}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=100, help="racing pairs per cache")
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--commands", default=",".join(fs.DEFAULT_WRITERS),
                    help=f"of {', '.join(fs.WRITERS)} (caches: {', '.join(CACHE_COMMANDS)})")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--spawn", action="store_true", help="a fresh interpreter per run instead of a fork")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    commands = [c for c in args.commands.split(",") if c]
    bad = [c for c in commands if c not in fs.WRITERS]
    sections = [s for s in args.sections.split(",") if s]
    if bad or set(sections) - set(SECTIONS):
        ap.error(f"unknown command or section: {', '.join(bad + sorted(set(sections) - set(SECTIONS)))}")
    t0 = time.monotonic()
    if not args.spawn:
        fk.preimport()
    root = Path(tempfile.mkdtemp(prefix="fault-campaign-"))
    lab = fc.Lab(root, fork=not args.spawn)
    caches = [c for c in commands if c in CACHE_COMMANDS]
    say(f"fault campaign: seed {args.seed}, commands {', '.join(commands)}, {'spawned' if args.spawn else 'forked'} "
        f"runs, in {root}")
    try:
        if "points" in sections:
            section_points(lab, commands)
        if "kills" in sections and args.kills:
            section_kills(lab, commands, args.kills, random.Random(args.seed))
        if "races" in sections and args.pairs:
            section_races(lab, caches, args.pairs)
        if "damage" in sections:
            section_damage(lab, caches)
        if "rule" in sections:
            section_rule(lab, commands)
        if "workers" in sections and "sweep" in commands:
            import fault_workers

            fault_workers.section(lab, say)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    say(f"\nelapsed {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
