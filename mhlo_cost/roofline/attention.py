"""Attention found in the data flow: dot -> softmax-like chain -> dot, priced as one fused kernel.

:func:`find_attention` looks, for each dot (the ``P V`` product), back along each of its operands through
the rows a fused attention kernel keeps on chip (elementwise, transcendental, reductions, converts,
broadcasts, reshapes, transposes: the scale, mask, max, subtract, exp, sum, divide and casts of a softmax,
however JAX, torchax or torch-xla spell them) to the dot that made the scores (``Q K^T``). It is an
attention when that chain holds an exponential and a reduction, shares the dots' multiplicity, and nothing
outside it that the chain reads depends on the first dot (the kernel would otherwise wait on itself).

The members are the two dots and the chain rows on a path between them. In the fused estimate
(:func:`.fusion.fuse` with ``attention="fused"``) they are one kernel: FLOPs unchanged, HBM traffic Q, K,
V, the mask (and any other outside input) read once and O written once; the B x H x S x S scores never
leave the chip (flash attention). A score that something outside the kernel reads (the probabilities
saved for a backward pass) is still written.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..visitors.row import short_name

#: Data ops a fused attention kernel keeps on chip (besides no-kernel ops: reshape, constant, ...).
_CHAIN_DATA = frozenset({
    "convert", "transpose", "broadcast_in_dim", "broadcast", "iota", "slice", "reduce_precision", "copy",
    "reshape", "bitcast", "select", "compare", "clamp", "dynamic_slice", "concatenate", "pad",
})
_MAX_CHAIN = 256  # rows walked back from one dot operand


@dataclass(frozen=True)
class Attention:
    """One attention: its score dot, its output dot, and every member row (program order)."""

    qk: int
    pv: int
    members: tuple[int, ...]


def _in_chain(r) -> bool:
    if r.kind in ("elementwise", "transcendental", "reduce"):
        return True
    return r.kind in ("data", "free", "other") and short_name(r.op) in _CHAIN_DATA or short_name(r.op) in (
        "reshape", "constant", "bitcast")


def _walk_back(rows, producers, start: int):
    """Rows reached back from ``start`` through chain rows, and the dots where the walk stops."""
    seen, dots, stack = set(), set(), [start]
    while stack and len(seen) < _MAX_CHAIN:
        i = stack.pop()
        if i in seen:
            continue
        r = rows[i]
        if r.kind == "dot":
            dots.add(i)
            continue
        if not _in_chain(r):
            continue
        seen.add(i)
        stack.extend(p for p in producers[i] if isinstance(p, int))
    return seen, dots


def _forward_from(qk: int, chain: set, producers) -> set:
    """The chain rows with a path from ``qk`` (in program order, so one pass suffices)."""
    reached = {qk}
    for i in sorted(chain):
        if any(isinstance(p, int) and p in reached for p in producers[i]):
            reached.add(i)
    return reached - {qk}


def _depends_on(producers, start: int, target: int, budget: int = 4096) -> bool:
    """Whether row ``start`` depends on row ``target`` (within a budget; over budget counts as yes)."""
    stack, seen = [start], set()
    while stack:
        i = stack.pop()
        if i == target:
            return True
        if i < target or i in seen:
            continue
        seen.add(i)
        budget -= 1
        if budget < 0:
            return True
        stack.extend(p for p in producers[i] if isinstance(p, int))
    return False


def _match(rows, producers, pv: int, operand: int):
    """The attention whose probabilities are operand ``operand`` of dot ``pv``, or None."""
    p = producers[pv][operand] if operand < len(producers[pv]) else None
    if not isinstance(p, int):
        return None
    chain, dots = _walk_back(rows, producers, p)
    if not any(rows[i].kind == "reduce" for i in chain) or not any(
            short_name(rows[i].op) == "exponential" for i in chain):
        return None  # every path below is in the chain: no softmax there, no attention (and no search)
    mult = rows[pv].multiplicity
    for qk in sorted(dots, reverse=True):
        if rows[qk].multiplicity != mult:
            continue
        path = _forward_from(qk, chain, producers)
        names = {short_name(rows[i].op) for i in path}
        if "exponential" not in names or not any(rows[i].kind == "reduce" for i in path):
            continue
        members = path | {qk, pv}
        outside = {q for i in path | {pv} for q in producers[i] if isinstance(q, int) and q not in members}
        if any(q > qk and _depends_on(producers, q, qk) for q in outside):
            continue
        if any(rows[i].multiplicity != mult for i in path):
            continue
        return Attention(qk, pv, tuple(sorted(members)))
    return None


def find_attention(rows, producers) -> list[Attention]:
    """Every attention of a program (see the module docstring), program order, no row in two."""
    found: list[Attention] = []
    taken: set = set()
    for i, r in enumerate(rows):
        if r.kind != "dot" or i in taken:
            continue
        for operand in (0, 1):
            att = _match(rows, producers, i, operand)
            if att is not None and not taken.intersection(att.members):
                found.append(att)
                taken.update(att.members)
                break
    return found
