"""The fault checks of issue 43, each one procedure returning what it saw, shared by ``tests/fault_cases.py``
(a few of each, asserted) and ``benchmarks/fault_campaign.py`` (many, counted).

Each check works in its own folder under a :class:`Lab` (one ledger of written files per lab, as one user has).
Commands and their arguments come from :mod:`fault_setups`; runs from :mod:`fault_kit`.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import fault_kit as fk
import fault_setups as fs


@dataclass
class Lab:
    """A folder for a family of checks, with one ledger (``XDG_STATE_HOME``) and a run counter."""

    root: Path
    timeout: float = 120.0
    fork: bool | None = None

    def __post_init__(self):
        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = fk.run_env(self.root / "state", self.root / "cache-home")
        self._n = 0
        self.notes: list = []  # what went wrong, one line each (the campaign prints them)

    def logs(self) -> Path:
        self._n += 1
        return self.root / "logs" / str(self._n % 8)

    def start(self, argv, before=None) -> fk.Run:
        return fk.start(argv, self.root, self.env, self.logs(), before, self.fork)

    def run(self, argv, before=None, timeout: float | None = None) -> fk.Outcome:
        return self.start(argv, before).finish(timeout or self.timeout)


# -- writes: old or new, never torn ---------------------------------------------------------------------------


class Writer:
    """One command writing one file over and over, alternating between its two variants."""

    def __init__(self, lab: Lab, cmd: str):
        name, a, b = fs.WRITERS[cmd]
        self.lab, self.cmd = lab, cmd
        self.folder = lab.root / cmd / "out"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.out = self.folder / name
        cache = lab.root / cmd / "cache"
        self.argv = [fs.fill(a, out=self.out, cache=cache), fs.fill(b, out=self.out, cache=cache)]
        self.bytes: list = [b"", b""]
        self.current = None  # which variant the file holds
        self.same = fs.FINGERPRINT.get(cmd)

    def state(self, old: int | None, new: int) -> str:
        """The file's state: the bytes of variant ``old`` (None: none), of ``new``, or empty, torn..."""
        return fk.file_state(self.out, None if old is None else self.bytes[old], self.bytes[new], self.same)

    def prepare(self, rounds: int = 1) -> list:
        """Run both variants to the end, ``rounds`` times (the first warms the caches); keep their bytes; the
        seconds of the last round."""
        seconds = [0.0, 0.0]
        for _ in range(rounds):
            for v in (0, 1):
                o = self.lab.run(self.argv[v])
                if o.rc != 0:
                    raise RuntimeError(f"{self.cmd}: {' '.join(o.argv)}: exit {o.rc}: {o.last_line()}")
                self.bytes[v], seconds[v], self.current = self.out.read_bytes(), o.seconds, v
        if self.bytes[0] == self.bytes[1] or self.state(0, 1) != "new":
            raise RuntimeError(f"{self.cmd}: both variants write the same bytes")
        return seconds

    def after(self, o: fk.Outcome, new: int) -> tuple:
        """The file's state after run ``o`` of variant ``new``; the file put back whole (old bytes, which the
        ledger knows) where the run left it otherwise; what the folder holds besides."""
        old = self.current
        state = self.state(old, new)
        extra = fk.leftovers(self.folder, {self.out.name})
        for name in extra:
            p = self.folder / name
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if state == "new":
            self.current = new
            self.bytes[new] = self.out.read_bytes()  # (a measured profile: this run's figures)
        elif state != "old":
            if self.out.is_dir() and not self.out.is_symlink():
                shutil.rmtree(self.out)
            elif self.out.exists() or self.out.is_symlink():
                self.out.unlink()
            self.out.write_bytes(self.bytes[old])
        if fk.classify(o) == "refused" and "--force" in o.stderr:
            state = "refused-after-kill"
            self.lab.run(self.argv[new] + ["--force"])  # the way out a user has; the file is then new
            self.current = new if self.state(None, new) == "new" else old
            if self.current == new:
                self.bytes[new] = self.out.read_bytes()
        return state, extra


def write_points(lab: Lab, cmd: str, limit: int = 50) -> list:
    """Kill the command just after each write operation in the output's folder in turn (k = 1, 2, ... until
    it ends by itself): ``[(k, state, leftovers), ...]``, the last one the run that ended. Where a kill left the
    file neither old nor new, the command is run again on it as it is (``then ok`` / ``then refused ...``)."""
    w = Writer(lab, cmd)
    w.prepare()
    seen = []
    for k in range(1, limit + 1):
        new = 1 - w.current
        o = lab.run(w.argv[new], before=fk.kill_at_write(w.folder, k))
        state = w.state(w.current, new)
        if state not in ("old", "new"):
            again = lab.run(w.argv[new])
            c = fk.classify(again)
            state += f", then {c}" + (" (needs --force)" if "--force" in again.stderr else "")
        extra = w.after(o, new)[1]
        seen.append((k, state if o.rc == -9 else f"ended {fk.classify(o)}: {state}", extra))
        if o.rc != -9:
            break
    return seen


def kill_series(lab: Lab, cmd: str, n: int, rng: random.Random) -> Counter:
    """``n`` runs of the command each killed at a moment drawn uniformly over its measured run time, each over
    the other variant's file: counts of old, new, empty, torn, missing, refused-after-kill, leftovers."""
    w = Writer(lab, cmd)
    seconds = w.prepare(rounds=2)
    counts = Counter()
    for _ in range(n):
        new = 1 - w.current
        run = lab.start(w.argv[new])
        if not run.wait(rng.uniform(0.0, seconds[new])):
            run.kill()
        o = run.finish(lab.timeout)
        state, extra = w.after(o, new)
        counts[state] += 1
        counts["leftover files"] += bool(extra)
        counts["killed"] += o.killed
    return counts


# -- caches: racing writers, damaged entries ------------------------------------------------------------------


def cache_argv(cmd: str, variant: int, cache: Path) -> list:
    return fs.fill(fs.CACHES[cmd][variant], cache=cache)


def cold(lab: Lab, cmd: str) -> list:
    """The answers (stdout bytes) of variants A and B, each from its own empty cache."""
    answers = []
    for v in (0, 1):
        cache = lab.root / "cold" / cmd / str(v)
        shutil.rmtree(cache, ignore_errors=True)
        o = lab.run(cache_argv(cmd, v, cache))
        if o.rc != 0:
            raise RuntimeError(f"{cmd}: {' '.join(o.argv)}: exit {o.rc}: {o.last_line()}")
        answers.append(o.stdout)
    return answers


def answer_class(o: fk.Outcome, expected: bytes) -> str:
    c = fk.classify(o)
    if c == "ok":
        return "right" if o.stdout == expected else "wrong answer"
    return c


def race_pair(lab: Lab, cmd: str, i: int, answers: list) -> list:
    """Two runs started together on one empty cache (the same key for even ``i``, A and B for odd), then a
    third that reads what they left: each run's class (right, wrong answer, exit 70, ...)."""
    cache = lab.root / "race" / cmd / str(i)
    shutil.rmtree(cache, ignore_errors=True)
    variants = (0, i % 2)
    runs = [lab.start(cache_argv(cmd, v, cache)) for v in variants]
    outcomes = [r.finish(lab.timeout) for r in runs]
    outcomes.append(lab.run(cache_argv(cmd, 0, cache)))
    seen = [answer_class(o, answers[v]) for o, v in zip(outcomes, (*variants, 0))]
    for o, c in zip(outcomes, seen):
        if c != "right":
            lab.notes.append(f"{cmd} pair {i}: {c}: exit {o.rc} {o.last_line()[:200]}")
    shutil.rmtree(cache, ignore_errors=True)
    return seen[:2] + [f"after: {seen[2]}"]


def interleaved(lab: Lab, cmd: str, k: int, answers: list) -> list | None:
    """Two writers of one key on one empty cache, interleaved: the first stopped just after its ``k``-th write in
    the cache, the second run to its end meanwhile, the first resumed; then a reader. Each run's class (right,
    wrong answer, exit 70, ...); None where the first writer ends before its ``k``-th write."""
    cache = lab.root / "interleaved" / cmd / str(k)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    first = lab.start(cache_argv(cmd, 0, cache), before=fk.pause_at_write(cache, k))
    if not first.stopped(lab.timeout):
        first.finish(lab.timeout)
        return None
    outcomes = [lab.run(cache_argv(cmd, 0, cache))]
    first.resume()
    outcomes.insert(0, first.finish(lab.timeout))
    outcomes.append(lab.run(cache_argv(cmd, 0, cache)))
    seen = [answer_class(o, answers[0]) for o in outcomes]
    for o, c in zip(outcomes, seen):
        if c != "right":
            lab.notes.append(f"{cmd} interleaved at write {k}: {c}: exit {o.rc} {o.message()[:200]}")
    shutil.rmtree(cache, ignore_errors=True)
    return seen


class DamagedCache:
    """A cache warmed with A and B; per schema folder of the command, A's entries and B's (``*.entry``)."""

    def __init__(self, lab: Lab, cmd: str):
        self.lab, self.cmd = lab, cmd
        self.base = lab.root / "damage" / cmd / "base"
        shutil.rmtree(self.base, ignore_errors=True)
        for v in (0, 1):
            o = lab.run(cache_argv(cmd, v, self.base))
            if o.rc != 0:
                raise RuntimeError(f"{cmd}: {' '.join(o.argv)}: exit {o.rc}: {o.last_line()}")
            if v == 0:
                mine = fs.entries(self.base)
                self.answer = o.stdout  # A's answer from an empty cache: the cold one
        theirs = fs.entries(self.base) - mine
        self.found = {fs.category(f) for f in mine | theirs}  # the schema folders the command wrote
        self.files = {}
        for cat in fs.CACHES[cmd][2]:
            a = sorted(f for f in mine if fs.category(f) == cat)
            b = sorted(f for f in theirs if fs.category(f) == cat)
            if a:
                self.files[cat] = (a, b)

    def check(self, cat: str, kind: str, expected: bytes) -> str:
        """Plant ``kind`` (or ``resealed``: no damage, the control) in every one of A's entries of the schema folder
        ``cat`` in a copy of the cache and run A (without -q, which hides the notes):
        recomputed (the cold answer, exit 0, and each damaged entry noted), trusted (exit 0, another answer),
        silently dropped (right, but no note), refused, exit 70, ...; or ``n/a: why``."""
        scratch = self.lab.root / "damage" / self.cmd / "scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(self.base, scratch, symlinks=True)
        if cat not in self.files:
            return f"n/a: A wrote no entry in {cat}"
        mine, theirs = self.files[cat]
        damage = fs.resealed if kind == "resealed" else fs.DAMAGES[kind]
        for i, f in enumerate(mine):
            why = damage(scratch / f, scratch / theirs[i % len(theirs)] if theirs else None)
            if why:
                return f"n/a: {why}"
        o = self.lab.run([a for a in cache_argv(self.cmd, 0, scratch) if a != "-q"])  # (-q: no notes)
        c = answer_class(o, expected)
        self.last = o
        if c == "right" and kind == "resealed":
            return "trusted" if "computed again" not in o.stderr else "computed again"
        if c == "right" and o.stderr.count("computed again") < len(mine):
            return "dropped without a note"
        return {"right": "recomputed", "wrong answer": "trusted (wrong answer)"}.get(c, c)


def cache_is_a_file(lab: Lab, cmd: str) -> fk.Outcome:
    """The command with its cache path naming a regular file."""
    f = lab.root / "not-a-folder" / cmd
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("a file, not a folder\n")
    return lab.run(cache_argv(cmd, 0, f))


# -- the -o rule, a full disk, a read-only folder ---------------------------------------------------------------


def foreign_output(lab: Lab, cmd: str, how: str) -> tuple:
    """``-o`` (``--plot``) over a file mhlo-cost did not write: ``how`` = file (a user's text), symlink (a link to
    a user's file elsewhere), gzip / module-text (lower: a user's gzip, a text beginning with ``module``).
    (outcome, whether the user's file is intact)."""
    import gzip

    name, a, _ = fs.WRITERS[cmd]
    folder = lab.root / "foreign" / cmd / how
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    content = {"gzip": gzip.compress(b"my notes\n", mtime=0), "module-text": b"module notes: keep me\n"}.get(
        how, b"precious: not written by mhlo-cost\n")
    user = folder / ("elsewhere.txt" if how == "symlink" else name)
    user.write_bytes(content)
    out = folder / name
    if how == "symlink":
        os.symlink(user, out)
    o = lab.run(fs.fill(a, out=out, cache=lab.root / cmd / "cache"))
    return o, user.read_bytes() == content and (how != "symlink" or out.is_symlink())


def full_disk(lab: Lab, cmd: str, limit: int = 200) -> tuple:
    """Variant A over B's file (written by mhlo-cost) while no file may grow past ``limit`` bytes:
    (outcome, state of the file: old, empty, torn ...)."""
    w = Writer(lab, cmd)
    w.prepare()
    old = w.current
    o = lab.run(w.argv[1 - old], before=fk.limit_file_size(limit))
    state = w.state(old, 1 - old)
    w.after(o, 1 - old)
    return o, state


@contextmanager
def read_only(folder: Path):
    """``folder`` made one that no file can be created in, renamed into or removed from (as root, whom modes do not
    stop: ``chattr +i``, where the file system has it), for the ``with`` block."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            raise OSError(f"chattr +i {folder} failed: cannot make a folder read-only for root here")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        return
    folder.chmod(0o555)
    try:
        yield
    finally:
        folder.chmod(0o755)


def read_only_folder(lab: Lab, cmd: str, existing: bool) -> tuple:
    """Variant A into a read-only folder, over B's file (itself writable) or under a new name: (outcome, the
    old file's state, or 'none' / 'created' for a new name)."""
    w = Writer(lab, cmd)
    w.prepare()
    old = w.current
    if not existing:
        w.out.unlink()
    with read_only(w.folder):
        o = lab.run(w.argv[1 - old])
    if existing:
        state = w.state(old, 1 - old)
        w.after(o, 1 - old)
        return o, state
    return o, "none" if not w.out.exists() else "created"
