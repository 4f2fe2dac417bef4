"""The ledger of the files mhlo-cost wrote: how the one output rule (:func:`mhlo_cost.files.write.claim`) knows its
own files.

When the writer (:mod:`.write`) writes a file, it records the file's SHA-256 under its real path (links resolved) in
a small ledger (``$XDG_STATE_HOME/mhlo-cost/written``, one entry per output path, each entry replaced atomically); a
file whose content still has that hash is mhlo-cost's own output, replaced when a command writes there again (a note
says so). Just before the new file is renamed into place the entry holds both hashes, the old file's and the new
one's (:func:`expect`), so that a writer killed between the rename and the entry's last update leaves a file the
ledger knows either way. A file edited since, one written by anything else, or one copied from another machine is
not: replacing it takes ``--force``. Nothing else (a name, a format, first bytes) makes a file mhlo-cost's.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .atomic import write_bytes


def ledger_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "mhlo-cost" / "written"


def _entry(path: str) -> Path:
    return ledger_dir() / hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:32]


def _digest(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _recorded(path: str) -> list[str]:
    try:
        return _entry(path).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):  # no entry, or one that is not ours: not our file
        return []


def wrote_before(path: str) -> bool:
    """Whether ``path`` holds, unchanged, what mhlo-cost last wrote there."""
    recorded = _recorded(path)
    return bool(recorded) and _digest(path) in recorded


def record(path: str, digest: str) -> None:
    """After writing ``path`` (whose content has the SHA-256 ``digest``): remember it, so that a command may
    replace it again. The entry is written beside itself, synced, and put in place by one rename."""
    _keep(path, [digest])


def expect(path: str, digest: str) -> None:
    """Just before ``path`` is replaced by a file whose SHA-256 is ``digest``: the entry knows both the file
    there now (where it is mhlo-cost's) and the new one, so that a kill between the rename and :func:`record`
    leaves a file the ledger knows."""
    recorded = _recorded(path)
    old = _digest(path) if recorded else None  # (the file there read once: an output may be large)
    _keep(path, ([old] if old in recorded else []) + [digest])


def _keep(path: str, digests: list[str]) -> None:
    try:
        write_bytes(_entry(path), "".join(d + "\n" for d in digests).encode("ascii"))
    except OSError:  # no ledger (a read-only home): the next run asks for --force
        pass
