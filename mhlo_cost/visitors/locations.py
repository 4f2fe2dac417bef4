"""Scope paths and source positions from MLIR locations, read through jaxlib's typed location classes.

JAX writes the name stack into a ``NameLoc``: ``jit(f)/blocks_3/attn/dot_general``. The last segment
is the primitive; segments written ``transform(...)`` (``jit(f)``, ``jvp(g)``, ``vmap(h)``) and einsum
specs (``bij,bjk->bik``) are not scopes a user wrote. What remains is the scope: ``blocks_3/attn``.
A ``FileLineColLoc`` inside gives the user's source position.
"""
from __future__ import annotations

import re
from jaxlib.mlir import ir

_TRANSFORM = re.compile(r"^[\w.<>-]*\(.*\)$")


class LocationInfo:
    """Scope of an op from its location name; ``file_line`` is read from the location on first use."""

    __slots__ = ("name", "scope", "scope_with_op", "_loc", "_file_line", "_memo")

    def __init__(self, name: str, scope: str, loc: ir.Location | None, memo: dict | None = None):
        self.name = name  # the raw name of the outermost NameLoc, "" where there is none
        self.scope = scope  # the op's scope: its name without the primitive and transform segments
        self.scope_with_op = scope  # for call / while ops: the scope their bodies run in
        self._loc = loc
        self._memo = memo if memo is not None else {}
        self._file_line: str | None = None if loc is not None else ""

    @property
    def file_line(self) -> str:
        """``file:line`` of the innermost source frame, or ""."""
        if self._file_line is None:
            self._file_line = _file_line(self._loc, self._memo)
            self._loc = self._memo = None
        return self._file_line

    def describe(self) -> str:
        parts = [p for p in (self.file_line, self.name) if p]
        return " ".join(parts) if parts else "unknown location"


def scope_of(name: str) -> str:
    segments = name.split("/")[:-1] if "/" in name else []
    return "/".join(s for s in segments if s and not _TRANSFORM.match(s) and "->" not in s)


_SCOPES: dict[str, str] = {}


class LocationCache:
    """Memoises :class:`LocationInfo` per location attribute, for one MLIR context."""

    def __init__(self):
        self._map: dict[int, LocationInfo] = {}
        self._file_lines: dict[int, str] = {}

    def __call__(self, loc: ir.Location) -> LocationInfo:
        key = hash(loc.attr)
        hit = self._map.get(key)
        if hit is None:
            hit = self._map[key] = _location_info(loc, self._file_lines)
        return hit


def location_info(loc: ir.Location) -> LocationInfo:
    return _location_info(loc, {})


def _location_info(loc: ir.Location, memo: dict) -> LocationInfo:
    name = ""
    if loc.typeid == _NAME:
        name = ir.NameLoc(loc).name_str
    elif loc.typeid == _FUSED:
        for sub in ir.FusedLoc(loc).locations:
            if sub.typeid == _NAME:
                name = ir.NameLoc(sub).name_str
                break
    scope = _SCOPES.get(name)
    if scope is None:
        scope = _SCOPES[name] = scope_of(name)
    return LocationInfo(name, scope, loc, memo)


def _file_line(loc: ir.Location, memo: dict) -> str:
    """The first file:line in a location tree, innermost call frame first (memoised per subtree)."""
    seen = []
    result = ""
    stack = [loc]
    while stack:
        cur = stack.pop()
        tid = cur.typeid
        if tid == _FILE:
            f = ir.FileLineColLoc(cur)
            result = f"{f.filename}:{f.start_line}"
            break
        key = hash(cur.attr)
        hit = memo.get(key)
        if hit is not None:
            result = hit
            break
        seen.append(key)
        if tid == _NAME:
            stack.append(ir.NameLoc(cur).child_loc)
        elif tid == _CALLSITE:
            c = ir.CallSiteLoc(cur)
            stack.append(c.caller)
            stack.append(c.callee)  # popped first: the innermost frame is the user's line
        elif tid == _FUSED:
            stack.extend(reversed(list(ir.FusedLoc(cur).locations)))
    if result:
        for key in seen:
            memo[key] = result
    return result


_NAME = ir.NameLoc.static_typeid
_FILE = ir.FileLineColLoc.static_typeid
_CALLSITE = ir.CallSiteLoc.static_typeid
_FUSED = ir.FusedLoc.static_typeid
