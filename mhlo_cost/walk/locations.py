"""Scope paths and source positions from MLIR locations, read through jaxlib's typed location classes.

JAX writes the name stack into a ``NameLoc``: ``jit(f)/blocks_3/attn/dot_general``. The last segment
is the primitive; call wrappers (``jit(f)``, ``pjit(f)``, ``shard_map(f)``) and einsum specs
(``bij,bjk->bik``) are not scopes a user wrote and are dropped; transform wrappers around a user's scope
(``jvp(blocks_0)``, ``transpose(jvp(blocks_1))``, ``vmap(attn)``) are unwrapped to it. The markers
``jax.checkpoint`` leaves (``checkpoint``, ``rematted_computation``) are dropped, and a segment repeated
right after itself (``transpose(jvp(layers.0))/jvp(layers.0)/...``, the forward a backward recomputes)
counts once. What remains is the scope: ``blocks_3/attn``. Any other ``name(...)`` segment is a user's
scope and stays. The raw name is kept (:attr:`LocationInfo.name`): the training phases read it.
A ``FileLineColLoc`` inside gives the user's source position.
"""
from __future__ import annotations

import re
from types import SimpleNamespace
from jaxlib.mlir import ir

from .row import LocationInfo  # noqa: F401 (imported from here too)

_WRAPPED = re.compile(r"^([\w.<>-]+)\((.*)\)$")
#: Wrappers that name a call, not a scope: dropped with what they wrap.
_CALL_WRAPPERS = frozenset({"jit", "pjit", "xla_pmap", "pmap", "shard_map", "xla_call", "core_call",
                            "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "remat_call"})
#: Transformations applied to a user's scope: unwrapped to it.
_TRANSFORMS = frozenset({"jvp", "transpose", "vmap", "batch", "linearize", "remat", "checkpoint", "vjp"})
#: Bare segments that ``jax.checkpoint`` writes around the computation it saves or recomputes: not scopes.
_MARKERS = frozenset({"checkpoint", "rematted_computation"})


def _segment(seg: str) -> str:
    """The user's scope in one name-stack segment ("" for none)."""
    while True:
        m = _WRAPPED.match(seg)
        if m is None:
            return "" if "->" in seg or seg in _MARKERS else seg
        if m.group(1) in _CALL_WRAPPERS:
            return ""
        if m.group(1) not in _TRANSFORMS:
            return seg
        seg = m.group(2)


def scope_of(name: str) -> str:
    segments = name.split("/")[:-1] if "/" in name else []
    out: list[str] = []
    for s in map(_segment, segments):
        if s and (not out or out[-1] != s):
            out.append(s)
    return "/".join(out)


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

    # -- what a split walk (mhlo_cost.walk.split) reads and adds: its fork's locations, by the same keys ---------
    def get(self, key: int | None) -> LocationInfo | None:
        return self._map.get(key)

    def put(self, key: int, info: LocationInfo) -> None:
        self._map[key] = info

    def keys(self) -> dict[int, int]:
        """id(location info) -> its key, for every location met so far."""
        return {id(info): key for key, info in self._map.items()}

    @property
    def file_lines(self) -> dict:
        """The memo of source positions the infos of this cache share."""
        return self._file_lines


def location_info(loc: ir.Location) -> LocationInfo:
    return _location_info(loc, {})


def _location_info(loc: ir.Location, memo: dict) -> LocationInfo:
    name, site = "", 0
    if type(loc) is ir.NameLoc:  # jaxlib's bindings hand back the location's own class: no cast, no typeid read
        name, site = loc.name_str, None  # the site read where it is asked for (_site)
    elif loc.typeid == _NAME:  # bindings that hand back a plain Location
        named = ir.NameLoc(loc)
        name = named.name_str
        child = named.child_loc
        site = hash(child.attr) if child.typeid in (_FILE, _CALLSITE, _FUSED) else 0
    else:  # other producers: the first name anywhere in the tree, innermost call frame first
        stack = [loc]
        while stack and not name:
            cur = stack.pop()
            tid = cur.typeid
            if tid == _NAME:
                name = ir.NameLoc(cur).name_str
            elif tid == _CALLSITE:
                c = ir.CallSiteLoc(cur)
                stack += [c.caller, c.callee]
            elif tid == _FUSED:
                stack.extend(reversed(list(ir.FusedLoc(cur).locations)))
    prefix = name.rpartition("/")[0]  # the scope reads the segments before the primitive only: one per prefix
    scope = _SCOPES.get(prefix)
    if scope is None:
        scope = _SCOPES[prefix] = scope_of(name)
    return LocationInfo(name, scope, loc, memo, READ, site)


def call_stack(loc: ir.Location, memo: dict) -> tuple:
    """The Python frames of a location's call-site chain, outermost first: (function, file, line, column) of
    the call made in each; () where the location has no call-site chain. Memoised per subtree: the ops of one
    call share its callers' frames (the same tuples, which the wire to the parent sends once)."""
    key = ("stack", hash(loc.attr))
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _frames(loc, memo)
    return hit


def _frames(loc: ir.Location, memo: dict) -> tuple:
    tid = loc.typeid
    if tid == _NAME:
        named = ir.NameLoc(loc)
        child = named.child_loc
        if child.typeid == _FILE:
            f = ir.FileLineColLoc(child)
            return ((named.name_str, f.filename, f.start_line, f.start_col),)
        return call_stack(child, memo)
    if tid == _CALLSITE:
        c = ir.CallSiteLoc(loc)
        return call_stack(c.caller, memo) + call_stack(c.callee, memo)
    return ()


def _file_line(loc: ir.Location, memo: dict) -> str:
    """The first file:line in a location tree, innermost call frame first ("" where it has none).

    Memoised per subtree: a shared call-site chain is resolved once for all the ops that point into it.
    """
    tid = loc.typeid
    if tid == _FILE:
        f = ir.FileLineColLoc(loc)
        return f"{f.filename}:{f.start_line}"
    if tid not in (_NAME, _CALLSITE, _FUSED):
        return ""
    key = hash(loc.attr)
    hit = memo.get(key)
    if hit is not None:
        return hit
    if tid == _NAME:
        children = [ir.NameLoc(loc).child_loc]
    elif tid == _CALLSITE:
        c = ir.CallSiteLoc(loc)
        children = [c.callee, c.caller]  # the innermost frame is the user's line
    else:
        children = list(ir.FusedLoc(loc).locations)
    result = ""
    for child in children:
        result = _file_line(child, memo)
        if result:
            break
    memo[key] = result
    return result


_NAME = ir.NameLoc.static_typeid
_FILE = ir.FileLineColLoc.static_typeid
_CALLSITE = ir.CallSiteLoc.static_typeid
_FUSED = ir.FusedLoc.static_typeid
#: The locations under a name that give a framework call's source position (LocationInfo.site).
_SITE_CLASSES = (ir.FileLineColLoc, ir.CallSiteLoc, ir.FusedLoc)


def _site(loc: ir.Location) -> int:
    """The key of the source position under a name location (:attr:`LocationInfo.site`), 0 where there is none."""
    child = loc.child_loc if type(loc) is ir.NameLoc else ir.NameLoc(loc).child_loc
    return hash(child.attr) if type(child) in _SITE_CLASSES or child.typeid in (_FILE, _CALLSITE, _FUSED) else 0


#: How a :class:`LocationInfo` reads its location on first use.
READ = SimpleNamespace(file_line=_file_line, stack=call_stack, site=_site)
