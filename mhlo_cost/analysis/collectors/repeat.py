"""Blocks from repetition alone: the period of the op sequence that repeats most.

The sequence is that of the rows' symbols (op name + result shape). Candidate periods are the distances
between consecutive occurrences of the same GEMM (dot / convolution with the same result shape), a
handful of distinct values; each is checked in O(n) with numpy (``sym[i] == sym[i + P]``), and the
period whose longest matching run covers most of the program wins (the smallest one on ties). Each
repetition of that period is a block. Regions holding under 10% of the compute (two equal embedders) are
no blocks; up to four regions are looked for (an encoder and a decoder).

A period may hold several blocks of different kinds (STDiT3: a spatial and a temporal block, whose
shapes differ): where the period's GEMMs, keyed by their weight shapes only, repeat with a shorter
period, the period is cut into that many sub-blocks, of kinds ``A``, ``B``, ... named ``block_a.{i}``,
``block_b.{i}``. Otherwise blocks are ``block.{i}`` of kind ``block``.

Parts (attention / cross_attention / mlp) come from the positions of the GEMMs and normalisations inside
each block, as in :mod:`~mhlo_cost.analysis.collectors.rms`.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from . import Blocks, compute_of, is_matmul, none_found, segments_to_blocks, short_op
from .rms import dot_parts, find_norms, weight_key

#: Candidate periods checked (most frequent GEMM distances first).
MAX_CANDIDATES = 24
#: Repeated regions looked for (an encoder and a decoder are two).
MAX_REGIONS = 4
#: Share of all compute a repeated region must hold to be blocks.
MIN_SHARE = 0.1
#: Fewest ops in a period (a normalisation alone is more).
MIN_PERIOD = 8


def _longest_run(eq: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True in a boolean array."""
    if not eq.size or not eq.any():
        return 0, 0
    padded = np.concatenate(([False], eq, [False]))
    d = np.diff(padded.astype(np.int8))
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    lengths = ends - starts
    k = int(np.argmax(lengths))
    return int(starts[k]), int(lengths[k])


class RepeatCollector:
    def __init__(self, min_repeats: int = 2):
        self.min_repeats = min_repeats

    def symbols(self, rows) -> np.ndarray:
        ids: dict[tuple, int] = {}
        return np.fromiter((ids.setdefault((r.op, r.shape), len(ids)) for r in rows), dtype=np.int64,
                           count=len(rows))

    def find_period(self, rows, sym: np.ndarray) -> tuple[int, int, int] | None:
        """(period, start, covered length) of the best repetition, or None."""
        n = len(sym)
        positions: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            if is_matmul(r):
                positions.setdefault(int(sym[i]), []).append(i)
        dist = Counter()
        for pos in positions.values():
            if len(pos) > 1:
                dist.update(np.diff(pos).tolist())
        best = None
        for p, _ in dist.most_common(MAX_CANDIDATES):
            if p < MIN_PERIOD or p * self.min_repeats > n:
                continue
            start, length = _longest_run(sym[:-p] == sym[p:])
            covered = length + p
            if covered // p < self.min_repeats:
                continue
            if best is None or covered > best[2] or (covered == best[2] and p < best[0]):
                best = (p, start, covered)
        return best

    def collect(self, rows) -> Blocks:
        n = len(rows)
        if n == 0:
            return none_found(rows, "repeat")
        sym = self.symbols(rows)
        total = compute_of(rows) or 1
        parts = [""] * n
        regions = []  # (start, period, reps, cuts)
        notes: list[str] = []
        for _ in range(MAX_REGIONS):
            found = self.find_period(rows, sym)
            if found is None:
                break
            p, s, covered = found
            reps = covered // p
            dots = [i for i in range(s, s + p) if is_matmul(rows[i])]
            share = compute_of(rows, s, s + reps * p) / total
            # Hide the region from the next search (each position its own symbol).
            sym = sym.copy()
            sym[s:s + covered] = -1 - np.arange(s, s + covered)
            if not dots or share < MIN_SHARE:
                continue  # a repetition without GEMMs, or a small one (two equal embedders), is no block
            cuts = self._sub_cuts(rows, s, p, dots)
            regions.append((s, p, reps, cuts))
            notes.append(f"period {p} ops x {reps} from op {s}" + (f", {len(cuts)} kinds per period"
                                                                    if len(cuts) > 1 else ""))
        regions.sort()
        segments: list[tuple[int, int, str, str, int]] = []
        lettered = len(regions) > 1 or any(len(r[3]) > 1 for r in regions)
        letter = 0
        for s, p, reps, cuts in regions:
            k = len(cuts)
            kinds = [chr(ord("A") + letter + j) for j in range(k)] if lettered else ["block"]
            letter += k
            for rep in range(reps):
                base = s + rep * p
                bounds = [base + c for c in cuts] + [base + p]
                for j in range(k):
                    kind = kinds[j]
                    name = f"block_{kind.lower()}.{rep}" if lettered else f"block.{rep}"
                    segments.append((bounds[j], bounds[j + 1], name, kind, rep))
        for s0, e0, *_ in segments:
            dot_parts(rows, s0, e0, find_norms(rows, s0, e0), parts)
        blocks = segments_to_blocks(rows, "repeat", segments, parts, notes=notes)
        # Loop bodies that became blocks: their parts as well.
        for (s0, e0), _ in blocks.loop_spans():
            dot_parts(rows, s0, e0, find_norms(rows, s0, e0), parts)
        return blocks

    def _sub_cuts(self, rows, s: int, p: int, dots: list[int]) -> list[int]:
        """Offsets (from s) where the blocks of one period start: [0] or [0, c1, ...]."""
        keys = [weight_key(rows[i]) for i in dots]
        m = len(keys)
        q = None
        for cand in range(1, m):
            if m % cand == 0 and all(keys[i] == keys[i + cand] for i in range(m - cand)):
                q = cand
                break
        if q is None:
            return [0]
        cuts = [0]
        names = [short_op(rows[i]) for i in range(s, s + p)]
        head = dots[0] - s  # ops before the first GEMM of the first block
        for j in range(1, m // q):
            prev_dot, first_dot = dots[j * q - 1] - s, dots[j * q] - s
            # The cut in the gap between the blocks' GEMMs whose ops best repeat the period's first ops.
            best_c, best_len = max(prev_dot + 1, first_dot - head), -1
            for c in range(prev_dot + 1, first_dot + 1):
                ln = 0
                while c + ln < p and ln < head and names[c + ln] == names[ln]:
                    ln += 1
                if ln > best_len:
                    best_c, best_len = c, ln
            cuts.append(best_c)
        return cuts
