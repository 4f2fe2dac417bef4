"""Scope paths and source positions from MLIR locations, read through jaxlib's typed location classes.

JAX writes the name stack into a ``NameLoc``: ``jit(f)/blocks_3/attn/dot_general``. The last segment
is the primitive; segments written ``transform(...)`` (``jit(f)``, ``jvp(g)``, ``vmap(h)``) and einsum
specs (``bij,bjk->bik``) are not scopes a user wrote. What remains is the scope: ``blocks_3/attn``.
A ``FileLineColLoc`` inside gives the user's source position.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from jaxlib.mlir import ir

_TRANSFORM = re.compile(r"^[\w.<>-]*\(.*\)$")


@dataclass(frozen=True, slots=True)
class LocationInfo:
    name: str  # the raw name of the outermost NameLoc, "" where there is none
    scope: str  # scope of the op itself: its name without the primitive and transform segments
    scope_with_op: str  # for call / while ops: the scope their bodies run in
    file_line: str  # "file:line" or ""

    def describe(self) -> str:
        parts = [p for p in (self.file_line, self.name) if p]
        return " ".join(parts) if parts else "unknown location"


def scope_of(name: str) -> str:
    segments = name.split("/")[:-1] if "/" in name else []
    return "/".join(s for s in segments if s and not _TRANSFORM.match(s) and "->" not in s)


_CACHE: dict = {}
_EMPTY = LocationInfo("", "", "", "")


def location_info(loc: ir.Location) -> LocationInfo:
    key = loc.attr
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    name, file_line = _walk(loc)
    if not name and not file_line:
        info = _EMPTY
    else:
        scope = scope_of(name)
        info = LocationInfo(name, scope, scope, file_line)
    _CACHE[key] = info
    return info


def _walk(loc: ir.Location) -> tuple[str, str]:
    """(outermost name, first file:line) of a location tree."""
    name = ""
    file_line = ""
    stack = [loc]
    while stack and not (name and file_line):
        cur = stack.pop()
        tid = cur.typeid
        if tid == _NAME:
            n = ir.NameLoc(cur)
            if not name:
                name = n.name_str
            stack.append(n.child_loc)
        elif tid == _FILE:
            if not file_line:
                f = ir.FileLineColLoc(cur)
                file_line = f"{f.filename}:{f.start_line}"
        elif tid == _CALLSITE:
            c = ir.CallSiteLoc(cur)
            stack.append(c.caller)
            stack.append(c.callee)  # popped first: the innermost frame is the user's line
        elif tid == _FUSED:
            stack.extend(reversed(list(ir.FusedLoc(cur).locations)))
    return name, file_line


_NAME = ir.NameLoc.static_typeid
_FILE = ir.FileLineColLoc.static_typeid
_CALLSITE = ir.CallSiteLoc.static_typeid
_FUSED = ir.FusedLoc.static_typeid
