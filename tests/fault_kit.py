"""Running ``mhlo-cost`` under faults (issue 43): a command in a forked child of a process that imported the
heavy modules once (or in a fresh interpreter), killed at a moment or at a write, and what came back classified.

Shared by ``tests/fault_cases.py``, ``tests/arg_fuzz.py``, ``benchmarks/fault_campaign.py`` and
``benchmarks/fuzz_args.py``. Only the command line is driven (``mhlo_cost.cli.main(argv)``), nothing below it.

A forked child: its own process group (so that a kill reaches the reader's child and a sweep's workers), standard
input from /dev/null, standard output and error into files, ``main(argv)``'s code as its exit status; a Python
exception that escapes ``main`` is printed as the interpreter would print it (a traceback) with status 1.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ERROR = "mhlo-cost: error: "
#: What every run gets in its environment (XDG folders are added per run: the ledger of written files, caches).
BASE_ENV = {"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0"}
CLASSES = ("ok", "refused", "accepted-and-ignored", "exit 70", "traceback", "native crash", "timeout",
           "bad stderr", "other exit")
FAILING = frozenset(CLASSES) - {"ok", "refused"}
_FORK = hasattr(os, "fork") and os.environ.get("FAULTS_SPAWN", "") in ("", "0")


def preimport(hf: bool = False) -> None:
    """Import what the commands import, once, before any fork (``hf``: torch and transformers too)."""
    import jax  # noqa: F401
    import jax.numpy  # noqa: F401
    import pandas  # noqa: F401

    import mhlo_cost.cli as cli

    cli.build_parser()
    for name in ("mhlo_cost.studies.serve.study", "mhlo_cost.studies.plan.study", "mhlo_cost.studies.sweep",
                 "mhlo_cost.studies.study"):
        __import__(name)
    if hf:
        import torch  # noqa: F401
        import transformers  # noqa: F401


@dataclass
class Outcome:
    """What one run gave: exit status (negative: the signal), standard output (bytes) and error (text)."""

    argv: list
    rc: int | None
    stdout: bytes = b""
    stderr: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    killed: bool = False  # by us, on purpose (a kill campaign)

    def error_lines(self) -> list:
        return [ln for ln in self.stderr.splitlines() if ln.startswith(ERROR)]

    def message(self) -> str:
        """The error as the user sees it: the first ``mhlo-cost: (internal) error`` line (or the traceback's first
        line), and the last line where more follow it."""
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        first = next((i for i, ln in enumerate(lines) if ln.startswith(("mhlo-cost: error", "mhlo-cost: internal",
                                                                        "Traceback"))), None)
        if first is None:
            return self.last_line()
        text = lines[first] + (f" [...{len(lines) - first - 1} more line(s)] {lines[-1]}" if first < len(lines) - 1
                               else "")
        return text[:400]

    def last_line(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""


def classify(o: Outcome) -> str:
    """One of :data:`CLASSES` (but "accepted-and-ignored", which needs the case's expectation)."""
    if o.timed_out:
        return "timeout"
    if "Traceback (most recent call last)" in o.stderr:
        return "traceback"
    if o.rc is not None and (o.rc < 0 or o.rc in (134, 139)):
        return "native crash"
    if o.rc == 70:
        return "exit 70"
    if o.rc == 0:
        return "ok"
    if o.rc == 2:
        return "refused" if len(o.error_lines()) == 1 else "bad stderr"
    return "other exit"


def refused_one_line(o: Outcome) -> bool:
    """Exit 2, exactly one ``mhlo-cost: error:`` line, no traceback."""
    return classify(o) == "refused"


# -- running one command --------------------------------------------------------------------------------------


@dataclass
class Run:
    """A started command: a forked child or a subprocess, in its own process group."""

    argv: list
    pid: int
    out: Path
    err: Path
    t0: float
    popen: subprocess.Popen | None = None
    status: int | None = None
    killed: bool = False
    extra: dict = field(default_factory=dict)

    def poll(self) -> int | None:
        if self.status is None:
            if self.popen is not None:
                self.status = self.popen.poll()
            else:
                pid, st = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = os.waitstatus_to_exitcode(st)
        return self.status

    def stopped(self, timeout: float) -> bool:
        """Whether it stopped itself (SIGSTOP, :func:`pause_at_write`) within ``timeout`` s; False where it ended."""
        end = time.monotonic() + timeout
        while self.status is None and time.monotonic() < end:
            pid, st = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            if pid and os.WIFSTOPPED(st):
                return True
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
                return False
            time.sleep(0.01)
        return False

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL to the whole group (the command, its reader's child, its workers)."""
        self.killed = self.killed or self.poll() is None
        _killpg(self.pid)

    def wait(self, timeout: float | None) -> bool:
        """Whether it ended within ``timeout`` seconds (None: wait for ever)."""
        end = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)
        return True

    def finish(self, timeout: float | None = 60.0) -> Outcome:
        """Wait (killing past ``timeout``), reap, clean the group up; what came back."""
        timed_out = not self.wait(timeout)
        if timed_out:
            self.kill()
            self.wait(None)
        _killpg(self.pid)  # what the command left running (a reader's child), ended with it
        out = self.out.read_bytes() if self.out.exists() else b""
        err = self.err.read_bytes().decode("utf-8", "replace") if self.err.exists() else ""
        return Outcome(self.argv, self.status, out, err, time.monotonic() - self.t0, timed_out, self.killed)


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_env(state: str | os.PathLike, cache: str | os.PathLike | None = None) -> dict:
    """The environment of a run: its own ledger of written files (and cache home)."""
    env = dict(BASE_ENV, XDG_STATE_HOME=str(state))
    env["XDG_CACHE_HOME"] = str(cache or Path(state) / "cache-home")
    return env


def start(argv: list, cwd: str | os.PathLike, env: dict, logs: str | os.PathLike,
          before: Callable[[], None] | None = None, fork: bool | None = None) -> Run:
    """Start ``mhlo-cost argv`` in ``cwd`` with ``env`` added; its output in ``logs``/out, ``logs``/err;
    ``before()`` runs in the child first (fork only: resource limits, hooks)."""
    logs = Path(logs)
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "out", logs / "err"
    argv = [str(a) for a in argv]
    if fork if fork is not None else _FORK:
        _forkable()
        sys.stdout.flush()
        sys.stderr.flush()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(argv, cwd, env, out, err, before)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        return Run(argv, pid, out, err, t0)
    if before is not None:
        raise ValueError("a hook in the child needs fork")
    full = {k: v for k, v in os.environ.items() if k != "MHLO_COST_DEBUG"}
    full.update(env)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "mhlo_cost", *argv], cwd=cwd, env=full, stdin=subprocess.DEVNULL,
                             stdout=fo, stderr=fe, start_new_session=True)
    return Run(argv, p.pid, out, err, t0, popen=p)


def _child(argv, cwd, env, out, err, before) -> None:
    """In the forked child: set up, run ``main(argv)``, leave with its code; never return."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.chdir(cwd)
        os.environ.pop("MHLO_COST_DEBUG", None)
        os.environ.update(env)
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            f = os.open(path, flags, 0o644)
            os.dup2(f, fd)
            os.close(f)
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
        _hide_harness_frames()
        _plain_main()
        _fresh_pools()
        if before is not None:
            before()
        from mhlo_cost.cli import main

        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # as the interpreter would: the traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


#: What a forked child inherited and must never destroy (see :func:`_fresh_pools`).
_KEPT: list = []


def _fresh_pools() -> None:
    """A fork of a process that has lowered with JAX inherits the MLIR context's thread pool without its threads:
    a lowering in the child would wait on it for ever. The child gets a new pool; the old one is kept, never
    destroyed (its destructor would wait for threads that are not there). A process whose JAX has made a backend
    (the CPU client) is not forked at all (:func:`_forkable`)."""
    mlir = sys.modules.get("jax._src.interpreters.mlir")
    if mlir is not None:
        _KEPT.append(mlir.global_thread_pool)
        mlir.global_thread_pool = mlir.ir.ThreadPool()


def _forkable() -> None:
    """RuntimeError where this process has made a JAX backend: its client's threads and locks come to a forked
    child broken (a computation there aborts on an inherited mutex). Run the cases in a fresh process."""
    xb = sys.modules.get("jax._src.xla_bridge")
    if xb is not None and xb.backends_are_initialized():
        raise RuntimeError("this process has made a JAX backend and cannot fork commands safely: run the fault "
                           "cases in a fresh process (tests/test_faults.py does)")


def _plain_main() -> None:
    """A ``__main__`` with neither file nor spec, as a console script's is to a process pool's ``spawn`` (which
    would otherwise import the harness's script, or fail on a standard-input one, in every worker)."""
    import types

    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.argv = ["mhlo-cost"]


def _hide_harness_frames() -> None:
    """The frames below ``main`` in a forked child are the harness's (pytest, a benchmark), which a command run as
    a process does not have: kept out of the op locations a lowering records, as the command's own are, so
    that a lowering's bytes are those of ``mhlo-cost`` run as a process."""
    if "jax" not in sys.modules:
        return
    try:
        from jax._src import source_info_util
    except ImportError:
        return
    f = sys._getframe()
    while f is not None:
        source_info_util.register_exclusion(f.f_code.co_filename)
        f = f.f_back


def run(argv: list, cwd, env: dict, logs, timeout: float = 60.0, before=None, fork: bool | None = None) -> Outcome:
    """Run ``mhlo-cost argv`` to its end (killed past ``timeout``)."""
    return start(argv, cwd, env, logs, before, fork).finish(timeout)


# -- killing at a write ---------------------------------------------------------------------------------------


def kill_at_write(folder: str | os.PathLike, k: int) -> Callable[[], None]:
    """A ``before`` hook: SIGKILL the child just after the ``k``-th write operation (opening a file for writing,
    a rename, a removal, a truncation) on a path inside ``folder`` has completed. Deterministic: run with
    k = 1, 2, ... until the command ends without reaching k, and every intermediate state is seen."""
    return at_write(folder, k, signal.SIGKILL)


def pause_at_write(folder: str | os.PathLike, k: int) -> Callable[[], None]:
    """A ``before`` hook: the child stops itself (SIGSTOP) just after its ``k``-th write operation in ``folder``,
    until :meth:`Run.resume`: another writer can then be run to its end in between, deterministically."""
    return at_write(folder, k, signal.SIGSTOP)


def at_write(folder: str | os.PathLike, k: int, sig: int) -> Callable[[], None]:
    """A ``before`` hook: the signal ``sig`` to the child itself just after its ``k``-th write in ``folder``."""
    folder = os.path.realpath(folder)

    def before() -> None:
        seen = [0]
        hook_code = []

        def inside(p) -> bool:
            if isinstance(p, int) or p is None:
                return False
            p = os.fsdecode(p)
            return os.path.realpath(os.path.join(os.getcwd(), p)).startswith(folder + os.sep)

        def profile(frame, event, arg):
            if frame.f_code not in hook_code:  # the operation returned: now
                sys.setprofile(None)
                os.kill(os.getpid(), sig)

        def hook(event, args):
            if event == "open":
                path, mode, flags = args
                writes = (mode is not None and any(c in mode for c in "wax+")) or (
                    mode is None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
                hit = writes and inside(path)
            elif event in ("os.rename", "os.remove", "os.truncate", "os.rmdir", "os.symlink", "os.link"):
                hit = any(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike)))
            else:
                return
            if hit:
                seen[0] += 1
                if seen[0] == k:
                    sys.setprofile(profile)

        hook_code.append(hook.__code__)
        sys.addaudithook(hook)

    return before


def limit_file_size(nbytes: int) -> Callable[[], None]:
    """A ``before`` hook: no file may grow past ``nbytes`` (a full disk, as RLIMIT_FSIZE makes one: EFBIG)."""
    def before() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return before


# -- what a file holds after a fault --------------------------------------------------------------------------


def file_state(path: Path, old: bytes | None, new: bytes, same: Callable | None = None) -> str:
    """``old``, ``new``, ``empty``, ``missing`` or ``torn`` (anything else); ``same``: what bytes are compared by
    (a fingerprint, None for torn ones), where they differ from run to run."""
    if path.is_symlink() or not path.exists():
        return "missing" if not path.is_symlink() else "symlink"
    if path.is_dir():
        return "folder"
    data = path.read_bytes()
    if not data:
        return "empty"
    if same is not None:
        data, old, new = same(data), None if old is None else same(old), same(new)
        if data is None:
            return "torn"
    if old is not None and data == old:
        return "old"
    if data == new:
        return "new"
    return "torn"


def leftovers(folder: Path, keep: set) -> list:
    """Names in ``folder`` other than ``keep`` (temporary files a killed writer left)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)
