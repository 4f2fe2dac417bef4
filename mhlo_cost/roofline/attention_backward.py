"""The backward of each fused attention in a training program, and the score shapes a flash kernel keeps on chip.

:func:`find_attention_backward` takes the forward attentions :func:`.attention.find_attention` found and gathers,
for each, the rows outside them that make or read a tensor ending in its score shape (B x H x Sq x Sk): the dots
of dV, dP, dQ, dK and the softmax gradient between them, one backward kernel (FlashAttention-2's backward
recomputes the probabilities from Q, K and the row statistics, so no score reaches HBM). :func:`trails` is that
shape test, which :mod:`.sdpa` and :mod:`.kernel_io` share.
"""
from __future__ import annotations

import math

from ..walk.row import short_name
from .attention import Attention, shape_of


def trails(t, shapes) -> bool:
    """Whether tensor ``t`` is a score of one of ``shapes`` (B x H x Sq x Sk, or stacked with more leading dims): its
    shape ends in one, or it ends in the same Sq x Sk and holds a whole number of scores. The second form is a score
    whose batch and head dims were split or merged (PyTorch's SDPA lowered through torchax multiplies Q K^T as a
    [B*H, Sq, D] bmm and computes the softmax and its gradient on [B, H, Sq, Sk]: with B > 1 neither shape ends in
    the other)."""
    s = tuple(getattr(t, "shape", ()))
    for q in shapes:
        if len(s) >= len(q) and s[len(s) - len(q):] == q:
            return True
        if len(s) >= 2 and len(q) >= 2 and s[-2:] == q[-2:] and math.prod(s) % math.prod(q) == 0:
            return True
    return False


def _components(cand: list[int], producers) -> list[list[int]]:
    """Connected components of ``cand`` rows along producer edges (program order inside each)."""
    parent = {i: i for i in cand}

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i in cand:
        for p in producers[i]:
            if isinstance(p, int) and p in parent:
                parent[root(i)] = root(p)
    groups: dict = {}
    for i in cand:
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def find_attention_backward(rows, producers, forward: list[Attention]) -> tuple[list[Attention], set]:
    """The backward kernels of the forward attentions of a training program, and the score shapes a flash
    kernel keeps on chip. A backward is the connected rows outside the forward kernels that make or read a
    tensor ending in a forward score shape (B x H x Sq x Sk, stacked per layer or not): the dots of dV, dP,
    dQ, dK and the softmax gradient between them. A flash training kernel saves no score: its backward
    recomputes the probabilities from Q, K and the row statistics, so the rows that save and reload them
    (a loop's stacked residuals) join the kernels and the scores never reach HBM. An ``optimization_barrier`` (JAX's
    fence over the residuals a layer saves for its backward: under no recompute the probabilities among them) joins
    none: it is no kernel (XLA aliases its results to its operands; PyTorch, whose SDPA saves its output and row
    statistics whatever autograd keeps, runs nothing for it), and a kernel holding it read every residual it fences
    and wrote them all again (7.6 ms for an eager Llama 3 8B layer's forward SDPA at 8192 tokens on an A100, 2.7 ms
    without; :class:`.fusion.Grouper` already kept it out of the compiled kernels, issue 38)."""
    shapes = {shape_of(rows[a.qk].result) for a in forward}
    taken = {i for a in forward for i in a.members}
    owner = {i: n for n, a in enumerate(forward) for i in a.members}
    cand = []
    for i, r in enumerate(rows):
        if i in taken or r.kind in ("collective", "unknown") or not r.result:
            continue
        if trails(r.result if hasattr(r.result, "shape") else r.result[0], shapes) or any(
                trails(t, shapes) for t in r.operands):
            cand.append(i)
    extra: dict = {}
    grads: dict = {}  # forward attention -> the rows of its backward (every component with a dot)
    for comp in _components(cand, producers):
        if len({rows[i].multiplicity for i in comp}) != 1:
            continue
        dots = [i for i in comp if rows[i].kind == "dot"]
        owners = {owner[p] for i in comp for p in producers[i] if isinstance(p, int) and p in owner}
        rest = [i for i in comp if short_name(rows[i].op) != "optimization_barrier"]  # (a fence: no member)
        if not dots:
            if len(owners) == 1 and rest:
                extra.setdefault(owners.pop(), []).extend(rest)
            continue
        n = min(owners) if owners else next((n for n, a in enumerate(forward) if any(
            trails(t, {shape_of(rows[a.qk].result)}) for i in comp for t in (*rows[i].operands,))), None)
        if n is not None:
            grads.setdefault(n, []).extend(rest)
    backward: list[Attention] = []
    for n, comp in sorted(grads.items()):
        comp = sorted(set(comp))
        dots = [i for i in comp if rows[i].kind == "dot"]
        if len(dots) >= 2 and len({rows[i].multiplicity for i in comp}) == 1:
            backward.append(Attention(dots[0], dots[-1], tuple(comp)))
    if not backward:
        return [], set()
    for n, more in extra.items():
        a = forward[n]
        if rows[more[0]].multiplicity == rows[a.qk].multiplicity:
            forward[n] = Attention(a.qk, a.pv, tuple(sorted(set(a.members) | set(more))))
    return backward, shapes
