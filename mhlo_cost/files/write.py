"""The one writer of every file a command writes (``-o``, ``--plot``, the HTML page), and the one rule before it.

* :func:`claim`, before any work: the file ``-o`` names may be replaced where it does not exist, where it holds,
  unchanged, what mhlo-cost last wrote there (its hash is in the ledger, :mod:`.written`: nothing else makes a
  file mhlo-cost's, neither its name nor its first bytes), or with ``force``; a folder is refused, and so is a
  path whose folder cannot be made or written. A symbolic link is the file it points to.
* :func:`write` (bytes or text) and :func:`replacing` (for a library that writes a path itself: matplotlib,
  pyarrow): the new content goes to a temporary file in the target's own folder, flushed and synced to disk,
  then :func:`os.replace` puts it over the target, so that a kill at any moment leaves the old file or the new
  one, never a part of either; then the new file's hash is recorded in the ledger (itself replaced atomically).
  A missing folder is made. A target that is not a regular file (``/dev/null``, a FIFO) is written in place, as
  a stream, and not recorded.

Every failure is an :class:`OutputError` whose message is one line (the target named, the system's reason),
and leaves the old file as it was. Standard library only.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from typing import Iterator

from .atomic import replaced
from .written import expect, record, wrote_before


class OutputError(Exception):
    """An output that may not be, or could not be, written; ``str()`` is one line."""


def target(path: str | os.PathLike) -> str:
    """The file ``path`` stands for: symbolic links resolved (a link's target is the file written)."""
    return os.path.realpath(os.fspath(path))


def _stream(real: str) -> bool:
    """Whether ``real`` exists and is not a regular file or a folder (a device, a FIFO): written in place."""
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def claim(path: str | os.PathLike, force: bool = False) -> str | None:
    """Check, before any work, that ``path`` may be written: None where nothing is replaced (or ``force``), the
    note ``replacing PATH (written by mhlo-cost before)`` where it is mhlo-cost's own file; :class:`OutputError`
    for a folder, a file mhlo-cost did not write (without ``force``), or a folder that cannot be made or
    written."""
    name = os.fspath(path)
    real = target(name)
    if os.path.isdir(real):
        raise OutputError(f"{name}: is a folder; the output names a file")
    _check_folder(name, os.path.dirname(real))
    if not os.path.lexists(real) or _stream(real) or force:
        return None
    if wrote_before(real):
        return f"replacing {name} (written by mhlo-cost before)"
    raise OutputError(f"{name} exists and mhlo-cost did not write it: add --force to replace it")


def _check_folder(name: str, folder: str) -> None:
    """The folder of the output is a folder that can be written, or can be made where one above it can."""
    existing = folder
    while not os.path.lexists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        raise OutputError(f"{name}: cannot write: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{name}: cannot write: {existing} is not writable (permission denied)")


def write(path: str | os.PathLike, data: bytes | str) -> str:
    """Write ``data`` (text as UTF-8) to ``path`` atomically and record it as mhlo-cost's; the file written
    (links resolved)."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with replacing(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(raw)
    return target(path)


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[str]:
    """The path of a temporary file beside ``path`` (same folder, same suffix, so that a library that reads
    the format from the name sees it), for the caller to write; once the block ends without an error, it is
    synced and replaces ``path``, and its hash is recorded. On any error the temporary file is removed and
    ``path`` is untouched; an ``OSError`` becomes one :class:`OutputError` line."""
    name = os.fspath(path)
    real = target(name)
    if _stream(real):  # a device or a FIFO: nothing to replace, nothing to record
        with _one_line(name):
            yield real
        return
    with _one_line(name):  # (an OSError of the caller's writing too: a full disk)
        with replaced(real, os.path.splitext(real)[1] or None) as tmp:
            yield tmp
            digest = _settle(tmp, real)
            expect(real, digest)  # (the rename follows: the ledger knows the old file and the new)
    record(real, digest)


@contextlib.contextmanager
def _one_line(name: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        raise OutputError(f"{name}: cannot write: {e.strerror or e}") from None


def _settle(tmp: str, real: str) -> str:
    """The written temporary file given the mode the target has (a new file: the umask's); its SHA-256."""
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        os.fchmod(f.fileno(), _mode(real))
    return h.hexdigest()


def _mode(real: str) -> int:
    try:
        return stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask
