"""The one disk cache of mhlo-cost: what the sweep, serve and the training plan keep between runs.

An entry is found by a key: the sha256 of the request (what the caller computes from: a point, a step, a
layer's shapes and chip) with the schema of what is kept and ONE code hash (:func:`code_hash`: mhlo-cost's
own source files that can change an answer, and the jax / jaxlib that lower). A changed rule, estimate or
profile is a new key, never a stale answer; nothing is bumped by hand.

Each entry is one file, ``<root>/<schema name>/<key>.entry``: a line of JSON (:func:`canonical`: ``schema``,
its name and version; ``key``; ``sha256``, of the payload's canonical JSON, a NUL byte and the blob;
``blob_bytes``; ``payload``), then the blob's bytes, if any (serve's lowered IR). What fails to read or
validate is never trusted: a file that is torn or not JSON, NaN or infinity anywhere, another key's or
another schema's entry, a checksum that does not match, a payload that breaks the schema its user declares
(:class:`Record`: names, types, ranges: no negative count or time), a folder, a symlink loop or a FIFO where
the file should be. It is computed again, with a note (a missing entry without one). Writes are atomic (a
temporary file in the same folder, fsync, :func:`os.replace`), so racing writers and readers never see half
an entry: the last writer wins with a whole one.

Standard library only (the bottom wing). The atomic writer here is private; ``files/write.py`` (the ``-o``
writer) may take it over.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .atomic import write_bytes
from .read import FileRefused, read_file

#: The package whose files the code hash reads.
PACKAGE = Path(__file__).resolve().parent.parent
#: Folders of the package left out of the code hash: the command line only maps options onto requests,
#: and every request is keyed in full.
NOT_HASHED = ("cli",)
#: The files of the package that can change an answer: its code and its data (chip and system profiles).
HASHED_SUFFIXES = (".py", ".toml")
#: The distributions whose versions the code hash holds (they lower every model mhlo-cost lowers itself).
TOOLCHAIN = ("jax", "jaxlib")


class CacheError(Exception):
    """A cache folder that cannot be one (a file, or not makeable); ``str()`` is one line."""


class Invalid(ValueError):
    """An entry that does not validate; ``str()`` says why, in a few words."""


def default_root() -> Path:
    """``$XDG_CACHE_HOME/mhlo-cost``, else ``~/.cache/mhlo-cost``: every command's cache, one folder each."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mhlo-cost"


# -- the code hash -------------------------------------------------------------------------------------
def source_files(root: Path) -> list[Path]:
    """The files of the package at ``root`` that the code hash reads, in a fixed order."""
    found = []
    for f in root.rglob("*"):
        rel = f.relative_to(root)
        if f.suffix in HASHED_SUFFIXES and "__pycache__" not in rel.parts and rel.parts[0] not in NOT_HASHED \
                and f.is_file():
            found.append(f)
    return sorted(found, key=lambda f: f.relative_to(root).as_posix())


def hash_sources(root: Path) -> str:
    """The sha256 of the package's hashed files (their paths and bytes) at ``root``."""
    h = hashlib.sha256()
    for f in source_files(root):
        data = f.read_bytes()
        h.update(f"{f.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@functools.cache
def code_hash() -> str:
    """The one code hash of this process (computed once): :data:`PACKAGE`'s sources and the versions of
    :data:`TOOLCHAIN`."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for dist in TOOLCHAIN:
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    return digest({"sources": hash_sources(PACKAGE), "toolchain": versions})


def canonical(obj: Any) -> bytes:
    """The one JSON text of ``obj`` (sorted keys, no spaces, no NaN): what keys and checksums hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def digest(obj: Any) -> str:
    """The sha256 of :func:`canonical` ``obj``."""
    return hashlib.sha256(canonical(obj)).hexdigest()


# -- schemas -------------------------------------------------------------------------------------------
class Spec:
    """What one value of a payload must be; :meth:`check` raises :class:`Invalid`."""

    def check(self, value: Any, where: str) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Leaf(Spec):
    what: str
    test: Callable[[Any], bool]

    def check(self, value, where):
        if not self.test(value):
            raise Invalid(f"{where} is {_short(value)}, not {self.what}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


#: A whole number >= 0 (FLOPs, bytes, elements, ops).
COUNT = Leaf("a count (a whole number >= 0)", lambda v: _is_int(v) and v >= 0)
#: A whole number >= 1 (a batch, a degree, steps).
POSITIVE = Leaf("a positive whole number", lambda v: _is_int(v) and v >= 1)
#: A finite number >= 0 (a time in seconds, a rate, a fraction).
AMOUNT = Leaf("a finite number >= 0", lambda v: _is_number(v) and v >= 0)
TEXT = Leaf("a string", lambda v: isinstance(v, str))
FLAG = Leaf("true or false", lambda v: isinstance(v, bool))
SHA256 = Leaf("a sha256 (64 hex digits)",
              lambda v: isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v))
#: Any JSON value (what JSON allows: the reader has refused NaN and infinity already).
ANY = Leaf("a JSON value", lambda v: True)


@dataclass(frozen=True)
class Maybe(Spec):
    """``spec`` or null."""
    spec: Spec

    def check(self, value, where):
        if value is not None:
            self.spec.check(value, where)


@dataclass(frozen=True)
class OneOf(Spec):
    choices: tuple

    def check(self, value, where):
        if not isinstance(value, str) or value not in self.choices:
            raise Invalid(f"{where} is {_short(value)}, not one of {', '.join(self.choices)}")


@dataclass(frozen=True)
class ListOf(Spec):
    item: Spec

    def check(self, value, where):
        if not isinstance(value, list):
            raise Invalid(f"{where} is {_short(value)}, not a list")
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")


@dataclass(frozen=True)
class TupleOf(Spec):
    """A list of exactly ``len(items)`` values, each its spec."""
    items: tuple

    def check(self, value, where):
        if not isinstance(value, list) or len(value) != len(self.items):
            raise Invalid(f"{where} is {_short(value)}, not a list of {len(self.items)}")
        for i, (spec, v) in enumerate(zip(self.items, value)):
            spec.check(v, f"{where}[{i}]")


@dataclass(frozen=True)
class MapOf(Spec):
    """An object whose keys are strings and values ``value``."""
    value: Spec

    def check(self, value, where):
        if not isinstance(value, dict):
            raise Invalid(f"{where} is {_short(value)}, not an object")
        for k, v in value.items():
            self.value.check(v, f"{where}.{k}")


@dataclass(frozen=True)
class Record(Spec):
    """An object with exactly the ``fields`` (and any of the ``optional`` ones), each its spec."""
    fields: Mapping[str, Spec]
    optional: Mapping[str, Spec] = field(default_factory=dict)

    def check(self, value, where="payload"):
        if not isinstance(value, dict):
            raise Invalid(f"{where} is {_short(value)}, not an object")
        missing = [k for k in self.fields if k not in value]
        extra = [k for k in value if k not in self.fields and k not in self.optional]
        if missing or extra:
            raise Invalid(f"{where} " + "; ".join(
                ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has unknown {', '.join(extra)}"]
                                                                       if extra else [])))
        for k, v in value.items():
            (self.fields.get(k) or self.optional[k]).check(v, f"{where}.{k}")


def _short(value) -> str:
    text = json.dumps(value, allow_nan=True) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Schema:
    """What one kind of entry holds: a ``name`` (its folder under the root: ``sweep/results``), a
    ``version`` (what the entry says it was written as), the ``payload``'s :class:`Record` and whether a
    blob of bytes follows it."""
    name: str
    version: int
    payload: Record
    blob: bool = False


# -- the cache -----------------------------------------------------------------------------------------
def open_root(root: str | os.PathLike) -> Path:
    """``root`` made where it is missing; :class:`CacheError` where it exists and is not a folder (or a
    folder cannot be made there)."""
    path = Path(root)
    name = os.fsdecode(root)
    if os.path.lexists(path) and not path.is_dir():
        raise CacheError(f"{name}: the cache folder exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:  # a file on the way, no permission, a NUL in the name
        raise CacheError(f"{name}: cannot make the cache folder there: {getattr(e, 'strerror', None) or e}") \
            from None
    return path


class DiskCache:
    """The entries of one :class:`Schema` under ``root`` (None: a cache that holds nothing and keeps
    nothing); ``note(text)`` is told of every entry not trusted and every entry not kept."""

    def __init__(self, root: str | os.PathLike | None, schema: Schema, note: Callable[[str], None] | None = None):
        self.schema = schema
        self.note = note or (lambda text: print(f"mhlo-cost: {text}", file=sys.stderr))  # no command around it
        self.folder = open_root(root) / schema.name if root is not None else None

    def key(self, request: Any) -> str:
        """The key of ``request`` (JSON: dicts, lists, strings, numbers, booleans, null): with the schema and
        :func:`code_hash`."""
        return digest({"schema": [self.schema.name, self.schema.version], "code": code_hash(),
                       "request": request})

    def path(self, request: Any) -> Path | None:
        return self.folder / f"{self.key(request)}.entry" if self.folder is not None else None

    def get(self, request: Any) -> dict | None:
        """The payload kept for ``request``, or None (nothing kept, or nothing that can be trusted)."""
        found = self._read(request)
        return found[0] if found is not None else None

    def get_blob(self, request: Any) -> tuple[dict, bytes] | None:
        """(payload, blob) kept for ``request``, or None."""
        return self._read(request)

    def put(self, request: Any, payload: dict, blob: bytes | None = None) -> None:
        """Keep ``payload`` (and ``blob``) for ``request``, atomically; what cannot be kept (a full disk, a
        figure that is not finite, a folder in the way) is a note, never the command's end."""
        if self.folder is None:
            return
        path = self.path(request)
        try:
            plain = json.loads(canonical(payload))  # as it will be read (tuples are lists); NaN refused here
            self.schema.payload.check(plain)
            data = _entry_bytes(self.schema, path.name[:-len(".entry")], plain, blob or b"")
            self.folder.mkdir(parents=True, exist_ok=True)
            write_bytes(path, data)
        except (OSError, ValueError) as e:  # (Invalid, NaN are ValueErrors)
            self.note(f"cache: cannot keep {path}: {getattr(e, 'strerror', None) or e}")

    def _read(self, request: Any) -> tuple[dict, bytes] | None:
        if self.folder is None:
            return None
        path = self.path(request)
        try:
            os.lstat(path)
        except FileNotFoundError:
            return None  # not kept yet: no note
        except OSError as e:
            self.note(f"cache: {path}: {e.strerror or e}; computed again")
            return None
        try:
            return _parse_entry(read_file(path, what="a cache entry"), self.schema, path.name[:-len(".entry")])
        except (FileRefused, Invalid) as e:
            self.note(f"cache: the entry {path} is not trusted ({_why(e, path)}); computed again")
            return None


def _why(e: Exception, path: Path) -> str:
    text, prefix = str(e), f"{os.fsdecode(path)}: "  # (FileRefused names the path: said once)
    return text[len(prefix):] if text.startswith(prefix) else text


# -- one entry's bytes ---------------------------------------------------------------------------------
def _checksum(payload: dict, blob: bytes) -> str:
    h = hashlib.sha256(canonical(payload))
    h.update(b"\0")
    h.update(blob)
    return h.hexdigest()


def _entry_bytes(schema: Schema, key: str, payload: dict, blob: bytes) -> bytes:
    head = {"schema": [schema.name, schema.version], "key": key, "sha256": _checksum(payload, blob),
            "blob_bytes": len(blob), "payload": payload}
    return canonical(head) + b"\n" + blob


HEADER = Record({"schema": ListOf(ANY), "key": SHA256, "sha256": SHA256, "blob_bytes": COUNT,
                 "payload": ANY})


def _parse_entry(data: bytes, schema: Schema, key: str) -> tuple[dict, bytes]:
    """(payload, blob) of an entry's bytes, every check passed; :class:`Invalid` says which failed."""
    line, newline, blob = data.partition(b"\n")
    if not newline:
        raise Invalid("torn: no end of its header line")
    head = _strict_json(line)
    HEADER.check(head, "the header")
    if head["schema"] != [schema.name, schema.version]:
        raise Invalid(f"written by schema {_short(head['schema'])}, read as {schema.name} {schema.version}")
    if head["key"] != key:
        raise Invalid("another key's entry")
    if head["blob_bytes"] != len(blob) or (blob and not schema.blob):
        raise Invalid(f"torn: {len(blob)} bytes after the header, {head['blob_bytes']} written")
    if _checksum(head["payload"], blob) != head["sha256"]:
        raise Invalid("its checksum does not match")
    schema.payload.check(head["payload"])
    return head["payload"], blob


def _refuse_constant(name: str):
    raise Invalid(f"holds {name}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Invalid(f"holds {text}, not a finite number")
    return value


def _strict_json(line: bytes) -> Any:
    """JSON with no NaN, no infinity (``1e999`` included), no duplicate keys and no numbers past the
    interpreter's limit."""
    def pairs(items):
        out = dict(items)
        if len(out) != len(items):
            raise Invalid("a key twice in one object")
        return out
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite,
                          object_pairs_hook=pairs)
    except Invalid:
        raise
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError, JSONDecodeError, int digits limit)
        raise Invalid(f"not JSON: {str(e).splitlines()[0][:80]}") from None
