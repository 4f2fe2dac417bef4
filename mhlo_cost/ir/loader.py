"""Load MLIR (MHLO or StableHLO, text or bytecode, plain or gzipped) into a jaxlib ``ir.Module``.

Every failure becomes a :class:`LoadError` whose message is one line, ``FILE:LINE:COL: message`` where
MLIR says where the problem is. The parsing itself is jaxlib's: no text is parsed here by hand. jaxlib is
imported only by :func:`load` itself: :func:`prepare` (the checks before any parse) needs none.
"""
from __future__ import annotations

import io
import os
import zlib
from dataclasses import dataclass

from ..files.read import FileRefused, read_file

_BYTECODE_MAGIC = b"ML\xefR"
_GZIP_MAGIC = b"\x1f\x8b"


class LoadError(Exception):
    """The input cannot be read as MLIR; ``str(err)`` is one line meant for a user."""


#: The oldest jax / jaxlib whose MLIR bindings the loader works with (pyproject says the same): 0.6 has no
#: ``_jax_mlir_ext``, 0.7.2 to 0.10.0 no ``ir.NameLoc``.
MIN_JAX = (0, 10, 1)


def require_jax() -> None:
    """A one-line :class:`LoadError`, before any import of the bindings, where the installed jax or jaxlib is
    missing or too old."""
    want = ".".join(map(str, MIN_JAX))
    for dist in ("jax", "jaxlib"):
        found = installed_version(dist)
        if found is None:
            raise LoadError(f"{dist} is not installed: pip install 'jax>={want}' 'jaxlib>={want}'")
        nums = tuple(int(p) if p.isdigit() else 0 for p in found.split(".")[:3])
        if nums < MIN_JAX:
            raise LoadError(f"{dist} {found} is too old (its MLIR bindings lack what the loader needs): "
                            f"pip install -U 'jax>={want}' 'jaxlib>={want}'")


def installed_version(dist: str) -> str | None:
    """The version of the installed distribution ``dist`` (a plain name: ``jax``), None where it is not installed:
    :func:`importlib.metadata.version`'s answer. An installed wheel is read from its metadata directly (the first
    ``dist-VERSION.dist-info`` on sys.path, the one importlib.metadata finds first, its ``Version:`` field), without
    importing importlib.metadata, which takes about a tenth of a second (email, zipfile, csv) of a command that
    needs nothing else from it; anything else (no such folder, an egg, unreadable metadata) asks importlib.metadata."""
    import os
    import sys

    want = dist.lower()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip, a folder gone
            continue
        for name in names:
            head, _, kind = name.lower().rpartition(".")
            if kind in ("dist-info", "egg-info") and head.partition("-")[0] == want:  # as importlib.metadata matches
                return _metadata_version(os.path.join(entry or ".", name)) or _library_version(dist)
    return _library_version(dist)


def _metadata_version(folder: str) -> str | None:
    """The ``Version:`` field of a .dist-info folder's METADATA (None: no such file or field: an egg's is elsewhere)."""
    try:
        with open(f"{folder}/METADATA", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line[len("Version:"):].strip() or None
                if not line.strip():  # the headers end at the first blank line
                    return None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _library_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except (PackageNotFoundError, FileNotFoundError):  # FileNotFoundError: importlib_metadata's MetadataNotFound, a
        return None  # .dist-info without METADATA once the backport (dask imports it) has put its finder first


@dataclass
class Loaded:
    module: object  # ir.Module
    context: object  # ir.Context
    name: str  # the file name (or "<string>") used in messages
    format: str  # "text", "bytecode" or "vhlo" (a StableHLO portable artifact)


def make_context(handler: bool = True):
    """An MLIR context with every dialect the analyzer reads (:func:`mhlo_cost.ir.reader.make_context`)."""
    from .reader import make_context as make

    return make(handler)


def _read_source(source: str | bytes | os.PathLike) -> tuple[bytes | str, str]:
    if isinstance(source, bytes):
        return source, "<bytes>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
        try:  # a regular file, read with a limit: a FIFO, a device or a directory is refused unopened
            return read_file(source), str(source)
        except FileRefused as e:
            raise LoadError(str(e)) from None
    return source, "<string>"


def _looks_like_path(s: str) -> bool:
    # The Python API takes a path or MLIR text in one str (the command line: always a path). MLIR text always
    # has a newline, braces or a dialect op; a path has none of those.
    return "\n" not in s and "{" not in s and len(s) < 4096


def load(source: str | bytes | os.PathLike, context: ir.Context | None = None,
         isolate: bool | None = None, name: str | None = None) -> Loaded:
    """Parse MLIR from a path, a text string or bytes (text, bytecode, VHLO; each optionally gzipped).

    A str is a path unless it holds a newline or ``{`` or has 4096 characters or more (then it is MLIR
    text); a :class:`~pathlib.Path` is always a path, and bytes are always the content.

    With ``isolate`` (the default; ``MHLO_COST_ISOLATE=0`` turns it off) jaxlib's reader runs in a child
    process (:mod:`mhlo_cost.ir.guard`), so that a corrupt or hostile file gives a :class:`LoadError`
    instead of crashing, hanging or exhausting the caller's process.
    """
    kind, data, name = prepare(source, name)
    ctx = context or make_context()
    if isolate is None:
        from .guard import enabled

        isolate = enabled()
    module = _parse(kind, data, name, ctx, isolate)
    return Loaded(module, ctx, name, kind)


def prepare(source: str | bytes | os.PathLike, name: str | None = None) -> tuple[str, bytes, str]:
    """(kind, bytes, name) of what :func:`load` would parse: ``kind`` is ``text``, ``bytecode`` or ``vhlo``; the
    bytes are ungzipped and unwrapped (a jax.export artifact). :class:`LoadError` for what is not MLIR."""
    data, found = _read_source(source)
    name = name or found  # (the name messages give: ``<stdin>`` for bytes read from standard input)
    data = _gunzip(data, name)
    if len(data) == 0 or (isinstance(data, str) and not data.strip()):
        raise LoadError(f"{name}: empty file, expected MLIR")
    data = _unwrap(data, name)
    kind, data = _classify(data, name)
    return kind, data, name


def _parse(kind: str, data: bytes, name: str, ctx, isolate: bool):
    from jaxlib.mlir import ir

    from .reader import parse as parse_here

    if isolate:
        from .guard import read_guarded

        blob, message = read_guarded(kind, data, name)
    else:
        module, op, message = parse_here(kind, data, name, ctx)
        if message is None and op == module.operation:
            return module
        blob = None if message is not None else _bytecode(op)
    if message is not None:
        raise LoadError(error_message(kind, message, name))
    with ctx:
        return ir.Module.parse(blob)  # bytecode that MLIR itself wrote from the input


def load_written(blob: bytes, name: str, kind: str) -> Loaded:
    """The module in bytecode that the reader's child wrote (MLIR's own: parsed here, without the guard)."""
    from jaxlib.mlir import ir

    ctx = make_context()
    with ctx:
        return Loaded(ir.Module.parse(blob), ctx, name, kind)


def _bytecode(op) -> bytes:
    buf = io.BytesIO()
    op.write_bytecode(buf)
    return buf.getvalue()


#: The most a gzip member may expand to: real IR compresses 5-30 x, a bomb (a run of one byte) over 1000 x.
GZIP_MIN_LIMIT = 256 << 20
GZIP_MAX_RATIO = 200


def _gunzip(data, name: str):
    """The decompressed bytes, streamed with a limit (``GZIP_MAX_RATIO`` x the compressed size, at least
    ``GZIP_MIN_LIMIT``) so that a small hostile file cannot fill this process's memory."""
    if not (isinstance(data, bytes) and data[:2] == _GZIP_MAGIC):
        return data
    import gzip  # (here: 3-5 ms of every start, the reader's child's and the command line's, for gzipped input alone)

    limit = max(GZIP_MIN_LIMIT, GZIP_MAX_RATIO * len(data))
    out, total = [], 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while chunk := f.read(1 << 22):
                total += len(chunk)
                if total > limit:
                    raise LoadError(f"{name}: gzip data expands past {limit >> 20} MiB ({GZIP_MAX_RATIO} x its "
                                    "size): not IR as a compiler writes it (a decompression bomb?)")
                out.append(chunk)
    except (OSError, EOFError, zlib.error, ValueError) as e:
        raise LoadError(f"{name}: truncated or corrupt gzip data ({_first_line(e)})") from None
    return b"".join(out)


def _classify(data, name: str) -> tuple[str, bytes]:
    """("bytecode" | "vhlo" | "text", the bytes to parse). Text loses a UTF-8 byte-order mark; bytes that
    are not UTF-8 (a Latin-1 comment, a file name in a location) become U+FFFD."""
    if isinstance(data, bytes) and data[:4] == _BYTECODE_MAGIC:
        # The bytecode header names its producer: "StableHLO_v1.x" for portable artifacts (VHLO).
        return ("vhlo" if b"StableHLO" in data[4:40] else "bytecode"), data
    if isinstance(data, str):
        text = data
    else:
        text = data.decode("utf-8", "replace")
        if text.count("\ufffd") > max(8, len(text) // 100):
            raise LoadError(f"{name}: not MLIR (binary data that is neither MLIR bytecode nor gzip)")
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        raise LoadError(f"{name}: not MLIR (binary data that is neither MLIR bytecode nor gzip)")
    if not text.strip():
        raise LoadError(f"{name}: empty file, expected MLIR")
    return "text", text.encode("utf-8")


def _first_line(e: Exception) -> str:
    return " ".join(str(e).strip().split("\n")[0].split())


def error_message(kind: str, message: str, name: str) -> str:
    """The one line for a reader's ``message`` about input of ``kind``."""
    if kind == "bytecode":
        return "unreadable MLIR bytecode (truncated or corrupt): " + message.replace(f"{name}:0:0:", f"{name}:")
    if kind == "vhlo" and not message.startswith(f"{name}: the MLIR reader"):
        rest = message[len(name) + 2:] if message.startswith(f"{name}: ") else message
        return f"{name}: unreadable StableHLO portable artifact (truncated or corrupt): {rest}"
    return message


def _unwrap(data, name: str):
    """A jax.export artifact -> the module inside; near misses (HLO text, a zip, a pickle) -> LoadError."""
    from .formats import NotMLIR, unwrap

    try:
        return unwrap(data, name)
    except NotMLIR as e:
        raise LoadError(str(e)) from None
