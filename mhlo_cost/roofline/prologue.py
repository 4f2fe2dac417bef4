"""The weight-only dequantise fused into its GEMM (prologue fusion, :mod:`.fusion`'s rule for a dot).

Marlin, AWQ and Machete kernels read the packed integer weight with its scales and zeros and dequantise in
registers; the bf16 weight never reaches memory. :func:`prologue_kernels` finds, per operand of a dot, the
open kernels upstream of it that form such a dequantise: no dot, reduction or attention among them, the dot
the only reader (outside them) of what they compute, and the signature of a dequantise among them: a
``convert`` from an integer of 2..8 bits (``i1`` masks excluded) or a float of at most 8 bits, which no bf16
program feeds a GEMM with. (The unpacking's ``and`` and ``shift`` each open a kernel of the grouping, so the
dequantise is usually several kernels; the dot takes them all in.) Since nothing else reads what the taken
kernels compute, taking them in makes no cycle.
"""
from __future__ import annotations

import re

from ..walk.row import short_name

_INT = re.compile(r"^(?:u|s)?i(\d+)$")
_FLOAT = re.compile(r"^f(\d+)")
_THROUGH = ("free", "dup")  # roles of the rows looked through (no kernel of their own)


def narrow(dtype: str) -> bool:
    """Whether ``dtype`` (MLIR's spelling) is an integer of 2..8 bits or a float of at most 8 bits."""
    m = _INT.match(dtype)
    if m:
        return 2 <= int(m.group(1)) <= 8
    m = _FLOAT.match(dtype)
    return bool(m) and int(m.group(1)) <= 8


def _narrow_convert(row) -> bool:
    return short_name(row.op) == "convert" and bool(row.operands) and narrow(row.operands[0].dtype)


def _through(g, r: int) -> bool:
    return g.row_kernel[r] is None and g.role[r] in _THROUGH


def _eligible(g, k: int, mult: int) -> bool:
    kern = g.kernels[k]
    if kern.closed or kern.has_dot or kern.attention or kern.multiplicity != mult:
        return False
    return not any(g.rows[m].kind in ("dot", "conv", "reduce") for m in kern.members)


def dequantises(g, members) -> bool:
    """Whether ``members`` (rows) hold, or read through a duplicated / no-kernel row, a convert from a
    narrow type."""
    seen, todo = set(), list(members)
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        if _narrow_convert(g.rows[r]):
            return True
        todo.extend(p for p in g.producers[r] if isinstance(p, int) and _through(g, p))
    return False


def read_only_by(g, members, inside: set, i: int) -> bool:
    """Whether every reader of ``members`` is dot ``i`` or a row of the kernels ``inside`` (looking through
    the duplicated / no-kernel rows placed before ``i``); a member nobody reads (a program output) fails."""
    cons = g.consumers()
    seen, todo = set(), list(members)
    while todo:
        readers = cons[todo.pop()]
        if not readers:
            return False
        for c in readers:
            if c == i or c in seen or g.row_kernel[c] in inside:
                continue
            if c < i and _through(g, c):
                seen.add(c)
                todo.append(c)
            else:
                return False
    return True


def _feeders(g, members, out: set) -> set:
    for m in members:
        g.candidates(m, out)
    return out


def _operand_kernels(g, p) -> set:
    """The kernels producing operand ``p`` of a row (looking through duplicated / no-kernel rows)."""
    if not isinstance(p, int):
        return set()
    if g.row_kernel[p] is not None:
        return {g.row_kernel[p]}
    return g.candidates(p, set()) if _through(g, p) else set()


def _taken_from(g, i: int, frontier: set, mult: int) -> set:
    """The kernels upstream of ``frontier`` that dot ``i`` may take in: eligible, of its phase and read only by
    the dot and the kernels already taken, added until no more are."""
    taken: set = set()
    while frontier:
        added = [k for k in sorted(frontier, reverse=True)
                 if k not in taken and _eligible(g, k, mult) and g.same_phase(i, k)
                 and read_only_by(g, g.kernels[k].members, taken | {k}, i)]
        if not added:
            break
        taken.update(added)
        frontier = _feeders(g, [m for k in added for m in g.kernels[k].members], set()) - taken
    return taken


def prologue_kernels(g, i: int) -> list[int]:
    """The kernels dot ``i`` of grouper ``g`` takes in as its prologue (sorted; empty: none): per operand,
    the kernels upstream of it that it may take in (:func:`_taken_from`), where they dequantise."""
    mult = g.rows[i].multiplicity
    out: set = set()
    for p in g.producers[i]:
        taken = _taken_from(g, i, _operand_kernels(g, p), mult) - out
        if taken and dequantises(g, [m for k in taken for m in g.kernels[k].members]):
            out |= taken
    return sorted(out)
