"""Replacing a file in one step: the one primitive under every file mhlo-cost writes (the outputs of
:mod:`.write`, the ledger of :mod:`.written`, the entries of :mod:`.cache`).

The new content goes to a temporary file in the target's own folder (so that the rename never crosses a file
system), is flushed and synced to disk, and :func:`os.replace` puts it over the target; the folder is synced so
that the rename itself lasts. A kill, a crash or a full disk at any moment leaves the old file or the new one,
never a part of either, and at worst a temporary file named ``.NAME.*`` beside it. Standard library only.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator


@contextlib.contextmanager
def replaced(real: str, suffix: str | None = None) -> Iterator[str]:
    """The path of a temporary file beside ``real`` (its folder made where missing; ``suffix``: the temporary
    file's, e.g. the target's own, for a library that reads the format from the name), for the caller to write;
    once the block ends without an error it is synced and replaces ``real``. On any error it is removed and
    ``real`` is untouched."""
    folder, base = os.path.split(real)
    os.makedirs(folder or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{base}.", suffix=suffix or ".part")
    os.close(fd)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, real)
        sync_folder(folder or ".")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """``data`` to ``path`` as one step (:func:`replaced`); an ``OSError`` is the caller's to say."""
    with replaced(os.fspath(path)) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def _fsync(path: str) -> None:
    with open(path, "rb+") as f:
        f.flush()
        os.fsync(f.fileno())


def sync_folder(folder: str) -> None:
    """The rename itself made durable (where the system lets a folder be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
