"""What one run of a command says on stderr: a :class:`Console` per run (the lines said, each once; its progress
displays, closed before any error line), and :class:`Progress`, the stages and bars a person watches.

Progress shows only where a person watches: a terminal, or ``--progress``; never in pipes, files or CI logs
unless asked, never under ``-q``. Nothing here is global: the command line makes one console per run and hands
it along (the studies hear stages through ``console.progress().stage``). Standard library only.
"""
from __future__ import annotations

import sys
import threading
import time


def progress_wanted(quiet: bool, asked: bool) -> bool:
    """Progress only where a person watches: ``asked`` (``--progress``), or stderr a terminal; never ``quiet``
    (``-q``)."""
    if quiet:
        return False
    return asked or _stderr_is_tty()


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def silent(text: str) -> None:
    """A stage nobody hears (the default of a study's ``stage``)."""


class Console:
    """One run's stderr: :meth:`say` (``mhlo-cost: text``, each line once; a note never under ``quiet``),
    :meth:`progress` (a display, closed by :meth:`stop` before an error line, however the command ends)."""

    def __init__(self, quiet: bool = False, progress: bool = False):
        self.quiet = quiet
        self.wanted = progress  # whether progress is shown (progress_wanted)
        self.said: set[str] = set()
        self.displays: list[Progress] = []

    @classmethod
    def of(cls, quiet: bool, asked: bool) -> "Console":
        """The console of a run that is ``quiet`` (``-q``) or ``asked`` for progress (``--progress``)."""
        return cls(quiet=quiet, progress=progress_wanted(quiet, asked))

    def say(self, text: str, note: bool = False) -> None:
        """``mhlo-cost: text`` on stderr, once per run; a ``note`` (what was found, what was written, facts that
        change no figure) never under ``-q``."""
        if (note and self.quiet) or text in self.said:
            return
        self.said.add(text)
        for p in self.displays:  # a line drawn in place on a terminal ends first
            p.clear()
        print(f"mhlo-cost: {text}", file=sys.stderr)

    def progress(self) -> "Progress":
        """A progress display of this run (shown where :func:`progress_wanted` said so)."""
        return Progress(enabled=self.wanted, displays=self.displays)

    def stop(self) -> None:
        """Close every progress display (its timer too): before an error line, so that none follows it."""
        while self.displays:
            self.displays.pop().close()


class Progress:
    """Stage messages and bars on stderr where a person watches.

    On a terminal one line is redrawn in place, and only once work has taken more than ``delay`` seconds;
    with ``--progress`` into a pipe or file, every stage is a line of its own, at once. A timer thread
    prints the delayed line; once closed (:meth:`done`, or :meth:`Console.stop` before an error line)
    nothing more is printed, even by a timer that already fired. ``displays``: the run's list of open
    displays (:attr:`Console.displays`), which this one joins until it is closed.
    """

    def __init__(self, enabled: bool = True, delay: float | None = None, tty: bool | None = None,
                 displays: list | None = None):
        self.enabled = enabled
        self.tty = _stderr_is_tty() if tty is None else tty
        self.delay = (1.0 if self.tty else 0.0) if delay is None else delay
        self.t0 = time.perf_counter()
        self.shown = False
        self.closed = False
        self._drawn = False  # a terminal line is drawn and not yet ended
        self._stage = ""
        self._timer: threading.Timer | None = None
        self._lock = threading.RLock()
        self._displays = displays if displays is not None else []
        self._displays.append(self)

    def stage(self, text: str) -> None:
        """What the command does now (``parsing FILE``, ``tracing``)."""
        if not self.enabled:
            return
        with self._lock:
            self._cancel()
            self._stage = text
            if self.closed:
                return
            remaining = self.delay - (time.perf_counter() - self.t0)
            if not self.shown and remaining > 0:
                self._timer = threading.Timer(remaining, self._print)
                self._timer.daemon = True
                self._timer.start()
                return
        self._print()

    def count(self, done: int, total: int, text: str = "", detail: str = "") -> None:
        """How far, where the total is known: ``text [#####.....] done/total detail``."""
        width = 20
        filled = width * done // total if total > 0 else width
        self.stage(f"{text} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {detail}".strip())

    def _print(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.shown = True
            line = f"mhlo-cost: {self._stage} ({time.perf_counter() - self.t0:.1f}s)"
            if self.tty:
                sys.stderr.write("\r\x1b[K" + line)
                self._drawn = True
            else:
                sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def clear(self) -> None:
        """End a line drawn in place, so that what follows starts on a line of its own."""
        with self._lock:
            if self._drawn:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
                self._drawn = False

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self, report: bool = False) -> None:
        """No more lines; with ``report``, a closing "done" line where stage lines were shown."""
        with self._lock:
            was_open = not self.closed
            self.closed = True
            self._cancel()
            self.clear()
            if report and was_open and self.shown and self.enabled:
                print(f"mhlo-cost: done in {time.perf_counter() - self.t0:.1f}s", file=sys.stderr, flush=True)
        if self in self._displays:
            self._displays.remove(self)

    def done(self) -> None:
        self.close(report=True)
