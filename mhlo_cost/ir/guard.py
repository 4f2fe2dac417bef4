"""Run jaxlib's MLIR reader (:mod:`mhlo_cost.ir.reader`; the child's loop is :mod:`mhlo_cost.cli.child`) in a
child process: a crash, a hang or a memory bomb in the reader ends the child, never the caller.

One child serves every load of a process (it starts once, in a fraction of a second, and is started
again after a failure). Each request gets a memory allowance (address space) and a time limit that grow
with the input; the parent gets back bytecode that MLIR wrote, or one error line. The time limit counts the
child's own CPU time (``RLIMIT_CPU``, set by the child for each request: the kernel stops it with SIGXCPU), so a
loaded machine, which slows the child's wall clock but not its work, does not fail a small file; a wall-clock
backstop, :data:`WALL_FACTOR` times as long, still ends a child that is blocked and uses no CPU at all. A walk request
(:func:`walk_guarded`, for :mod:`mhlo_cost.analysis.isolated`) has the child walk the module it parsed too, under the
same limits, and hand back the analysis: then the input is parsed once, and the caller needs no jaxlib.
"""
from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .codes import WALK_ANSWERS, Answer

#: The child's loop, the package's second front door (run as a file: the package's wings are not imported for it).
_READER = Path(__file__).resolve().parents[1] / "cli" / "child.py"
#: The folder that holds the package: the child imports the walk (:mod:`mhlo_cost.analysis.isolated`) from there.
_ROOT = str(Path(__file__).resolve().parents[2])

#: Address space a request may add to the child: a floor plus room that grows with the input.
BASE_MEMORY = 1 << 30
MEMORY_PER_INPUT_BYTE = 64
#: Seconds of the child's CPU time: a floor, plus time that grows with the input.
BASE_SECONDS = 20.0
SECONDS_PER_MB = 4.0
#: The wall-clock backstop: a request (or the child's start) that takes this many times its CPU allowance in
#: wall time is stopped, used CPU or not (a child blocked for ever, or one starved on a machine far beyond loaded).
WALL_FACTOR = 10.0

# Runs the reader file without putting its folder (which holds a ``types.py``) on sys.path. The interpreter starts
# without the site module (``-S``: no .pth file is read, no import hook an editable install's .pth brings is set up,
# 20-50 ms of each start): its path is the caller's, handed over as JSON (argv[1]); where jaxlib is not found on it
# (a caller started without site, or a jaxlib that only a .pth's hook finds) the site module is run after all.
_BOOT = ("import json, runpy, sys; sys.path[:] = json.loads(sys.argv[1]); sys.argv = sys.argv[2:]\n"
         "import importlib.util\n"
         "if importlib.util.find_spec('jaxlib') is None:\n"
         "    import site; site.main()\n"
         "runpy.run_path(sys.argv[0], run_name='__main__')")


def _child_path() -> list[str]:
    """The child's sys.path: this process's, less its first entry (the folder of the script or ``-c``/``-m``'s working
    folder, which the child's own start would not have either) and the working folder."""
    return [p for p in sys.path[1:] if p]


def _stderr_file():
    """An anonymous file for the child's stderr (what it said before dying): in memory where Linux has
    ``memfd_create`` (the child starts without this process importing :mod:`tempfile`, 5-10 ms before it), else a
    temporary file."""
    if hasattr(os, "memfd_create"):
        try:
            return open(os.memfd_create("mhlo-cost-reader-stderr", os.MFD_CLOEXEC), "w+b")
        except OSError:
            pass
    import tempfile

    return tempfile.TemporaryFile()


class _Failed(Exception):
    """The child died or ran out of time; ``str()`` says how."""


def limits(n_bytes: int) -> tuple[int, float]:
    """(memory in bytes, seconds of CPU time) a request for an input of ``n_bytes`` may use."""
    return BASE_MEMORY + MEMORY_PER_INPUT_BYTE * n_bytes, BASE_SECONDS + SECONDS_PER_MB * n_bytes / 1e6


class _Server:
    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.pid = 0  # the process that started the child (a fork must start its own)
        self.err = None
        self.lock = threading.Lock()

    def request(self, kind: str, data: bytes, name: str, walk: str | None = None, meanwhile=None) -> bytes:
        memory, seconds = limits(len(data))
        with self.lock:
            try:
                self.ensure(walk is not None)
            except OSError as e:
                raise _Failed(f"cannot start the MLIR reader process: {e.strerror or e}") from None
            header = json.dumps([kind, name, memory, len(data), walk, seconds]).encode() + b"\n"
            wall = seconds * WALL_FACTOR  # the backstop; the child's CPU time is limited by the child itself
            try:
                self._send(header + data, meanwhile, wall)
                size = int.from_bytes(self._read(8, time.monotonic() + wall, wall), "big")
                answer = self._read(size, time.monotonic() + wall, wall)
            except (_Failed, OSError) as e:
                message = str(e) if isinstance(e, _Failed) else self._death(memory, seconds)
                self.stop()
                raise _Failed(message) from None
            except BaseException:  # (an interrupt) a request half done: its answer must not meet the next one
                self.stop()
                raise
            if answer[:1] == Answer.OUT_OF_MEMORY:
                self.stop()  # after running out of memory the child is not trusted again
            return answer

    def _send(self, request: bytes, meanwhile, seconds: float) -> None:
        """Write ``request`` to the child; with ``meanwhile``, from a thread while ``meanwhile()`` runs here: the
        pipe holds 64 KiB, so a large input is taken in only once the child has started (jaxlib imported), and
        the caller's own imports overlap that start instead of following it."""
        if meanwhile is None:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
            return
        failed: list = []

        def write():
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
            except (OSError, ValueError) as e:  # the child died (a closed pipe)
                failed.append(e)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        meanwhile()  # (an exception here: the caller stops the child, which ends the write)
        writer.join(seconds)
        if writer.is_alive():
            raise _Failed(f"the MLIR reader took no input for {seconds:.0f} s (wall clock) and was stopped")
        if failed:
            raise OSError(str(failed[0]))

    def ensure(self, walk: bool = False) -> None:
        """A running child of this process: a dead one is reaped (its pipes closed) and started again; after a
        fork the child of the parent is left to the parent. ``walk``: a new child imports the walk at once."""
        if self.proc is not None and self.pid == os.getpid() and self.proc.poll() is None:
            return
        if self.proc is not None and self.pid == os.getpid():
            self.stop()
        self._start(walk)

    def _start(self, walk: bool) -> None:
        self.err = _stderr_file()
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        argv = [sys.executable, "-S", "-c", _BOOT, json.dumps(_child_path()), str(_READER), _ROOT]
        argv += ["walk"] if walk else []
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, env=env)
        self.pid = os.getpid()

    def _read(self, n: int, deadline: float, seconds: float) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise _Failed(f"the MLIR reader gave no answer in {seconds:.0f} s (wall clock) on this input "
                                  "and was stopped (blocked, or a machine far beyond loaded)")
                chunk = os.read(fd, min(n - got, 1 << 20))
                if not chunk:
                    raise OSError("the reader closed its output")
                chunks.append(chunk)
                got += len(chunk)
        return b"".join(chunks)

    def _death(self, memory: int, seconds: float) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = 0
        self.err.seek(0)
        text = self.err.read().decode("utf-8", "replace")
        what = f"exit {code}"
        if code < 0:
            try:
                what = signal.Signals(-code).name
            except ValueError:
                what = f"signal {-code}"
        if code == -getattr(signal, "SIGXCPU", -1):
            return (f"the MLIR reader used {seconds:.0f} s of CPU time on this input and was stopped "
                    "(a hostile or broken file?)")
        if "MemoryError" in text or "bad_alloc" in text or "unable to grow" in text:
            return (f"the MLIR reader ran out of memory on this input (limit {memory >> 20} MiB more): "
                    "truncated, corrupt or hostile data")
        return f"the MLIR reader crashed on this input ({what}): truncated, corrupt or hostile data"

    def stop(self, wait: bool = True) -> None:
        """Kill the child and close its pipes; ``wait``: reap it too (not at this process's exit, where the
        child's teardown of a large module would delay the caller's: the system reaps it)."""
        if self.proc is not None and self.pid == os.getpid():
            try:
                self.proc.kill()
                if wait:
                    self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for f in (self.proc.stdin, self.proc.stdout, self.err):
                try:
                    f.close()
                except OSError:
                    pass
        self.proc = None


_SERVER = _Server()
atexit.register(_SERVER.stop, wait=False)


def enabled() -> bool:
    """Whether loads go through the child (the default; ``MHLO_COST_ISOLATE=0`` turns it off; on Windows pipes
    cannot be waited on with a time limit, so the reader runs in process there)."""
    return os.environ.get("MHLO_COST_ISOLATE", "1") != "0" and os.name != "nt"


def forced() -> bool:
    """Whether ``MHLO_COST_ISOLATE=1`` is set explicitly: every load goes through the child, even the text a
    process lowered itself (:attr:`mhlo_cost.studies.study.StudyOptions.parse_here` gives way to it)."""
    return os.environ.get("MHLO_COST_ISOLATE") == "1" and os.name != "nt"


def prestart(walk: bool = False) -> None:
    """Start the child now, so that its start (an interpreter and jaxlib; with ``walk``, the walk's own
    modules too) overlaps the caller's own imports instead of delaying the first load. Harmless where it is
    running already or cannot start (the load then says why)."""
    if not enabled():
        return
    with _SERVER.lock:
        try:
            _SERVER.ensure(walk)
        except OSError:
            pass


def read_guarded(kind: str, data: bytes, name: str) -> tuple[bytes | None, str | None]:
    """(bytecode, None) where the child read ``data``; (None, one-line message) where it did not."""
    try:
        answer = _SERVER.request(kind, data, name)
    except _Failed as e:
        return None, f"{name}: {e}"
    code, payload = Answer.split(answer)
    if code is Answer.BYTECODE:
        return payload, None
    return None, payload.decode("utf-8", "replace")


def walk_guarded(kind: str, data: bytes, name: str, options: str, meanwhile=None) -> tuple[Answer, bytes]:
    """The child parses ``data`` and walks it with ``options`` (:class:`mhlo_cost.analysis.isolated.WalkOptions` as
    JSON): (:attr:`~Answer.ANALYSIS`, the encoded analysis), (:attr:`~Answer.BYTECODE`: the analysis is too large
    to send), (:attr:`~Answer.RENDERED`, the whole answer the options' ``render`` asks for:
    :mod:`mhlo_cost.studies.compose`), (:attr:`~Answer.ANALYSIS_ERROR`, an analysis error's line),
    (:attr:`~Answer.BUG`, an unexpected error's line) or (:attr:`~Answer.READ_ERROR`, the reader's message).
    ``meanwhile()`` runs once the request is sent, before the answer is read (the time limit runs from then on)."""
    try:
        answer = _SERVER.request(kind, data, name, options, meanwhile)
    except _Failed as e:
        return Answer.READ_ERROR, f"{name}: {e}".encode()
    code, payload = Answer.split(answer)
    return (code if code in WALK_ANSWERS else Answer.READ_ERROR), payload
