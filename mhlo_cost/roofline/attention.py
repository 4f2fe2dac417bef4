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
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from ..machines.kernels import backward_pass_bytes
from ..walk.row import short_name
from .band import mask_fraction

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


# -- training programs: the backward of each attention, and what a flash kernel keeps on chip -------------
def _shape(res) -> tuple:
    t = res if hasattr(res, "shape") else res[0]
    return tuple(t.shape)


def trails(t, shapes) -> bool:
    s = tuple(getattr(t, "shape", ()))
    return any(len(s) >= len(q) and s[len(s) - len(q):] == q for q in shapes)


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
    (a loop's stacked residuals) join the kernels and the scores never reach HBM."""
    shapes = {_shape(rows[a.qk].result) for a in forward}
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
        if not dots:
            if len(owners) == 1:
                extra.setdefault(owners.pop(), []).extend(comp)
            continue
        n = min(owners) if owners else next((n for n, a in enumerate(forward) if any(
            trails(t, {_shape(rows[a.qk].result)}) for i in comp for t in (*rows[i].operands,))), None)
        if n is not None:
            grads.setdefault(n, []).extend(comp)
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


def is_causal(rows, producers, members) -> bool:
    """Whether a forward attention masks with an index comparison (iota against iota: a causal or windowed
    mask): a ``select`` member whose outside operand comes from an ``iota`` within a few data ops."""
    inside = set(members)
    for i in members:
        if short_name(rows[i].op) != "select":
            continue
        stack = [(p, 0) for p in producers[i] if isinstance(p, int) and p not in inside]
        while stack:
            p, d = stack.pop()
            name = short_name(rows[p].op)
            if name == "iota":
                return True
            if d < 6 and (rows[p].kind in ("data", "free", "other", "elementwise") or name == "compare"):
                stack.extend((q, d + 1) for q in producers[p] if isinstance(q, int))
    return False


#: The head dims a library compiles its kernels for: a call runs the smallest at least its own, computing on the
#: padded width (both products scale with it). FlashAttention-2: ``HEADDIM_SWITCH`` in
#: Dao-AILab/flash-attention ``csrc/flash_attn/src/static_switch.h`` (the copy PyTorch's flash SDPA backend
#: bundles has the same ladder): 32, 64, 96, 128, 160, 192, 256; a head dim of 72 (STDiT3) runs the 96 kernel.
#: cuDNN 9 (its sm90 SDPA kernels, as PyTorch 2.11 calls them on an H200, [MEAS] kernel names in
#: benchmarks/data/measured_h200.toml): head dim 64 runs a ``..._64x128x64`` kernel, 72 and 128 ``..._64x128x128``.
PADDED_HEAD_DIMS = {"fa2": (32, 64, 96, 128, 160, 192, 256), "cudnn": (64, 128)}


def score_head_dim(r) -> int:
    """The contracted dimension of a score product Q K^T: its FLOPs / (2 x its elements); 0 where unknown."""
    n = r.out_elems * max(r.multiplicity, 1)
    return r.gemm_flops // (2 * n) if n else 0


def padded_head_dim(d: int, ladder: tuple) -> int:
    """The kernel head dim a call of head dim ``d`` runs (``d`` itself above the ladder)."""
    return next((k for k in ladder if k >= d), d)


def kernel_compute_s(rows, producers, times, members, hw, multiplicity: int, library: str = "",
                     masks: dict | None = None) -> float | None:
    """The compute time of one fused attention kernel on ``hw`` (totals over its multiplicity): its GEMM FLOPs
    over the blocks it computes at the library's fraction of the matrix peak plus the library's exposed share of
    its exponentials (``exp_exposed``), beside its exponentials and its vector work; a backward recomputes the score product; a library's kernel computes on its
    padded head dim (:data:`PADDED_HEAD_DIMS`). ``library``: the kernel's library where the profile has a model
    of it, else the profile's default. ``masks``: the walk's ``masks`` record (:mod:`mhlo_cost.roofline.band`): an
    index mask read from it that leaves fewer key tiles than a causal one (a sliding window) prices the blocks it
    visits; a causal kernel skips the blocks above the diagonal whole: their products, exponentials and vector
    work. A backward adds the HBM time of its two memory-bound passes (``backward_pass_bytes``). None without a
    model."""
    model = getattr(hw, "attention", None)
    if model is None or model.get() is None:
        return None
    name = library if library and model.get(library) is not None else model.library
    lib = model.get(name)
    dots = [i for i in members if rows[i].kind == "dot"]
    gemm_flops = sum(rows[i].gemm_flops for i in dots)
    backward = len(dots) > 2
    recomputed = _recomputed_exps(rows, dots, gemm_flops) if backward and lib.exp_exposed else 0
    if backward:
        gemm_flops += gemm_flops // len(dots)  # the score product recomputed from Q and K
    qk = dots[0]
    if name in PADDED_HEAD_DIMS:
        d = score_head_dim(rows[qk])
        gemm_flops = gemm_flops * padded_head_dim(d, PADDED_HEAD_DIMS[name]) // d if d else gemm_flops
    sq, sk = _shape(rows[qk].result)[-2:] if backward is False else _score_of(rows, dots)
    tiles = sk / model.tile
    n = max(1.0, -(-sk // model.tile))
    band = mask_fraction(rows, producers, masks, members, model.tile)
    if band is not None and band >= (n + 1) / (2 * n):
        band = None  # no fewer blocks than a causal mask visits: priced as one, as before
    if band is None and (is_causal(rows, producers, members) or (backward and _masked(rows, members))):
        band = (n + 1) / (2 * n)  # causal: the blocks on and below the diagonal
    peak = times[qk].peak or 1.0
    matrix = gemm_flops * (1 if band is None else band) / (peak * lib.fraction(backward, tiles))
    trans = (sum(rows[i].transcendentals for i in members) + recomputed) / hw.transcendental_rate
    vector = sum(times[i].compute_s for i in members if rows[i].kind != "dot" and times[i].unit == "vector")
    if band is not None:  # a window or a causal mask: the blocks it visits, their exponentials and vector work
        trans, vector = trans * band, vector * band
    passes = hw.memory_time(_pass_bytes(rows, dots, sk), 2 * max(multiplicity, 1)) if backward else 0.0
    return max(matrix + lib.exp_exposed * trans, trans, vector) + passes


def _pass_bytes(rows, dots, sk: int) -> int:
    """:func:`~mhlo_cost.machines.kernels.backward_pass_bytes` of a backward kernel: its query rows (B x H x Sq:
    one product's FLOPs / 2d / Sk), head dim and narrowest operand type (Q, K, V, O and dO's)."""
    d = min((score_head_dim(rows[i]) for i in dots), default=0)
    if not d or not sk:
        return 0
    sizes = [t.nbytes // math.prod(t.shape) for i in dots for t in rows[i].operands
             if getattr(t, "shape", None) and getattr(t, "nbytes", 0) and math.prod(t.shape)]
    return backward_pass_bytes(rows[dots[0]].gemm_flops // (2 * d) // sk, d, max(1, min(sizes, default=2)))


def _recomputed_exps(rows, dots, gemm_flops: int) -> int:
    """The exponentials a backward kernel recomputes (P = exp(S - L), one per score): one product's FLOPs over
    2 x the head dim (the smallest contracted dimension of its products)."""
    d = min((score_head_dim(rows[i]) for i in dots), default=0)
    return gemm_flops // len(dots) // (2 * d) if d else 0


def _score_of(rows, dots) -> tuple:
    for i in dots:
        for t in (rows[i].result, *rows[i].operands):
            s = _shape(t) if hasattr(t, "shape") else ()
            if len(s) >= 2 and s[-1] == s[-2]:
                return s[-2:]
    return _shape(rows[dots[0]].result)[-2:]


def _masked(rows, members) -> bool:
    return any(short_name(rows[i].op) == "select" for i in members)
