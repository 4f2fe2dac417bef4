"""Attention found in the data flow: dot -> softmax-like chain -> dot, priced as one fused kernel.

:func:`find_attention` looks, for each dot (the ``P V`` product), back along each of its operands through
the rows a fused attention kernel keeps on chip (elementwise, transcendental, reductions, converts,
broadcasts, reshapes, transposes: the scale, mask, max, subtract, exp, sum, divide and casts of a softmax,
however JAX, torchax or torch-xla spell them) to the dot that made the scores (``Q K^T``). It is an
attention when that chain holds an exponential and a reduction, shares the dots' multiplicity, and nothing
outside it that the chain reads depends on the first dot (the kernel would otherwise wait on itself).

The members are the two dots and the chain rows on a path between them. In the fused estimate
(:func:`.program.fuse` with ``attention="fused"``) they are one kernel: FLOPs unchanged, HBM traffic Q, K,
V, the mask (and any other outside input) read once and O written once; the B x H x S x S scores never
leave the chip (flash attention). A score that something outside the kernel reads (the probabilities
saved for a backward pass) is still written.

The backward kernels of a training program are found in :mod:`.attention_backward`; the compute time of one
fused kernel is :func:`.attention_compute.kernel_compute_s`.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from ..walk.row import short_name

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


def shape_of(res) -> tuple:
    """The shape of a row's result (its first, where it has several) or of one tensor."""
    t = res if hasattr(res, "shape") else res[0]
    return tuple(t.shape)


def _in_chain(r) -> bool:
    if r.kind in ("elementwise", "transcendental", "reduce"):
        return True
    return r.kind in ("data", "free", "other") and short_name(r.op) in _CHAIN_DATA or short_name(r.op) in (
        "reshape", "constant", "bitcast")


def _walk_back(rows, producers, start: int):
    """Rows reached back from ``start`` through chain rows, and the dots where the walk stops. Nearest rows
    first (breadth first), so that the cap cuts the far ones: a tensorwise fp8 scale's amax reads back through
    norms and residual adds into earlier layers, and a depth-first walk spent the cap there before it met the
    layer's own score dot (an fp8 KV cache's GPT-J decode found two attentions of 28)."""
    seen, dots, stack = set(), set(), deque([start])
    while stack and len(seen) < _MAX_CHAIN:
        i = stack.popleft()
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


def _links(chain: set, producers) -> tuple[list, list, bool]:
    """The chain rows in program order, the row producers of each, and whether any of them reads a row at or after
    its own (then no chain row before a dot can be skipped): made once per walk for :func:`_forward_from`."""
    order = sorted(chain)
    reads = [tuple(p for p in producers[i] if isinstance(p, int)) for i in order]
    backward = all(p < i for i, ps in zip(order, reads) for p in ps)
    return order, reads, backward


def _forward_from(qk: int, links: tuple) -> set:
    """The chain rows with a path from ``qk`` (in program order, so one pass suffices); ``links``:
    :func:`_links` of the chain. Where every chain row reads earlier rows only, none before ``qk`` is reached."""
    order, reads, backward = links
    reached = {qk}
    for n in range(bisect_right(order, qk) if backward else 0, len(order)):
        if not reached.isdisjoint(reads[n]):
            reached.add(order[n])
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


_LOOK_THROUGH = frozenset({"transpose", "convert", "reshape", "copy", "bitcast", "broadcast_in_dim"})


def _source(rows, producers, i):
    """The value behind row ``i`` looking through layout and dtype changes (an int row, or a key)."""
    for _ in range(16):
        if not isinstance(i, int) or short_name(rows[i].op) not in _LOOK_THROUGH:
            return i
        srcs = producers[i]
        i = srcs[0] if srcs else i
    return i


def _shares_matrix(rows, producers, qk: int, pv: int, chain_in) -> bool:
    """Whether the output dot reads a matrix the score dot also reads (Q K^T then P V reads no matrix twice;
    logits = x W then dlogits W^T does: softmax cross-entropy and its gradient)."""
    first = {_source(rows, producers, p) for p in producers[qk] if p is not None}
    other = [p for p in producers[pv] if p is not None and p != chain_in]
    return any(_source(rows, producers, p) in first for p in other)


def _row_reduce(r) -> bool:
    """Whether ``r`` reduces one axis of its input: a softmax's max or sum over the keys (per query, head and
    batch). A reduction over every axis of a tensor of rank two or more (the amax of a tensorwise fp8 scale) is no
    softmax: an fp8 MLP's GEMM, SiLU, amax, scale divide and next GEMM is not an attention."""
    if r.kind != "reduce" or not r.operands:
        return False
    res = r.result if hasattr(r.result, "shape") else r.result[0]
    return len(getattr(r.operands[0], "shape", ())) == len(getattr(res, "shape", ())) + 1


def _sums_exps(rows, producers, i: int) -> bool:
    """Whether row ``i`` is a softmax's sum: a one-axis reduce (:func:`_row_reduce`) of an exponential read
    through data ops only (casts, broadcasts, a mask's select). A rowwise fp8 amax reduces one axis too, but of
    ``abs`` of a SiLU product, not of an exponential."""
    if not _row_reduce(rows[i]):
        return False
    stack = [(producers[i][0], 0)] if producers[i] else []
    while stack:
        j, depth = stack.pop()
        if not isinstance(j, int):
            continue
        if short_name(rows[j].op) == "exponential":
            return True
        if depth < 8 and rows[j].kind in ("data", "free", "other"):
            stack.extend((q, depth + 1) for q in producers[j])
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
    mult, links = rows[pv].multiplicity, _links(chain, producers)
    for qk in sorted(dots, reverse=True):
        if rows[qk].multiplicity != mult:
            continue
        path = _forward_from(qk, links)
        names = {short_name(rows[i].op) for i in path}
        if "exponential" not in names or not any(_sums_exps(rows, producers, i) for i in path):
            continue
        members = path | {qk, pv}
        outside = {q for i in path | {pv} for q in producers[i] if isinstance(q, int) and q not in members}
        if any(q > qk and _depends_on(producers, q, qk) for q in outside):
            continue
        if any(rows[i].multiplicity != mult for i in path):
            continue
        if _shares_matrix(rows, producers, qk, pv, p):
            return None  # a linear layer and its gradient around a softmax: cross-entropy, not an attention
        return Attention(qk, pv, tuple(sorted(members)))
    return None


#: Layout changes a fused attention kernel reads through (strides), never a copy of its own.
_VIEWS = frozenset({"transpose", "reshape", "bitcast", "copy"})


def _views(rows, producers, consumers, att: Attention) -> set:
    """Transposes and reshapes that only feed the attention (``K^T`` of a cache, heads moved to the front):
    FlashAttention-style kernels take Q, K and V through batch, head and sequence strides, so such a view
    is read in place inside the kernel instead of being copied through HBM first."""
    members, mult = set(att.members), rows[att.pv].multiplicity
    out: set = set()
    stack = [q for d in (att.qk, att.pv) for q in producers[d] if isinstance(q, int) and q not in members]
    while stack:
        i = stack.pop()
        if i in out or short_name(rows[i].op) not in _VIEWS or rows[i].multiplicity != mult:
            continue
        if not consumers[i] or not consumers[i] <= members | out:
            continue
        out.add(i)
        stack.extend(q for q in producers[i] if isinstance(q, int))
    # Reshapes and bitcasts are no kernel wherever they stand (the kernel reads through them): only the copies
    # join it.
    return {i for i in out if short_name(rows[i].op) in ("transpose", "copy")}


def find_attention(rows, producers) -> list[Attention]:
    """Every attention of a program (see the module docstring), program order, no row in two."""
    found: list[Attention] = []
    taken: set = set()
    consumers: list = [set() for _ in rows]
    for i, ps in enumerate(producers):
        for q in ps:
            if isinstance(q, int):
                consumers[q].add(i)
    for i, r in enumerate(rows):
        if r.kind != "dot" or i in taken:
            continue
        for operand in (0, 1):
            att = _match(rows, producers, i, operand)
            if att is not None and not taken.intersection(att.members):
                views = _views(rows, producers, consumers, att) - taken
                att = Attention(att.qk, att.pv, tuple(sorted(set(att.members) | views)))
                found.append(att)
                taken.update(att.members)
                break
    return found
