"""Reading an input file the user names: a regular file, read with a size limit; anything else is refused.

A FIFO is never opened (opening one with no writer blocks for ever), a device is never read (``/dev/zero``
never ends), and no file is read past a limit: each refusal is a :class:`FileRefused` whose message is one
line. Standard library only: the command line checks a file before it imports jaxlib.
"""
from __future__ import annotations

import os
import stat

#: The most an MLIR input (a file, or standard input) may hold: four times the largest IR a compiler writes
#: for a model whose weights are not inlined. Gzip input has its own limit (:data:`mhlo_cost.ir.loader.GZIP_MIN_LIMIT`).
MAX_INPUT_BYTES = 2 << 30
#: The most a settings file (a hardware or system TOML, a sweep spec, a baseline) may hold.
MAX_SETTINGS_BYTES = 64 << 20
_CHUNK = 1 << 22


class FileRefused(Exception):
    """The path is not a regular file, or holds more than the limit; ``str()`` is one line."""


def _kind(mode: int) -> str | None:
    """What a file that is not a regular one is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return "is not a regular file"


def read_file(path: str | os.PathLike, limit: int | None = None, what: str = "an MLIR file") -> bytes:
    """The bytes of the regular file ``path``; :class:`FileRefused` for a missing file, a directory, a FIFO,
    a device or a socket (checked before opening), or a file of more than ``limit`` bytes (default
    :data:`MAX_INPUT_BYTES`)."""
    name = os.fsdecode(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileRefused(f"{name}: no such file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the name
        raise FileRefused(f"{name}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    _refuse(st.st_mode, name, what)
    _check_size(st.st_size, limit, name)
    try:  # O_NONBLOCK: should the path have become a FIFO since the stat, opening it does not block
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise FileRefused(f"{name}: cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        _refuse(os.fstat(fd).st_mode, name, what)
        return read_stream(f, name, limit)


def read_settings(path: str | os.PathLike, what: str) -> bytes:
    """:func:`read_file` for a settings file (TOML, JSON): at most :data:`MAX_SETTINGS_BYTES`."""
    return read_file(path, MAX_SETTINGS_BYTES, what)


def is_regular(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file (a FIFO, a device, a directory or nothing at all are not)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _refuse(mode: int, name: str, what: str) -> None:
    kind = _kind(mode)
    if kind is None:
        return
    hint = ": mhlo-cost never opens one (with no writer it blocks)"
    if what == "an MLIR file":
        hint += "; pipe the data into - (standard input)"
    raise FileRefused(f"{name}: {kind}, not {what}" + (hint if stat.S_ISFIFO(mode) else ""))


def read_stream(f, name: str, limit: int | None = None) -> bytes:
    """All of the binary stream ``f``, in chunks, refused past ``limit`` bytes (a file that grows, a
    ``/proc`` file whose size says 0, standard input)."""
    chunks, total = [], 0
    try:
        while chunk := f.read(_CHUNK):
            total += len(chunk)
            _check_size(total, limit, name)
            chunks.append(chunk)
    except OSError as e:
        raise FileRefused(f"{name}: cannot read: {e.strerror or e}") from None
    return b"".join(chunks)


def _check_size(n: int, limit: int | None, name: str) -> None:
    limit = MAX_INPUT_BYTES if limit is None else limit
    if n > limit:
        size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
        raise FileRefused(f"{name}: more than {size}, the most mhlo-cost reads: not IR as a compiler "
                          "writes it (or a model with its weights inlined)")
