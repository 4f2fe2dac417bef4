"""Blocks from normalisations: cut the op sequence at RMSNorm / LayerNorm, ``norms_per_block`` per block.

Rows carry no data flow, so a normalisation is recognised from the op sequence: an ``rsqrt`` (or a
``sqrt`` followed by a ``divide``) with, a few ops before it and no GEMM in between, a ``reduce`` that
follows a ``multiply`` (the square: ``mean(x*x)`` of RMSNorm, ``mean((x-mu)^2)`` of LayerNorm, whose
earlier ``reduce`` for the mean is where the normalisation starts). An IR with data flow would allow an
exact test (rsqrt <- add eps <- reduce <- multiply(x, x)); the heuristic is what rows allow.

``norms_per_block`` counts every normalisation of a block, qk-norms included (STDiT3: norm1, q_norm,
k_norm, norm2 = 4). By default it is the period of the normalisations' signatures (the GEMMs, keyed by
weight shape, between one normalisation and the next) that covers most normalisations; blocks whose
full signatures (GEMM result shapes) differ get kinds ``A``, ``B``, ... (spatial / temporal).

Parts: the block's widest normalisations (the hidden size; qk-norms are narrower) cut it into segments.
In a segment, an attention is the linear GEMMs up to a pair of attention-core GEMMs (both operands of
rank >= 3) and the linear GEMM after it; the block's first attention is ``attention``, further ones
``cross_attention``; GEMMs of a segment without attention core are ``mlp``.
"""
from __future__ import annotations

import re

from . import Blocks, compute_of, is_matmul, loop_runs, segments_to_blocks, short_op

#: How far before an rsqrt its reduce may be (LayerNorm in float32 is ~20 ops).
WINDOW = 28
#: Share of all compute the blocks must hold.
MIN_SHARE = 0.1
_SHAPE = re.compile(r"\[([^\]]*)\]")


# ---------------------------------------------------------------------------------------------------------
# Row helpers
# ---------------------------------------------------------------------------------------------------------


def _operand_dims(r) -> list[tuple[str, ...]]:
    return [tuple(d for d in m.split(",") if d) for m in _SHAPE.findall(r.operand_shapes or "")]


def _weights(r) -> list[tuple[str, ...]]:
    dims = _operand_dims(r)
    w = r.weight_operands
    if w:
        idx = [int(x) for x in str(w).split(",") if x.strip().isdigit()]
        ws = [dims[i] for i in idx if i < len(dims) and 1 <= len(dims[i]) <= 2]
        if ws:
            return ws
    return [d for d in dims if 1 <= len(d) <= 2]


def is_core(r) -> bool:
    """An attention-core GEMM (q@k^T, probs@v): no operand is a weight matrix."""
    return is_matmul(r) and not _weights(r) and len(_operand_dims(r)) >= 2


def weight_key(r) -> tuple:
    """A GEMM keyed by its weight shapes (the same in blocks of different sequence layouts)."""
    if is_core(r):
        return (short_op(r), "core")
    return (short_op(r),) + tuple(_weights(r))


def _numel(shape: str) -> int:
    n = 1
    for d in shape.split("x"):
        if d.isdigit():
            n *= int(d)
    return n if shape else 0


# ---------------------------------------------------------------------------------------------------------
# Normalisations
# ---------------------------------------------------------------------------------------------------------


def find_norms(rows, s: int = 0, e: int | None = None) -> list[tuple[int, int, int]]:
    """Normalisations in rows[s:e] as ``(start, rsqrt index, width)`` in program order."""
    e = len(rows) if e is None else e
    out = []
    for i in range(s, e):
        op = short_op(rows[i])
        if op == "sqrt":
            if not any(short_op(rows[k]) == "divide" for k in range(i + 1, min(e, i + 4))):
                continue
        elif op != "rsqrt":
            continue
        lo = max(s, i - WINDOW)
        if out:
            lo = max(lo, out[-1][1] + 1)
        first_reduce = None
        for j in range(i - 1, lo - 1, -1):
            r = rows[j]
            o = short_op(r)
            if is_matmul(r) or o in ("rsqrt", "sqrt"):
                break
            if o == "reduce":
                first_reduce = j
        if first_reduce is None or not _has_square(rows, first_reduce, i):
            continue
        start = first_reduce
        for _ in range(3):
            if start - 1 >= lo and short_op(rows[start - 1]) in ("constant", "convert"):
                start -= 1
            else:
                break
        # The normalised size: elements of the normalised tensor per element of the reduce's result.
        biggest = max((_numel(rows[j].shape) for j in range(start, i + 1)), default=0)
        reduced = _numel(rows[first_reduce].shape) or 1
        width = biggest // reduced if biggest >= reduced else 0
        out.append((start, i, width))
    return out


def _has_square(rows, first_reduce: int, rsqrt: int) -> bool:
    """A multiply (or power) followed by a reduce between the first reduce and the rsqrt (or the reduce
    right after a multiply: RMSNorm's ``mean(x*x)``)."""
    mul = False
    for j in range(max(0, first_reduce - 3), rsqrt):
        o = short_op(rows[j])
        if o in ("multiply", "power"):
            mul = True
        elif o == "reduce" and mul:
            return True
    return False


# ---------------------------------------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------------------------------------


def dot_parts(rows, s: int, e: int, norms, parts: list[str]) -> None:
    """Write attention / cross_attention / mlp into ``parts[s:e]`` from GEMM positions (see module doc)."""
    inside = [nm for nm in norms if s <= nm[1] < e]
    widest = max((nm[2] for nm in inside), default=0)
    cuts = sorted({s} | {nm[0] for nm in inside if nm[2] == widest and nm[0] > s})
    bounds = cuts + [e]
    dot_part: dict[int, str] = {}
    attention = 0
    for a, b in zip(bounds, bounds[1:]):
        dots = [i for i in range(a, b) if is_matmul(rows[i])]
        cores = [i for i in dots if is_core(rows[i])]
        if not cores:
            for i in dots:
                dot_part[i] = "mlp"
            continue
        k = 0
        seen_core = False
        local: dict[int, int] = {}
        for i in dots:
            if is_core(rows[i]):
                seen_core = True
                local[i] = k
            elif seen_core:
                local[i] = k  # the output projection
                k += 1
                seen_core = False
            else:
                local[i] = k
        n_inst = k + (1 if seen_core else 0)
        for i, kk in local.items():
            if kk >= n_inst:
                dot_part[i] = "mlp"  # linears after the last attention
            else:
                dot_part[i] = "attention" if attention + kk == 0 else "cross_attention"
        attention += n_inst
    _other_rows(bounds, s, e, dot_part, parts)


def _other_rows(bounds: list[int], s: int, e: int, dot_part: dict[int, str], parts: list[str]) -> None:
    """Every row that is not a GEMM: the part of the last GEMM before it in its segment, else of the next GEMM."""
    seg_of = {}
    for a, b in zip(bounds, bounds[1:]):
        for i in range(a, b):
            seg_of[i] = a
    cur, cur_seg = "", None
    pending: list[int] = []
    for i in range(s, e):
        if seg_of[i] != cur_seg:
            cur, cur_seg = "", seg_of[i]
        if i in dot_part:
            cur = dot_part[i]
            for j in pending:
                parts[j] = cur
            pending = []
            parts[i] = cur
        elif cur:
            parts[i] = cur
        else:
            pending.append(i)
    for j in pending:  # after the block's last GEMM with none before them in their segment
        parts[j] = parts[j - 1] if j > s and parts[j - 1] else ""


# ---------------------------------------------------------------------------------------------------------
# The collector
# ---------------------------------------------------------------------------------------------------------


def _best_run(sigs: list, p: int) -> tuple[int, int]:
    """(start, covered) of the longest stretch where sigs[j] == sigs[j + p]."""
    best = (0, 0)
    run_start, run = 0, 0
    for j in range(len(sigs) - p):
        if sigs[j] == sigs[j + p]:
            if run == 0:
                run_start = j
            run += 1
            if run + p > best[1]:
                best = (run_start, run + p)
        else:
            run = 0
    return best


class RMSCollector:
    def __init__(self, norms_per_block: int | None = None, max_period: int = 16):
        if norms_per_block is not None and norms_per_block < 1:
            raise ValueError("norms_per_block must be at least 1")
        self.norms_per_block = norms_per_block
        self.max_period = max_period

    def collect(self, rows) -> Blocks:
        n = len(rows)
        in_loop = [False] * n
        for s, e, _ in loop_runs(rows, min_compute=False):
            for i in range(s, e):
                in_loop[i] = True
        norms = [nm for nm in find_norms(rows) if not in_loop[nm[1]]]
        parts = [""] * n
        segments: list[tuple[int, int, str, str, int]] = []
        notes: list[str] = []
        if norms:
            segments, note = self._segments(rows, norms, in_loop)
            if note:
                notes.append(note)
        for s0, e0, *_ in segments:
            dot_parts(rows, s0, e0, norms, parts)
        blocks = segments_to_blocks(rows, "rms", segments, parts, notes=notes)

        for (s0, e0), _ in blocks.loop_spans():
            dot_parts(rows, s0, e0, find_norms(rows, s0, e0), parts)
        return blocks

    def _signatures(self, rows, norms, in_loop, full: bool) -> list:
        sigs = []
        for j, (start, rs, width) in enumerate(norms):
            end = norms[j + 1][0] if j + 1 < len(norms) else len(rows)
            dots = tuple((rows[i].op, rows[i].shape) if full else weight_key(rows[i])
                         for i in range(rs, end) if is_matmul(rows[i]) and not in_loop[i])
            sigs.append((width, dots))
        return sigs

    def _segments(self, rows, norms, in_loop):
        sigs = self._signatures(rows, norms, in_loop, full=False)
        count = len(norms)
        period = self._period(sigs, count)
        if isinstance(period, str):
            return [], period
        p, j0, covered = period
        reps = covered // p
        if reps == 0:
            return [], None
        # Blocks must hold GEMMs, and a fair share of the compute.
        if not any(sigs[j][1] for j in range(j0, j0 + p)):
            return [], "normalisations without GEMMs between them"
        last = j0 + reps * p
        span_end = norms[last][0] if last < count else len(rows)
        if compute_of(rows, norms[j0][0], span_end) < MIN_SHARE * compute_of(rows):
            return [], "the repeating normalisations hold little of the compute"
        bounds = _bounds(rows, norms, sigs, p, j0, reps)
        reps = len(bounds)
        full = self._signatures(rows, norms, in_loop, full=True)
        return _named_segments(bounds, full, p, j0), f"{p} normalisations per block x {reps} from normalisation {j0}"

    def _period(self, sigs, count: int):
        """``(normalisations per block, first, normalisations covered)`` of the longest repeating run, or the
        reason there is none."""
        if self.norms_per_block is not None:
            p = self.norms_per_block
            j0, covered = _best_run(sigs, p)
            return (p, j0, covered) if covered // p >= 2 else (p, 0, count)
        best = None
        for p in range(1, min(self.max_period, count // 2) + 1):
            j0, covered = _best_run(sigs, p)
            if covered // p < 2:
                continue
            if best is None or covered > best[2]:
                best = (p, j0, covered)
        return best if best is not None else "no repeating pattern of normalisations"


def _bounds(rows, norms, sigs, p: int, j0: int, reps: int) -> list[list[int]]:
    """``[start, end)`` of each block of ``p`` normalisations from normalisation ``j0``."""
    count = len(norms)
    bounds = []
    for b in range(reps):
        first = j0 + b * p
        nxt = first + p
        bounds.append([norms[first][0], norms[nxt][0] if nxt < count else None])
    # The last block: up to the next normalisation, else as long as the block before it.
    if bounds[-1][1] is None:
        if len(bounds) > 1:
            length = bounds[-2][1] - bounds[-2][0]
            bounds[-1][1] = min(len(rows), bounds[-1][0] + length)
        else:
            bounds[-1][1] = len(rows)
    # A last block whose final signature only starts like the others' (no normalisation after it).
    nxt = j0 + reps * p
    if nxt + p == count and sigs[nxt:nxt + p - 1] == sigs[j0:j0 + p - 1]:
        want, got = sigs[j0 + p - 1], sigs[count - 1]
        if want[0] == got[0] and got[1][:len(want[1])] == want[1] and len(bounds) > 0:
            prev_len = bounds[-1][1] - bounds[-1][0]
            bounds.append([norms[nxt][0], min(len(rows), norms[nxt][0] + prev_len)])
    return bounds


def _named_segments(bounds, full, p: int, j0: int) -> list[tuple]:
    """``(start, end, name, kind, index)`` per block: ``block.N`` where all blocks look alike, else one
    letter per kind of block (``block_a.0``, ``block_b.0``, ...) when there are at most eight kinds."""
    reps = len(bounds)
    block_sigs = []
    for b in range(reps):
        bs = tuple(full[j0 + b * p: j0 + (b + 1) * p])
        if b == reps - 1 and bs not in block_sigs:
            # The last block may see the model's tail after it: match it on its first normalisations.
            same = [x for x in block_sigs if x[:-1] == bs[:-1]]
            if same:
                bs = same[-1]
        block_sigs.append(bs)
    letters: dict[tuple, str] = {}
    for bs in block_sigs:
        letters.setdefault(bs, chr(ord("A") + len(letters)))
    many = 1 < len(letters) <= 8
    segments = []
    counters: dict[str, int] = {}
    for b, (s0, e0) in enumerate(bounds):
        if many:
            kind = letters[block_sigs[b]]
            idx = counters.get(kind, 0)
            counters[kind] = idx + 1
            segments.append((s0, e0, f"block_{kind.lower()}.{idx}", kind, idx))
        else:
            segments.append((s0, e0, f"block.{b}", "block", b))
    return segments
