"""Blocks from scope paths: ``spatial_blocks.3/attn`` is block ``spatial_blocks.3``, part ``attn``.

Default patterns: a name followed by an index, written as JAX named scopes, flax module paths and torch
module paths write them: ``name.{i}`` (``spatial_blocks.3``, ``h.11``, ``layers.0.attn.qkv``),
``name_{i}`` (``blocks_3``, flax ``Block_3``), ``name[{i}]`` and ``name/{i}``. A name with a number
inside it (``conv2d``, ``fc1``) is no block; a ``Sequential`` in a ``Sequential`` (timm's EfficientNet)
writes ``blocks.2.1``, block 1 of ``blocks.2``. The outermost match of an eligible family is the block; a
family (the same name under the same prefix) is eligible when its members contain parts (deeper scopes)
or hold a large share of the compute, and, for ``name_{i}`` (which flax also gives to every
``Dense_0``), when it has several indices. A family whose members are groups of repeated blocks
(stages of blocks: ConvNeXt's, Swin's, EfficientNet's, NFNet's) gives way to those blocks, the finest
repeated unit that carries weights, where they carry most of its compute and are identical, or direct
children alike in their matrix products: all of them, or those after each group's first (which may
downsample: NFNet's ``stages.1.0``), two such at least in one group. ``stages=True`` keeps the outermost
families (``--blocks stages``).

Blocks numbered without a separator, as timm's RegNet names them (``s1/b1`` ... ``s4/b7``; ``s1.b1`` as a
torch module path): a component ``name{i}`` whose name ends in a letter, no index after it. Such names are
as often single layers (``conv1``, ``fc2``), so a family of them (indices in the path above ignored: ``s3/b2``
and ``s4/b5`` are one) names blocks only where it has two members at least, each with deeper scopes and two
matrix products at least (:mod:`.numbered`); RegNet's stages ``s1`` ... ``s4`` give way to their 13 units.

A user ``pattern`` (regular expression) overrides the defaults: its first group, or the whole match,
names the block.

Loops: a ``jax.lax.scan`` over layers gives rows scoped ``while/body/layers/attn`` of multiplicity N; where
the body holds no named block, it becomes N blocks ``layers.0`` ... ``layers.{N-1}`` named after the first
scope under ``while/body``, and every body row is split evenly over them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress
from operator import not_

from . import Block, Blocks, fill_nearest, index_of, is_matmul, kind_of, loop_runs, nearest_groups, row_scopes
from .numbered import NUMBERED, numbered_matches, numbered_ok, with_numbered_towers
from .perrow import ScopeWork

_B = r"(?:^|(?<=[/.]))"  # start of a path component
_E = r"(?=$|[/.\[])"  # end of a path component
DEFAULT_PATTERNS = (
    ("dot", re.compile(_B + r"([A-Za-z_][\w-]*)([./])(\d+)" + _E)),
    ("under", re.compile(_B + r"([A-Za-z][\w-]*?)_(\d+)" + _E)),
    ("bracket", re.compile(_B + r"([A-Za-z_][\w-]*)\[(\d+)\]" + _E)),
)
_NESTED = re.compile(r"([./])(\d+)" + _E)  # blocks.2 -> blocks.2.1
_PART = re.compile(r"[/.]*([^/.\[]+)")
_LOOP_BODY = re.compile(r"(?:^|/)while/body(?=/|$)")

#: Share of all compute (GEMM + conv + vector FLOPs) that makes a family of leaf scopes blocks.
MIN_SHARE = 0.25


@dataclass(frozen=True)
class _Cand:
    start: int
    name: str  # block name: the path up to the index
    family: tuple  # (prefix, base name, separator)
    index: int | None
    part: str
    end: int = 0  # where the index ends in the path


def _clean(name: str) -> str:
    return _LOOP_BODY.sub("", name).lstrip("/") or name


def _part_after(path: str, end: int) -> str:
    m = _PART.match(path, end)
    return m.group(1) if m else ""


class ScopeCollector:
    def __init__(self, pattern: str | None = None, stages: bool = False):
        self.pattern = re.compile(pattern) if pattern else None
        self.stages = stages
        self._cache: dict[str, list[_Cand]] = {}

    # -- candidates ---------------------------------------------------------------------------------------
    def candidates(self, path: str) -> list[_Cand]:
        hit = self._cache.get(path)
        if hit is not None:
            return hit
        out: list[_Cand] = []
        if not path:
            pass
        elif self.pattern is not None:
            m = self.pattern.search(path)
            if m and m.group(0):
                if m.groups() and m.group(1):
                    name, end = m.group(1), m.end(1)
                else:
                    name, end = m.group(0), m.end(0)
                start = end - len(name)
                name = name.strip("/.")
                _, idx = index_of(name)
                parent = _clean(path[:start]).rstrip("/.") if start > 0 else ""
                out.append(_Cand(m.start(), name, (parent, self.pattern.pattern, "re"), idx,
                                 _part_after(path, max(end, m.end()))))
        else:
            for tag, rx in DEFAULT_PATTERNS:
                for m in rx.finditer(path):
                    base = m.group(1)
                    if tag == "dot":
                        sep, idx = m.group(2), int(m.group(3))
                    elif tag == "under":
                        sep, idx = "_", int(m.group(2))
                    else:
                        sep, idx = "[", int(m.group(2))
                    prefix = path[: m.start()]
                    out.append(_Cand(m.start(), _clean(path[: m.end()]), (prefix, base, sep), idx,
                                     _part_after(path, m.end()), m.end()))
                    if tag != "under":
                        out.extend(_nested(path, m.end()))
            out.extend(_numbered_cands(path))
            out.sort(key=lambda c: c.start)
        self._cache[path] = out
        return out

    # -- collection --------------------------------------------------------------------------------------
    def collect(self, rows) -> Blocks:
        # Rows of one scope share everything but their position: the scopes' facts are found once each (in
        # the order they first appear), and the rows read theirs by their scope.
        scopes = row_scopes(rows)
        cands = {s: self.candidates(s) for s in dict.fromkeys(scopes)}
        work = None if self.pattern is not None else ScopeWork(rows, scopes)
        eligible = self._eligible(work, cands, numbered_ok(rows, scopes, cands))
        if self.pattern is None and not self.stages:
            eligible -= _groups_of_blocks(rows, scopes, cands, eligible, work)
        names, parts, info, parents = _named_rows(cands, eligible, scopes)
        loop_blocks = _loop_blocks(rows, scopes, names, parts)
        blocks, row_blocks = _numbered(names, info, loop_blocks)
        groups = nearest_groups(rows, scopes)
        notes = []
        if loop_blocks:
            notes.append(f"{len(loop_blocks)} loop bod{'y' if len(loop_blocks) == 1 else 'ies'} split into "
                         "iterations")
        warnings = _merged(parents, self.pattern.pattern) if self.pattern is not None else []
        method = "stages" if self.stages and self.pattern is None else "scope"
        numbered = {c.name for cs in cands.values() for c in cs if c.family[2] == NUMBERED and c.family in eligible}
        return with_numbered_towers(Blocks(method, blocks, row_blocks, parts, groups, notes, warnings), numbered)

    def _eligible(self, work: ScopeWork | None, cands: dict, numbered_ok: dict) -> set:
        """The candidate families that name blocks (``cands``: each scope's candidates; ``work``: their FLOPs,
        summed only where a family without parts needs them; ``numbered_ok``: numbered families whose members
        all hold enough matrix products)."""
        if self.pattern is not None:
            return {c.family for cs in cands.values() for c in cs}
        indices: dict[tuple, set] = {}
        has_part: dict[tuple, bool] = {}
        paths: dict[tuple, list] = {}  # family -> the scopes with a candidate of it
        for path, cs in cands.items():
            for c in cs:
                f = c.family
                indices.setdefault(f, set()).add(c.index)
                has_part[f] = has_part.get(f, False) or bool(c.part)
                at = paths.setdefault(f, [])
                if not at or at[-1] != path:  # each scope once
                    at.append(path)
        out = set()
        for f, idx in indices.items():
            if f[2] == NUMBERED:
                if has_part[f] and numbered_ok.get(f):
                    out.add(f)
                continue
            if f[2] == "_" and len(idx) < 2:
                continue
            if has_part[f] or (work.total and work.of(paths[f]) >= MIN_SHARE * work.total):
                out.add(f)
        return out


#: Share of a family's compute its inner repeated blocks must hold for it to count as a group of blocks.
INNER_SHARE = 0.8


def _nested(path: str, end: int) -> list[_Cand]:
    """Candidates for the indices right after the index that ends at ``end``: ``blocks.2.1`` is block 1 of
    ``blocks.2``; the family of ``blocks.2``'s members is ``("blocks.2", "", ".")``."""
    out = []
    m = _NESTED.match(path, end)
    while m:
        out.append(_Cand(m.start() + 1, _clean(path[: m.end()]), (path[: m.start()], "", m.group(1)),
                         int(m.group(2)), _part_after(path, m.end()), m.end()))
        m = _NESTED.match(path, m.end())
    return out


def _numbered_cands(path: str) -> list[_Cand]:
    """Candidates for the components numbered without a separator (``s1/b1``; see :mod:`.numbered`)."""
    return [_Cand(start, _clean(path[:end]), family, idx, _part_after(path, end), end)
            for start, end, family, idx in numbered_matches(path)]


def _groups_of_blocks(rows, scopes: list[str], cands: dict, eligible: set, work: ScopeWork) -> set:
    """Eligible families that are groups of blocks rather than blocks: every member holds a run of inner
    blocks of one family, which carry most of its compute and are either identical (timm's ConvNeXt
    ``stages.1/blocks.2``, a ResNet's stages) or its direct children alike in their matrix products, each
    with one at least: the finest repeated unit that carries weights (Swin's ``layers.1/blocks.0`` and
    its shifted ``blocks.1``, EfficientNet's ``blocks.2.0`` whose stride differs from ``blocks.2.1``).
    Blocks whose inner units differ stay blocks: T5's ``block.0/layer.0`` (attention) and ``layer.1``
    (MLP). ``cands`` and ``work``: each scope's candidates and FLOPs; ``scopes``: each row's scope."""
    members: dict[tuple, set] = {}  # outer family -> its member names
    outer_paths: dict[tuple, list] = {}  # outer family -> the scopes in its members
    inner_paths: dict[tuple, list] = {}  # inner key -> the scopes in its members
    direct: dict[tuple, bool] = {}  # inner blocks right below the outer one (layers.1/blocks.0, blocks.2.1)
    in_inner: dict[str, tuple] = {}  # scope -> (inner key, outer member, inner member) of its rows
    for path, cs in cands.items():
        got = _outer_inner(cs, eligible, members, direct)
        if got is None:
            continue
        o, key, name = got
        outer_paths.setdefault(o.family, []).append(path)
        if key is not None:
            inner_paths.setdefault(key, []).append(path)
            in_inner[path] = (key, o.name, name)
    inner: dict[tuple, dict] = {}  # (outer family, inner base, sep) -> outer member -> inner member -> ops
    for i in compress(range(len(rows)), map(in_inner.__contains__, scopes)):
        r = rows[i]
        key, outer, name = in_inner[scopes[i]]
        inner.setdefault(key, {}).setdefault(outer, {}).setdefault(name, []).append((r.op, r.shape, is_matmul(r)))
    out = set()
    for key, by_outer in inner.items():
        fam = key[0]
        if set(by_outer) != members[fam] or not any(len(v) > 1 for v in by_outer.values()) \
                or work.of(inner_paths[key]) < INNER_SHARE * work.of(outer_paths[fam]):
            continue
        if _is_group(by_outer, direct[key], NUMBERED in (fam[2], key[-1])):
            out.add(fam)
    return out


def _is_group(by_outer: dict, direct: bool, numbered: bool) -> bool:
    """Whether the inner units of each outer member (``by_outer``: outer member -> inner member -> its ops)
    make the outer ones groups of blocks: identical units; or direct children alike in their matrix
    products, all of them or those after each group's first (which may downsample: NFNet's ``stages.1.0``,
    RegNet's ``s3/b1``), two of them at least in one group. Where either family is numbered (``s1/b1``),
    only the latter: a transformer block's ``attn1`` and ``attn2`` are no blocks of it."""
    rest = [list(v.values())[1:] for v in by_outer.values()]
    after_first = direct and any(len(r) > 1 for r in rest) and all(_alike(r) for r in rest if r)
    if numbered:
        return after_first
    return after_first or all(len({tuple(ops) for ops in v.values()}) == 1 for v in by_outer.values()) \
        or (direct and all(_alike(v.values()) for v in by_outer.values()))


def _outer_inner(cs, eligible: set, members: dict, direct: dict):
    """For the rows of one candidate list: None where no candidate is eligible, else the outer candidate, the
    key of the inner one (None where there is none) and its name. Records the outer member and whether the
    inner one is right below it."""
    el = [c for c in cs if c.family in eligible]
    if not el:
        return None
    o = el[0]
    members.setdefault(o.family, set()).add(o.name)
    if len(el) == 1:
        return o, None, ""
    key = (o.family,) + el[1].family[1:]
    direct[key] = direct.get(key, True) and el[1].start == o.end + 1
    return o, key, el[1].name


def _alike(units) -> bool:
    """Whether inner blocks (each a list of (op, shape, is matmul)) run the same matrix products in the same
    order (shapes aside), one at least."""
    sigs = {tuple(op for op, _, mm in ops if mm) for ops in units}
    return len(sigs) == 1 and bool(next(iter(sigs)))


def _merged(parents: dict[str, set], pattern: str) -> list[str]:
    """A warning where a --block-pattern names one block in scopes of different parents."""
    merged = {n: sorted(p) for n, p in parents.items() if len(p) > 1}
    if not merged:
        return []
    name, where = next(iter(merged.items()))
    shown = ", ".join(w or "(top)" for w in where[:3]) + (" ..." if len(where) > 3 else "")
    return [f"--block-pattern merges blocks of different parents into one: {name} is found under {shown}"
            f"{f' (and {len(merged) - 1} more block(s) alike)' if len(merged) > 1 else ''}; include the "
            f"parent in the pattern to keep them apart (e.g. --block-pattern '(?:[^/]+/)?{pattern}')"]


def _before_body(scope: str) -> str:
    """The scope path before the first (outermost) ``while/body`` ("" where there is none)."""
    segs = scope.split("/") if scope else []
    for i in range(1, len(segs)):
        if segs[i] == "body" and segs[i - 1] == "while":
            return "/".join(x for x in segs[:i - 1] if x)
    return ""


def _after_body(scope: str) -> list[str]:
    """Scope segments after the first (outermost) ``while/body`` (empty where the scope has none)."""
    segs = scope.split("/") if scope else []
    for i in range(1, len(segs)):
        if segs[i] == "body" and segs[i - 1] == "while":
            return [s for s in segs[i + 1:] if s]
    return []


def _named_rows(cands: dict, eligible: set, scopes: list[str]):
    """Each row's block name and part from its scope's first eligible candidate; rows without a scope
    (constants) between two rows of one block belong to it. Also each name's (kind, index) and the families
    it came from."""
    info: dict[str, tuple[str, int | None]] = {}
    parents: dict[str, set] = {}
    name_of: dict[str, str] = {}
    part_of: dict[str, str] = {}
    for path, cs in cands.items():
        c = next((c for c in cs if c.family in eligible), None)
        name_of[path], part_of[path] = (c.name, c.part) if c is not None else ("", "")
        if c is not None:
            if c.name not in info:
                info[c.name] = (kind_of(c.family[1] if c.family[2] == NUMBERED else c.name), c.index)
            parents.setdefault(c.name, set()).add(c.family[0])
    names = list(map(name_of.__getitem__, scopes))
    parts = list(map(part_of.__getitem__, scopes))
    unscoped = list(compress(range(len(scopes)), map(not_, scopes)))  # named and parted "" so far
    if unscoped:
        filled = fill_nearest(names, "", same_only=True)
        for i in unscoped:
            names[i] = filled[i]
        # A row without a name has no part: the parts' neighbours are those of the named rows.
        part_filled = fill_nearest(parts, "", same_only=True)
        for i in unscoped:
            if names[i]:
                parts[i] = part_filled[i]
    return names, parts, info, parents


def _loop_blocks(rows, scopes: list[str], names: list[str], parts: list[str]) -> list:
    """Loop bodies without named blocks: N blocks per family named after the first scope under while/body,
    as ``(first row, blocks, [(row, block offsets)])``; sets the parts of their rows."""
    out = []
    for s, e, trips in loop_runs(rows):
        if any(names[s:e]):
            continue
        fams, fparts = [], []
        for i in range(s, e):
            rest = _after_body(scopes[i])
            fams.append(rest[0] if rest else "")
            fparts.append(rest[1] if len(rest) > 1 else "")
        if not any(fams):
            continue  # an unnamed loop: the positional collectors' business
        order = list(dict.fromkeys(f for f in fams if f))
        fams = fill_nearest(fams, order[0])
        # The scope around the loop tells two loops apart (encoder/layers.0, decoder/layers.0).
        outer = _before_body(scopes[s])
        blocks_here = []
        for k in range(trips):
            for f in order:
                base, _ = index_of(f)
                name = f"{base}.{k}"
                blocks_here.append(Block(f"{outer}/{name}" if outer else name, kind_of(name), k))
        rows_here = []
        for j, i in enumerate(range(s, e)):
            fi = order.index(fams[j])
            rows_here.append((i, tuple(k * len(order) + fi for k in range(trips))))
            parts[i] = fparts[j]
        out.append((s, blocks_here, rows_here))
    return out


def _numbered(names: list[str], info: dict, loop_blocks: list) -> tuple[list[Block], list[tuple[int, ...]]]:
    """Blocks numbered in program order (named blocks at their first row, loop blocks at their loop's), and
    each row's block ids."""
    first = dict(zip(reversed(names), range(len(names) - 1, -1, -1)))  # the earliest row of each name stays
    first.pop("", None)
    items = [(pos, 0, ("named", nm)) for nm, pos in first.items()]
    items += [(lb[0], 1, ("loop", lb)) for lb in loop_blocks]
    items.sort(key=lambda t: (t[0], t[1]))
    blocks: list[Block] = []
    single: dict[str, tuple] = {"": ()}  # one tuple per block, shared by its rows
    loops = []
    for _, _, (what, data) in items:
        if what == "named":
            single[data] = (len(blocks),)
            kind, idx = info.get(data, (kind_of(data), None))
            blocks.append(Block(data, kind, idx))
        else:
            _, bl, rows_here = data
            loops.append((len(blocks), rows_here))
            blocks.extend(bl)
    row_blocks = list(map(single.__getitem__, names))
    for base, rows_here in loops:  # a loop body's rows have no name
        for i, bids in rows_here:
            row_blocks[i] = tuple(base + b for b in bids)
    return blocks, row_blocks
