"""``-o FILE``, one rule for every command: a file mhlo-cost did not write is replaced only with ``--force``.

How a command knows it wrote a file: when it writes one, it records the file's SHA-256 under its path in a
small ledger (``$XDG_STATE_HOME/mhlo-cost/written``, one entry per output path); a file whose content still
has that hash is its own output, replaced when the command runs again (a note says so). A file edited since,
one written by anything else, or one copied from another machine is refused before any work, in one line
naming ``--force`` (:func:`mhlo_cost.cli.common.claim_output`). A command may know more of its own files (``lower``: any MLIR text, bytecode or gzip of
them; ``baseline --update``: a baseline): ``ours`` says so from the file's first bytes.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: the first bytes of a file, enough for ``ours`` to recognise a format
HEAD = 64


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


def wrote_before(path: str) -> bool:
    """Whether ``path`` holds, unchanged, what mhlo-cost last wrote there."""
    try:
        recorded = _entry(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):  # no entry, or one that is not ours: not our file
        return False
    return bool(recorded) and recorded == _digest(path)


def head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD)
    except OSError:
        return b""


def record_output(path: str | None) -> None:
    """After writing ``path``: remember its hash, so that running the command again may replace it."""
    if not path or path == "-":
        return
    digest = _digest(path)
    if digest is None:
        return
    entry = _entry(path)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f"{entry.name}.{os.getpid()}")
        tmp.write_text(digest + "\n", encoding="ascii")
        os.replace(tmp, entry)
    except OSError:  # no ledger (a read-only home): the next run asks for --force
        pass
