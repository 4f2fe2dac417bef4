"""Blocks numbered without a separator, as timm's RegNet names them: ``s1/b1`` ... ``s4/b7`` (``s1.b1`` as a
torch module path).

A candidate is a path component ``name{i}`` whose name ends in a letter (``b1``, ``layer2``; not ``conv2d``)
and that no index follows (``layer1.0`` is left to the ``name.{i}`` pattern: its ``.0`` numbers the blocks).
Its family is the name at its place with the indices of the path above it read as ``#``: ``s3/b2`` and
``s4/b5`` are members of one family ``(s#/, b, #)``. Names so numbered are as often single layers (``conv1``,
``fc2``, ``act3``), so a family names blocks only where it has two members at least, each with deeper scopes
and :data:`MIN_NUMBERED_MATMULS` matrix products (GEMM or convolution rows) at least: a Bottleneck's
``conv1`` (one convolution and its norm) is none. The scope collector decides the rest (a family of stages
gives way to the units inside it: :func:`~mhlo_cost.analysis.collectors.scope._is_group`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from itertools import compress

from . import is_matmul
from .towers import with_towers

#: The separator of a numbered family's key (``s1/b1``: none).
NUMBERED = "#"
#: Fewest matrix products (GEMM or convolution rows) in each member of a numbered family that names blocks.
MIN_NUMBERED_MATMULS = 2

_B = r"(?:^|(?<=[/.]))"  # start of a path component
_E = r"(?=$|[/.\[])"  # end of a path component
_MATCH = re.compile(_B + r"([A-Za-z](?:[A-Za-z_-]*[A-Za-z])?)(\d+)" + _E + r"(?!(?:[./]\d+|\[\d+\])(?=$|[/.\[]))")
_INDICES = re.compile(r"\d+(?=$|[/.\[\]])")  # the indices in the path above a numbered name
_INDEX = re.compile(r"(?<=[A-Za-z])(\d+)(?=$|[/.\[])")


def numbered_matches(path: str) -> list[tuple[int, int, tuple, int]]:
    """``(start, end, family, index)`` of each component of ``path`` numbered without a separator; the
    family is ``(the path above with its indices as #, the name, #)``."""
    return [(m.start(), m.end(), (_INDICES.sub(NUMBERED, path[: m.start()]), m.group(1), NUMBERED),
             int(m.group(2))) for m in _MATCH.finditer(path)]


def numbered_ok(rows, scopes: list[str], cands: dict) -> dict:
    """Numbered family -> whether it has two members at least, each with MIN_NUMBERED_MATMULS matrix products
    at least (``cands``: each scope's candidates; only the rows of scopes with a numbered one are looked at)."""
    want = {p for p, cs in cands.items() if any(c.family[2] == NUMBERED for c in cs)}
    if not want:
        return {}
    per_scope = dict.fromkeys(want, 0)
    for i in compress(range(len(rows)), map(want.__contains__, scopes)):
        if is_matmul(rows[i]):
            per_scope[scopes[i]] += 1
    members: dict[tuple, dict[str, int]] = {}
    for p in want:
        for c in cands[p]:
            if c.family[2] == NUMBERED:
                at = members.setdefault(c.family, {})
                at[c.name] = at.get(c.name, 0) + per_scope[p]
    return {f: len(m) > 1 and min(m.values()) >= MIN_NUMBERED_MATMULS for f, m in members.items()}


def with_numbered_towers(blocks, numbered: set):
    """:func:`~mhlo_cost.analysis.collectors.towers.with_towers`, where the indices in the ``numbered`` blocks'
    names are indices too: RegNet's ``s1/b1`` and ``s4/b7`` are blocks of one tower (read as ``s.1/b.1``)."""
    if not numbered:
        return with_towers(blocks)
    read = [replace(b, name=_INDEX.sub(r".\1", b.name)) if b.name in numbered else b for b in blocks.blocks]
    kinds = with_towers(replace(blocks, blocks=read)).blocks
    return replace(blocks, blocks=[replace(b, kind=k.kind) for b, k in zip(blocks.blocks, kinds)])
