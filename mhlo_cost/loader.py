"""Load MLIR (MHLO or StableHLO, text or bytecode, plain or gzipped) into a jaxlib ``ir.Module``.

Every failure becomes a :class:`LoadError` whose message is one line, ``FILE:LINE:COL: message`` where
MLIR says where the problem is. The parsing itself is jaxlib's: no text is parsed here by hand.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext
from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

_BYTECODE_MAGIC = b"ML\xefR"
_GZIP_MAGIC = b"\x1f\x8b"


class LoadError(Exception):
    """The input cannot be read as MLIR; ``str(err)`` is one line meant for a user."""


@dataclass
class Loaded:
    module: ir.Module
    context: ir.Context
    name: str  # the file name (or "<string>") used in messages
    format: str  # "text", "bytecode" or "vhlo" (a StableHLO portable artifact)


def make_context() -> ir.Context:
    """An MLIR context with func, the upstream dialects jaxlib ships, StableHLO, MHLO, CHLO and Shardy."""
    ctx = ir.Context()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    # Diagnostics become LoadError messages; nothing is printed on stderr behind the caller's back.
    ctx.attach_diagnostic_handler(lambda diagnostic: True)
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    mhlo.register_mhlo_dialect(ctx)
    sdy.register_dialect(ctx)
    return ctx


def _first_line(text: str) -> str:
    return " ".join(text.strip().split("\n")[0].split())


def _diagnostic_message(err: ir.MLIRError, name: str) -> str:
    """``name:line:col: message`` from the first error diagnostic MLIR attached."""
    diags = list(getattr(err, "error_diagnostics", []) or [])
    if not diags:
        return f"{name}: {_first_line(str(err))}"
    d = diags[0]
    where = name
    try:
        loc = ir.FileLineColLoc(d.location)  # raises unless it is a file:line:col location
        where = f"{name}:{loc.start_line}:{loc.start_col}"
    except (ValueError, TypeError):
        pass
    return f"{where}: {_first_line(d.message)}"


def _read_source(source: str | bytes | os.PathLike) -> tuple[bytes | str, str]:
    if isinstance(source, bytes):
        return source, "<bytes>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
        path = Path(source)
        name = str(source)
        if not path.exists():
            raise LoadError(f"{name}: no such file")
        if path.is_dir():
            raise LoadError(f"{name}: is a directory, not an MLIR file")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise LoadError(f"{name}: cannot read: {e.strerror or e}") from None
        return data, name
    return source, "<string>"


def _looks_like_path(s: str) -> bool:
    # MLIR text always has a newline, braces or a dialect op; a path has none of those.
    return "\n" not in s and "{" not in s and len(s) < 4096


def load(source: str | bytes | os.PathLike, context: ir.Context | None = None) -> Loaded:
    """Parse MLIR from a path, a text string or bytes (text, bytecode, VHLO; each optionally gzipped)."""
    data, name = _read_source(source)
    if isinstance(data, bytes) and data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise LoadError(f"{name}: truncated or corrupt gzip data ({e})") from None
    if len(data) == 0 or (isinstance(data, str) and not data.strip()):
        raise LoadError(f"{name}: empty file, expected MLIR")
    data = _unwrap(data, name)
    ctx = context or make_context()
    if isinstance(data, bytes) and data[:4] == _BYTECODE_MAGIC:
        return _load_bytecode(data, name, ctx)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise LoadError(f"{name}: not MLIR (binary data that is neither MLIR bytecode nor gzip)") from None
    if "\x00" in data:
        raise LoadError(f"{name}: not MLIR (binary data that is neither MLIR bytecode nor gzip)")
    try:
        with ctx:
            module = ir.Module.parse(data)
    except ir.MLIRError as e:
        raise LoadError(_diagnostic_message(e, name)) from None
    return Loaded(module, ctx, name, "text")


def _unwrap(data, name: str):
    """A jax.export artifact -> the module inside; near misses (HLO text, a zip, a pickle) -> LoadError."""
    from .formats import NotMLIR, unwrap

    try:
        return unwrap(data, name)
    except NotMLIR as e:
        raise LoadError(str(e)) from None


def _load_bytecode(data: bytes, name: str, ctx: ir.Context) -> Loaded:
    # Plain MLIR bytecode of registered dialects parses directly; a StableHLO portable artifact is
    # VHLO bytecode, which the StableHLO bindings turn back into StableHLO.
    # The bytecode header names its producer: "StableHLO_v1.x" for portable artifacts.
    if b"StableHLO" in data[4:40]:
        try:
            module = stablehlo.deserialize_portable_artifact(ctx, data)
            return Loaded(module, ctx, name, "vhlo")
        except Exception as e:  # the bindings raise a bare exception on bad artifacts
            raise LoadError(f"{name}: unreadable StableHLO portable artifact (truncated or corrupt): "
                            f"{_first_line(str(e))}") from None
    try:
        with ctx:
            return Loaded(ir.Module.parse(data), ctx, name, "bytecode")
    except ir.MLIRError as e:
        msg = _diagnostic_message(e, name).replace(f"{name}:0:0:", f"{name}:")
        raise LoadError(f"unreadable MLIR bytecode (truncated or corrupt): {msg}") from None
